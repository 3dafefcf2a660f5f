"""Load for the control-loop tests: closed-loop workers (a fixed number of requests in flight) and open-loop
Poisson arrivals, against the real engine's /v1/completions. Non-streaming: the engine's own histograms are
what the governor reads, so the client only has to keep requests coming."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from governor_dev import loadgen

from tests.support.engine import Engine


@dataclass
class LoadStats:
    sent: int = 0
    completed: int = 0
    failed: int = 0


async def _one(
    client: httpx.AsyncClient,
    engine: Engine,
    rng: random.Random,
    max_tokens: int,
    stats: LoadStats,
    prompt_tokens: tuple[int, int] = (16, 48),
) -> None:
    stats.sent += 1
    # Random lengths, so that requests started together do not all finish together (lockstep waves).
    prompt = [rng.randrange(3, 1000) for _ in range(rng.randint(*prompt_tokens))]
    body = engine.completion_body(prompt, rng.randint(max(1, max_tokens // 2), max_tokens))
    try:
        response = await client.post("/v1/completions", json=body)
        if response.status_code == 200:
            stats.completed += 1
        else:
            stats.failed += 1
    except httpx.HTTPError:
        stats.failed += 1


@contextlib.asynccontextmanager
async def closed_loop(
    engine: Engine, concurrency: int, max_tokens: int, prompt_tokens: tuple[int, int] = (16, 48)
) -> AsyncIterator[LoadStats]:
    """`concurrency` workers, each sending its next request when the last one finished; prompts of a length
    drawn from `prompt_tokens`."""
    stats = LoadStats()
    rngs = [random.Random(seed) for seed in range(concurrency)]
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=300, limits=limits) as client:

        async def send(worker: int, _round: int) -> None:
            await _one(client, engine, rngs[worker], max_tokens, stats, prompt_tokens)

        async with loadgen.closed_loop_running(concurrency, send):
            yield stats


@contextlib.asynccontextmanager
async def open_loop(engine: Engine, rate_rps: float, max_tokens: int) -> AsyncIterator[LoadStats]:
    """Poisson arrivals at `rate_rps`, whatever the engine manages: a queue grows when it cannot keep up."""
    stats, rng = LoadStats(), random.Random(7)
    async with httpx.AsyncClient(
        base_url=engine.base_url, timeout=300, limits=httpx.Limits(max_connections=2000)
    ) as client:
        inflight: set[asyncio.Task[None]] = set()

        async def arrivals() -> None:
            while True:
                await asyncio.sleep(rng.expovariate(rate_rps))
                task = asyncio.create_task(_one(client, engine, rng, max_tokens, stats))
                inflight.add(task)
                task.add_done_callback(inflight.discard)

        sender = asyncio.create_task(arrivals())
        try:
            yield stats
        finally:
            sender.cancel()
            for task in list(inflight):
                task.cancel()
            await asyncio.gather(sender, *inflight, return_exceptions=True)
