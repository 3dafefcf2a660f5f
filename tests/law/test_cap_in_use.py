"""A cut for a per-token miss acts on the cap in use (issue 12: a step change answered in a tick or two, not a
chain of moves). A cap above every batch of a window binds nothing: the levers law's first cut from it goes
to the window's largest batch, where the rule table halves the idle cap a cooldown at a time. Synthetic
readings: the load keeps the batch at 18-26, far under the cap, and the P99 twice the target."""

from __future__ import annotations

import random
from collections.abc import Callable

from governor.core.law import LAWS, Decision, LawConfig, LawName, LawState, Observation

TICK = 5.0
BATCHES = (18.0, 22.0, 26.0, 20.0, 24.0, 19.0)


def drive(
    law: LawName,
    cfg: LawConfig,
    ticks: int,
    start_cap: int = 256,
    miss: float = 2.0,
    rate: Callable[[int], float] = lambda i: 4.0,
    batches: Callable[[int], float] = lambda i: BATCHES[i % len(BATCHES)],
) -> list[Decision]:
    """The P99 at `miss` x the target; `rate(tick)` requests per second arrive, `batches(tick)` run."""
    rng = random.Random(11)
    state, out = LawState(cap=start_cap), []
    for i in range(ticks):
        batch = min(float(state.cap), batches(i))
        p99 = miss * cfg.slo_target_s * rng.uniform(0.97, 1.03)
        obs = Observation(
            now_s=(i + 1) * TICK,
            p99_s=p99,
            running=batch,
            waiting=0.0,
            request_rate=rate(i),
            tpot_mean_s=0.7 * p99,
        )
        out.append(LAWS[law](state, obs, cfg))
        state = out[-1].state
        assert state.cap == out[-1].cap, out[-1]  # the cap decided is the cap the law holds next tick
    return out


def cuts(decisions: list[Decision]) -> list[tuple[int, int]]:
    return [(d.previous_cap, d.cap) for d in decisions if d.cap < d.previous_cap]


CFG = LawConfig(slo_target_s=0.020, ceiling=256, tick_s=TICK, window_s=15.0)


def test_a_cut_from_a_cap_the_batch_never_reached_goes_to_the_batch_in_use() -> None:
    decisions = drive("levers", CFG, ticks=8)
    made = cuts(decisions)
    # the first reading is not a window: the table's own cut; the next, a window later, from the batch in use
    assert made[0] == (256, 128), made
    assert len(made) >= 2 and made[1][1] <= max(BATCHES), (made, [d.detail for d in decisions])
    second = next(d for d in decisions if d.cap < d.previous_cap and d.previous_cap == made[1][0])
    assert "the window's largest batch" in second.detail, second.detail
    assert second.reason == "slo-violation"


def test_the_rule_table_keeps_its_own_steps() -> None:
    """The rule table, kept as the benchmark policy, still halves the cap a cooldown at a time."""
    made = cuts(drive("rules", CFG, ticks=8))
    assert made[:2] == [(256, 128), (128, 64)], made


def test_a_cap_the_batch_reaches_is_cut_by_the_table_alone() -> None:
    """At a cap the window's batches reach, the table's cut is already below every one of them: unchanged."""
    levers, rules = drive("levers", CFG, ticks=8, start_cap=24), drive("rules", CFG, ticks=8, start_cap=24)
    assert cuts(levers)[0] == cuts(rules)[0] == (24, 12), (cuts(levers), cuts(rules))
    assert all("largest batch" not in d.detail for d in levers)


def test_the_bursts_pre_emptive_cut_goes_to_the_batch_in_use_too() -> None:
    """Rule 12's cut (the rate rising, the P99 inside the band) acts from the cap in use as well."""
    levers = drive("levers", CFG, ticks=14, miss=0.95, rate=lambda i: 4.0 if i < 9 else 4.0 * 1.6 ** (i - 8))
    burst = [d for d in levers if d.reason == "burst"]
    assert burst and burst[0].previous_cap == 256, [(d.reason, d.cap) for d in levers]
    assert burst[0].cap <= max(BATCHES), (burst[0].cap, burst[0].detail)


def test_a_miss_at_one_sequence_at_a_time_is_held_where_the_table_walks_the_cap_down() -> None:
    """A light load runs one sequence at a time and still misses (a slow host): no cap makes that batch
    smaller, so after the table's first cut (not yet a window) the cap holds and asks no replica, where the
    rule table walks it to the floor. The hold is for such windows only: once the batch grows, the law's
    other answers (here the queue floor and the lever's verdict) take over."""
    light = 10
    batch = lambda i: 1.0 if i < light else 8.0  # noqa: E731
    levers = drive("levers", CFG, ticks=light + 6, rate=lambda i: 0.5, batches=batch)
    assert cuts(levers[:light]) == [(256, 128)], cuts(levers)
    held = [d for d in levers[:light] if d.reason == "held-one-at-a-time"]
    assert len(held) >= light - 4, [(d.reason, d.cap) for d in levers]
    assert all(d.cap == 128 and d.replica_wish != 1 for d in held)
    assert "no cap lowers that" in held[0].detail, held[0].detail
    grown = levers[light + 3 :]  # a whole window of the larger batch
    assert all(d.reason != "held-one-at-a-time" for d in grown), [d.reason for d in grown]
    rules = drive("rules", CFG, ticks=light, rate=lambda i: 0.5, batches=batch)
    assert rules[-1].cap <= 16, cuts(rules)
