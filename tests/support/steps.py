"""One check of the step counters' contract, run on the runtime's real engine and on the twin alike."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
from governor.core import signals

STEP_SERIES = (
    signals.RUNTIME_STEP_SECONDS,
    signals.RUNTIME_STEPS,
    signals.RUNTIME_STEP_SEQUENCES,
    signals.RUNTIME_STEP_CONTEXT_TOKENS,
    signals.RUNTIME_STEP_PREFILL_TOKENS,
)
# (prompt tokens, generated tokens) of six requests sent at once
SHAPES = ((23, 9), (57, 4), (80, 12), (31, 1), (64, 7), (45, 16))


async def check_step_accounting(
    base_url: str, body: Callable[[list[int], int], dict[str, Any]], totals: Callable[[], list[float]]
) -> None:
    """Six requests at once, prompts never seen before (no prefix-cache hit): the step counters grow by
    exactly their prompt tokens (prefill), their generated tokens (one sequence-step each: the prefill's
    step samples the first) and the context their decode steps held (P, P+1, ... P+n-2); the steps lie
    between the longest request's and the sequences; the seconds are more than none and at most the wall
    time. `totals` reads the five series of STEP_SERIES from /metrics."""
    before = totals()
    while True:  # an earlier request may still be on its way to /metrics
        await asyncio.sleep(1.2)
        if (now := totals()) == before:
            break
        before = now
    rng = random.Random(time.time_ns())
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        sent = [
            client.post("/v1/completions", json=body([rng.randrange(3, 1000) for _ in range(p)], n))
            for p, n in SHAPES
        ]
        responses = await asyncio.gather(*sent)
    elapsed = time.monotonic() - started
    assert all(response.status_code == 200 for response in responses)
    expected = (
        sum(n for _, n in SHAPES),
        sum(sum(range(p, p + n - 1)) for p, n in SHAPES),
        sum(p for p, _ in SHAPES),
    )
    deadline = time.monotonic() + 10
    while True:  # the totals reach /metrics on the next refresh
        seconds, steps, sequences, context, prefill = (a - b for a, b in zip(totals(), before, strict=True))
        if (sequences, context, prefill) == expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    assert (sequences, context, prefill) == expected
    assert max(n for _, n in SHAPES) <= steps <= sequences
    assert 0 < seconds <= elapsed
