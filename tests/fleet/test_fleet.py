"""Fleet twin invariants: nothing lost on scale-down, GPU-seconds from scheduling to deletion, a warming
replica serves nothing; and our policy goes through the operator's own control step and planner."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from governor.core.law import LawConfig
from governor.core.planner import Cooldowns, ReplicaBounds
from governor_twin.fleet.fleet import Fleet, FleetConfig
from governor_twin.fleet.metrics import FleetMetrics
from governor_twin.fleet.ours import Ours
from governor_twin.fleet.peers import ReplicaPolicy
from governor_twin.fleet.run import TAIL_S, run
from governor_twin.fleet.scenarios import FleetScenario, warmed
from governor_twin.profile import load_profile


def _fleet(replicas: int, router: str = "random", rate: float = 20.0, span: float = 120.0) -> Fleet:
    cfg = FleetConfig(router=router, max_replicas=8)  # type: ignore[arg-type]
    fleet = Fleet(load_profile("h200_llama8b"), cfg, replicas, cap=64)
    rng = np.random.default_rng(0)
    n = int(rate * span)
    fleet.load(np.sort(rng.uniform(0, span, n)), rng.integers(256, 1025, n), rng.integers(64, 257, n))
    return fleet


def test_no_request_lost_when_scaling_down_under_load() -> None:
    fleet = _fleet(3)
    fleet.advance(60.0)
    fleet.scale_to(1, 60.0)
    draining = [r for r in fleet.replicas if r.drain_s is not None]
    assert len(draining) == 2 and all(r.deleted_s is None for r in draining)  # still serving its requests
    fleet.advance(400.0)
    _, _, done = fleet.outcomes()
    assert done.all()
    assert all(r.deleted_s is not None and r.deleted_s > 60.0 for r in draining)
    late = fleet.sent > 61.0
    assert set(fleet.where[late].tolist()) == {fleet.live()[0].index}  # drained replicas got nothing new


def test_gpu_seconds_run_from_scheduling_to_deletion() -> None:
    fleet = _fleet(1, rate=1.0)
    fleet.advance(10.0)
    fleet.scale_to(2, 10.0)
    fleet.advance(50.0)
    fleet.scale_to(1, 50.0)  # the new one is still warming: deleted at once
    fleet.advance(100.0)
    assert fleet.gpu_seconds(100.0) == pytest.approx(100.0 + 40.0)
    assert fleet.gpu_seconds(100.0, start=30.0) == pytest.approx(70.0 + 20.0)  # after a warm-up of 30 s


def test_a_warming_replica_serves_nothing() -> None:
    fleet = _fleet(1, router="least_loaded", rate=30.0)
    fleet.advance(5.0)
    fleet.scale_to(2, 5.0)
    new = fleet.replicas[1]
    assert 5.0 + 86.0 <= new.ready_s <= 5.0 + 100.0
    fleet.advance(new.ready_s - 1.0)
    assert not new.routed
    fleet.advance(new.ready_s + 20.0)
    assert new.routed and fleet.sent[new.routed[0]] >= new.ready_s - 1.0


@pytest.mark.parametrize("router", ["random", "round_robin", "least_loaded"])
def test_routers_spread_the_load(router: str) -> None:
    fleet = _fleet(4, router=router, rate=40.0, span=60.0)
    fleet.advance(200.0)
    shares = np.bincount(fleet.where, minlength=4) / fleet.where.size
    assert shares.min() > 0.15


def _scenario(rate: float, span: float, seed: int) -> FleetScenario:
    """Poisson-like arrivals at `rate` for `span` seconds on one replica (one replica's worth: 30 req/s)."""
    rng = np.random.default_rng(seed)
    n = int(rate * span)
    prompt, output = rng.integers(256, 1025, n), rng.integers(64, 257, n)
    return FleetScenario("t", "", np.sort(rng.uniform(0, span, n)), prompt, output, span, 30.0, 1)


def _queue_scenario() -> FleetScenario:
    return _scenario(80.0, 300.0, seed=3)  # ~2.5 replicas' worth on one replica


CFG = LawConfig(slo_target_s=0.025, ceiling=256, gpu_type="h200", ttft_bound_s=2.5)


def test_ours_scales_out_through_the_planner_when_the_queue_grows() -> None:
    policy = Ours(CFG, ReplicaBounds(min_replicas=1, max_replicas=4), Cooldowns())
    result = run(_queue_scenario(), policy, "law")
    assert policy.edges is not None and any(r.desired_replicas for r in policy.edges.reports)
    assert result.live.max() >= 2 and result.replica_changes >= 1
    assert policy.edges.planner.replicas == int(result.live[-1])


def test_the_levers_law_learns_from_the_pooled_means_in_the_fleet() -> None:
    # The levers law fits its lines on the pooled mean TPOT (sum of the engines' histogram sums over their
    # counts): without those means its mean line never learns and its queue side has no service model.
    policy = Ours(CFG, ReplicaBounds(min_replicas=1, max_replicas=4), Cooldowns(), law="levers")
    run(_queue_scenario(), policy, "law")
    assert policy.edges is not None
    metrics = policy.edges.metrics
    # The run ends a tail after the last arrival, by when the queue may be gone: read the metrics as they
    # stood at the last scrape whose window saw requests finish.
    scraped = len(metrics.samples)
    while metrics.mean("tpot_mean_s", CFG.window_s) is None and len(metrics.samples) > 2:
        metrics.samples.pop()
    assert len(metrics.samples) > scraped / 2  # requests finished until well into the kept history
    last, base = metrics.samples[-1], metrics._base(CFG.window_s)
    assert base is not None
    (total, count), (total0, count0) = last.sums["tpot_mean_s"], base.sums["tpot_mean_s"]
    assert metrics.mean("tpot_mean_s", CFG.window_s) == pytest.approx((total - total0) / (count - count0))
    assert 0.004 < (total - total0) / (count - count0) < 0.1  # seconds per token on the H200 profile
    assert policy.state.mean_fit is not None and policy.state.mean_fit.count >= 8


class _TwoReplicas(ReplicaPolicy):
    """Scales 1 -> 2 in the warm-up's first tick and holds."""

    name = "two"

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        return 2


def test_the_warm_up_is_not_scored() -> None:
    # Light load (half a replica's worth) after a warm-up whose every request vLLM would refuse (prompt above
    # max-model-len): scored, they would show as refused; the warm-up's scale-out is not a counted change, and
    # GPU-hours and mean replicas run from its end.
    scn = warmed(_scenario(15.0, 240.0, seed=4), start_rps=5.0, warmup_s=120.0)
    warm = scn.sent < 120.0
    assert 450 < warm.sum() < 750 and scn.duration_s == 360.0 and (scn.sent[~warm] >= 120.0).all()
    prompt = scn.prompt.copy()
    prompt[warm] = load_profile("h200_llama8b").max_model_len + 1
    scn = dataclasses.replace(scn, prompt=prompt)

    result = run(scn, _TwoReplicas(64), "64")
    assert result.refused == 0 and result.attainment == 1.0 and result.lost == 0
    assert result.replica_changes == 0 and result.mean_replicas == 2.0
    assert result.gpu_hours == pytest.approx(2 * (240.0 + TAIL_S) / 3600.0)
    assert result.t[0] < 0 < result.t[-1]  # the timeline shows the warm-up before 0

    unwarmed = run(dataclasses.replace(scn, warmup_s=0.0), _TwoReplicas(64), "64")
    assert unwarmed.refused == warm.sum() and unwarmed.replica_changes == 1


def test_a_warm_up_needs_a_rate_and_requests_to_draw_from() -> None:
    light = _scenario(15.0, 60.0, seed=4)
    with pytest.raises(ValueError, match="warm-up"):
        warmed(light, start_rps=-1.0)
    with pytest.raises(ValueError, match="warm-up"):
        warmed(
            dataclasses.replace(light, sent=light.sent[:0], prompt=light.prompt[:0], output=light.output[:0]),
            5.0,
        )
