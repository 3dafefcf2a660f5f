"""Fidelity of the twin: the H200 calibration rows (±15 %), and the real vLLM CPU runtime (the shared engine).

The CPU check (issue 5: throughput and P50/P99 latency at three concurrencies within ±20 %): the twin is a
model of *this* engine on *this* machine, so the test first re-fits the stored CPU profile's machine-speed
terms (overhead, step base and per-sequence cost, stalls) on closed loops at concurrencies 1, 4, 12 and 24
measured in the session, then compares the twin's predictions at 2, 8 and 16 (never fitted on) against a
separate, held-out measurement of the same engine: every metric within ±20 %. All seven levels are measured
in four interleaved rounds, each level keeping its fastest run; the real engine's own disagreement between
its even and odd rounds is printed next to each error. That the engine reproduces itself at all is owed to
`localengine.pin_engine` (EngineCore and worker on one core): unpinned, its throughput at 8-24 clients
swung 5-10x between runs and no twin could be judged to ±20 %.
Every error is printed (-s) and written to the test's temp dir.
"""

from __future__ import annotations

import asyncio
import json
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
ROUNDS = 4


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

    # Rounds over every level, interleaved, so that a slow spell of the shared cores falls on fitted and
    # held-out levels alike; each level keeps its fastest run (neighbours only slow a run down), and each
    # held-out level is also kept as two independent halves (even and odd rounds) to measure the real
    # engine's disagreement with itself.
    runs: dict[int, list[dict[str, float]]] = {c: [] for c in (*FIT_LEVELS, *LEVELS)}
    for round_ in range(ROUNDS):
        for concurrency in runs:
            runs[concurrency].append(asyncio.run(once(concurrency, 1000 * round_ + concurrency)))

    def fastest(levels: list[dict[str, float]]) -> dict[str, float]:
        return max(levels, key=lambda level: level["tokens_per_s"])

    stored = with_limits(load_profile("cpu_tiny_llama"), ceiling=engine.ceiling)
    profile = refit_speed(stored, [fastest(runs[c]) for c in FIT_LEVELS], SECONDS)

    report = []
    for concurrency in LEVELS:
        first, second = fastest(runs[concurrency][0::2]), fastest(runs[concurrency][1::2])
        for comparison in cpu_comparisons(profile, [fastest(runs[concurrency])], PROMPT, OUTPUT, SECONDS):
            a, b = first[comparison.metric], second[comparison.metric]
            report.append(
                {**asdict(comparison), "error": comparison.error, "real_vs_real": abs(a - b) / min(a, b)}
            )
    fit = {"step": asdict(profile.step), "request_overhead_s": profile.request_overhead_s}
    (tmp_path / "cpu_fidelity.json").write_text(json.dumps({"fit": fit, "held_out": report}, indent=1))
    print(json.dumps({"fit": fit}, indent=1))
    for row in report:
        print(
            f"{row['label']:16s} {row['metric']:13s} real {row['measured']:8.4g} twin {row['twin']:8.4g} "
            f"error {100 * row['error']:+6.1f} % (real vs real {100 * row['real_vs_real']:5.1f} %)"
        )
    for row in report:
        assert abs(row["error"]) <= CPU_TOLERANCE, (row, report)
    # the lever has the same direction in both: more concurrency, longer requests
    p50 = {(row["label"], row["metric"]): (row["measured"], row["twin"]) for row in report}
    low, high = p50[("concurrency 2", "e2e_p50_s")], p50[("concurrency 16", "e2e_p50_s")]
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
