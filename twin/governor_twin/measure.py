"""Closed-loop levels against any OpenAI-compatible completions endpoint (the real vLLM runtime or the twin).

Used to calibrate the twin's CPU step-time profile and by the fidelity check, so both sides of a comparison
are measured by the same client (`governor_dev.loadgen.closed_loop`, timed by `governor_dev.measure`).
Prompts are token-id lists with `ignore_eos`, so lengths are exact. Streamed requests keep TTFT and every gap
between chunks (ITL); non-streamed ones only e2e = end − send.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import httpx
import numpy as np
from governor_dev import loadgen
from governor_dev.measure import stream_completion


@dataclass(frozen=True)
class Measured:
    """One completed request as the client saw it (seconds since the level started)."""

    sent_s: float
    prompt_tokens: int
    output_tokens: int
    ttft_s: float  # NaN when not streamed
    e2e_s: float
    gaps_s: tuple[float, ...]


def little(concurrency: int, amount: float, e2e_sum_s: float) -> float:
    """A closed loop's rate of `amount` (requests or tokens) by Little's law: `concurrency` in flight, each
    for the mean e2e of the requests counted (0 when none finished)."""
    return concurrency * amount / e2e_sum_s if e2e_sum_s > 0 else 0.0


@dataclass
class LevelResult:
    """A closed-loop level: `concurrency` clients, each sending the next request when the last one ends."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    duration_s: float
    requests: list[Measured] = field(default_factory=list)
    errors: int = 0
    # The requests finishing in the window, whenever sent, and their summed e2e: the throughput. A closed
    # loop holds `concurrency` requests at every instant (but for the client's own gap between two), so by
    # Little's law it serves concurrency / mean e2e requests per second. Counting completions in the window
    # instead is quantized by the bursts in which a synchronized batch finishes: at 16 clients and 0.55 s a
    # request, a 2 s window holds 3 or 4 bursts of 16 by its phase alone (1568 or 2080 tok/s from one engine,
    # 2026-12-02), and counting only the requests also sent in it loses one per client at each edge.
    finished: int = 0
    finished_tokens: int = 0
    finished_e2e_s: float = 0.0

    def record(self, measured: Measured, warmup_s: float) -> None:
        """Count a request that finished in the window [warmup_s, warmup_s + duration_s]; keep its latencies
        if it was also sent in it."""
        if warmup_s <= measured.sent_s + measured.e2e_s <= warmup_s + self.duration_s:
            self.finished += 1
            self.finished_tokens += measured.output_tokens
            self.finished_e2e_s += measured.e2e_s
            if measured.sent_s >= warmup_s:
                self.requests.append(measured)

    def summary(self) -> dict[str, float]:
        e2e = np.array([r.e2e_s for r in self.requests]) if self.requests else np.array([np.nan])
        ttft = np.array([r.ttft_s for r in self.requests] or [np.nan])
        gaps = np.concatenate([np.array(r.gaps_s) for r in self.requests if r.gaps_s] or [np.array([np.nan])])
        return {
            "concurrency": float(self.concurrency),
            "requests": float(len(self.requests)),
            "tokens_per_s": little(self.concurrency, self.finished_tokens, self.finished_e2e_s),
            "requests_per_s": little(self.concurrency, self.finished, self.finished_e2e_s),
            "e2e_p50_s": float(np.percentile(e2e, 50)),
            "e2e_p99_s": float(np.percentile(e2e, 99)),
            "ttft_p50_s": float(np.percentile(ttft, 50)),
            "itl_p50_s": float(np.percentile(gaps, 50)),
            "errors": float(self.errors),
        }


async def _one(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    prompt: list[int],
    max_tokens: int,
    start: float,
    stream: bool,
) -> Measured:
    body: dict[str, object] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if stream:
        timed = await stream_completion(client, url, body)
        tokens = timed.usage_tokens or max_tokens
        return Measured(timed.sent - start, len(prompt), tokens, timed.ttft_s, timed.e2e_s, timed.gaps_s)
    sent = time.perf_counter()
    response = await client.post(url, json={**body, "stream": False})
    response.raise_for_status()
    end = time.perf_counter()
    tokens = int(response.json()["usage"]["completion_tokens"])
    return Measured(sent - start, len(prompt), tokens, float("nan"), end - sent, ())


async def closed_loop(
    base_url: str,
    model: str,
    concurrency: int,
    duration_s: float,
    prompt_tokens: int,
    output_tokens: int,
    warmup_s: float = 1.0,
    seed: int = 0,
    stream: bool = False,
) -> LevelResult:
    """Run `concurrency` clients for `warmup_s + duration_s`: the throughput of the requests finishing in
    the window, the latencies of those also sent in it."""
    rng = random.Random(seed)
    url = base_url.rstrip("/") + "/v1/completions"
    result = LevelResult(concurrency, prompt_tokens, output_tokens, duration_s)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    start = time.perf_counter()

    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:

        async def send(_worker: int, _round: int) -> None:
            prompt = [rng.randrange(3, 1000) for _ in range(prompt_tokens)]
            try:
                record = await _one(client, url, model, prompt, output_tokens, start, stream)
            except (httpx.HTTPError, RuntimeError):
                result.errors += 1
                await asyncio.sleep(0.05)
                return
            result.record(record, warmup_s)

        deadline = time.monotonic() + warmup_s + duration_s
        await loadgen.closed_loop(concurrency, send, deadline=deadline)
    return result


async def best_of(
    base_url: str,
    model: str,
    concurrency: int,
    seconds: float,
    prompt_tokens: int,
    output_tokens: int,
    repeats: int = 3,
    seed: int = 0,
) -> LevelResult:
    """The repeat with the highest throughput. Neighbours on shared cores only ever slow a run down, so the
    best of a few short repeats estimates the engine itself (as `timeit` takes the minimum)."""
    results = [
        await closed_loop(base_url, model, concurrency, seconds, prompt_tokens, output_tokens, 0.5, seed + r)
        for r in range(repeats)
    ]
    return max(results, key=lambda level: level.summary()["tokens_per_s"])
