"""One tick of the law: derive the signals, let the first matching rule move the cap, hand off to replicas."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from governor.core.law import derive
from governor.core.law.derive import known
from governor.core.law.model import Decision, LawConfig, LawState, Observation
from governor.core.law.rules import Move, Signals, first_rule
from governor.core.law.steps import mode_cap


def decide(state: LawState, obs: Observation, cfg: LawConfig, *, guesses: bool = True) -> Decision:
    """The rule table's decision. `guesses=False` runs it without rules 11 and 14 (long-tail mode, the
    violation memory): guesses about where the SLO will break, from a prompt shift or from where it broke
    before, which the levers law replaces with the lines it fits (governor.core.law.computed)."""
    now = obs.now_s
    running, waiting, rate = known(obs.running), known(obs.waiting), known(obs.request_rate)
    latency = derive.latency(state, known(obs.p99_s), cfg)
    growth = derive.queue_growth(state, now, waiting, known(obs.queue_growth), rate, cfg)
    tail = derive.long_tail(state, rate, known(obs.long_prompt_rate), known(obs.prompt_p95), cfg)
    rising = derive.burst(state, rate, cfg)
    if not guesses:
        tail = replace(tail, triggered=False)
    span = derive.mode(state, now, tail, rising, cfg)
    draining = derive.drain(state, now, latency.smoothed, cfg)
    memory = derive.violation_memory(state, cfg) if guesses else None
    signals = Signals(
        cfg=cfg,
        cap=state.cap,
        upper=mode_cap(span.mode, cfg),
        mode=span.mode,
        per_token=cfg.latency_kind.per_token,
        p99=latency.p99,
        smoothed=latency.smoothed,
        violating=latency.violating,
        comfortable=latency.comfortable,
        overloaded=growth.overloaded,
        hedge=rising.confirmed and not latency.comfortable,  # rule 12: a burst below the band lowers nothing
        cooling=draining.cooling,
        stale=draining.stale,
        binding=derive.binding(state.cap, running, waiting, cfg),
        queued=derive.queued(waiting, cfg),
        memory=memory,
        comfortable_ticks=state.comfortable_ticks,
    )
    reason, move = first_rule(signals)
    ttft_pressing = derive.ttft_pressure(
        known(obs.ttft_p99_s),
        signals.binding,
        signals.queued,
        growth.overloaded,
        headroom=latency.comfortable and move.cap < signals.upper,
        cfg=cfg,
    )
    pressure_ticks, idle_ticks, wish = _hand_off(
        state, move, latency, running, waiting, rate, cfg, ttft_pressing=ttft_pressing
    )
    next_state = LawState(
        cap=move.cap,
        p99_smoothed=latency.smoothed,
        mode=span.mode,
        mode_until_s=span.until_s,
        cooldown_until_s=now + cfg.cooldown_s if move.cut else state.cooldown_until_s,
        comfortable_ticks=state.comfortable_ticks + 1 if latency.comfortable else 0,
        pressure_ticks=pressure_ticks,
        idle_ticks=idle_ticks,
        rate_ewma=rising.rate_ewma,
        burst_ticks=rising.burst_ticks,
        baseline_ticks=rising.baseline_ticks,
        prompt_p95_slow=tail.prompt_p95_slow,
        violation_cap=float(state.cap) if move.remember and guesses else memory,
        cut_p99=latency.smoothed if move.cut else state.cut_p99,
        shift_ticks=tail.shift_ticks,
        cut_s=now if move.cut else state.cut_s,
        waiting_prev=waiting if waiting is not None else state.waiting_prev,
        waiting_prev_s=now if waiting is not None else state.waiting_prev_s,
        growth_ticks=growth.growth_ticks,
        ticks=state.ticks + 1,
    )
    return Decision(
        cap=move.cap,
        reason=reason,
        detail=move.detail,
        mode=span.mode,
        replica_wish=wish,
        state=next_state,
        previous_cap=state.cap,
    )


def _hand_off(
    state: LawState,
    move: Move,
    latency: derive.Latency,
    running: float | None,
    waiting: float | None,
    rate: float | None,
    cfg: LawConfig,
    ttft_pressing: bool = False,
) -> tuple[int, int, Literal[-1, 0, 1]]:
    """Rule 10, anti-windup: pressure the cap cannot answer asks for a replica, a long idle gives one back.
    Pressure is the rule table's (a violation at the lowest cap, a binding cap at the top) or a TTFT past
    its bound behind a binding cap (derive.ttft_pressure); neither moves the cap here, only the wish.
    Returns the pressure and idle counts to keep, and the replica wish."""
    pressure_ticks = state.pressure_ticks + 1 if move.pressure or ttft_pressing else 0
    quiet = (
        waiting is not None
        and waiting < 1
        and running is not None
        and running <= cfg.idle_fraction * move.cap
    )
    # No requests at all: the quantile is undefined, the engine idle.
    no_traffic = latency.p99 is None and rate == 0.0
    calm = latency.comfortable and not latency.violating and latency.p99 is not None
    idle_ticks = state.idle_ticks + 1 if quiet and (calm or no_traffic) else 0
    if pressure_ticks >= cfg.replica_after_ticks:
        return 0, idle_ticks, 1
    if idle_ticks >= cfg.idle_after_ticks:
        return pressure_ticks, 0, -1
    return pressure_ticks, idle_ticks, 0
