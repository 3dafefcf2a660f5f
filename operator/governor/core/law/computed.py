"""The computed law ("levers"): the rule table's judgement, with the distance and the veto from what the cap
is measured to do.

In one paragraph: every tick the law adds (the window's largest running batch, the per-token P99) and (its
mean batch, the mean TPOT) to two online line fits that forget old regimes (governor.core.levers.fit; on the
H200 the TPOT P99 is one line in the running batch). The rule table still decides *whether* to move (its
smoothing, band, cooldowns, queue-growth guard and replica hand-off). Once the fits are confident they decide
*how far* and *whether the lever works*: a cut for a miss goes in one move to the per-token cap (the largest
cap whose predicted P99, on the upper confidence side, is under `plan_margin` x the target) instead of a
chain of x0.8 steps, and a raise goes up to it and never past it. If the cap does not move the signal (a line
flat across the batches seen), the law stops cutting and asks for replicas; if the line rises with the batch
and one sequence alone is above the target, no cap and no replica helps, and it keeps throughput and says the
SLO is infeasible; a verdict stands (no cut) while the fits re-learn, until a confident fit finds a cap that
meets the target. When TTFT breaks behind a binding cap, the cap goes up to serve the queue, but only within
the per-token bound: the per-token SLO first, the TTFT bound then given up to the replicas.

Every raise stays within the evidence (a trust region): the model's raise goes at most to TRUST x the largest
running batch the quantile line was measured at (LeverFit.support); past that the law takes the rule table's
bounded exploratory step, and the fit learns the line as the batch grows. The line's confidence band cannot
guard this: it measures the noise around a line assumed right, and a line fitted at small batches is not (on
the H200 the P99 sat in one histogram bucket at batches 3..21, the fit called the line flat, and its doubling
to 128 cost 98 SLO misses at 20 ms).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from governor.core.law.decide import decide
from governor.core.law.derive import known
from governor.core.law.model import Decision, LawConfig, LawState, Observation
from governor.core.law.steps import mode_cap, raise_cap
from governor.core.levers.fit import LeverFit
from governor.core.levers.plan import CapPlan, PlanSettings, plan_cap
from governor.core.signals import LatencyKind

# Largest raise one computed move makes: a cap far above every batch the fits have seen is extrapolation;
# doubling per move still reaches any ceiling from 1 in 8 moves.
MAX_RAISE = 2.0
# A cap given to the queue must serve this much more than arrive, or the queue never drains.
RELIEF_HEADROOM = 1.1
# How far past its support a fitted line is trusted. Measured on the H200 calibration (17 serving points): a
# line fitted on the points up to a batch B under-predicts the TPOT P99 at 1.25 B by at most 10 % (what the
# plan's margin absorbs) at 10 of 11 supports (-14 % at B = 127), but at 1.5 B by up to 16 % and at 2 B by up
# to 24 % (B = 16, where the P99 is still flat). benchmarks/levers_trust.py prints the table.
TRUST = 1.25


def _recent(state: LawState, obs: Observation, cfg: LawConfig) -> tuple[float, ...]:
    """The running batch over the ticks the quantile's window spans: the quantile answers for requests
    that ran over the whole window, so its regressor is the window's mean batch, not this tick's."""
    running = known(obs.running)
    if running is None:
        return state.running_recent
    keep = max(1, math.ceil(cfg.window_s / cfg.tick_s))
    return (*state.running_recent, running)[-keep:]


def _fits(state: LawState, obs: Observation, recent: tuple[float, ...]) -> tuple[LeverFit, LeverFit]:
    """Fold this window into both lines (clipping and forgetting absorb the windows that straddle a move).
    The mean TPOT answers for the window's mean batch; the quantile for its largest: the slowest requests of
    a window are the ones that ran at its biggest batch (regressed on the mean, a window that straddles a
    raise overstates the slope, and the cap planned from it falls short: twin, 2x step, 84 instead of 128)."""
    quantile_fit, mean_fit = state.quantile_fit or LeverFit(), state.mean_fit or LeverFit()
    batch = sum(recent) / len(recent) if recent else 0.0
    if batch < 1 or known(obs.running) is None:
        return quantile_fit, mean_fit
    return (
        quantile_fit.update((max(recent),), known(obs.p99_s)),
        mean_fit.update((batch,), known(obs.tpot_mean_s)),
    )


def _per_token_plan(state: LawState, cfg: LawConfig, fits: tuple[LeverFit, LeverFit], upper: int) -> CapPlan:
    """The per-token side alone: the queue is judged from what it does, not from a queueing model fed by
    lagging window averages (tried: it mistook a starting surge for a slow engine and cut)."""
    return plan_cap(
        fits[0],
        fits[1],
        arrival_rps=0.0,
        out_tokens=1.0,
        prefill_s=0.0,
        target_s=cfg.slo_target_s,
        ttft_bound_s=None,
        min_cap=min(cfg.min_cap, upper),
        ceiling=upper,
        settings=PlanSettings(margin=cfg.plan_margin),
    )


def _starving(state: LawState, obs: Observation, base: Decision, cfg: LawConfig) -> bool:
    """The queue pays for the per-token cap: TTFT is past its bound (or, without one, the queue grows)
    while the cap binds."""
    running, waiting = known(obs.running), known(obs.waiting)
    binding = running is not None and running >= cfg.queue_binding_fraction * state.cap
    queued = waiting is not None and waiting >= max(cfg.queue_min, 1.0)
    growing = base.state.growth_ticks >= cfg.queue_growth_ticks
    ttft = known(obs.ttft_p99_s)
    late = ttft is not None and cfg.ttft_bound_s is not None and ttft > cfg.ttft_bound_s
    return binding and queued and (late or (cfg.ttft_bound_s is None and growing))


def computed_decide(state: LawState, obs: Observation, cfg: LawConfig) -> Decision:
    base = decide(state, obs, cfg)
    recent = _recent(state, obs, cfg)
    fits = _fits(state, obs, recent)
    memory: dict[str, Any] = {
        "quantile_fit": fits[0], "mean_fit": fits[1], "running_recent": recent, "verdict": state.verdict,
    }
    if cfg.latency_kind is not LatencyKind.TPOT or known(obs.p99_s) is None:
        # TTFT and e2e SLOs are queue-driven (never cut for them); no data holds: the rule table answers.
        return _with(base, base.state.model_copy(update=memory))
    upper = mode_cap(base.mode, cfg)
    plan = _per_token_plan(state, cfg, fits, upper)
    if state.verdict is not None and plan.reason in ("unconfident", "at-min-cap") and base.cap < state.cap:
        return _standing(state, base, memory)  # nothing yet shows a cap that meets the target
    if plan.reason == "unconfident":
        return _with(base, base.state.model_copy(update=memory))
    if plan.cap is None:  # inert: the cap does not move the signal; cutting would only build a queue
        return _inert(state, obs, base, plan, memory, cfg, upper)
    if plan.reason == "infeasible":
        return _infeasible(state, base, plan, memory, cfg, upper)
    if plan.reason != "at-min-cap":  # a confident line with a cap that meets the target ends a verdict
        memory["verdict"] = None
    if _starving(state, obs, base, cfg) and plan.cap > state.cap:
        return _relief(state, obs, base, plan, memory, cfg, fits[1])
    return _computed(state, obs, base, plan, memory, cfg)


def _standing(state: LawState, base: Decision, memory: dict[str, Any]) -> Decision:
    """The table would cut, and the last confident fit said the cap cannot reach the target; the fits are
    re-learning, or they find no cap that meets it: the verdict stands (no cut) until a confident fit finds
    one."""
    infeasible = state.verdict == "infeasible"
    detail = (
        "SLO infeasible on this hardware (the last confident fit); replicas do not help" if infeasible
        else "no engine lever reaches the SLO: replicas needed (the last confident fit)"
    ) + "; no cut while the fits re-learn"
    wish: Literal[-1, 0, 1] = 0 if infeasible else base.replica_wish
    return _decision(state, base, state.cap, str(state.verdict), detail, wish, dict(memory))


def _trusted(memory: dict[str, Any]) -> int:
    """The largest cap the quantile line vouches for: TRUST x the largest batch it was measured at."""
    fit: LeverFit = memory["quantile_fit"]
    return math.floor(TRUST * fit.support)


def _support(memory: dict[str, Any]) -> str:
    fit: LeverFit = memory["quantile_fit"]
    return f"batches up to {fit.support:.0f}, trusted to cap {_trusted(memory)}"


def _reach(state: LawState, memory: dict[str, Any], cfg: LawConfig, upper: int) -> int:
    """The highest cap a raise on the fit's word may take this tick: its trust region, or past it the rule
    table's bounded exploratory step from the current cap."""
    return max(_trusted(memory), raise_cap(state.cap, upper, cfg))


