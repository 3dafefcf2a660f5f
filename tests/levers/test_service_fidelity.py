"""benchmarks/service_fidelity.py: the engine kept full reproduces the H200 calibration, and the levers law's
queue model knows what the cap it holds serves (near its operating point, where its decisions are made)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from governor_twin.matrix.profiles import REFERENCE_OUTPUT, REFERENCE_PROMPT, get_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import service_fidelity


def calibration_lengths(n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    prompts = rng.integers(REFERENCE_PROMPT[0], REFERENCE_PROMPT[1] + 1, n).astype(np.int64)
    outputs = rng.integers(REFERENCE_OUTPUT[0], REFERENCE_OUTPUT[1] + 1, n).astype(np.int64)
    return prompts, outputs


@pytest.mark.parametrize(("cap", "measured"), [(16, 14.3), (32, 21.7), (64, 30.2)])
def test_an_engine_kept_full_serves_what_the_h200_calibration_measured(cap: int, measured: float) -> None:
    # The calibration's capacity at each cap (tests/levers/test_queueing.py holds the same figures).
    rate, tpot_p99, running = service_fidelity.saturated(
        get_profile("h200_llama8b"), cap, *calibration_lengths()
    )
    assert rate == pytest.approx(measured, rel=0.1)
    assert running == pytest.approx(cap, rel=0.05)  # kept full: the cap binds
    assert 0.004 < tpot_p99 < 0.05


def test_the_queue_model_knows_what_the_held_cap_serves_on_the_h200_steady_cell() -> None:
    profile = get_profile("h200_llama8b")
    caps = [32, 64, 128, 256]
    seen = service_fidelity.predictions("h200_llama8b", "steady", "medium", 0, caps)
    assert seen.held and all(seen.service[c] for c in caps)
    held = statistics.median(seen.held)
    nearest = min(caps, key=lambda c: abs(np.log(c / held)))
    rate, _, _ = service_fidelity.saturated(profile, nearest, seen.prompts, seen.outputs)
    assert statistics.median(seen.service[nearest]) == pytest.approx(rate, rel=0.15)


@pytest.mark.parametrize("profile_name", ["h200_llama8b", "cpu_tiny_llama", "h200_llama70b_derived"])
@pytest.mark.parametrize("cap", [4, 16])
def test_the_step_costs_give_a_full_caps_service_by_work_conservation(profile_name: str, cap: int) -> None:
    # Short chats and long prompts with short outputs alike: the engine's time is its steps' costs.
    profile = get_profile(profile_name)
    chats = calibration_lengths(600)
    rng, longest = np.random.default_rng(5), profile.max_model_len
    long_prompts = (
        rng.integers(longest // 2, longest * 3 // 4, 600).astype(np.int64),
        rng.integers(8, 32, 600).astype(np.int64),
    )
    for prompts, outputs in (chats, long_prompts):
        rate, _, _ = service_fidelity.saturated(profile, cap, prompts, outputs)
        costed = profile.step.full_rate_rps(cap, prompts.tolist(), outputs.tolist())
        assert costed == pytest.approx(rate, rel=0.05)


def test_the_step_costs_service_refuses_what_it_cannot_price() -> None:
    step = get_profile("h200_llama8b").step
    with pytest.raises(ValueError):
        step.full_rate_rps(0, [100.0], [10.0])
    with pytest.raises(ValueError):
        step.full_rate_rps(4, [100.0], [])
