"""One test per rule of the law (see governor.core.law): state + readings -> decision."""

from __future__ import annotations

from dataclasses import replace

from governor.core.law import (
    Decision,
    LawConfig,
    LawState,
    Observation,
    computed_decide,
    decide,
    initial_state,
)
from governor.core.signals import LatencyKind
from governor_twin.seed import seed_decide, seed_step

SLO = 0.02
CFG = LawConfig(slo_target_s=SLO, ceiling=64, min_cap=2, cooldown_s=10.0, tick_s=5.0)


def ticks(
    state: LawState, cfg: LawConfig, n: int, start: float = 0.0, **reading: float | None
) -> list[Decision]:
    out = []
    for i in range(n):
        d = decide(state, Observation(now_s=start + i * cfg.tick_s, **reading), cfg)
        out.append(d)
        state = d.state
    return out


def test_seed_law_is_kept_verbatim_with_its_defect() -> None:
    assert seed_step(100, 1.0, 0.5) == 80
    assert seed_step(6, 0.1, 1.0) == 6  # int(6 x 1.15) == 6: the seed never grows a small cap
    assert seed_step(250, 0.1, 1.0) == 256
    d = seed_decide(LawState(cap=10), Observation(now_s=0, p99_s=0.1), LawConfig(slo_target_s=1.0))
    assert d.cap == 11


def test_small_caps_make_progress_both_ways() -> None:
    up = ticks(LawState(cap=3), CFG, 3, p99_s=SLO / 4, running=64, waiting=4)  # every slot busy
    assert [d.cap for d in up] == [
        3,
        4,
        5,
    ]  # one confirming tick, then +1 per tick although int(3 x 1.15) == 3
    down = decide(LawState(cap=3), Observation(now_s=0, p99_s=SLO * 3, running=3, waiting=0), CFG)
    assert down.cap == 2 and down.reason == "slo-violation"


def test_cooldown_after_a_decrease_holds_the_cap_while_it_drains() -> None:
    caps = [d.cap for d in ticks(LawState(cap=64), CFG, 8, p99_s=SLO * 1.2, running=64, waiting=0)]
    assert caps == [51, 51, 51, 51, 51, 51, 40, 40]  # the same stale miss again: only after a fresh window
    state = ticks(LawState(cap=64), CFG, 1, p99_s=SLO * 1.2, running=64, waiting=0)[-1].state
    worse = ticks(state, CFG, 3, start=5.0, p99_s=SLO * 2.0, running=64, waiting=0)
    assert [d.cap for d in worse] == [51, 28, 28]  # a worse miss cuts again once the 10 s cooldown is over


def test_low_latency_does_not_creep_the_cap_up_when_it_is_not_binding() -> None:
    ds = ticks(LawState(cap=16), CFG, 10, p99_s=SLO / 4, running=3, waiting=0)
    assert {d.cap for d in ds} == {16} and ds[-1].reason == "not-binding"
    assert {d.cap for d in ticks(LawState(cap=16), CFG, 3, p99_s=SLO / 4)} == {16}  # unknown load: no creep


def test_a_queue_beside_a_small_cap_one_slot_short_binds() -> None:
    # Short requests finish between steps, so the gauge reads a slot short of a full small cap.
    assert ticks(LawState(cap=5), CFG, 3, p99_s=SLO / 4, running=4, waiting=40)[-1].cap > 5
    assert ticks(LawState(cap=5), CFG, 3, p99_s=SLO / 4, running=3, waiting=40)[-1].cap == 5  # idle slots
    assert ticks(LawState(cap=5), CFG, 3, p99_s=SLO / 4, running=4, waiting=0)[-1].cap == 5  # no queue
    one = CFG.model_copy(update={"min_cap": 1})
    assert ticks(LawState(cap=1), one, 3, p99_s=SLO / 4, running=0, waiting=40)[-1].cap == 1  # engine idle
    assert ticks(LawState(cap=1), one, 3, p99_s=SLO / 4, running=1, waiting=40)[-1].cap > 1


def test_raise_stops_at_the_ceiling() -> None:
    ds = ticks(LawState(cap=40), CFG, 20, p99_s=SLO / 4, running=64, waiting=10)
    assert ds[-1].cap == 64 and ds[-1].reason == "at-limit"


def test_a_large_miss_takes_a_larger_but_bounded_step() -> None:
    assert (
        decide(LawState(cap=64), Observation(now_s=0, p99_s=SLO * 1.6, running=64), CFG).cap == 40
    )  # x 1/1.6
    assert (
        decide(LawState(cap=64), Observation(now_s=0, p99_s=SLO * 9, running=64), CFG).cap == 32
    )  # x 0.5 at most


def test_ewma_absorbs_a_single_spike() -> None:
    state = ticks(LawState(cap=32), CFG, 4, p99_s=SLO)[-1].state
    d = decide(state, Observation(now_s=20, p99_s=SLO * 1.15, running=32, waiting=0), CFG)
    assert d.cap == 32 and d.reason == "in-band"


