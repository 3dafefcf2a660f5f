"""The demo's passes run one after the other: a span run at the same load and the same cap in two passes (the
first phase; the whole of both static passes) says whether the machine kept its speed between them, and the
demo says so when it did not. The static side is the mean of the passes before and after the governed one."""

from __future__ import annotations

import pytest
from governor_dev.demo import (
    DRIFT_BOUND,
    PassResult,
    Tick,
    bracket,
    held_throughout,
    host_drift,
    meets_check,
    score,
)
from governor_dev.demoview import drift_line, verdict_line
from governor_dev.loadgen import RequestRecord


def light_phase(tpot_s: float, requests: int = 9) -> list[RequestRecord]:
    """Requests of the first phase, one a second, each with `tpot_s` per token (one slow outlier)."""
    per_token = [10 * tpot_s] + [tpot_s] * (requests - 1)  # one tail the median must not follow
    return [
        RequestRecord("light", float(i), 32, 64, ttft_s=0.05, tpot_s=t, e2e_s=0.05 + 63 * t)
        for i, t in enumerate(per_token)
    ]


def test_the_median_of_the_control_phase_gives_the_machines_drift() -> None:
    static = score(light_phase(0.004), 0.01, 0.0, 20.0, 2.5)
    same = score(light_phase(0.004), 0.01, 0.0, 20.0, 2.5)
    slower = score(light_phase(0.0072), 0.01, 0.0, 20.0, 2.5)
    assert static.median_s == pytest.approx(0.004)
    assert host_drift(static, same) == pytest.approx(1.0)
    assert host_drift(static, slower) == pytest.approx(1.8)
    assert host_drift(static, score([], 0.01, 0.0, 20.0, 2.5)) is None


def test_a_drift_past_the_bound_is_named_and_one_within_it_is_not() -> None:
    within = drift_line("light phase", DRIFT_BOUND * 0.99)
    beyond = drift_line("light phase", DRIFT_BOUND * 1.5)
    faster = drift_line("light phase", 1 / (DRIFT_BOUND * 1.5))
    assert "measures the machine" not in within and "×1.19" in within
    assert "measures the machine as much as the law" in beyond and "×1.80" in beyond
    assert "measures the machine as much as the law" in faster
    assert "too little" in drift_line("light phase", None)


def test_the_static_side_is_the_mean_of_the_passes_around_the_governed_one() -> None:
    # A machine that slows steadily: the static pass before at 4 ms per token, after at 6 ms. Against a
    # governed pass at 5 ms (the machine's speed halfway through), the mean of the two static passes is the
    # fair side; either alone is not.
    slo = 0.0055
    before, after = (score(light_phase(t), slo, 0.0, 20.0, 2.5) for t in (0.004, 0.006))
    static = bracket(before, after)
    assert static.goodput_tok_s == pytest.approx((before.goodput_tok_s + after.goodput_tok_s) / 2)
    assert before.goodput_tok_s > 0 and after.goodput_tok_s == 0.0
    assert static.attainment == pytest.approx((before.attainment + after.attainment) / 2)
    assert static.median_s == pytest.approx(0.005)
    assert static.requests == before.requests + after.requests and static.failed == 0
    assert host_drift(before, after) == pytest.approx(1.5)
    line = drift_line("whole run", host_drift(before, after), compared=("the first static pass", "the last"))
    assert "×1.50 the first static pass's median TPOT in the last" in line
    assert "measures the machine as much as the law" in line


def test_the_verdict_asks_both_windows_and_goodput_at_least_static() -> None:
    fast, slow = (score(light_phase(t), 0.0055, 0.0, 20.0, 2.5) for t in (0.004, 0.006))
    assert meets_check(slow, fast) and meets_check(fast, fast) and not meets_check(fast, slow)
    assert "this run meets the check" in verdict_line(slow, fast)
    assert "this run does not meet the check" in verdict_line(fast, slow)
    assert "×0.00" in verdict_line(fast, slow)
    # A static side with no goodput at all: no ratio, and the check still judged on both.
    assert "×" not in verdict_line(slow, slow) and "meets the check" in verdict_line(slow, slow)


def test_a_phase_in_which_the_cap_moved_is_no_control() -> None:
    moved = PassResult("governed", True, ticks=[tick(0.5, 64), tick(1.5, 51), tick(6.0, 38, "heavy")])
    kept = PassResult("static", False, ticks=[tick(0.5, 64), tick(1.5, 64), tick(6.0, 64, "heavy")])
    assert held_throughout(kept, "light", 64) and not held_throughout(moved, "light", 64)
    assert not held_throughout(kept, "probe", 64), "a phase with no tick is no control"
    assert "no control" in drift_line("light phase", None, held=False)


def tick(t: float, cap: int, phase: str = "light") -> Tick:
    return Tick(t=t, phase=phase, cap=cap, p99_s=None, smoothed_s=None, running=None, waiting=None,
                tokens_per_s=None)  # fmt: skip
