"""The fleet's Alertmanager path (governor_twin.fleet.alerting): the shipped scale alerts, evaluated by the
real promtool over recorded series in virtual time, Alertmanager's timing, and the receiver's steps. The
series are written as the fleet records them; what must fire is known from the rules' thresholds and
`for:`."""

from __future__ import annotations

import pytest
from governor.core.law import LawConfig
from governor.core.notifications import SOURCE, Step
from governor.core.planner import Cooldowns, PlannerState, ReplicaBounds
from governor_twin.fleet.alerting import EVAL_S, GROUP_WAIT_S, SCRAPE_S, AlertPath, PromtoolMissing
from governor_twin.fleet.fleet import Fleet, FleetConfig
from governor_twin.fleet.metrics import FleetMetrics
from governor_twin.fleet.ours import FleetEdges
from governor_twin.profile import load_profile

BUCKETS = ("0.5", "1", "2.5", "5", "10", "+Inf")


def scrape(
    path: AlertPath, t: float, *, queued_s: float, served: float, running: float, waiting: float
) -> None:
    """`served` requests so far, every one of them queued `queued_s` (cumulative bucket counts)."""
    buckets = [(le, served if le == "+Inf" or queued_s <= float(le) else 0.0) for le in BUCKETS]
    path.record(
        t,
        path.series(
            queue_buckets=buckets,
            running=running,
            waiting=waiting,
            runtime_cap=16.0,
            cap=16.0,
            floor=1.0,
            p99_smoothed=0.02,
            slo_s=0.025,
        ),
    )


def drive(path: AlertPath, minutes: float, **load: float) -> list[tuple[float, int, tuple[str, ...]]]:
    """Scrapes every SCRAPE_S for `minutes`, 2 requests/s served; the steps asked for, with their times."""
    steps = []
    t = 0.0
    while t <= minutes * 60:
        scrape(path, t, served=2.0 * t, **load)
        steps += [(t, s.direction, s.alerts) for s in path.steps(t)]
        t += SCRAPE_S
    return steps


def test_a_queue_saturated_for_five_minutes_asks_for_one_replica() -> None:
    path = AlertPath("ai", "chat")
    steps = drive(path, 12, queued_s=4.0, running=16.0, waiting=40.0)  # queue-time P95 4 s > 2 s
    assert steps, (path.fired, path.evaluations)
    t, direction, names = steps[0]
    assert direction == 1 and names == ("VLLMGovernorQueueSaturated",)
    # `for: 5m` after the 5 m rate window has the P95, then Alertmanager's group_wait, on 1 m evaluations
    assert 5 * 60 <= t <= 5 * 60 + 5 * 60 + GROUP_WAIT_S + 2 * EVAL_S, t
    # the same alert keeps firing: no second step until the receiver's repeat interval (10 m) has passed
    assert len(steps) == 1, steps


def test_sustained_headroom_asks_for_one_replica_fewer_and_a_calm_service_for_nothing() -> None:
    idle = AlertPath("ai", "chat")
    steps = drive(idle, 20, queued_s=0.1, running=1.0, waiting=0.0)  # 1 of 16 slots busy, no queue
    assert [(d, n) for _, d, n in steps] == [(-1, ("VLLMGovernorHeadroom",))], (steps, idle.fired)
    assert steps[0][0] >= 15 * 60  # for: 15m
    busy = AlertPath("ai", "chat")
    assert drive(busy, 20, queued_s=0.1, running=12.0, waiting=0.0) == [] and busy.fired == {}


def test_the_receivers_step_reaches_the_planner_as_the_operator_hands_it() -> None:
    fleet = Fleet(load_profile("h200_llama8b"), FleetConfig(), replicas=2, cap=64)
    edges = FleetEdges(
        fleet, FleetMetrics(fleet), cfg=LawConfig(slo_target_s=0.025),
        bounds=ReplicaBounds(min_replicas=1, max_replicas=4), cooldowns=Cooldowns(),
        planner=PlannerState(replicas=2),
    )  # fmt: skip
    path = AlertPath("ai", "chat")
    for t, direction, names in drive(path, 12, queued_s=4.0, running=16.0, waiting=40.0):
        edges.alert_step(Step("ai", "chat", direction, f"{names[0]} firing", names), t)
    # one replica more, scheduled now: a warming replica is live (counted) before it is ready
    assert edges.planner.replicas == 3 and len(fleet.live()) == 3 and len(fleet.warming()) == 1
    ((_, direction, why, to),) = edges.alert_plans
    assert (direction, why, to) == (1, "scaled-up", 3), edges.alert_plans
    assert edges.planner.last_reason == f"{SOURCE}: VLLMGovernorQueueSaturated firing", edges.planner


def test_without_promtool_the_path_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    path = AlertPath("ai", "chat")
    with pytest.raises(PromtoolMissing, match=r"scripts/setup\.sh"):
        drive(path, 2, queued_s=4.0, running=16.0, waiting=40.0)


def test_a_scrape_off_the_interval_is_refused() -> None:
    # promtool reads the points as one series at SCRAPE_S: a caller ticking every 10 s would skew every
    # rate and `for:` silently.
    path = AlertPath("ai", "chat")
    scrape(path, 0.0, queued_s=1.0, served=0.0, running=1.0, waiting=0.0)
    scrape(path, 10.0, queued_s=1.0, served=0.0, running=1.0, waiting=0.0)  # before the next scrape: kept out
    with pytest.raises(ValueError, match="does not divide"):
        scrape(path, 20.0, queued_s=1.0, served=0.0, running=1.0, waiting=0.0)