def test_queue_driven_slo_never_lowers_the_cap_and_asks_for_a_replica() -> None:
    cfg = CFG.model_copy(update={"latency_kind": LatencyKind.TTFT, "slo_target_s": 1.0})
    ds = ticks(LawState(cap=64), cfg, 6, p99_s=5.0, running=64, waiting=200)
    assert {d.cap for d in ds} == {64}
    assert [d.replica_wish for d in ds] == [0, 0, 1, 0, 0, 1]  # every replica_after_ticks, not every tick
    raised = decide(LawState(cap=32), Observation(now_s=0, p99_s=5.0, running=32, waiting=50), cfg)
    assert raised.cap > 32  # vertical first: a binding cap below the ceiling goes up


def test_growing_queue_holds_the_cap_instead_of_starving_the_queue() -> None:
    state = LawState(cap=32)
    decisions = []
    for i in range(8):  # arrivals outrun completions: the queue grows by 20 requests per tick
        obs = Observation(now_s=i * 5.0, p99_s=SLO * 2, running=32, waiting=20.0 * (i + 1), request_rate=10.0)
        decisions.append(d := decide(state, obs, CFG))
        state = d.state
    assert decisions[-1].reason == "queue-overload" and decisions[-1].cap == decisions[-2].cap
    assert any(d.replica_wish == 1 for d in decisions)
    assert min(d.cap for d in decisions) > CFG.min_cap


def test_at_the_floor_and_still_violating_asks_for_one_more_replica() -> None:
    ds = ticks(LawState(cap=2), CFG, 3, p99_s=SLO * 3, running=2, waiting=0)
    assert [d.replica_wish for d in ds] == [0, 0, 1] and {d.cap for d in ds} == {2}


def test_idle_with_headroom_allows_one_fewer_replica() -> None:
    ds = ticks(LawState(cap=64), CFG, 12, p99_s=SLO / 4, running=2, waiting=0)
    assert [d.replica_wish for d in ds][-1] == -1 and all(d.replica_wish == 0 for d in ds[:-1])


def test_no_data_holds_the_cap_and_keeps_the_smoothed_value() -> None:
    state = ticks(LawState(cap=20), CFG, 2, p99_s=SLO)[-1].state
    d = decide(state, Observation(now_s=10, p99_s=float("nan"), running=20, waiting=0), CFG)
    assert d.cap == 20 and d.reason == "no-data" and d.state.p99_smoothed == state.p99_smoothed


def _steady_prompts(state: LawState, n: int = 26) -> LawState:
    """Established traffic: 10 req/s, prompt P95 1000, 3 % of prompts above 1.3 x P95 (heavy tail)."""
    reading = {"request_rate": 10.0, "prompt_p95": 1000.0, "long_prompt_rate": 0.3, "running": 64.0}
    return ticks(state, CFG, n, p99_s=SLO / 4, waiting=0.0, **reading)[-1].state


def test_long_tail_mode_caps_relative_to_the_ceiling_then_expires() -> None:
    state = _steady_prompts(LawState(cap=64))
    assert state.mode == "normal" and state.cap == 64
    shift = Observation(now_s=140, p99_s=2 * SLO, request_rate=10, prompt_p95=2000.0, long_prompt_rate=2.0)
    d = decide(state, shift, CFG)
    assert d.mode == "normal"  # one tick of a shift may be noise
    d = decide(d.state, replace(shift, now_s=145), CFG)
    assert d.cap == 16 and d.mode == "long-tail"  # 0.25 x ceiling, as the seed's 256 -> 64
    later = decide(d.state, Observation(now_s=206, p99_s=SLO / 4, running=16, waiting=5), CFG)
    assert later.mode == "normal"


def test_long_tail_needs_a_shift_and_its_cap_binds_only_under_pressure() -> None:
    base = {"p99_s": SLO, "request_rate": 10.0, "running": 64.0}
    # Start-up: no baseline yet, whatever the share.
    d = decide(LawState(cap=64), Observation(now_s=0, long_prompt_rate=2.0, prompt_p95=3000.0, **base), CFG)
    assert d.mode == "normal" and d.cap == 64
    state = _steady_prompts(LawState(cap=64))
    # A share within the heavy tail's routine (7 %), or a P95 jump alone, or a share alone: no mode.
    for p95, long_rate in ((1200.0, 0.7), (2000.0, 0.5), (1000.0, 2.0)):
        d = decide(state, Observation(now_s=140, prompt_p95=p95, long_prompt_rate=long_rate, **base), CFG)
        assert d.mode == "normal" and d.cap == 64
    # In long-tail mode with a comfortable P99, the mode's cap is not imposed, only raises past it stop.
    calm = decide(
        LawState(cap=64, p99_smoothed=SLO / 4, mode="long-tail", mode_until_s=100),
        Observation(now_s=5, p99_s=SLO / 4, running=64, waiting=3),
        CFG,
    )
    assert calm.cap == 64 and calm.mode == "long-tail"


