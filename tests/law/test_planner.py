"""The replica planner: unsized requests one step at a time, sized ones (issue 14) to the backlog's count;
bounds, cooldowns, and one overload seen twice is one step."""

from __future__ import annotations

from governor.core.planner import (
    Cooldowns,
    PlannerState,
    ReplicaBounds,
    ScaleRequest,
    StepLimits,
    backlog_replicas,
    plan,
)
from hypothesis import given, settings
from hypothesis import strategies as st

BOUNDS = ReplicaBounds(min_replicas=1, max_replicas=4)
COOL = Cooldowns(up_s=60, down_s=300)
BIG = ReplicaBounds(min_replicas=1, max_replicas=12)


def up(now: float, source: str = "law") -> ScaleRequest:
    return ScaleRequest(direction=1, source=source, reason="overload", now_s=now)


def down(now: float) -> ScaleRequest:
    return ScaleRequest(direction=-1, source="law", reason="idle", now_s=now)


def test_law_and_alert_seeing_one_overload_make_one_step() -> None:
    first = plan(PlannerState(replicas=1), up(0.0, "law"), BOUNDS, COOL)
    second = plan(first.state, up(5.0, "alertmanager"), BOUNDS, COOL, ready_replicas=2)
    assert (first.replicas, first.changed) == (2, True)
    assert (second.replicas, second.changed, second.reason) == (2, False, "cooldown")
    assert plan(second.state, up(61.0), BOUNDS, COOL, ready_replicas=2).replicas == 3


def test_no_step_up_while_the_last_one_is_pending() -> None:
    state = plan(PlannerState(replicas=1), up(0.0), BOUNDS, COOL).state
    assert plan(state, up(100.0), BOUNDS, COOL, ready_replicas=1).reason == "pending"


def test_scale_in_waits_after_any_change_and_stops_at_min() -> None:
    state = plan(PlannerState(replicas=2), up(0.0), BOUNDS, COOL).state
    assert plan(state, down(100.0), BOUNDS, COOL, ready_replicas=3).reason == "cooldown"
    d = plan(state, down(301.0), BOUNDS, COOL, ready_replicas=3)
    assert d.replicas == 2 and d.reason == "scaled-down"
    assert plan(PlannerState(replicas=1), down(0.0), BOUNDS, COOL).reason == "at-min"


def test_bounds_that_moved_clip_at_once() -> None:
    d = plan(PlannerState(replicas=9), up(0.0), BOUNDS, COOL)
    assert (d.replicas, d.reason) == (4, "bounds")


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10),
    st.integers(0, 10),
    st.lists(
        st.tuples(st.sampled_from([-1, 1]), st.floats(0, 400), st.none() | st.integers(0, 12)), max_size=40
    ),
)
def test_unsized_requests_stay_in_bounds_and_move_one_step(
    lo: int, span: int, requests: list[tuple[int, float, int | None]]
) -> None:
    bounds = ReplicaBounds(min_replicas=lo, max_replicas=lo + span)
    state, now = PlannerState(replicas=lo), 0.0
    for direction, gap, ready in requests:
        now += gap
        d = plan(
            state,
            ScaleRequest(direction=1 if direction > 0 else -1, source="t", reason="r", now_s=now),
            bounds,
            COOL,
            ready_replicas=ready,
        )
        assert bounds.min_replicas <= d.replicas <= bounds.max_replicas
        assert abs(d.replicas - d.previous) <= 1
        state = d.state


def test_a_sized_request_is_not_blocked_by_a_warming_replica_but_counts_it() -> None:
    """Issue 14, a deliberate change for sized requests only: the pending block above stays for unsized
    ones."""
    first = plan(PlannerState(replicas=1), ScaleRequest(1, "law", "ttft", 0.0, wanted=3), BIG, COOL)
    assert (first.replicas, first.reason) == (3, "scaled-up")
    again = plan(first.state, ScaleRequest(1, "law", "ttft", 10.0, wanted=3), BIG, COOL, ready_replicas=1)
    assert (again.replicas, again.reason) == (3, "supplied")  # two warming replicas are supply
    more = plan(first.state, ScaleRequest(1, "law", "ttft", 10.0, wanted=5), BIG, COOL, ready_replicas=1)
    assert (more.replicas, more.reason) == (5, "scaled-up")  # neither pending nor the up-cooldown blocks it


def test_a_sized_step_is_bounded_by_max_step_and_max_replicas() -> None:
    d = plan(PlannerState(replicas=2), ScaleRequest(1, "law", "q", 0.0, wanted=50), BIG, COOL)
    assert d.replicas == 2 + StepLimits().max_step
    assert (
        plan(PlannerState(replicas=2), ScaleRequest(1, "law", "q", 0.0, wanted=50), BOUNDS, COOL).replicas
        == 4
    )
    two = StepLimits(max_step=2)
    assert (
        plan(
            PlannerState(replicas=2), ScaleRequest(1, "l", "q", 0.0, wanted=9), BIG, COOL, limits=two
        ).replicas
        == 4
    )


def test_scale_in_only_when_the_rest_hold_the_load_at_their_caps() -> None:
    """Issue 14: with the load share the remaining replicas would carry, a step in waits until it fits."""
    state = PlannerState(replicas=3)
    busy = plan(state, ScaleRequest(-1, "law", "idle", 0.0, load_after=0.95), BIG, COOL, ready_replicas=3)
    assert (busy.replicas, busy.reason) == (3, "loaded")
    light = plan(state, ScaleRequest(-1, "law", "idle", 0.0, load_after=0.5), BIG, COOL, ready_replicas=3)
    assert (light.replicas, light.reason) == (2, "scaled-down")
    assert plan(state, down(0.0), BIG, COOL, ready_replicas=3).replicas == 2  # unsized: as before


def test_backlog_replicas_serve_the_arrivals_and_drain_the_queue() -> None:
    assert backlog_replicas(2, capacity_rps=10.0, arrivals_rps=45.0, waiting=0.0, drain_s=120.0) == 5
    assert backlog_replicas(2, capacity_rps=10.0, arrivals_rps=20.0, waiting=1200.0, drain_s=120.0) == 3
    assert backlog_replicas(2, capacity_rps=10.0, arrivals_rps=20.0, waiting=0.0, drain_s=120.0) == 2
    assert backlog_replicas(2, capacity_rps=0.0, arrivals_rps=20.0, waiting=0.0, drain_s=120.0) is None


def test_a_sized_step_in_goes_to_the_replicas_that_hold_the_load() -> None:
    state = PlannerState(replicas=10)
    d = plan(
        state, ScaleRequest(-1, "law", "idle", 0.0, wanted=3, load_after=0.3), BIG, COOL, ready_replicas=10
    )
    assert (d.replicas, d.reason) == (10 - StepLimits().max_step, "scaled-down")  # at most max_step at once
    d = plan(
        state, ScaleRequest(-1, "law", "idle", 0.0, wanted=8, load_after=0.7), BIG, COOL, ready_replicas=10
    )
    assert d.replicas == 8
    d = plan(
        state, ScaleRequest(-1, "law", "idle", 0.0, wanted=10, load_after=0.7), BIG, COOL, ready_replicas=10
    )
    assert (d.replicas, d.reason) == (10, "loaded")


def test_a_sized_step_up_may_double_the_replicas_as_the_hpa_does() -> None:
    d = plan(PlannerState(replicas=6), ScaleRequest(1, "law", "q", 0.0, wanted=50), BIG, COOL)
    assert d.replicas == 12