def _relief_cap(state: LawState, obs: Observation, mean_fit: LeverFit, upper: int) -> int | None:
    """The smallest cap above this one whose service rate outruns the arrivals, from the mean-TPOT line:
    at a batch c a request takes about out x tpot(c), so capacity scales as c / tpot(c). None when the fit
    is not usable or no cap up to `upper` would do (overload at every cap: giving up the per-token bound
    would buy nothing; that is the replicas' job alone)."""
    running, waiting, rate = known(obs.running), known(obs.waiting), known(obs.request_rate)
    if running is None or waiting is None or rate is None or running < 1 or mean_fit.count < 8:
        return None
    growth = 0.0
    if (
        state.waiting_prev is not None
        and state.waiting_prev_s is not None
        and obs.now_s > state.waiting_prev_s
    ):
        growth = max(0.0, (waiting - state.waiting_prev) / (obs.now_s - state.waiting_prev_s))
    arrival = rate + max(growth, known(obs.queue_growth) or 0.0)

    def capacity(c: float) -> float:
        return c / max(mean_fit.predict((c,)).mean, 1e-9)

    now = capacity(running)
    for c in range(state.cap + 1, upper + 1):
        if rate * capacity(c) / now >= arrival * RELIEF_HEADROOM:
            return c
    return None


