"""plan_cap on the H200 lines: the cap solved from the fit, and the reason given when it cannot meet both."""

from __future__ import annotations

import math
import random
from functools import cache

import pytest
from governor.core.levers.fit import LeverFit
from governor.core.levers.plan import CapPlan, PlanSettings, plan_cap
from governor.core.levers.queueing import TpotLine, Workload, ttft_quantile_s
from hypothesis import given, settings
from hypothesis import strategies as st

# calibration/h200_llama8b_serving.csv: (mean running, TPOT P50 ms, TPOT P99 ms) at all 17 serving points.
H200_POINTS = [
    (7.9, 5.97, 7.55), (15.8, 6.96, 7.75), (15.6, 6.86, 7.58), (8.5, 6.04, 7.45), (26.2, 8.29, 10.35),
    (31.4, 8.85, 10.31), (7.6, 6.05, 7.64), (27.8, 8.35, 12.12), (63.2, 12.86, 14.92), (7.7, 6.17, 8.0),
    (29.1, 9.06, 12.26), (126.9, 21.26, 23.58), (126.1, 22.43, 25.92), (6.6, 5.77, 6.88), (26.0, 7.8, 9.85),
    (168.4, 26.74, 37.39), (254.6, 38.83, 42.8),
]  # fmt: skip
MS = 0.001
EXACT = PlanSettings(margin=1.0)  # solve the line at the target itself, as DESIGN.md does


def synthetic(intercept_ms: float, slope_ms: float, noise_ms: float, n: int = 200, seed: int = 1) -> LeverFit:
    rng = random.Random(seed)
    fit = LeverFit()
    for _ in range(n):
        running = rng.uniform(4, 250)
        fit = fit.update([running], (intercept_ms + slope_ms * running + rng.gauss(0, noise_ms)) * MS)
    return fit


@cache
def h200_fits() -> tuple[LeverFit, LeverFit]:
    """The per-token P99 line (≈ 6.3 ms + 0.153 ms x running) and the mean line, learnt from noisy ticks."""
    return synthetic(6.3, 0.153, 0.3), synthetic(4.83, 0.132, 0.2, seed=2)


@cache
def measured_fits() -> tuple[LeverFit, LeverFit]:
    """The same lines fitted to the 17 measured points themselves (no forgetting: they are one data set)."""
    quantile, mean = LeverFit(forgetting=1.0), LeverFit(forgetting=1.0)
    for running, p50, p99 in H200_POINTS:
        quantile = quantile.update([running], p99 * MS)
        mean = mean.update([running], p50 * MS)
    return quantile, mean


def plan(
    fits: tuple[LeverFit, LeverFit],
    target_ms: float,
    *,
    rate: float = 8.0,
    ttft_s: float | None = None,
    min_cap: int = 1,
    ceiling: int = 256,
    knobs: PlanSettings | None = None,
) -> CapPlan:
    return plan_cap(
        *fits, arrival_rps=rate, out_tokens=160, prefill_s=0.04, target_s=target_ms * MS, ttft_bound_s=ttft_s,
        min_cap=min_cap, ceiling=ceiling, settings=knobs,
    )  # fmt: skip


@pytest.mark.parametrize(("target_ms", "expected"), [(25, 122), (20, 90), (12, 37)])
def test_the_h200_line_gives_the_cap_in_one_move(target_ms: float, expected: int) -> None:
    result = plan(h200_fits(), target_ms, knobs=EXACT)
    assert result.reason == "meets-both" and result.cap is not None
    assert abs(result.cap - expected) <= 3
    assert result.per_token_met and result.ttft_met
    assert result.predicted_per_token_s is not None and result.predicted_per_token_s <= target_ms * MS


@pytest.mark.parametrize(("target_ms", "expected"), [(25, 122), (20, 90), (12, 37)])
def test_the_measured_points_give_the_same_caps_a_little_lower(target_ms: float, expected: int) -> None:
    """17 points with 1.3 ms of scatter: the upper confidence side costs a few sequences."""
    result = plan(measured_fits(), target_ms, knobs=EXACT)
    assert result.reason == "meets-both" and result.cap is not None
    assert expected - 6 <= result.cap <= expected


def test_the_margin_aims_below_the_target() -> None:
    result = plan(h200_fits(), 25)  # default margin 0.9: aim at 22.5 ms
    assert result.cap is not None and abs(result.cap - 106) <= 3


def test_a_target_below_one_sequence_is_infeasible() -> None:
    result = plan(h200_fits(), 5.0)
    assert result.reason == "infeasible" and result.cap == 256  # keep throughput
    with_bound = plan(h200_fits(), 5.0, rate=20.0, ttft_s=0.5)
    assert with_bound.reason == "infeasible" and with_bound.cap is not None and with_bound.cap < 256
    assert with_bound.ttft_met and with_bound.ttft_cap == with_bound.cap


