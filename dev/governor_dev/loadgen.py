"""Open-loop load for an OpenAI-compatible completions endpoint, with per-request latencies.

Prompts are token-id lists (the test and demo engines run without a tokenizer), lengths are exact, and
`ignore_eos` makes every request produce exactly the output length asked for. Arrivals are Poisson at the
phase's rate; each request streams, so TTFT and TPOT are measured at the client the way `vllm bench serve`
measures them: TTFT = first chunk − send, TPOT = (last chunk − first chunk) / (output tokens − 1).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx


@dataclass(frozen=True)
class Phase:
    """One stretch of traffic: Poisson arrivals at `rate_rps`, uniform prompt and output lengths."""

    name: str
    duration_s: float
    rate_rps: float
    prompt_tokens: tuple[int, int] = (32, 64)
    output_tokens: tuple[int, int] = (32, 64)


@dataclass(frozen=True)
class RequestRecord:
    phase: str
    sent_at: float  # seconds since the load started
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class LoadResult:
    records: list[RequestRecord] = field(default_factory=list)

    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]


async def one_request(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    phase: str,
    prompt: list[int],
    output_tokens: int,
    t0: float,
) -> RequestRecord:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    sent = time.monotonic()
    first: float | None = None
    last: float | None = None
    produced = 0
    try:
        async with client.stream("POST", f"{base_url}/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:200]
                error = f"HTTP {resp.status_code}: {detail}"
                return RequestRecord(phase, sent - t0, len(prompt), 0, error=error)
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    produced = int(chunk["usage"].get("completion_tokens") or produced)
                if chunk.get("choices"):
                    now = time.monotonic()
                    first = first if first is not None else now
                    last = now
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return RequestRecord(phase, sent - t0, len(prompt), produced, error=f"{type(exc).__name__}: {exc}")
    end = time.monotonic()
    if first is None or last is None:
        return RequestRecord(phase, sent - t0, len(prompt), produced, error="no tokens streamed")
    tpot = (last - first) / (produced - 1) if produced > 1 else None
    return RequestRecord(phase, sent - t0, len(prompt), produced, first - sent, tpot, end - sent)


async def run_phases(
    base_url: str,
    model: str,
    phases: Sequence[Phase],
    *,
    seed: int = 0,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_phase: Callable[[Phase], None] | None = None,
    timeout_s: float = 120.0,
) -> LoadResult:
    """Send every phase's traffic in order; returns when the last request has finished."""
    rng = random.Random(seed)
    result = LoadResult()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        t0 = time.monotonic()
        tasks: list[asyncio.Task[RequestRecord]] = []

        def finished(task: asyncio.Task[RequestRecord]) -> None:
            if task.cancelled():
                return
            record = task.result()
            result.records.append(record)
            if on_record is not None:
                on_record(record)

        for phase in phases:
            if on_phase is not None:
                on_phase(phase)
            phase_end = time.monotonic() + phase.duration_s
            while phase.rate_rps > 0:
                await asyncio.sleep(rng.expovariate(phase.rate_rps))
                if time.monotonic() >= phase_end:
                    break
                prompt = [rng.randrange(10, 1000) for _ in range(rng.randint(*phase.prompt_tokens))]
                out = rng.randint(*phase.output_tokens)
                task = asyncio.create_task(one_request(client, base_url, model, phase.name, prompt, out, t0))
                task.add_done_callback(finished)
                tasks.append(task)
            if phase.rate_rps <= 0:
                await asyncio.sleep(max(0.0, phase_end - time.monotonic()))
        await asyncio.gather(*tasks, return_exceptions=True)
    return result
