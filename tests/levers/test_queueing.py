"""Queueing at a cap: Erlang C against closed forms, and the model against the H200 calibration."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from governor.core.levers.queueing import (
    TpotLine,
    Workload,
    erlang_b,
    erlang_c,
    is_stable,
    mean_wait_s,
    occupancy,
    service_rate,
    ttft_quantile_s,
    wait_quantile_s,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# A line through the TPOT P50s of the 17 serving points in calibration/h200_llama8b_serving.csv
# (4.83 ms + 0.132 ms x mean running); that workload's mean output is 160 tokens, its light-load TTFT ~40 ms.
H200_MEAN = TpotLine(0.00483, 0.000132)


def h200(arrival_rps: float) -> Workload:
    return Workload(arrival_rps=arrival_rps, out_tokens=160, prefill_s=0.04, tpot=H200_MEAN)


def erlang_c_exact(servers: int, offered: Fraction) -> Fraction:
    """The textbook sum, in exact arithmetic."""
    terms = [offered**k / math.factorial(k) for k in range(servers)]
    top = offered**servers / math.factorial(servers) * servers / (servers - offered)
    return top / (sum(terms, Fraction(0)) + top)


def test_erlang_c_textbook_values() -> None:
    assert erlang_c(1, 0.9) == pytest.approx(0.9)  # M/M/1: an arrival waits with probability ρ
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2: 2ρ² / (1 + ρ), ρ = 1/2
    assert erlang_c(2, 1.5) == pytest.approx(2 * 0.75**2 / 1.75)
    assert erlang_c(3, 2.0) == pytest.approx(4 / 9)
    assert erlang_b(2, 1.0) == pytest.approx(0.2)  # B = (a²/2) / (1 + a + a²/2)
    assert erlang_c(5, 5.0) == 1.0 and erlang_c(5, 0.0) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 80), st.fractions(min_value=Fraction(1, 100), max_value=Fraction(999, 1000)))
def test_erlang_c_matches_the_exact_sum(servers: int, load: Fraction) -> None:
    offered = load * servers
    assert erlang_c(servers, float(offered)) == pytest.approx(
        float(erlang_c_exact(servers, offered)), rel=1e-9
    )


def test_erlang_c_is_stable_for_a_thousand_servers() -> None:
    """Halfin–Whitt: with a = c - β√c, C → 1 / (1 + β Φ(β) / φ(β)); 0.2235 for β = 1."""
    value = erlang_c(1024, 1024 - 32)
    assert value == pytest.approx(0.2235, abs=0.02)
    loads = [erlang_c(1024, a) for a in (500, 900, 1000, 1020, 1023.9)]
    assert loads == sorted(loads) and all(0 <= v <= 1 for v in loads)


def test_waiting_time_quantile_of_mm1() -> None:
    """M/M/1: P(Wq > t) = ρ exp(-(μ - λ) t), so the 99th percentile at ρ = 0.9 is ln(90) / 0.1 s."""
    assert wait_quantile_s(1, 0.9, 1.0, 0.99) == pytest.approx(math.log(90) / 0.1)
    assert wait_quantile_s(1, 0.9, 1.0, 0.05) == 0.0  # 90 % wait, so the 5th percentile does not
    assert wait_quantile_s(1, 1.1, 1.0, 0.5) == math.inf
    assert mean_wait_s(1, 0.9, 1.0) == pytest.approx(9.0)  # ρ / (μ - λ)


@pytest.mark.parametrize(("cap", "measured"), [(16, 14.3), (32, 21.7), (64, 30.2), (128, 36.0), (256, 40.0)])
def test_service_rate_matches_the_h200_capacity(cap: int, measured: float) -> None:
    assert service_rate(cap, h200(1.0)) == pytest.approx(measured, rel=0.1)


@pytest.mark.parametrize(
    ("rate", "measured_running"), [(8.08, 7.9), (19.72, 26.2), (19.9, 27.8), (19.7, 29.1), (20.22, 26.0)]
)
def test_occupancy_matches_the_running_batch_measured_below_saturation(
    rate: float, measured_running: float
) -> None:
    assert occupancy(h200(rate)) == pytest.approx(measured_running, rel=0.12)


def test_stability_matches_the_saturated_points() -> None:
    assert not is_stable(16, h200(20.18))  # saturated at 14.2 req/s
    assert not is_stable(128, h200(39.63))  # saturated, 63.7 waiting
    assert is_stable(32, h200(19.72)) and is_stable(64, h200(19.9))
    assert ttft_quantile_s(16, h200(20.18), 0.99) == math.inf


def test_ttft_is_the_prefill_at_light_load_and_grows_near_capacity() -> None:
    assert ttft_quantile_s(64, h200(8.0), 0.99) == pytest.approx(0.04)
    near = ttft_quantile_s(32, h200(19.72), 0.99)
    assert 0.74 <= near < 5.0  # measured 0.74 s; the model errs on the pessimistic side
    smoother = ttft_quantile_s(32, h200(19.72)._replace(variability=0.56), 0.99)
    assert 0.04 < smoother < near


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 45.0))
def test_ttft_does_not_grow_with_the_cap(rate: float) -> None:
    work = h200(rate)
    values = [ttft_quantile_s(cap, work, 0.99) for cap in range(8, 257, 8)]
    finite = [v for v in values if math.isfinite(v)]
    assert finite == sorted(finite, reverse=True)
    assert values == [math.inf] * (len(values) - len(finite)) + finite  # unstable caps are the small ones
