"""The GPU proof's load: Poisson traces, streamed requests timed per chunk, /metrics sampling, the admin
route. Standard library and aiohttp only (it runs under the GPU image's python3); see gpubench.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv",
    "vllm:num_preemptions_total": "preemptions",
    "vllm_governor:max_num_active_seqs": "cap",
    "vllm_governor:max_num_scheduled_tokens": "token_budget",
    "vllm:prefix_cache_hits_total": "prefix_hits",
}


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each wanted series over its labels (one engine here)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = METRIC_LINE.match(line)
        if match is None or match[1] not in GAUGES:
            continue
        with contextlib.suppress(ValueError):
            key = GAUGES[match[1]]
            found[key] = found.get(key, 0.0) + float(match[3])
    return found


@dataclass
class Request:
    index: int
    phase: int
    t_sched: float
    in_len: int
    out_len: int
    t_send: float = math.nan
    chunks: list[float] = field(default_factory=list)
    completion_tokens: int | None = None
    t_end: float = math.nan
    error: str = ""
    salt: int = 0  # another prompt content for the same index and length (a replay the prefix cache misses)

    @property
    def ok(self) -> bool:
        return not self.error and not math.isnan(self.t_end)

    @property
    def ttft(self) -> float:
        return self.chunks[0] - self.t_send if self.chunks else math.nan

    @property
    def tpot(self) -> float:
        tokens = self.completion_tokens or len(self.chunks)
        if len(self.chunks) < 2 or tokens < 2:
            return math.nan
        return (self.chunks[-1] - self.chunks[0]) / (tokens - 1)

    @property
    def e2e(self) -> float:
        return self.t_end - self.t_send


@dataclass(frozen=True)
class Lengths:
    in_min: int = 256
    in_max: int = 1024
    out_min: int = 64
    out_max: int = 256
    id_low: int = 1000
    id_high: int = 120000


def make_trace(phases: Sequence[tuple[float, float]], seed: int, lengths: Lengths) -> list[Request]:
    """Poisson arrivals with a piecewise-constant rate; phases are (duration s, rate req/s)."""
    rng = random.Random(seed)
    trace: list[Request] = []
    start = 0.0
    for phase, (duration, rate) in enumerate(phases):
        t = start
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= start + duration:
                break
            trace.append(
                Request(
                    index=len(trace),
                    phase=phase,
                    t_sched=t,
                    in_len=rng.randint(lengths.in_min, lengths.in_max),
                    out_len=rng.randint(lengths.out_min, lengths.out_max),
                )
            )
        start += duration
    return trace


class Server:
    """One runtime: completions, /metrics and the admin route."""

    def __init__(self, session: aiohttp.ClientSession, base: str, model: str, token: str, lengths: Lengths):
        self.session = session
        self.base = base.rstrip("/")
        self.model = model
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.lengths = lengths

    async def limits(self) -> dict[str, Any]:
        async with self.session.get(f"{self.base}/governor/v1/limits", headers=self.headers) as response:
            body: dict[str, Any] = await response.json()
            if response.status != 200:
                raise RuntimeError(f"GET limits -> {response.status}: {body}")
            return body

    async def set_cap(self, cap: int) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        async with self.session.put(
            f"{self.base}/governor/v1/limits", json={"cap": cap}, headers=self.headers
        ) as response:
            body: dict[str, Any] = await response.json()
            elapsed = time.perf_counter() - started
            if response.status != 200:
                raise RuntimeError(f"PUT cap={cap} -> {response.status}: {body}")
            return body, elapsed

    async def metrics(self) -> dict[str, float]:
        async with self.session.get(f"{self.base}/metrics") as response:
            return parse_metrics(await response.text())

    async def stream(self, request: Request, t0: float) -> None:
        rng = random.Random((request.index + 1_000_000 * request.salt) * 1_000_003 + request.in_len)
        prompt = [rng.randrange(self.lengths.id_low, self.lengths.id_high) for _ in range(request.in_len)]
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": request.out_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        request.t_send = time.perf_counter() - t0
        try:
            async with self.session.post(f"{self.base}/v1/completions", json=body) as response:
                if response.status != 200:
                    request.error = f"http {response.status}: {(await response.text())[:160]}"
                    return
                async for raw in response.content:
                    if not raw.startswith(b"data: "):
                        continue
                    payload = raw[6:].strip()
                    if payload == b"[DONE]":
                        break
                    now = time.perf_counter() - t0
                    message = json.loads(payload)
                    usage = message.get("usage")
                    if usage:
                        request.completion_tokens = usage.get("completion_tokens")
                    choices = message.get("choices") or []
                    if choices and choices[0].get("text"):
                        request.chunks.append(now)
            request.t_end = time.perf_counter() - t0
            if request.completion_tokens != request.out_len:
                request.error = f"short output {request.completion_tokens}/{request.out_len}"
        except asyncio.CancelledError:
            request.error = "cancelled"
            raise
        except Exception as exc:  # every failure is recorded, none stops the run
            request.error = repr(exc)[:160]

    async def wait_idle(self, limit_s: float = 120.0) -> float:
        started = time.perf_counter()
        while time.perf_counter() - started < limit_s:
            with contextlib.suppress(Exception):
                sample = await self.metrics()
                if sample.get("running", 1) == 0 and sample.get("waiting", 1) == 0:
                    break
            await asyncio.sleep(0.5)
        return time.perf_counter() - started


class Sampler:
    """Samples /metrics every ``interval`` seconds into rows (t relative to ``t0``)."""

    def __init__(self, server: Server, t0: float, interval: float, label: dict[str, Any]):
        self.server, self.t0, self.interval, self.label = server, t0, interval, label
        self.rows: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter() - self.t0
            with contextlib.suppress(Exception):
                self.rows.append({**self.label, "t": round(t, 3), **await self.server.metrics()})
            await asyncio.sleep(self.interval)

    def __enter__(self) -> Sampler:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def drive(
    server: Server,
    trace: list[Request],
    t0: float,
    grace_s: float,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Send the trace on time (until ``stop``), wait ``grace_s`` for the rest, cancel what is still open."""
    tasks: list[asyncio.Task[None]] = []
    sent = 0
    for request in trace:
        if stop is not None and stop.is_set():
            break
        delay = t0 + request.t_sched - time.perf_counter()
        if delay > 0:
            if stop is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
            else:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(server.stream(request, t0)))
        sent += 1
    send_end = time.perf_counter() - t0
    pending = [task for task in tasks if not task.done()]
    if pending:
        await asyncio.wait(pending, timeout=grace_s)
    cancelled = 0
    for task in tasks:
        if not task.done():
            task.cancel()
            cancelled += 1
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"sent": sent, "cancelled": cancelled, "send_end_s": send_end, "stop_s": time.perf_counter() - t0}
