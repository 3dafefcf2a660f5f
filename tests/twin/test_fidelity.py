"""Fidelity of the twin: the H200 calibration rows (±15 %), and the real vLLM CPU runtime (the shared engine).

The CPU check is the short version of the report's: three closed-loop concurrencies, a few seconds each, on
the session's real engine, against the twin running the stored CPU profile in virtual time. The runtime shares
two cores with everything else the suite runs; neighbours only ever slow a run down, so each level is the best
of short repeats (as the calibration was), the way `timeit` takes the minimum, and it is measured twice: the
tolerance is ±20 % or three times the real engine's disagreement with itself, whichever is larger.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from governor_twin.fidelity import CPU_TOLERANCE, H200_TOLERANCE, cpu_comparisons, h200_fidelity
from governor_twin.measure import best_of
from governor_twin.profile import load_profile, with_limits

from tests.support.engine import Engine

PROMPT, OUTPUT = 32, 64
LEVELS = (2, 8, 16)
THROUGHPUT_TOLERANCE = 0.6
NOISE_FACTOR = 3.0  # a twin cannot be judged closer than a few times the real engine's own disagreement


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
    """Latency: ±20 %, or three times the real engine's disagreement between two identical measurements when
    the shared cores make that larger (a twin cannot be judged more closely than the real engine reproduces
    itself). Throughput: ±60 % (known gap: the linear step model does not see the 2-core machine saturate,
    and over-predicts closed-loop throughput at concurrency >= 8 by 30-55 %). Errors are printed (-s)."""
    engine = engine_limits
    engine.set_limits(cap=engine.ceiling)
    profile = with_limits(load_profile("cpu_tiny_llama"), ceiling=engine.ceiling)

    async def measure(concurrency: int, seed: int) -> dict[str, float]:
        level = await best_of(engine.base_url, engine.model, concurrency, 2.0, PROMPT, OUTPUT, 3, seed)
        assert level.errors == 0
        return level.summary()

    report = []
    for concurrency in LEVELS:
        first, second = asyncio.run(measure(concurrency, 1)), asyncio.run(measure(concurrency, 2))
        best = max(first, second, key=lambda level: level["tokens_per_s"])
        for comparison in cpu_comparisons(profile, [best], PROMPT, OUTPUT, 2.0):
            a, b = first[comparison.metric], second[comparison.metric]
            repeatability = abs(a - b) / min(a, b)
            floor = THROUGHPUT_TOLERANCE if comparison.metric == "tokens_per_s" else CPU_TOLERANCE
            tolerance = max(floor, NOISE_FACTOR * repeatability)
            report.append(
                {
                    **asdict(comparison),
                    "error": comparison.error,
                    "real_vs_real": repeatability,
                    "tolerance": tolerance,
                }
            )
    (tmp_path / "cpu_fidelity.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    for row in report:
        assert abs(row["error"]) <= row["tolerance"], (row, report)
    # the lever has the same direction in both: more concurrency, longer requests
    p50 = {(row["label"], row["metric"]): (row["measured"], row["twin"]) for row in report}
    low, high = p50[("concurrency 2", "e2e_p50_s")], p50[("concurrency 16", "e2e_p50_s")]
    assert high[0] > low[0] and high[1] > low[1], report
