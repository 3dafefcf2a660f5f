"""Every law a user can choose (governor.core.law.LAWS) keeps the contract the control step relies on: the cap
it answers is the cap its next state holds (status.law resumes from it), inside [min_cap, ceiling], whatever
the readings (None, NaN, inf, zero traffic, huge queues)."""

from __future__ import annotations

import math

import pytest
from governor.core import spec as api
from governor.core.law import DEFAULT_LAW, LAW_NAMES, LAWS, LawConfig, LawName, LawState, Observation
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.law.test_law_properties import configs

TICK = 5.0
value = st.none() | st.sampled_from([math.nan, math.inf]) | st.floats(0, 1e4)
readings = st.lists(
    st.tuples(
        st.none() | st.floats(1e-4, 0.2),  # p99 (per-token seconds)
        st.none() | st.floats(0, 512),  # running
        value,  # waiting
        st.none() | st.floats(0, 100),  # request rate
        st.none() | st.floats(1e-4, 0.2),  # mean TPOT
        st.none() | st.floats(0, 30),  # TTFT p99
    ),
    min_size=1,
    max_size=80,
)


@pytest.mark.parametrize("name", LAW_NAMES)
@settings(max_examples=150, deadline=None)
@given(cfg=configs(), rows=readings, start=st.integers(1, 600), ttft_bound=st.none() | st.floats(0.1, 10))
def test_the_cap_decided_is_the_cap_kept_and_inside_the_bounds(
    name: LawName, cfg: LawConfig, rows: list[tuple[float | None, ...]], start: int, ttft_bound: float | None
) -> None:
    cfg = cfg.model_copy(update={"ttft_bound_s": ttft_bound})
    state = LawState(cap=start)
    for i, (p99, running, waiting, rate, tpot_mean, ttft) in enumerate(rows):
        obs = Observation(
            now_s=i * TICK,
            p99_s=p99,
            running=running,
            waiting=waiting,
            request_rate=rate,
            tpot_mean_s=tpot_mean,
            ttft_p99_s=ttft,
        )
        d = LAWS[name](state, obs, cfg)
        assert d.state.cap == d.cap, f"{name}: decided {d.cap} ({d.reason}) but keeps {d.state.cap}"
        assert cfg.min_cap <= d.cap <= cfg.ceiling, (name, d.reason, d.cap)
        assert d.previous_cap == state.cap
        state = d.state


def test_a_vetoed_cut_leaves_no_cooldown_behind() -> None:
    """The levers law vetoing the table's cut (the cap does not move the signal) keeps the cap, and must not
    keep that cut's cooldown either (the next ticks would read "waiting for the last decrease to drain")."""
    cfg = LawConfig(slo_target_s=0.020, ceiling=64, ttft_bound_s=2.0, tick_s=TICK, window_s=15.0)
    state, vetoed = LawState(cap=64), 0
    for i in range(120):
        obs = Observation(
            now_s=i * TICK,
            p99_s=0.040,
            running=float(min(state.cap, 4 + (i * 7) % 57)),
            waiting=3.0,
            request_rate=10.0,
            tpot_mean_s=0.028,
            ttft_p99_s=0.5,
        )
        table, d = LAWS["rules"](state, obs, cfg), LAWS["levers"](state, obs, cfg)
        if d.reason == "lever-inert" and table.cap < state.cap:
            vetoed += 1
            assert d.cap == d.state.cap >= state.cap
            assert d.state.cooldown_until_s == state.cooldown_until_s and d.state.cut_s == state.cut_s
        state = d.state
    assert vetoed > 0, "no cut was vetoed: the scenario no longer exercises the veto"


def test_a_cut_held_at_the_queue_floor_leaves_no_cooldown_behind() -> None:
    """The same for a cut the queue floor holds back (the arrivals need the cap): the held decision carries
    the chosen one's memory, and that memory held the vetoed cut's cooldown, so the next real cut waited
    for a drain that never happened (113 of 113 held cuts here, before the fix)."""
    cfg = LawConfig(slo_target_s=0.020, ceiling=64, ttft_bound_s=2.0, tick_s=TICK, window_s=15.0)
    state, held = LawState(cap=64), 0
    for i in range(300):
        running = float(min(state.cap, 20 + (i * 7) % 45))
        obs = Observation(
            now_s=i * TICK,
            p99_s=0.018 + 0.0006 * running,
            running=running,
            waiting=40.0 + (i % 5) * 10,
            request_rate=running / 0.6,
            tpot_mean_s=0.010 + 0.0003 * running,
            ttft_p99_s=1.5,
            ttft_mean_s=0.8,
            queue_time_mean_s=0.6,
            output_tokens_mean=50.0,
        )
        table, d = LAWS["rules"](state, obs, cfg), LAWS["levers"](state, obs, cfg)
        if table.cap < state.cap <= d.cap:
            held += d.reason == "queue-floor"
            assert (d.state.cooldown_until_s, d.state.cut_s, d.state.cut_p99) == (
                state.cooldown_until_s,
                state.cut_s,
                state.cut_p99,
            ), d.reason
        state = d.state
    assert held > 0, "no cut was held at the queue floor: the scenario no longer exercises it"


def test_the_spec_names_the_law_and_refuses_an_unknown_one() -> None:
    spec = api.parse_spec({"model": "m", "slo": {"targetMs": 25}, "adaptive": {"law": "levers"}})
    assert spec.adaptive.law == "levers" and LAWS[spec.adaptive.law] is LAWS["levers"]
    assert api.parse_spec({"model": "m", "slo": {"targetMs": 25}}).adaptive.law == DEFAULT_LAW == "levers"
    rules = api.parse_spec({"model": "m", "slo": {"targetMs": 25}, "adaptive": {"law": "rules"}})
    assert LAWS[rules.adaptive.law] is LAWS["rules"]
    with pytest.raises(ValidationError, match="'rules' or 'levers'"):
        api.parse_spec({"model": "m", "slo": {"targetMs": 25}, "adaptive": {"law": "pid"}})
