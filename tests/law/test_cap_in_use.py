"""A cut for a per-token miss acts on the cap in use (issue 12: a step change answered in a tick or two, not a
chain of moves). A cap above every batch of a window binds nothing: the levers law's first cut from it goes
to the window's largest batch, where the rule table halves the idle cap a cooldown at a time. Synthetic
readings: the load keeps the batch at 18-26, far under the cap, and the P99 twice the target."""

from __future__ import annotations

import math
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
    out_tokens: float | None = None,
    hold_s: float | None = None,
) -> list[Decision]:
    """The P99 at `miss` x the target; `rate(tick)` requests per second complete, `batches(tick)` run, each
    request writing `out_tokens` on average and spending `hold_s` in the engine (None: unexported, as an
    older vLLM)."""
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
            output_tokens_mean=out_tokens,
            inference_time_mean_s=hold_s,
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
    assert "from the batch in use" in second.detail, second.detail
    assert second.reason == "slo-violation"


def test_the_rule_table_keeps_its_own_steps() -> None:
    """The rule table, kept as the benchmark policy, still halves the cap a cooldown at a time."""
    made = cuts(drive("rules", CFG, ticks=8))
    assert made[:2] == [(256, 128), (128, 64)], made


def test_a_cap_the_batch_reaches_is_cut_by_the_table_alone() -> None:
    """At a cap the window's batches reach, the table's cut is already below every one of them: unchanged."""
    levers, rules = drive("levers", CFG, ticks=8, start_cap=24), drive("rules", CFG, ticks=8, start_cap=24)
    assert cuts(levers)[0] == cuts(rules)[0] == (24, 12), (cuts(levers), cuts(rules))
    assert all("batch in use" not in d.detail for d in levers)


def test_the_bursts_pre_emptive_cut_goes_to_the_batch_in_use_too() -> None:
    """Rule 12's cut (the rate rising, the P99 inside the band) acts from the cap in use as well."""
    levers = drive("levers", CFG, ticks=14, miss=0.95, rate=lambda i: 4.0 if i < 9 else 4.0 * 1.6 ** (i - 8))
    burst = [d for d in levers if d.reason == "burst"]
    assert burst and burst[0].previous_cap == 256, [(d.reason, d.cap) for d in levers]
    assert burst[0].cap <= max(BATCHES), (burst[0].cap, burst[0].detail)


def test_a_miss_at_one_sequence_at_a_time_is_held_and_the_cut_comes_back_as_the_batch_grows() -> None:
    """A light load runs one sequence at a time and still misses (a slow host): no cap makes that batch
    smaller. After the table's first cut (not yet a window) the levers law holds, asking no replica, where
    before 9f71d5b it cut 128 -> 1 a window later (the queue model carrying the light arrivals at cap 1: the
    demo's figure at 2cf968b) and the rule table walks the cap down in halves. Once the batch grows and the
    miss goes on, the cut from the batch in use comes back."""
    light = 10
    batch = lambda i: 1.0 if i < light else 8.0  # noqa: E731
    levers = drive("levers", CFG, ticks=light + 4, rate=lambda i: 0.5, batches=batch, out_tokens=64.0)
    assert cuts(levers[:light]) == [(256, 128)], cuts(levers)
    held = [d for d in levers[:light] if d.reason == "held-one-at-a-time"]
    assert len(held) >= light - 4, [(d.reason, d.cap) for d in levers]
    assert all(d.cap == 128 and d.replica_wish != 1 for d in held)
    assert "no cap lowers that" in held[0].detail, held[0].detail
    grown = cuts(levers[light:])
    assert grown and grown[0] == (128, 8), (grown, [d.detail for d in levers[light:]])
    assert "from the batch in use (8)" in levers[light].detail, levers[light].detail
    rules = drive("rules", CFG, ticks=light, rate=lambda i: 0.5, batches=batch, out_tokens=64.0)
    assert rules[-1].cap <= 16, cuts(rules)


def test_a_cut_while_the_batch_still_grows_stops_at_the_batch_the_arrivals_keep_running() -> None:
    """The batch climbs 4 a tick (the engine holds more each tick: arrivals above completions), so a window's
    largest batch lags the load. Little's law, arrivals x a request's measured time in the engine, says
    where the batch goes; the cut from the batch in use stops there, above the lagging batch (the demo's
    heavy phase: 64 -> 16 six seconds in, while the batch rose past 30)."""
    growing = lambda i: 6.0 + 4.0 * i  # noqa: E731
    told = drive("levers", CFG, ticks=6, batches=growing, hold_s=8.0)
    made = cuts(told)
    assert made[0] == (256, 128), made
    # a window after it: arrivals = completions 4/s + the holdings' growth 4 per 5 s tick = 4.8/s; x 8 s
    little = math.ceil((4.0 + 4.0 / TICK) * 8.0)
    cut = next(d for d in told if d.previous_cap == 128 and d.cap < 128)
    lagging = max(growing(i) for i in range(told.index(cut) + 1))
    assert (cut.previous_cap, cut.cap) == (128, little) and little > lagging, (made, lagging)
    assert f"from the batch in use ({little})" in cut.detail, cut.detail


