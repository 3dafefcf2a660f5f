"""The replica planner: one step at a time, bounds, cooldowns, and one overload seen twice is one step."""

from __future__ import annotations

from governor.core.planner import Cooldowns, PlannerState, ReplicaBounds, ScaleRequest, plan
from hypothesis import given, settings
from hypothesis import strategies as st

BOUNDS = ReplicaBounds(min_replicas=1, max_replicas=4)
COOL = Cooldowns(up_s=60, down_s=300)


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
def test_replicas_stay_in_bounds_and_move_one_step(
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
