"""Load for an OpenAI-compatible completions endpoint: open-loop phases with per-request latencies, and the
closed loop (a fixed number of clients, each sending its next request when the last one is answered).

Prompts are token-id lists (the test and demo engines run without a tokenizer), lengths are exact, and
`ignore_eos` makes every request produce exactly the output length asked for. Open-loop arrivals are Poisson
at the phase's rate; each request streams and is timed by `governor_dev.measure` (TTFT, TPOT as
`vllm bench serve` measures them).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import httpx

from governor_dev.measure import StreamError, stream_completion


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
        "temperature": 0.0,
    }
    sent_at = time.perf_counter() - t0
    try:
        timed = await stream_completion(client, f"{base_url}/v1/completions", body)
    except StreamError as exc:
        return RequestRecord(phase, sent_at, len(prompt), 0, error=str(exc))
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return RequestRecord(phase, sent_at, len(prompt), 0, error=f"{type(exc).__name__}: {exc}")
    sent_at, produced = timed.sent - t0, timed.output_tokens
    return RequestRecord(phase, sent_at, len(prompt), produced, timed.ttft_s, timed.tpot_s, timed.e2e_s)


async def closed_loop(
    concurrency: int,
    send: Callable[[int, int], Awaitable[object]],
    *,
    stop: asyncio.Event | None = None,
    deadline: float | None = None,
) -> None:
    """`concurrency` workers, each awaiting `send(worker, round)` again as soon as its last call returned,
    until `stop` is set or `time.monotonic()` passes `deadline`; returns once every worker has stopped (an
    exception in `send` propagates). Without either bound it runs until cancelled."""

    def going() -> bool:
        return not (stop is not None and stop.is_set()) and (deadline is None or time.monotonic() < deadline)

    async def worker(index: int) -> None:
        for round_ in itertools.count():
            if not going():
                return
            await send(index, round_)

    await asyncio.gather(*(worker(index) for index in range(concurrency)))


@contextlib.asynccontextmanager
async def closed_loop_running(
    concurrency: int, send: Callable[[int, int], Awaitable[object]]
) -> AsyncIterator[None]:
    """`closed_loop` in the background for the body of a `with`; leaving it cancels the requests in flight."""
    task = asyncio.create_task(closed_loop(concurrency, send))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def run_phases(
    base_url: str,
    model: str,
    phases: Sequence[Phase],
    *,
    seed: int = 0,
    content_seed: int | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_phase: Callable[[Phase], None] | None = None,
    timeout_s: float = 120.0,
) -> LoadResult:
    """Send every phase's traffic in order; returns when the last request has finished. `seed` fixes the
    arrivals and the lengths; `content_seed`, when given, draws the prompts' token ids apart from them, so two
    runs can replay the same traffic without sharing a prompt (vLLM's prefix cache would serve the second
    run's prefills: the demo's governed pass once ran its long prompts at TPOT P99 6.5 ms where the static
    pass, at the same cap, ran them at 31 ms)."""
    rng = random.Random(seed)
    ids = rng if content_seed is None else random.Random(content_seed)
    result = LoadResult()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        t0 = time.perf_counter()
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
                prompt = [ids.randrange(10, 1000) for _ in range(rng.randint(*phase.prompt_tokens))]
                out = rng.randint(*phase.output_tokens)
                task = asyncio.create_task(one_request(client, base_url, model, phase.name, prompt, out, t0))
                task.add_done_callback(finished)
                tasks.append(task)
            if phase.rate_rps <= 0:
                await asyncio.sleep(max(0.0, phase_end - time.monotonic()))
        await asyncio.gather(*tasks, return_exceptions=True)
    return result
