"""Closed-loop load against any OpenAI-compatible completions endpoint (the real vLLM runtime or the twin).

Used to calibrate the twin's CPU step-time profile and by the fidelity check, so both sides of a comparison
are measured by the same client. Prompts are token-id lists with `ignore_eos`, so lengths are exact. Each
request streams; TTFT = first chunk − send, TPOT = (last chunk − first chunk) / (tokens − 1), e2e = end −
send, and every gap between chunks is kept (ITL).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from dataclasses import dataclass, field

import httpx
import numpy as np


@dataclass(frozen=True)
class Measured:
    """One completed request as the client saw it (seconds since the level started)."""

    sent_s: float
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    e2e_s: float
    gaps_s: tuple[float, ...]

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / max(1, self.output_tokens - 1)


@dataclass
class LevelResult:
    """A closed-loop level: `concurrency` clients, each sending the next request when the last one ends."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    duration_s: float
    requests: list[Measured] = field(default_factory=list)
    errors: int = 0

    def summary(self) -> dict[str, float]:
        e2e = np.array([r.e2e_s for r in self.requests]) if self.requests else np.array([np.nan])
        ttft = np.array([r.ttft_s for r in self.requests] or [np.nan])
        gaps = np.concatenate([np.array(r.gaps_s) for r in self.requests if r.gaps_s] or [np.array([np.nan])])
        tokens = sum(r.output_tokens for r in self.requests)
        return {
            "concurrency": float(self.concurrency),
            "requests": float(len(self.requests)),
            "tokens_per_s": tokens / self.duration_s,
            "requests_per_s": len(self.requests) / self.duration_s,
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
        "stream": stream,
    }
    sent = time.perf_counter()
    if not stream:
        response = await client.post(url, json=body)
        response.raise_for_status()
        end = time.perf_counter()
        tokens = int(response.json()["usage"]["completion_tokens"])
        return Measured(sent - start, len(prompt), tokens, float("nan"), end - sent, ())
    body["stream_options"] = {"include_usage": True}
    chunk_times: list[float] = []
    usage_tokens = 0
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            payload = json.loads(line[6:])
            if payload.get("usage"):
                usage_tokens = int(payload["usage"].get("completion_tokens", 0))
            if payload.get("choices"):
                chunk_times.append(time.perf_counter())
    end = time.perf_counter()
    if not chunk_times:
        raise RuntimeError("no tokens streamed")
    gaps = tuple(float(b - a) for a, b in itertools.pairwise(chunk_times))
    return Measured(
        sent_s=sent - start,
        prompt_tokens=len(prompt),
        output_tokens=usage_tokens or max_tokens,
        ttft_s=chunk_times[0] - sent,
        e2e_s=end - sent,
        gaps_s=gaps,
    )


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
    """Run `concurrency` clients for `warmup_s + duration_s`; keep requests sent after the warm-up."""
    rng = random.Random(seed)
    url = base_url.rstrip("/") + "/v1/completions"
    result = LevelResult(concurrency, prompt_tokens, output_tokens, duration_s)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    start = time.perf_counter()
    stop_at = start + warmup_s + duration_s

    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                prompt = [rng.randrange(3, 1000) for _ in range(prompt_tokens)]
                try:
                    record = await _one(client, url, model, prompt, output_tokens, start, stream)
                except (httpx.HTTPError, RuntimeError):
                    result.errors += 1
                    await asyncio.sleep(0.05)
                    continue
                if record.sent_s >= warmup_s and record.sent_s + record.e2e_s <= warmup_s + duration_s:
                    result.requests.append(record)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
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