def _relief(
    state: LawState,
    obs: Observation,
    base: Decision,
    plan: CapPlan,
    memory: dict[str, Any],
    cfg: LawConfig,
    mean_fit: LeverFit,
) -> Decision:
    """TTFT is past its bound while the queue waits at a binding cap, and the model says the per-token bound
    holds at a higher cap: go up, in one move, to the smallest cap that outruns the arrivals, never past the
    per-token cap (the per-token bound first, as the user's objective asks). Past it the queue is the
    replicas' to answer (the table's TTFT hand-off asks for them)."""
    assert plan.cap is not None
    relief = _relief_cap(state, obs, mean_fit, plan.cap)
    reach = _reach(state, memory, cfg, plan.cap)
    cap = max(
        state.cap, min(plan.cap if relief is None else relief, math.floor(state.cap * MAX_RAISE), reach)
    )
    detail = (
        f"TTFT past its bound behind a binding cap: raised within the per-token bound ({plan.detail})"
        + ("" if relief is not None else "; no cap within it outruns the arrivals: replicas needed")
    )
    return _decision(state, base, cap, "queue-relief", detail, base.replica_wish, memory)


def _infeasible(
    state: LawState, base: Decision, plan: CapPlan, memory: dict[str, Any], cfg: LawConfig, upper: int
) -> Decision:
    """No cap meets the target and no replica would: keep the throughput (back up towards the ceiling)."""
    cap = max(base.cap, min(upper, math.ceil(state.cap * MAX_RAISE), _reach(state, memory, cfg, upper)))
    detail = f"SLO infeasible on this hardware: {plan.detail}; replicas do not help"
    update = {**memory, "cap": cap, "pressure_ticks": 0, "verdict": "infeasible"}
    return _decision(state, base, cap, "infeasible", detail, 0, update)


