"""Actuation: hold the cap on every ready pod through the runtime's authenticated admin route.

PUT /governor/v1/limits {"cap": N} with a Bearer token answers the values the engine now holds.
- Concurrency-limited (a semaphore), per-request timeouts, retries with backoff (tenacity) on transport errors
  and 5xx/503; a 4xx (bad token, above the ceiling) is an answer, not a glitch, so it is not retried.
- Each pod is independent: one unreachable pod is reported and the others still follow.
- A pod is only written when its identity (`PodTarget.key`: uid and restart count in the operator) has not
  been given the current cap yet, so a restarted pod gets the cap re-applied; `verify_s` re-reads every pod
  now and then anyway, because a process can restart without Kubernetes noticing (standalone mode, or a
  runtime restarted inside its container).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import httpx
from governor_runtime import contract
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

LIMITS_PATH = contract.LIMITS_PATH


@dataclass(frozen=True)
class PodTarget:
    name: str
    base_url: str  # http://IP:PORT
    token: str | None
    key: str = ""  # identity of the process behind the URL; a new key means "apply again"

    @property
    def identity(self) -> str:
        return self.key or self.base_url


class Limits(BaseModel):
    cap: int
    ceiling: int
    token_budget: int | None = None
    token_budget_ceiling: int | None = None


@dataclass(frozen=True)
class PodResult:
    pod: str
    ok: bool
    limits: Limits | None = None
    error: str | None = None
    written: bool = False


class _Retryable(Exception):
    pass


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError)


class Actuator:
    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        concurrency: int = 8,
        timeout_s: float = 2.0,
        attempts: int = 3,
        backoff_s: float = 0.2,
        verify_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._sem = asyncio.Semaphore(concurrency)
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.verify_s = verify_s
        self._clock = clock
        # identity -> (cap held, token budget held or None where never written, when confirmed)
        self._applied: dict[str, tuple[int, int | None, float]] = {}
        self._groups: dict[Hashable, set[str]] = {}  # group -> identities of its pods at its last ensure

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, method: str, pod: PodTarget, body: dict[str, int] | None = None) -> Limits:
        headers = {"Authorization": f"Bearer {pod.token}"} if pod.token else {}
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=2.0),
            retry=retry_if_exception(_retryable),
            reraise=True,
        ):
            with attempt:
                async with self._sem:
                    resp = await self._client.request(
                        method,
                        f"{pod.base_url.rstrip('/')}{LIMITS_PATH}",
                        json=body,
                        headers=headers,
                        timeout=self.timeout_s,
                    )
                if resp.status_code >= 500:
                    raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}")
                if resp.status_code != 200:
                    raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
                return Limits.model_validate_json(resp.content)
        raise AssertionError("unreachable")  # pragma: no cover - AsyncRetrying reraises

    async def read(self, pod: PodTarget) -> PodResult:
        try:
            return PodResult(pod=pod.name, ok=True, limits=await self._call("GET", pod))
        except (httpx.HTTPError, _Retryable, RuntimeError, ValidationError) as exc:
            return PodResult(pod=pod.name, ok=False, error=f"{type(exc).__name__}: {exc}")

    async def _ensure_one(self, pod: PodTarget, cap: int, budget: int | None, force: bool) -> PodResult:
        now = self._clock()
        held = self._applied.get(pod.identity)
        same = held is not None and held[0] == cap and (budget is None or held[1] == budget)
        try:
            if not force and held is not None and same and now - held[2] < self.verify_s:
                return PodResult(pod=pod.name, ok=True, limits=None)
            if not force and held is not None and same:
                limits = await self._call("GET", pod)  # verification: still holding it?
                if limits.cap == cap and (budget is None or limits.token_budget == budget):
                    self._applied[pod.identity] = (cap, limits.token_budget, now)
                    return PodResult(pod=pod.name, ok=True, limits=limits)
            body = {"cap": cap} if budget is None else {"cap": cap, "token_budget": budget}
            limits = await self._call("PUT", pod, body)
        except (httpx.HTTPError, _Retryable, RuntimeError, ValidationError) as exc:
            self._applied.pop(pod.identity, None)
            return PodResult(pod=pod.name, ok=False, error=f"{type(exc).__name__}: {exc}")
        self._applied[pod.identity] = (limits.cap, limits.token_budget, now)
        return PodResult(pod=pod.name, ok=True, limits=limits, written=True)

    async def ensure(
        self,
        pods: Sequence[PodTarget],
        cap: int,
        *,
        token_budget: int | None = None,
        force: bool = False,
        group: Hashable = None,
    ) -> list[PodResult]:
        """Make every pod hold `cap` (and `token_budget`, when given; else each keeps its own). Never
        raises; one result per pod, in order.

        `pods` are all of `group`'s pods (the operator's one Actuator serves every InferenceService, each
        its own group): a pod of the group missing from them has left and is forgotten, so a returning IP is
        written again. Other groups' pods are kept: forgetting them re-wrote every pod on every tick.
        """
        results = await asyncio.gather(*(self._ensure_one(p, cap, token_budget, force) for p in pods))
        live = {p.identity for p in pods}
        for gone in self._groups.get(group, set()) - live:
            self._applied.pop(gone, None)
        self._groups[group] = live
        return list(results)

    def forget(self, group: Hashable) -> None:
        """A group that is no longer governed: its pods are written again should it come back."""
        for gone in self._groups.pop(group, set()):
            self._applied.pop(gone, None)

    def held(self, pods: Sequence[PodTarget]) -> int | None:
        """The cap every listed pod is known to hold (the lowest, if they differ); None if unknown."""
        caps = [self._applied[p.identity][0] for p in pods if p.identity in self._applied]
        return min(caps) if caps and len(caps) == len(pods) else None

    def held_budget(self, pods: Sequence[PodTarget]) -> int | None:
        """The token budget every listed pod is known to hold (the lowest); None if unknown."""
        budgets = [self._applied[p.identity][1] for p in pods if p.identity in self._applied]
        known = [b for b in budgets if b is not None]
        return min(known) if known and len(known) == len(pods) else None