def test_rising_request_rate_pre_empts_with_one_step() -> None:
    ds = ticks(LawState(cap=40), CFG, 8, p99_s=SLO, request_rate=1.0, running=40)
    state, start = ds[-1].state, 8 * CFG.tick_s
    caps = []
    for i, rate in enumerate([2.0, 4.0, 8.0]):
        d = decide(state, Observation(now_s=start + i * 5, p99_s=SLO, request_rate=rate, running=40), CFG)
        caps.append(d.cap)
        state = d.state
    assert caps == [40, 40, 32] and d.reason == "burst" and d.mode == "burst"


def test_a_rate_rising_from_zero_is_not_a_burst() -> None:
    ds = ticks(LawState(cap=40), CFG, 1, p99_s=SLO, request_rate=0.0, running=0)
    state = ds[-1].state
    for i, rate in enumerate([1.0, 2.0, 4.0, 8.0, 12.0]):
        d = decide(state, Observation(now_s=5 + i * 5, p99_s=SLO, request_rate=rate, running=40), CFG)
        assert d.cap == 40 and d.mode == "normal"
        state = d.state


def test_a_burst_below_the_band_neither_lowers_nor_blocks_a_cautious_raise() -> None:
    ds = ticks(LawState(cap=40), CFG, 8, p99_s=SLO / 2, request_rate=1.0, running=10, waiting=0)
    state, start = ds[-1].state, 8 * CFG.tick_s
    for i, rate in enumerate([2.0, 4.0, 8.0, 16.0, 32.0]):
        d = decide(state, Observation(now_s=start + i * 5, p99_s=SLO / 2, request_rate=rate, running=64), CFG)
        assert d.cap >= d.previous_cap
        assert d.mode != "burst" or d.cap - d.previous_cap <= CFG.cautious_step
        state = d.state
    assert state.mode == "burst" and d.direction == "up"


def test_raises_turn_additive_near_the_last_violation_cap() -> None:
    cfg = CFG.model_copy(update={"ceiling": 256})
    state = ticks(LawState(cap=100), cfg, 1, p99_s=SLO * 1.25, running=100, waiting=0)[-1].state
    assert state.cap == 80 and state.violation_cap == 100
    ds = ticks(state, cfg, 12, start=20.0, p99_s=SLO / 4, running=300, waiting=5)
    assert 85 in [d.cap for d in ds] and ds[-1].cap > 85  # up to 0.85 x 100 at once, then +2 per raise
    assert all(d.cap - d.previous_cap <= cfg.cautious_step for d in ds if d.previous_cap >= 85)


def test_the_levers_law_runs_the_table_without_its_guesses() -> None:
    """Rules 11 and 14 guess where the SLO will break (a prompt shift; where it broke before); the levers
    law fits where. The readings that put the table into long-tail mode and make it remember a violation
    cap do neither in the levers law; a burst (rule 12) is pre-empted by both."""
    state = _steady_prompts(LawState(cap=64))
    shift = Observation(now_s=140, p99_s=2 * SLO, request_rate=10, prompt_p95=2000.0, long_prompt_rate=2.0)
    table = decide(decide(state, shift, CFG).state, replace(shift, now_s=145), CFG)
    levers = computed_decide(computed_decide(state, shift, CFG).state, replace(shift, now_s=145), CFG)
    assert table.mode == "long-tail" and table.cap == 16
    assert levers.mode == "normal" and levers.cap > 16

    missed = Observation(now_s=0, p99_s=SLO * 1.25, running=100, waiting=0)
    cfg = CFG.model_copy(update={"ceiling": 256})
    assert decide(LawState(cap=100), missed, cfg).state.violation_cap == 100
    assert computed_decide(LawState(cap=100), missed, cfg).state.violation_cap is None

    for law in (decide, computed_decide):
        steady = LawState(cap=40)
        for i in range(8):
            steady = law(steady, Observation(now_s=i * 5, p99_s=SLO, request_rate=1.0, running=40), CFG).state
        for i, rate in enumerate([2.0, 4.0, 8.0]):
            d = law(steady, Observation(now_s=40 + i * 5, p99_s=SLO, request_rate=rate, running=40), CFG)
            steady = d.state
        assert d.mode == "burst" and d.cap == 32


def test_initial_cap_from_the_profile_and_the_slo() -> None:
    h200 = {"gpu_type": "H200", "model_class": "small", "ceiling": 256}
    assert initial_state(LawConfig(slo_target_s=0.015, **h200)).cap == 64
    assert initial_state(LawConfig(slo_target_s=0.05, **h200)).cap == 256
    assert initial_state(LawConfig(slo_target_s=0.001, **h200)).cap == 16
    assert initial_state(LawConfig(slo_target_s=1.0, ceiling=48)).cap == 48
    assert initial_state(LawConfig(slo_target_s=1.0, ceiling=48, initial_cap=500)).cap == 48


def test_state_survives_a_round_trip_through_status_json() -> None:
    state = ticks(LawState(cap=64), CFG, 3, p99_s=SLO * 2, running=64, waiting=0, request_rate=3.0)[-1].state
    assert LawState.model_validate(state.model_dump(mode="json")) == state