def _inert(
    state: LawState,
    obs: Observation,
    base: Decision,
    plan: CapPlan,
    memory: dict[str, Any],
    cfg: LawConfig,
    upper: int,
) -> Decision:
    """The cap does not move the per-token signal: no cut (it would only build a queue). A miss is the
    replicas' to answer, and while a queue waits behind the cap it goes back up towards the throughput it
    gave away (the fits follow the batch up; a slope that appears ends the verdict)."""
    cap = max(state.cap, base.cap)  # a raise the table wants (throughput) is fine; a cut is not
    violating = (base.state.p99_smoothed or 0.0) > cfg.band_high * cfg.slo_target_s
    running, waiting = known(obs.running), known(obs.waiting)
    queued = waiting is not None and waiting >= max(cfg.queue_min, 1.0)
    if violating and queued and running is not None and running >= cfg.queue_binding_fraction * state.cap:
        cap = max(cap, min(upper, math.ceil(state.cap * MAX_RAISE), _reach(state, memory, cfg, upper)))
    pressure = state.pressure_ticks + 1 if violating else 0
    wish: Literal[-1, 0, 1] = 1 if pressure >= cfg.replica_after_ticks else base.replica_wish
    detail = f"the cap does not move the per-token latency ({plan.detail})"
    if violating:
        detail = f"no engine lever reaches the SLO: replicas needed; {detail}"
    update = {**memory, "cap": cap, "pressure_ticks": 0 if wish == 1 else pressure, "verdict": "lever-inert"}
    return _decision(state, base, cap, "lever-inert", detail, wish, update)


def _computed(
    state: LawState, obs: Observation, base: Decision, plan: CapPlan, memory: dict[str, Any], cfg: LawConfig
) -> Decision:
    """The table's direction, the model's distance: a cut for a miss goes in one move to the per-token cap
    (not a chain of x0.8), a raise with headroom goes up to it (at most doubling). Only where the table
    itself moves: its guards (cooldown, queue growth, binding, confirmation) still decide *whether*."""
    assert plan.cap is not None
    cap, detail = base.cap, plan.detail
    if base.reason == "slo-violation" and plan.cap < base.cap:
        # No deeper than the table's strongest cut: a line fitted on lagging windows can overstate the slope.
        cap = max(cfg.min_cap, plan.cap, math.floor(state.cap * cfg.strongest_decrease))
    elif base.reason == "headroom":
        # Up to the model's cap in one move, and never past it: the table's raise reads a P99 that lags. Past
        # the fit's trust region only as far as the table's own step goes.
        reach = max(_trusted(memory), base.cap)
        cap = max(
            state.cap, min(plan.cap, math.floor(state.cap * MAX_RAISE), mode_cap(base.mode, cfg), reach)
        )
        if reach < min(plan.cap, mode_cap(base.mode, cfg)) and cap == reach:
            detail = f"{plan.detail}; raised within what the line was measured at ({_support(memory)})"
    if cap == base.cap:
        return _with(base, base.state.model_copy(update=memory))
    update = {**memory, "cap": cap}
    if cap < state.cap:
        update.update(cooldown_until_s=obs.now_s + cfg.cooldown_s, cut_s=obs.now_s)
    return _decision(state, base, cap, f"model-{plan.reason}", detail, base.replica_wish, update)


def _decision(
    state: LawState,
    base: Decision,
    cap: int,
    reason: str,
    detail: str,
    wish: Literal[-1, 0, 1],
    update: dict[str, Any],
) -> Decision:
    update = {**update, "cap": cap}  # the state holds the cap decided, never the table's overridden one
    if base.cap < state.cap <= cap:  # the table's cut was vetoed: none of its cut memory applies
        update.setdefault("cooldown_until_s", state.cooldown_until_s)
        update.setdefault("cut_s", state.cut_s)
        update.setdefault("cut_p99", state.cut_p99)
    return Decision(
        cap=cap,
        reason=reason,
        detail=detail,
        mode=base.mode,
        replica_wish=wish,
        state=base.state.model_copy(update=update),
        previous_cap=state.cap,
    )


def _with(base: Decision, state: LawState) -> Decision:
    """The rule table's decision, carrying the computed law's memory. Its moves are small (bounded steps),
    so the windows around them still feed the fits: that spread is what makes the fits confident."""
    return Decision(
        cap=base.cap,
        reason=base.reason,
        detail=base.detail,
        mode=base.mode,
        replica_wish=base.replica_wish,
        state=state,
        previous_cap=base.previous_cap,
    )
