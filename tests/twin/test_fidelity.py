"""Fidelity of the twin: the H200 calibration rows (±15 %), and the real vLLM CPU runtime (the shared engine).

The CPU check is the short version of the report's: three closed-loop concurrencies, a few seconds each, on
the session's real engine, against the twin running the stored CPU profile in virtual time. The runtime shares
two cores with everything else the suite runs, so the machine's speed right now is measured first (one client,
the same requests) and the profile's time constants are scaled by it; then the three levels are compared.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from governor_twin.fidelity import (
    CPU_TOLERANCE,
    H200_TOLERANCE,
    Comparison,
    closed_loop_twin,
    cpu_comparisons,
    h200_fidelity,
)
from governor_twin.measure import closed_loop
from governor_twin.profile import EngineProfile, StepTimeModel, load_profile, with_limits

from tests.support.engine import Engine

PROMPT, OUTPUT = 32, 64


def test_twin_reproduces_the_h200_serving_rows() -> None:
    comparisons = h200_fidelity()
    errors = {(c.label, c.metric): c.error for c in comparisons}
    # capacity (achieved rate) of every row, saturated or not
    assert all(abs(e) <= H200_TOLERANCE for (_, m), e in errors.items() if m == "achieved_rps"), errors
    # per-token latency, the signal the cap governs, at its median
    assert all(abs(e) <= H200_TOLERANCE for (_, m), e in errors.items() if m == "tpot_p50_ms"), errors
    within = np.mean([abs(e) <= H200_TOLERANCE for e in errors.values()])
    assert within >= 0.8, sorted(errors.items(), key=lambda kv: -abs(kv[1]))[:8]


def scaled(profile: EngineProfile, factor: float) -> EngineProfile:
    """The same engine on a machine `factor` times slower (every time constant scales)."""
    s = profile.step
    step = StepTimeModel(
        s.base_s * factor,
        s.per_seq_s * factor,
        s.per_kv_token_s * factor,
        s.per_prefill_token_s * factor,
        s.stall_rate_per_s,
        s.stall_mean_s * factor,
    )
    return with_limits(profile, step=step, request_overhead_s=profile.request_overhead_s * factor)


@pytest.mark.vllm
def test_twin_matches_the_real_cpu_runtime(engine_limits: Engine, tmp_path: Path) -> None:
    engine = engine_limits
    engine.set_limits(cap=engine.ceiling)
    profile = with_limits(load_profile("cpu_tiny_llama"), ceiling=engine.ceiling)

    async def measure(concurrency: int, seconds: float) -> dict[str, float]:
        level = await closed_loop(
            engine.base_url,
            engine.model,
            concurrency,
            seconds,
            PROMPT,
            OUTPUT,
            warmup_s=0.5,
            seed=concurrency,
        )
        assert level.errors == 0
        return level.summary()

    comparisons: list[Comparison] = []
    speeds = []
    for concurrency in (2, 8, 16):
        probe = asyncio.run(measure(1, 2.0))  # the machine's speed right now
        twin_probe = closed_loop_twin(profile, 1, 2.0, PROMPT, OUTPUT)
        speed = probe["e2e_p50_s"] / twin_probe["e2e_p50_s"]
        speeds.append(speed)
        level = asyncio.run(measure(concurrency, 4.0))
        comparisons += cpu_comparisons(scaled(profile, speed), [level], PROMPT, OUTPUT, 4.0)
    report = {"speed_factors": speeds, "comparisons": [{**asdict(c), "error": c.error} for c in comparisons]}
    (tmp_path / "cpu_fidelity.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    for c in comparisons:
        bound = CPU_TOLERANCE if c.metric != "e2e_p99_s" else 2.5 * CPU_TOLERANCE
        assert abs(c.error) <= bound, (c, report)