def test_no_infeasible_verdict_from_a_line_read_far_below_where_it_was_measured() -> None:
    # A P99 concave in the batch (steep at small batches, flatter later, as the twin's 70B shape):
    # 20 ms + 15 ms x sqrt(batch), measured at batches 57..132 only. The line through those puts one
    # sequence near 90 ms, above a 70 ms target that batch 8 meets (62 ms): a verdict there would give up an
    # SLO a small cap reaches. The plan explores instead.
    rng = random.Random(3)
    concave = LeverFit()
    for _ in range(120):
        batch = rng.uniform(57, 132)
        concave = concave.update([batch], (20.0 + 15.0 * math.sqrt(batch) + rng.gauss(0, 0.5)) * MS)
    assert 55 <= concave.low <= 70 and 110 <= concave.support <= 132, (concave.low, concave.support)
    assert concave.predict([1.0]).mean > 80 * MS  # what the old verdict read
    result = plan((concave, h200_fits()[1]), 70.0)
    assert result.reason == "unconfident" and result.cap is None
    assert "explore down before a verdict" in result.detail
    # Measured down to a few sequences, the same kind of line (one sequence above target) is a verdict.
    assert plan(h200_fits(), 5.0).reason == "infeasible" and h200_fits()[0].reaches(1)


def test_the_support_follows_the_batches_measured_on_both_sides() -> None:
    fit = LeverFit()
    for batch in (60, 90, 130, 75):
        fit = fit.update([batch], (10 + 0.1 * batch) * MS)
    # Each end forgets its distance to the newest batch at λ = 0.97 per sample: 60 -> 63.3, 130 -> 128.4.
    assert 60 < fit.low < 64 and 127 < fit.support < 130, (fit.low, fit.support)
    fit = fit.update([12], 11.2 * MS)
    assert fit.low == 12 and fit.reaches(1) and not fit.reaches(200)
    for _ in range(100):  # only large batches since: the low end is forgotten at the samples' rate
        fit = fit.update([120], 22 * MS)
    assert fit.low > 100 and not fit.reaches(1)


def test_a_flat_signal_is_inert() -> None:
    flat = synthetic(10.0, 0.0, 0.3)
    result = plan((flat, h200_fits()[1]), 25)
    assert result.reason == "inert" and result.cap is None


def test_a_noisy_slope_that_cannot_be_bounded_is_unconfident_not_inert() -> None:
    noisy = synthetic(10.0, 0.01, 30.0, n=12)
    result = plan((noisy, h200_fits()[1]), 25)
    assert result.reason == "unconfident" and result.cap is None


def test_too_few_samples_or_no_excitation_is_unconfident() -> None:
    few = synthetic(6.3, 0.153, 0.3, n=5)
    assert plan((few, h200_fits()[1]), 25).reason == "unconfident"
    still = LeverFit()
    for i in range(60):
        still = still.update([50.0], (14.0 + 0.1 * (i % 3)) * MS)
    result = plan((still, h200_fits()[1]), 25)
    assert result.reason == "unconfident" and result.cap is None and "spread" in result.detail


def test_a_ttft_bound_beyond_the_per_token_cap_keeps_the_per_token_bound_and_asks_for_replicas() -> None:
    result = plan(h200_fits(), 12, rate=15.0, ttft_s=0.1)
    assert result.reason == "per-token-first" and result.cap is not None
    assert result.cap == result.per_token_cap and result.per_token_met and not result.ttft_met
    assert result.ttft_cap is None or result.ttft_cap > result.cap
    assert result.replicas_needed is not None and result.replicas_needed >= 2
    # and that many replicas do bring TTFT under the bound at this cap
    mean = h200_fits()[1]
    work = Workload(15.0 / result.replicas_needed, 160, 0.04, TpotLine(*mean.line()))
    assert ttft_quantile_s(result.cap, work, 0.99) <= 0.1


def test_an_unstable_queue_at_the_per_token_cap_gives_up_the_per_token_bound() -> None:
    result = plan(h200_fits(), 12, rate=30.0)
    assert result.reason == "ttft-first"
    assert result.cap is not None and result.per_token_cap is not None and result.cap > result.per_token_cap
    assert result.utilisation is not None and result.utilisation <= 0.95
    assert not result.per_token_met and result.replicas_needed == 2


def test_a_floor_above_the_per_token_cap_is_held() -> None:
    result = plan(h200_fits(), 12, min_cap=64)
    assert result.reason == "at-min-cap" and result.cap == 64 and not result.per_token_met


@settings(max_examples=40, deadline=None)
@given(
    rate=st.floats(0.5, 80.0),
    target_ms=st.floats(3.0, 60.0),
    ttft_s=st.none() | st.floats(0.01, 10.0),
    bounds=st.tuples(st.integers(1, 300), st.integers(1, 300)).map(sorted),
)
def test_every_plan_is_within_bounds_and_says_what_it_meets(
    rate: float, target_ms: float, ttft_s: float | None, bounds: list[int]
) -> None:
    result = plan(h200_fits(), target_ms, rate=rate, ttft_s=ttft_s, min_cap=bounds[0], ceiling=bounds[1])
    assert result.reason not in ("inert", "unconfident")  # the fits are good
    assert result.cap is not None and bounds[0] <= result.cap <= bounds[1]
    assert result.detail
    if result.reason == "meets-both":
        assert result.per_token_met and result.ttft_met
    if result.reason == "per-token-first":
        assert result.per_token_met and not result.ttft_met
    if result.replicas_needed is not None:
        assert result.replicas_needed >= 1
    assert result.predicted_ttft_s is not None and (
        result.predicted_ttft_s >= 0.04 or math.isinf(result.predicted_ttft_s)
    )
