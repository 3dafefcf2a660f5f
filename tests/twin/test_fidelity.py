"""Fidelity of the twin: the H200 calibration rows (±15 %), and the real vLLM CPU runtime (the shared engine).

The CPU check (issue 5: throughput and P50/P99 latency at three concurrencies within ±20 %): the twin is a
model of *this* engine on *this* machine, so its machine-speed terms (overhead, step base and per-sequence
cost, stalls) are re-fitted on closed loops at concurrencies 1, 4, 12 and 24, and its predictions at 2, 8 and
16 (never fitted on) are compared with the engine. The machine is a shared VM whose speed moves between
rounds (one session's concurrency-1 median e2e went 113 → 304 ms from one round to the next), so a fit from
one round does not describe another: each of seven rounds measures all seven levels, re-fits on its own four
and predicts its own three, and the verdict is each held-out metric's median error over the rounds, within
±20 %. Every round's error is printed; their spread (±30 % in a round is common) is the engine's
disagreement with itself. Why seven: a single round's errors over two sessions (16 rounds) gave a median of
five rounds beyond ±20 % on some metric in 2 % of 4000 random draws, of seven in none. The levels run
in a seeded shuffled order per round: in a fixed order, concurrency 2 always ran just after 24, and in one
session it measured 30-40 % slower than the twin in all four rounds (slower even than concurrency 4). CI
failed three times on the protocol this replaced (one fit on each level's fastest round), mostly on P99s
of single 2 s windows. That the engine reproduces itself at all is owed to `localengine.pin_engine`
(EngineCore and worker on one core): unpinned, its throughput at 8-24 clients swung 5-10x between runs.
Every error is printed (-s) and written to the test's temp dir.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from governor_twin.calibrate import refit_speed
from governor_twin.fidelity import CPU_TOLERANCE, H200_TOLERANCE, cpu_comparisons, h200_fidelity
from governor_twin.measure import LevelResult, Measured, closed_loop
from governor_twin.profile import load_profile, with_limits

from tests.support.engine import Engine

PROMPT, OUTPUT = 32, 64  # calibrate.PROMPT, calibrate.OUTPUT: the shape refit_speed fits
FIT_LEVELS = (1, 4, 12, 24)
LEVELS = (2, 8, 16)  # held out
SECONDS = 2.0
ROUNDS = 7


def test_twin_reproduces_the_h200_serving_rows() -> None:
    comparisons = h200_fidelity()
    errors = {(c.label, c.metric): c.error for c in comparisons}
    # capacity (achieved rate) of every row, saturated or not
    assert all(abs(e) <= H200_TOLERANCE for (_, m), e in errors.items() if m == "achieved_rps"), errors
    # per-token latency, the signal the cap governs, at its median
    assert all(abs(e) <= H200_TOLERANCE for (_, m), e in errors.items() if m == "tpot_p50_ms"), errors
    within = np.mean([abs(e) <= H200_TOLERANCE for e in errors.values()])
    assert within >= 0.8, sorted(errors.items(), key=lambda kv: -abs(kv[1]))[:8]


@pytest.mark.vllm
def test_twin_matches_the_real_cpu_runtime(engine_limits: Engine, tmp_path: Path) -> None:
    engine = engine_limits
    engine.set_limits(cap=engine.ceiling)

    async def once(concurrency: int, seed: int) -> dict[str, float]:
        level = await closed_loop(
            engine.base_url, engine.model, concurrency, SECONDS, PROMPT, OUTPUT, 0.5, seed
        )
        assert level.errors == 0
        return level.summary()

    stored = with_limits(load_profile("cpu_tiny_llama"), ceiling=engine.ceiling)
    errors: dict[tuple[str, str], list[float]] = {}
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    fits = []
    for round_ in range(ROUNDS):
        order = [*FIT_LEVELS, *LEVELS]
        random.Random(round_).shuffle(order)
        levels = {c: asyncio.run(once(c, 1000 * round_ + c)) for c in order}
        profile = refit_speed(stored, [levels[c] for c in FIT_LEVELS], SECONDS)
        fits.append({"step": asdict(profile.step), "request_overhead_s": profile.request_overhead_s})
        for comparison in cpu_comparisons(profile, [levels[c] for c in LEVELS], PROMPT, OUTPUT, SECONDS):
            key = (comparison.label, comparison.metric)
            errors.setdefault(key, []).append(comparison.error)
            pairs.setdefault(key, []).append((comparison.measured, comparison.twin))

    median = {key: float(np.median(values)) for key, values in errors.items()}
    report = [
        {"label": label, "metric": metric, "median_error": median[key], "rounds": pairs[key]}
        for key in errors
        for label, metric in [key]
    ]
    (tmp_path / "cpu_fidelity.json").write_text(json.dumps({"fits": fits, "held_out": report}, indent=1))
    for (label, metric), values in errors.items():
        each = " ".join(f"{100 * e:+4.0f}" for e in values)
        print(f"{label:16s} {metric:13s} error median {100 * median[label, metric]:+6.1f} %  rounds {each} %")
    assert all(abs(e) <= CPU_TOLERANCE for e in median.values()), sorted(median.items(), key=lambda kv: kv[1])
    # the lever has the same direction in both: more concurrency, longer requests
    low, high = (np.median(pairs[f"concurrency {c}", "e2e_p50_s"], axis=0) for c in (LEVELS[0], LEVELS[-1]))
    assert high[0] > low[0] and high[1] > low[1], report


def test_a_closed_loop_throughput_does_not_depend_on_the_windows_phase() -> None:
    """A synchronized closed loop finishes in bursts of `concurrency`: counted in a 2 s window, 16 clients at
    0.55 s a request read 3 or 4 bursts (1536 or 2048 tok/s) by where the window falls, and the fastest of
    four rounds kept the lucky phase (the CPU check failed CI on a 2-core AMD machine, 2026-12-02, with the
    real engine at 2080 tok/s against the twin's 1553 for that alone). By Little's law the rate is the same
    at every phase, and it keeps the requests that straddle the window's start."""
    e2e, clients = 0.55, 16
    rates = []
    for warmup in np.linspace(0.5, 0.5 + e2e, 12):
        level = LevelResult(clients, PROMPT, OUTPUT, SECONDS)
        for _client in range(clients):
            sent = 0.0
            while sent < warmup + SECONDS:
                level.record(Measured(sent, PROMPT, OUTPUT, float("nan"), e2e, ()), warmup)
                sent += e2e
        assert all(r.sent_s >= warmup and r.sent_s + r.e2e_s <= warmup + SECONDS for r in level.requests)
        rates.append(level.summary()["tokens_per_s"])
    assert rates == pytest.approx([clients * OUTPUT / e2e] * len(rates), rel=1e-9)
