"""Reads the control loop's signals from the Prometheus HTTP API: typed results that never raise.

One tick is one `PromReader.read`: every query of governor.core.promql, concurrently, each answering for all
services at once. Whatever goes wrong (Prometheus down, slow, an error answer, an empty vector, NaN,
+Inf, data older than `stale_after_s`) becomes "unknown" (None) in the result, and
`Snapshot.available` says whether Prometheus answered at all, so the loop can hold the cap and
report MetricsAvailable=False.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ValidationError

from governor.core import promql
from governor.core.reading import Key, Reading, Snapshot
from governor.core.signals import LatencyKind


class _Sample(BaseModel):
    metric: dict[str, str]
    value: tuple[float, str]


class _Data(BaseModel):
    resultType: Literal["vector", "scalar", "matrix", "string"]
    result: list[_Sample] | Any


class _Answer(BaseModel):
    status: Literal["success", "error"]
    data: _Data | None = None
    error: str | None = None


class PromError(Exception):
    pass


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class PromReader:
    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 2.0,
        stale_after_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.stale_after_s = stale_after_s
        self._client = client or httpx.AsyncClient(timeout=timeout_s)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def query(self, expr: str, labels: tuple[str, ...]) -> dict[Key, float | None]:
        """An instant vector keyed by `labels`' values. Raises PromError (read() catches it)."""
        try:
            # wait_for bounds the whole exchange; httpx's timeouts bound each read, not a trickling answer.
            resp = await asyncio.wait_for(
                self._client.get(
                    f"{self.base_url}/api/v1/query", params={"query": expr}, timeout=self.timeout_s
                ),
                self.timeout_s,
            )
            answer = _Answer.model_validate_json(resp.content)
        except (httpx.HTTPError, ValidationError, TimeoutError) as exc:
            raise PromError(f"{type(exc).__name__}: {exc}") from exc
        if answer.status != "success" or answer.data is None:
            raise PromError(answer.error or f"HTTP {resp.status_code}")
        if answer.data.resultType != "vector":
            raise PromError(f"expected a vector, got {answer.data.resultType}")
        return {
            tuple(s.metric.get(label, "") for label in labels): _finite(s.value[1])
            for s in answer.data.result
        }

    async def read(
        self,
        grouping: promql.Grouping,
        window_s: float,
        gauge_window_s: float,
        latencies: set[tuple[LatencyKind, float]],
    ) -> Snapshot:
        exprs = promql.queries(grouping, window_s, gauge_window_s, latencies)
        exprs["age"] = f"time() - {exprs.pop('last_scrape')}"
        names = list(exprs)
        answers = await asyncio.gather(
            *(self.query(exprs[n], grouping.labels) for n in names), return_exceptions=True
        )
        errors = [str(a) for a in answers if isinstance(a, BaseException)]
        values: dict[str, dict[Key, float | None]] = {
            n: a for n, a in zip(names, answers, strict=True) if not isinstance(a, BaseException)
        }
        if len(errors) == len(names):
            return Snapshot(available=False, error=errors[0])
        ages = values.get("age", {})
        fresh = [k for k, age in ages.items() if age is not None and age <= self.stale_after_s]
        latency_names = [n for n in names if n.startswith("latency:")]
        services = {
            key: Reading(
                latency={n: values.get(n, {}).get(key) for n in latency_names},
                **{n: values.get(n, {}).get(key) for n in _SCALARS},
            )
            for key in fresh
        }
        return Snapshot(available=not errors, error=errors[0] if errors else None, services=services)


_SCALARS = (
    "running",
    "waiting",
    "queue_growth",
    "kv_usage",
    "preemption_rate",
    "request_rate",
    "prompt_p95",
    "long_prompt_rate",
    "cap",
    "token_budget",
    *promql.MEANS,
    *promql.STEP_RATES,
)