def test_a_miss_the_confident_line_says_is_met_is_cut_from_the_batch_in_use() -> None:
    """A line fitted at light load (batches 4-20, far under the target) says every cap up to the ceiling meets
    the per-token aim; then the load steps and the window misses at batches 22-30 under cap 64. The window
    refutes the line there: the first cut goes to the batch in use, not the table's x0.8 from a cap the
    batch never reached."""
    cfg = LawConfig(slo_target_s=0.020, ceiling=64, tick_s=2.0, window_s=8.0, cooldown_s=4.0)
    light = [float(b) for b in (4, 4, 4, 4, 12, 12, 12, 12, 20, 20, 20, 20, 8, 8, 8, 8, 16, 16, 16, 16)]
    batches = light + [22.0, 26.0, 30.0, 24.0] * 3
    state, decisions = LawState(cap=64), []
    for i, batch in enumerate(batches):
        window = max(batches[max(0, i - 3) : i + 1])  # a window's P99 answers for its largest batch
        p99 = 0.026 if i >= len(light) else 0.005 + 0.0002 * window
        obs = Observation(
            now_s=(i + 1) * cfg.tick_s, p99_s=p99, running=batch, waiting=0.0, request_rate=8.0,
            tpot_mean_s=0.7 * p99, output_tokens_mean=64.0,
        )  # fmt: skip
        decisions.append(LAWS["levers"](state, obs, cfg))
        state = decisions[-1].state
    light_plan = decisions[19]
    assert light_plan.outlook is not None and (light_plan.outlook.per_token_cap or 0) >= 64, light_plan
    first = next(d for d in decisions[20:] if d.cap < d.previous_cap)
    assert first.previous_cap == 64 and first.cap <= 30, (first.cap, first.detail)
    assert "from the batch in use" in first.detail, first.detail


LIGHT = [float(b) for b in (4, 4, 4, 4, 12, 12, 12, 12, 20, 20, 20, 20, 8, 8, 8, 8, 16, 16, 16, 16)]


def _on_the_line_after_light_load(
    law: LawName, ceiling: int, after: list[float], rate: Callable[[int], float] = lambda i: 8.0
) -> list[Decision]:
    """A steep line fitted at light load (batches 4-20: the P99 reaches the band at 18), then the batches
    `after`, the P99 on the same line (a window's P99 answers for its largest batch), `rate(i)` requests
    completing per second after the light load."""
    cfg = LawConfig(slo_target_s=0.020, ceiling=ceiling, tick_s=2.0, window_s=8.0, cooldown_s=4.0)
    batches = LIGHT + after
    state, decisions = LawState(cap=ceiling), []
    for i, batch in enumerate(batches):
        window = max(batches[max(0, i - 3) : i + 1])
        p99 = 0.002 + 0.0009 * window
        completing = rate(i - len(LIGHT)) if i >= len(LIGHT) else 8.0
        obs = Observation(
            now_s=(i + 1) * cfg.tick_s, p99_s=p99, running=batch, waiting=0.0, request_rate=completing,
            tpot_mean_s=0.7 * p99, output_tokens_mean=64.0,
        )  # fmt: skip
        decisions.append(LAWS[law](state, obs, cfg))
        state = decisions[-1].state
    return decisions


def _confident_then_rising(law: LawName) -> list[Decision]:
    """Then the arrivals rise 20 % a tick with the batch at 14-18 under cap 64, the P99 inside the band
    (rule 12's burst)."""
    rising = [14.0, 16.0, 18.0, 15.0] * 2
    return _on_the_line_after_light_load(law, 64, rising, lambda i: 8.0 * 1.2 ** (i + 1))


def test_a_burst_the_confident_line_meets_is_cut_from_the_batch_in_use() -> None:
    """Rule 12's pre-emptive cut on the confident path (the line names a per-token cap) acts from the batch
    in use too; the rule table's own cut, kept as the benchmark policy, is the x0.8 from the cap."""
    levers = _confident_then_rising("levers")
    burst = next(d for d in levers[20:] if d.reason == "burst")
    assert burst.outlook is not None and burst.outlook.per_token_cap is not None, burst
    assert burst.previous_cap == 64 and burst.cap <= 20, (burst.cap, burst.detail)
    assert "from the batch in use" in burst.detail, burst.detail
    table = next(d for d in _confident_then_rising("rules")[20:] if d.reason == "burst")
    assert (table.previous_cap, table.cap) == (64, 51), (table.cap, table.detail)


def test_a_miss_the_confident_line_sizes_is_cut_no_higher_than_the_batch_in_use() -> None:
    """The line fitted at light load is right (the P99 on it after the step too) and names a per-token cap
    of 17; the load steps to batches 22-30 under cap 128 and the window misses. The model's cut goes no
    deeper than the table's strongest (x0.5), and no higher than the batch in use: 128 -> 22-30, not 64,
    a cap above every batch, which would bind nothing for a cooldown. The rule table cuts x0.8."""

    def run(law: LawName) -> list[Decision]:
        return _on_the_line_after_light_load(law, 128, [22.0, 26.0, 30.0, 24.0] * 3)

    levers = run("levers")
    first = next(d for d in levers[20:] if d.cap < d.previous_cap)
    assert first.outlook is not None and first.outlook.per_token_cap == 17, first.outlook
    assert first.reason == "model-meets-both" and first.previous_cap == 128, first.detail
    assert 22 <= first.cap <= 30 and f"from the batch in use ({first.cap})" in first.detail, first.detail
    table = next(d for d in run("rules")[20:] if d.cap < d.previous_cap)
    assert (table.previous_cap, table.cap) == (128, 102), (table.cap, table.detail)
