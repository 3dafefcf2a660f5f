"""Rule 10's TTFT half (issue 14): a per-token SLO in its band with a queue whose TTFT is past the goodput
bound asks for a replica, without moving the cap; nothing changes without a TTFT bound."""

from __future__ import annotations

from governor.core.law import Decision, LawConfig, LawState, Observation, decide
from governor.core.spec import parse_spec
from governor.services.governed import law_config

SLO = 0.02
CFG = LawConfig(slo_target_s=SLO, ceiling=64, min_cap=2, tick_s=5.0, ttft_bound_s=2.5)


def run(state: LawState, cfg: LawConfig, n: int, **reading: float | None) -> list[Decision]:
    out = []
    for i in range(n):
        d = decide(state, Observation(now_s=i * cfg.tick_s, **reading), cfg)
        out.append(d)
        state = d.state
    return out


IN_BAND = {"p99_s": SLO, "running": 40.0, "waiting": 2000.0, "request_rate": 10.0}


def test_blown_ttft_behind_a_binding_cap_asks_for_a_replica_and_holds_the_cap() -> None:
    ds = run(LawState(cap=40), CFG, 6, ttft_p99_s=30.0, **IN_BAND)
    assert [d.replica_wish for d in ds] == [0, 0, 1, 0, 0, 1]  # every replica_after_ticks, as rule 10
    assert {d.cap for d in ds} == {40}  # the wish only: the cap is neither cut nor raised for it


def test_no_ttft_bound_no_wish_the_law_as_before() -> None:
    cfg = CFG.model_copy(update={"ttft_bound_s": None})
    assert all(d.replica_wish == 0 for d in run(LawState(cap=40), cfg, 6, ttft_p99_s=30.0, **IN_BAND))


def test_ttft_within_its_bound_asks_for_nothing() -> None:
    assert all(d.replica_wish == 0 for d in run(LawState(cap=40), CFG, 6, ttft_p99_s=1.0, **IN_BAND))


def test_unknown_ttft_asks_for_nothing() -> None:
    assert all(d.replica_wish == 0 for d in run(LawState(cap=40), CFG, 6, ttft_p99_s=None, **IN_BAND))


def test_a_queue_beside_idle_slots_is_not_the_caps_doing() -> None:
    reading = {**IN_BAND, "running": 10.0}  # 10 of 40 slots busy: the cap does not bind
    assert all(d.replica_wish == 0 for d in run(LawState(cap=40), CFG, 6, ttft_p99_s=30.0, **reading))


def test_headroom_first_a_comfortable_cap_below_the_top_is_raised_not_a_replica() -> None:
    reading = {**IN_BAND, "p99_s": SLO / 4}  # per-token far below its band: the law raises the cap
    ds = run(LawState(cap=20), CFG, 6, ttft_p99_s=30.0, **{**reading, "running": 20.0})
    assert ds[-1].cap > 20 and all(d.cap < CFG.ceiling for d in ds)
    assert all(d.replica_wish == 0 for d in ds)


def test_the_operator_passes_the_specs_ttft_bound_to_the_law() -> None:
    base = {"model": "meta-llama/Llama-3.1-8B", "resources": {"gpu": {"type": "NVIDIA-H200"}}}
    with_bound = parse_spec({**base, "slo": {"kind": "tpot", "targetMs": 25, "ttftMs": 2500}})
    assert law_config(with_bound, with_bound.resolve()).ttft_bound_s == 2.5
    without = parse_spec({**base, "slo": {"kind": "tpot", "targetMs": 25}})
    assert law_config(without, without.resolve()).ttft_bound_s is None
