"""The fleet report's clairvoyant reference: replicas sized to each bucket of the scored arrivals, and the
largest cap whose saturated TPOT P99 meets the SLO."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from governor_twin.fleet.bound import clairvoyant_gpu_hours, per_token_cap
from governor_twin.fleet.scenarios import SLO, FleetScenario, saturated
from governor_twin.scenarios import Slo


def _scenario(sent: list[float], warmup_s: float, duration_s: float) -> FleetScenario:
    n = len(sent)
    rng = np.random.default_rng(0)
    return FleetScenario(
        "s",
        "test",
        np.array(sent, dtype=np.float64),
        rng.integers(256, 1025, n).astype(np.int64),
        rng.integers(64, 257, n).astype(np.int64),
        duration_s,
        30.0,
        1,
        SLO,
        warmup_s,
    )


def test_each_bucket_gets_the_replicas_its_own_arrivals_need_and_the_warm_up_is_left_out() -> None:
    # warm-up 0-60 s (heavy, not scored); then 30 s at 40 req/s, 30 s at 100 req/s, 30 s with nothing
    sent = [*np.linspace(0, 59.9, 6000), *np.linspace(60, 89.99, 1200), *np.linspace(90, 119.99, 3000)]
    scn = _scenario(sent, warmup_s=60.0, duration_s=150.0)
    # at 30 req/s a replica: 2 replicas, then 4, then none, 30 s each
    assert clairvoyant_gpu_hours(scn, 30.0) == pytest.approx((2 + 4 + 0) * 30 / 3600)
    # a faster replica (a higher cap) needs fewer: 1, 2, 0
    assert clairvoyant_gpu_hours(scn, 50.0) == pytest.approx((1 + 2) * 30 / 3600)
    with pytest.raises(ValueError, match="positive"):
        clairvoyant_gpu_hours(scn, 0.0)


def test_the_per_token_cap_is_the_largest_whose_saturated_p99_meets_the_target() -> None:
    scn = _scenario([0.0] * 4000, warmup_s=0.0, duration_s=60.0)
    at_64, at_128 = saturated(scn.prompt, scn.output, 64), saturated(scn.prompt, scn.output, 128)
    assert at_128.tpot_p99_s > at_64.tpot_p99_s and at_128.rps > at_64.rps  # the cap buys rate, costs TPOT
    target = (at_64.tpot_p99_s + at_128.tpot_p99_s) / 2
    found = per_token_cap(replace(scn, slo=Slo(target_s=target, ttft_s=2.5)), 64, 128)
    assert 64 < found.cap < 128 and found.tpot_p99_s <= target
    assert saturated(scn.prompt, scn.output, found.cap + 1).tpot_p99_s > target
    # none meets a target below the low end's own P99: the low end is returned
    assert per_token_cap(replace(scn, slo=Slo(target_s=at_64.tpot_p99_s / 2, ttft_s=2.5)), 64, 128).cap == 64
