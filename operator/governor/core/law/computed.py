"""The computed law ("levers"): the rule table's judgement, with the distance and the veto from what the cap
is measured to do.

In one paragraph: every tick the law adds (the window's largest running batch, the per-token P99) and (its
mean batch, the mean TPOT) to two online line fits that forget old regimes (governor.core.levers.fit; on the
H200 the TPOT P99 is one line in the running batch). The rule table still decides *whether* to move (its
smoothing, band, cooldowns, queue-growth guard and replica hand-off). Once the fits are confident they decide
*how far* and *whether the lever works*: a cut for a miss goes in one move to the per-token cap (the largest
cap whose predicted P99, on the upper confidence side, is under `plan_margin` x the target) instead of a chain
of x0.8 steps, and a raise goes up to it and never past it (before they are, a cut goes at least to the batch
in use, the window's largest or the arrivals' by Little's law, and a miss in a window that never ran more than
the smallest cap's batch is held: no cap makes that batch smaller). If the cap does not move the signal (a
line flat across the batches seen), the law stops cutting and asks for replicas; if the line rises with the
batch and one sequence alone is above the target, no cap and no replica helps, and it keeps throughput and
says the SLO is infeasible; a verdict stands (no cut) while the fits re-learn, until a confident fit finds a
cap that meets the target. Then the queue has its say, because goodput counts requests meeting both bounds,
with the per-token bound first where a cap is known to meet it: no cut goes below the smallest cap whose
service (c / (prefill + out x tpot(c)) from the mean line, levelled by the measured hold per request) carries
the arrivals and whose backlog, a window ahead, waits within the TTFT bound (below it the queue grows until
every TTFT is a miss), unless the per-token cap lies below and its own backlog still waits within the bound (a
burst the bound absorbs). Where it would not, no cap meets both bounds, and a request that misses either
counts for nothing: the floor is the cap between the two that keeps the most requests within both over the
next window (its service while the queue's wait stays within the TTFT bound, times the share of requests whose
own tokens meet the target there); above the per-token cap the per-token bound is given up, at it the TTFT
bound. When the backlog would hold requests past their TTFT bound behind a binding cap, the cap goes up a step
at a time within the per-token cap (and the trust region), or, with no such cap known and the per-token bound
already missed (or held, on a queue without end at the cap: it grows, and the cap serves less than arrives),
one step per episode, or one move to the smallest cap that carries the arrivals (the limit where none does)
while the queue measurably grows (or, the per-token bound missed, stands where the cap's modelled service
falls short of the arrivals: then within the trust region), no further than that goodput goes, asking for
replicas. A backlog the TTFT bound absorbs (a burst that ends) is left to queue. Where the per-token fit needs
its line measured at smaller batches before it can give a verdict, a cut may probe one step below the floor
for a window while the backlog there waits within the TTFT bound, and comes back unless a confident fit then
names a cap (one probe until one does). Last, for an inter-token SLO, the token budget
(governor.core.law.budget): while it can still go down it answers the miss first and the cap's cuts wait.

Every raise stays within the evidence (a trust region): the model's raise goes at most to TRUST x the largest
running batch the quantile line was measured at (LeverFit.support); past that the law takes the rule table's
bounded exploratory step, and the fit learns the line as the batch grows; with a per-token SLO alone, one
such step per window past what a whole window held (_paced). The line's confidence band cannot
guard this: it measures the noise around a line assumed right, and a line fitted at small batches is not (on
the H200 the P99 sat in one histogram bucket at batches 3..21, the fit called the line flat, and its doubling
to 128 cost 98 SLO misses at 20 ms).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from statistics import NormalDist
from typing import Any, Literal, NamedTuple

from governor.core.law.budget import budget_left, with_budget
from governor.core.law.decide import decide
from governor.core.law.derive import binding, growth_rate, known, queued
from governor.core.law.model import Decision, LawConfig, LawState, Observation, Outlook
from governor.core.law.steps import clip, mode_cap, raise_cap
from governor.core.levers.fit import TRUST, LeverFit
from governor.core.levers.plan import CapPlan, PlanSettings, plan_cap
from governor.core.levers.queueing import TpotLine, Workload, service_rate, service_time_s
from governor.core.levers.steps import StepCostFit

# Largest raise one computed move makes: a cap far above every batch the fits have seen is extrapolation;
# doubling per move still reaches any ceiling from 1 in 8 moves. Inert on the twin matrix at 1.5 and 4
# (KNOBS.md: no served cell moves on any of three draws, nor on draw 0 at a27fa93).
MAX_RAISE = 2.0
# A cap given to the queue must serve this much more than arrive, or the queue never drains. Matrix means
# (KNOBS.md, draws 0/1/2; 0.912/0.912/0.913 at 1.1): 1.05 0.909/0.908/0.909 (1-2 cells down a draw, none
# up), 1.2 0.913/0.915/0.915 (one cell up on two draws). At a27fa93, draw 0 (0.918 at 1.1): 1.05 0.920 (3
# cells down, 2 up), 1.2 0.919 (1 down, 3 up).
RELIEF_HEADROOM = 1.1


def _recent(state: LawState, obs: Observation, cfg: LawConfig) -> tuple[float, ...]:
    """The running batch over the ticks the quantile's window spans: the quantile answers for requests
    that ran over the whole window, so its regressor is the window's mean batch, not this tick's."""
    running = known(obs.running)
    if running is None:
        return state.running_recent
    return (*state.running_recent, running)[-_window_ticks(cfg) :]


def _window_ticks(cfg: LawConfig) -> int:
    """The ticks a window spans."""
    return max(1, math.ceil(cfg.window_s / cfg.tick_s))


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


def computed_decide(state: LawState, obs: Observation, cfg: LawConfig) -> Decision:
    # The table without its guesses about where the SLO breaks (rules 11 and 14: long-tail mode and the
    # violation memory, 11 knobs): the fitted lines say where. Measured without them: the twin matrix the
    # same (mean 0.895; median 0.994 -> 0.997), and the H200 trace replayed on the twin the same (0.997 at
    # 20 ms). Rule 12, the burst's pre-emptive step and additive-only raises, stays: without it that replay
    # fell to 0.925 (caps up to 109 where it held 97 at most), and to 0.466 with a 2.5 s TTFT bound (caps
    # up to 212).
    base = decide(state, obs, cfg, guesses=False)
    chosen, plan = _per_token(state, obs, cfg, base)
    chosen = _paced(state, obs, cfg, base, chosen)
    if cfg.latency_kind.per_token and known(obs.p99_s) is not None:
        chosen = _carry_the_queue(state, obs, cfg, base, chosen, plan)
    if chosen.cap < state.cap and budget_left(state, obs, cfg, state.cap):
        # An inter-token P99 is the step that carries a prefill chunk: the budget is its lever (measured,
        # budget.py), and a cut of the cap costs everyone's throughput, so the budget goes first.
        detail = f"the token budget first for an inter-token SLO; the cap's cut waits ({chosen.detail})"
        kept = _kept(chosen, state.cap)
        if chosen.reason == "probe":  # the probe is not taken, so none is under way
            kept.update(probe_from=state.probe_from, probe_s=state.probe_s)
        chosen = _decision(state, base, state.cap, "budget-first", detail, chosen.replica_wish, kept)
    decision = with_budget(state, obs, cfg, chosen)
    raised = obs.now_s if decision.cap > state.cap else state.raised_s
    step_fit = (state.step_fit or StepCostFit()).update(obs.step_rates)
    decision = replace(
        decision, state=decision.state.model_copy(update={"raised_s": raised, "step_fit": step_fit})
    )
    return replace(decision, outlook=_outlook(state, obs, cfg, decision, plan))


def _held_support(
    state: LawState, obs: Observation, cfg: LawConfig, recent: tuple[float, ...], fit: LeverFit
) -> float:
    """The largest batch held through a whole window, its excess forgotten at the fit's rate (0 until a
    window of ticks is seen)."""
    prior = state.held_support
    if known(obs.running) is None or len(recent) < _window_ticks(cfg):
        return prior
    held = min(recent)
    return max(held, held + fit.forgetting * (prior - held))


def _paced(state: LawState, obs: Observation, cfg: LawConfig, base: Decision, chosen: Decision) -> Decision:
    """With a per-token SLO alone, a raise for headroom past TRUST x the largest batch held through a whole
    window waits until the window has seen the last raise. The table raises on a P99 that lags the batch
    by a window, so unpaced its x1.15 steps compound before the first shows (H200, 20 ms, a line fitted in
    the light phase: 64 -> 73 -> 83 -> 95 in four seconds as a burst began, each within TRUST of the
    running batch the tick before, then P99 24.9 ms for 30 s; attainment 0.775 against static 64's 0.999).
    Where a TTFT bound counts too, the queue's waits are the price of a held cap and a raise buys goodput:
    paced there, the twin matrix lost (8B medium: steady 0.96 -> 0.92, 2x step 0.69 -> 0.58), so it is not."""
    if cfg.ttft_bound_s is not None or base.reason != "headroom" or chosen.cap <= state.cap:
        return chosen
    trusted = math.floor(TRUST * chosen.state.held_support)
    if state.raised_s is None or chosen.cap <= trusted or obs.now_s - state.raised_s >= cfg.window_s:
        return chosen
    cap = max(state.cap, trusted)
    detail = (
        f"a raise past the batch held through a window ({chosen.state.held_support:.0f}, trusted to cap "
        f"{trusted}) waits for the window to see the last one; {chosen.detail}"
    )
    return _decision(state, base, cap, "raise-paced", detail, chosen.replica_wish, _kept(chosen, cap))


def _per_token(
    state: LawState, obs: Observation, cfg: LawConfig, base: Decision
) -> tuple[Decision, CapPlan | None]:
    """The cap for the per-token bound alone, and the plan it came from (None when none was made)."""
    recent = _recent(state, obs, cfg)
    fits = _fits(state, obs, recent)
    memory: dict[str, Any] = {
        "quantile_fit": fits[0],
        "mean_fit": fits[1],
        "running_recent": recent,
        "held_recent": _held(state, obs, cfg),
        "held_support": _held_support(state, obs, cfg, recent, fits[0]),
        "verdict": state.verdict,
        "probe_from": state.probe_from,
        "probe_s": state.probe_s,
        "probe_failed": state.probe_failed,
    }
    if not cfg.latency_kind.per_token or known(obs.p99_s) is None:
        # TTFT and e2e SLOs are queue-driven (never cut for them); no data holds: the rule table answers.
        return _with(base, base.state.model_copy(update=memory)), None
    upper = mode_cap(base.mode, cfg)
    plan = _per_token_plan(state, cfg, fits, upper)
    used = _from_use(cfg, base, recent, _little(state, obs, memory["held_recent"], cfg))
    if state.verdict is not None and plan.reason in ("unconfident", "at-min-cap") and base.cap < state.cap:
        return _standing(state, base, memory), plan  # nothing yet shows a cap that meets the target
    if plan.reason == "unconfident":
        if _one_at_a_time(cfg, base, recent) and base.cap < state.cap:
            return _unanswerable(state, base, memory), plan
        return _with(used, used.state.model_copy(update=memory)), plan
    if plan.cap is None:  # inert: the cap does not move the signal; cutting would only build a queue
        return _inert(state, obs, base, plan, memory, cfg, upper), plan
    if plan.reason == "infeasible":
        return _infeasible(state, base, plan, memory, cfg, upper), plan
    if plan.reason != "at-min-cap":  # a confident line with a cap that meets the target ends a verdict
        memory["verdict"] = None
    refuted = base.reason == "slo-violation" and plan.cap >= base.cap
    if refuted or base.reason == "burst":
        # The table's cut goes from the batch in use as on the unconfident path where the confident line
        # gives no distance. A miss at a cap the line says meets the aim refutes it there (read past the
        # batches it was fitted at): on the CPU engine's 2x step the line fitted before the step (batches up
        # to 22) put the per-token cap at 62, and the table cut 64 -> 51 with 22 running. Rule 12's
        # pre-emptive cut for a rising load: the line says where the target holds, not how far the load will
        # take the batch (a reaction run: 64 -> 51 with 13 running). Either cut from a cap far above the
        # batch binds nothing for a cooldown. Both inert on the twin matrix (four draws, every cell the same)
        # and on the twin's reaction (three seeds).
        return _with(used, used.state.model_copy(update=memory)), plan
    return _computed(state, obs, base, used, plan, memory, cfg), plan


def _from_use(cfg: LawConfig, base: Decision, recent: tuple[float, ...], little: float) -> Decision:
    """The table's cuts (for a miss, and the burst's pre-emptive one) taken from the cap in use: a cap above
    every batch of a whole window binds nothing, and a cut that stays above them changes nothing but costs a
    cooldown (the twin's 70B shape, prefill-heavy: 256 -> 128 -> 64 -> 32, a window each, with the batch
    under 30). The cut goes down at least to the window's largest batch; the table's next one, a cooldown
    later, from there. Measured on the twin matrix (served cells, four draws): mean 0.925 -> 0.939, 0.936 ->
    0.942, 0.930 -> 0.939, 0.934 -> 0.926; the 70B medium and loose prefill-heavy cells up on every draw
    (0.44 -> 0.77 and 0.83 -> 0.94 on draw 0), the 70B tight prefill-heavy ones (8-14 % served) down on
    every draw. Only over a whole window: a few ticks' largest batch understates the load's (taken from the
    first readings, the means went 0.936 -> 0.902 and 0.930 -> 0.887 on draws 1 and 2; on the CPU tight 2x
    step a cut 32 -> 7 where the batch later reached 13, and a queue past the TTFT bound held it there for
    two minutes). Nor below the batch the arrivals keep running by Little's law (`little`, _little): a
    window's largest batch lags a load that still grows (the demo's heavy phase, cut 64 -> 16 six seconds
    in while the batch rose past 30). Inert on the twin matrix (draws 0-3, every cell the same); read before
    a whole window, or as its Poisson upper quantile, it moved cells both ways (docs/measurements.md)."""
    if base.reason not in ("slo-violation", "burst") or len(recent) < _window_ticks(cfg):
        return base
    in_use = clip(math.ceil(max(*recent, little)), cfg)
    if in_use >= base.cap:
        return base
    detail = f"{base.detail}; from the batch in use ({in_use}): the cap above it bound nothing"
    return replace(base, cap=in_use, detail=detail, state=base.state.model_copy(update={"cap": in_use}))


def _little(state: LawState, obs: Observation, held: tuple[float, ...], cfg: LawConfig) -> float:
    """The batch the arrivals keep running, by Little's law: arrivals (_arrivals) x a request's measured
    time in the engine (0 when either is unknown)."""
    arrivals, hold = _arrivals(state, obs, held, cfg.tick_s), known(obs.inference_time_mean_s)
    return 0.0 if arrivals is None or hold is None else arrivals * hold


def _one_at_a_time(cfg: LawConfig, base: Decision, recent: tuple[float, ...]) -> bool:
    """A miss in a whole window that never ran more than the smallest cap's batch: no cap makes a batch
    smaller, so no cut answers it (a slow host, a prefill beside the one sequence, a target below what one
    sequence gets)."""
    if base.reason != "slo-violation" or len(recent) < _window_ticks(cfg):
        return False
    return math.ceil(max(recent)) <= cfg.min_cap


def _unanswerable(state: LawState, base: Decision, memory: dict[str, Any]) -> Decision:
    """Hold the cap for a miss no cap answers (_one_at_a_time). Cut to the window's batch instead
    (_from_use), the demo's light phase took the cap 51 -> 1 at one sequence at a time, and the heavy phase
    then came back one step a tick, queueing behind a cap that bought no latency (TPOT the same as static
    64's). No replica: a replica does not make one sequence faster either; the fits go on learning, and a
    confident line that puts one sequence above the target gives the infeasible verdict."""
    detail = f"{base.detail}; held: no batch in the window was above the smallest cap, and no cap lowers that"
    wish: Literal[-1, 0, 1] = 0 if base.replica_wish == 1 else base.replica_wish
    return _decision(state, base, state.cap, "held-one-at-a-time", detail, wish, dict(memory))


def _standing(state: LawState, base: Decision, memory: dict[str, Any]) -> Decision:
    """The table would cut, and the last confident fit said the cap cannot reach the target; the fits are
    re-learning, or they find no cap that meets it: the verdict stands (no cut) until a confident fit finds
    one."""
    infeasible = state.verdict == "infeasible"
    detail = (
        "SLO infeasible on this hardware (the last confident fit); replicas do not help"
        if infeasible
        else "no engine lever reaches the SLO: replicas needed (the last confident fit)"
    ) + "; no cut while the fits re-learn"
    wish: Literal[-1, 0, 1] = 0 if infeasible else base.replica_wish
    return _decision(state, base, state.cap, str(state.verdict), detail, wish, dict(memory))


def _trusted(fit: LeverFit | None) -> int:
    """The largest cap the quantile line vouches for: TRUST x the largest batch it was measured at."""
    return math.floor(TRUST * (fit or LeverFit()).support)


def _support(fit: LeverFit | None) -> str:
    fit = fit or LeverFit()
    return f"batches up to {fit.support:.0f}, trusted to cap {_trusted(fit)}"


def _reach(state: LawState, memory: dict[str, Any], cfg: LawConfig, upper: int) -> int:
    """The highest cap a raise on the fit's word may take this tick: its trust region, or past it the rule
    table's bounded exploratory step from the current cap."""
    return max(_trusted(memory["quantile_fit"]), raise_cap(state.cap, upper, cfg))


def _held(state: LawState, obs: Observation, cfg: LawConfig) -> tuple[float, ...]:
    """What the engine holds (running + waiting) at each tick the window spans."""
    running, waiting = known(obs.running), known(obs.waiting)
    if running is None or waiting is None:
        return state.held_recent
    return (*state.held_recent, running + waiting)[-max(2, _window_ticks(cfg)) :]


def _arrivals(state: LawState, obs: Observation, held: tuple[float, ...], tick_s: float) -> float | None:
    """Requests per second reaching the engine, by conservation over the window: its completions plus the
    growth of what the engine holds, the queue and the running batch alike. Counted on the queue alone, a
    batch the cap had just cut, finishing without being replaced, read as arrivals: on the demo's CPU
    engine, seconds after the load had stopped, 8.5 req/s, and the queue side undid each cut the table
    made (a saw from 64 down to 1; tests/law/test_queue_floor.py). Before the window holds two ticks: the
    queue's growth alone, and unknown without it (the completions alone, on a first tick behind a draining
    backlog, raised a cap the per-token bound had to cut back one tick later)."""
    waiting, rate = known(obs.waiting), known(obs.request_rate)
    if waiting is None or rate is None:
        return None
    if len(held) >= 2:
        return max(rate + (held[-1] - held[0]) / ((len(held) - 1) * tick_s), 0.0)
    growth = growth_rate(state, obs.now_s, waiting, known(obs.queue_growth))
    return None if growth is None else max(rate + growth, 0.0)


def _prefill(obs: Observation) -> float:
    """A request's prefill time: its mean TTFT beyond its mean time queued (0 when either is unknown)."""
    ttft, queued_s = known(obs.ttft_mean_s), known(obs.queue_time_mean_s)
    return max(ttft - queued_s, 0.0) if ttft is not None and queued_s is not None else 0.0


class QueueModel(NamedTuple):
    """What the queue does at a cap c, from this tick: the arrivals, the backlog, and the service rate.
    With a usable mean-TPOT line, c / (prefill + out x tpot(c)) (governor.core.levers.queueing: within a few
    per cent of the H200 calibration's measured capacity); without one, what the engine completes now at its
    window's mean batch B, scaled by c / B, which understates a small cap's service where tokens get faster
    as the batch shrinks (the safe side: it refuses cuts, and raises one step at a time). Anchoring the
    line on today's completions instead was tried: below saturation they are the arrivals, not the
    capacity, and the floor it gave refused every cut on an engine whose throughput is flat in the batch.

    The line sets how a request's hold changes with the batch; its level is what the engine measured, the
    mean time its requests held a slot (`scale`: vLLM's request inference time over the model's hold at the
    window's batch). Out x the mean TPOT overstates that hold wherever the per-token time varies between
    requests (on prefill-heavy traffic the short outputs, stalled behind others' prefills, weigh in the
    mean TPOT and little in the time held) and wherever the line's level is off at today's batch (fitted
    through a burst, read at the lull after it). Past the batch the engine ran at, the measurement says
    nothing, so a level measured faster than the model's is not carried there."""

    arrivals: float  # req/s reaching the engine
    waiting: float
    rate: float  # completions per second now
    batch: float  # the window's mean running batch
    work: Workload | None  # None: scale the completions by c / B
    scale: float = 1.0  # the measured hold per request over the model's at the window's batch

    def service(self, cap: int) -> float:
        if self.work is None:
            return self.rate * cap / self.batch
        modelled = service_rate(cap, self.work)
        return modelled if self.scale < 1 and cap > self.batch else modelled / self.scale

    def carries(self, cap: int) -> bool:
        """The queue stays bounded at `cap`, with RELIEF_HEADROOM to spare. (Tried: the Erlang C wait
        quantile within the TTFT bound instead; the matrix's mean fell 0.885 -> 0.875, no cell class won.)"""
        return self.service(cap) >= self.arrivals * RELIEF_HEADROOM

    def late_ahead(self, cap: int, horizon_s: float, wait_bound_s: float) -> bool:
        """A request queued one horizon from now, behind today's backlog plus what the arrivals add beyond
        the service, would wait past `wait_bound_s` at `cap`."""
        return self.within_bound_s(cap, wait_bound_s) < horizon_s

    def room(self, cap: int, wait_bound_s: float) -> float:
        """Requests the queue may still take in at `cap` and have each wait within `wait_bound_s` (below 0:
        today's backlog already waits past it)."""
        return wait_bound_s * self.service(cap) - self.waiting

    def within_bound_s(self, cap: int, wait_bound_s: float, headroom: float = 1.0) -> float:
        """How long from now a request joining the queue still waits within `wait_bound_s` at `cap`, the
        arrivals (x `headroom`) adding to today's backlog what the service does not take (inf: for ever)."""
        service = self.service(cap)
        growth = max(self.arrivals * headroom - service, 0.0)
        room = self.room(cap, wait_bound_s)
        if growth <= 0:
            return math.inf if room >= 0 else 0.0
        return room / growth


def queue_model(state: LawState, obs: Observation, memory: LawState, tick_s: float) -> QueueModel | None:
    """This tick's queue model from the memory this tick decided with (its mean line, the window's running
    batch and holdings); None when nothing is known (no completions, no batch)."""
    recent, mean_fit = memory.running_recent, memory.mean_fit or LeverFit()
    arrivals = _arrivals(state, obs, memory.held_recent, tick_s)
    rate, waiting = known(obs.request_rate), known(obs.waiting)
    batch = sum(recent) / len(recent) if recent else 0.0
    if arrivals is None or rate is None or waiting is None or rate <= 0 or batch < 1:
        return None
    out = known(obs.output_tokens_mean)
    work = None
    if mean_fit.count >= 8 and out is not None and out > 0 and mean_fit.predict((batch,)).mean > 0:
        intercept, slope = mean_fit.line()
        work = Workload(arrivals, out, _prefill(obs), TpotLine(intercept, slope, mean_fit.trusted_low))
    held, modelled = known(obs.inference_time_mean_s), 0.0 if work is None else service_time_s(batch, work)
    if held is None or held <= 0 or modelled <= 0:  # unmeasured (an older vLLM, nothing finished): the line
        return QueueModel(arrivals, waiting, rate, batch, work)
    return QueueModel(arrivals, waiting, rate, batch, work, held / modelled)


def _wait_bound(obs: Observation, cfg: LawConfig) -> float | None:
    """How long a request may wait and still meet the TTFT bound: the bound less its prefill (the mean
    TTFT beyond the mean time queued)."""
    if cfg.ttft_bound_s is None:
        return None
    return max(cfg.ttft_bound_s - _prefill(obs), 0.0)


def _carry_the_queue(
    state: LawState, obs: Observation, cfg: LawConfig, base: Decision, chosen: Decision, plan: CapPlan | None
) -> Decision:
    """The goodput side of the trade, after the per-token side has chosen. A cap whose service falls short of
    the arrivals grows a queue that ends in every request missing its TTFT: no cut goes below the smallest cap
    that carries them and whose backlog, a window ahead, still waits within the TTFT bound (a cut must not
    undo the raise below: without this the real CPU engine's demo cut 16 -> 8, raised 8 -> 10 -> 12 for the
    queue, and cut 12 -> 6), or, where no cap meets both bounds, below the cap that keeps the most goodput
    (`_floor`). Where the backlog, one window ahead, would make a request wait past its TTFT bound behind a
    binding cap, the cap goes up a step at a time, within the per-token cap where a confident fit knows one
    (and its trust region); with none known and the per-token bound already missed at this cap (or held there
    on a queue without end), one step per episode, no further than the goodput it keeps, asking for replicas
    (no cap is known to meet both bounds). A backlog that the bound absorbs (a burst that ends) is left to
    queue: the per-token bound first."""
    decision, origin = _queue_side(state, obs, cfg, base, chosen, plan)
    if decision.state.queue_raised_from == origin:
        return decision
    return replace(decision, state=decision.state.model_copy(update={"queue_raised_from": origin}))


def _queue_side(
    state: LawState, obs: Observation, cfg: LawConfig, base: Decision, chosen: Decision, plan: CapPlan | None
) -> tuple[Decision, int | None]:
    """The decision, and the cap this queue episode's unguided raise started from (None: no episode)."""
    upper = mode_cap(chosen.mode, cfg)
    model = queue_model(state, obs, chosen.state, cfg.tick_s)
    if model is None:
        return chosen, None
    bound = _wait_bound(obs, cfg)

    floor, per_token, chosen, why = _floor(model, chosen, _meetable(plan), upper, bound, cfg)
    current = max(chosen.cap, state.cap)
    late = model.late_ahead(current, cfg.window_s, bound) if bound is not None else floor > current
    origin = state.queue_raised_from if late else None
    missed = (base.state.p99_smoothed or 0.0) > cfg.band_high * cfg.slo_target_s
    # The queue measurably grows at this cap (the table's growth count) and holds more than a batch, or
    # already what the cap's service drains within the wait bound (a slow engine's queue is late long
    # before it outnumbers the batch): the cap, not a raise, is what falls short. Only against a TTFT
    # bound: without one the SLO is the per-token bound alone, and the queue the replicas'. Counted in
    # slots alone, the twin's H200 8B medium 2x step held cap 126 in its band for 45 s while 85-119
    # requests (2.5-3.4 s of its service) waited; counted in time too, the matrix (four draws, served
    # cells) moved 0.939 / 0.942 / 0.939 / 0.926 -> 0.944 / 0.942 / 0.940 / 0.930, that cell 0.69 -> 0.94,
    # no cell down by more than 0.01.
    backlog = bound is not None and (model.waiting > current or model.room(current, bound) < 0)
    counted = backlog and base.state.growth_ticks >= cfg.queue_growth_ticks
    # ... or, with the per-token bound already missed at this cap, the queue stands where the mean line's
    # service falls short of the arrivals: it has no end there either, though its growth, swinging with the
    # arrivals, never counts up.
    stands = backlog and not counted and missed and model.work is not None and not model.carries(current)
    grows = counted or stands
    chosen, probed = _probe(state, obs, cfg, base, chosen, plan, model, floor, per_token, bound, upper)
    if probed:
        return chosen, origin
    # Without a usable mean line the floor's service is the completions scaled by cap / batch, a measure of
    # capacity only where the engine keeps step with its arrivals. One still filling (the cap holds nothing
    # back, and it completes less than the arrivals by the floor's headroom: they go into its batch) says
    # nothing of what a smaller cap serves, so that floor holds no cut: the twin's 70B-shape medium bursts
    # kept 256 through its first burst on "no cap up to it carries the arrivals (1.18 req/s served there,
    # 5.25 arriving)" with 3 waiting. Matrix (four draws, served cells): mean 0.944 / 0.942 / 0.940 / 0.930
    # -> 0.947 / 0.945 / 0.944 / 0.939, worst 0.425 -> 0.442 and 0.367 -> 0.640 on draws 2-3; that cell
    # 0.80 -> 0.92, 0.74 -> 0.86, 0.78 -> 0.82, 0.78 -> 0.74. Without the filling test (any engine the cap
    # does not hold back), the CPU medium steady and prefill-heavy cells lost 0.06-0.09 to first-tick cuts.
    filling = (
        model.work is None
        and not _held_back(state, obs, cfg)
        and model.rate * RELIEF_HEADROOM < model.arrivals
    )
    if chosen.cap < state.cap and chosen.cap < floor and not filling:  # a cut, held at the floor
        # Where no per-token cap is known the cut is not made at all (it would trade TTFT for a bound still
        # missed). Where the line knows one and the floor gave it up for the cap that keeps the most goodput,
        # the line's own cut goes to that floor once no queue waits: held where it stood, a cut landing
        # just under the floor changed nothing (the twin's 70B-shape tight 2x step, draw 0: 31 -> 15 against
        # a floor of 16, cap 31 held for 45 s). With a queue waiting it holds, and the backlog drains at the
        # larger cap first (cut to the floor then, the twin's 8B medium 2x step sawed between the floor and
        # the raise for the queue).
        given_up = per_token is None and _meetable(plan) is not None
        to_floor = given_up and chosen.reason.startswith("model-") and model.waiting < cfg.queue_min
        cap = min(state.cap, floor) if per_token is not None or to_floor else state.cap
        detail = f"no cut below {floor}, {why}; {chosen.detail}"
        held = _decision(state, base, cap, "queue-floor", detail, chosen.replica_wish, _kept(chosen, cap))
        if not (late and grows and state.cap < floor):
            return held, origin
        # The cap already stands below the floor, and the queue behind it grows and will wait past the
        # TTFT bound: a hold would leave it there, so the raise below answers. (Before, the per-token
        # miss's cut, held here, kept that raise from running: on the twin's CPU medium 2x step, draw 1,
        # the step's cut 32 -> 25 left a backlog of 24-109 behind cap 25 for 145 s, the floor at 32.)
        chosen = held
    if not (late and current < upper and _held_back(state, obs, cfg)):
        return chosen, origin
    # A miss within a window of a raise is that raise's own doing; a raise with no miss after it is no
    # reason to leave a queue without end be (held so, the twin's H200 8B medium 2x step, draw 1, raised
    # to 117 on the model and then sat in its band for a window while the queue grew 129 -> 254: 0.80 x the
    # best static within both bounds; 1.23 answered at once).
    own_doing = missed and state.raised_s is not None and obs.now_s - state.raised_s < cfg.window_s
    # ... and this cap's service falls short of the arrivals: the queue has no end here, and holding the
    # per-token bound only makes every request miss TTFT.
    endless = grows and model.service(current) < model.arrivals
    if per_token is None and (
        (not missed and not endless) or own_doing or (origin is not None and current > origin and not grows)
    ):
        # The per-token bound holds now and no fit says how far it would (per-token first), while the queue
        # at this cap would end (held there on a queue without end, the twin's H200 8B medium bursts scored
        # 0.86 x the best static within both bounds; given up there, 1.03); or the miss
        # follows a raise within a window, the raise's own doing (H200, 20 ms: raises 64 -> 99 as a burst
        # began, the miss they caused, then this step to 123: attainment 0.86 against 1.00); or this
        # episode's one step for the queue is taken, its miss may be that step's own doing, and the queue
        # no longer grows.
        return chosen, origin
    # A step at a time, the table's cut undone (x 1/decrease_factor), within what the quantile line was
    # measured at: the per-token cap of a line fitted at small batches is extrapolation (on the H200 at
    # 12 ms a relief to "the per-token cap (118)" from 41 cost a third of the requests).
    step = max(current + 1, math.floor(current / cfg.decrease_factor))
    if per_token is not None:
        cap = min(upper, step, per_token, max(_trusted(chosen.state.quantile_fit), current))
        if cap <= current:
            return chosen, origin  # the queue is the replicas' now (the table's TTFT hand-off asks)
        detail = f"{_why_late(bound)} behind a binding cap: raised within the per-token cap ({per_token})"
        return _decision(
            state, base, cap, "queue-relief", detail, chosen.replica_wish, _kept(chosen, cap)
        ), origin
    # A growing queue gets the smallest cap that carries it in one move (a chain of x1.25 steps a window
    # apart left 5,000 requests queued on the twin's H200 bursts); otherwise one step.
    cap = min(upper, max(step, floor) if grows else step)
    if bound is not None:  # no further than the goodput it keeps: past it, tokens too slow to count
        cap = _most_goodput(_goodput_at(model, chosen.state.quantile_fit, bound, cfg), current, cap)
        if cap <= current:
            detail = (
                f"{chosen.detail}; {_why_late(bound)}, but no raise keeps more requests within both bounds "
                "(the TTFT bound given up here); replicas needed"
            )
            return replace(chosen, detail=detail, replica_wish=1), origin
    if stands:  # a queue the model, not its growth, says has no end: the raise stays within the evidence
        cap = min(cap, max(current, _trusted(chosen.state.quantile_fit)))
        if cap <= current:
            return chosen, origin
    per_token_side = (
        "the per-token bound is missed at this cap too"
        if missed
        else f"the queue has no end at this cap ({model.service(current):.3g} req/s served, "
        f"{model.arrivals:.3g} arriving)"
    )
    detail = (
        f"{_why_late(bound)} behind a binding cap, and {per_token_side}: raised to {cap} for the queue "
        "(the per-token bound given up); no cap is known to meet both, replicas needed"
    )
    update = _kept(chosen, cap)
    if state.probe_from is not None:  # the raise ends a probe under way: a later one leaves from here
        update.update(probe_from=None, probe_s=None)
    return _decision(
        state, base, cap, "queue-relief", detail, 1, update
    ), current if origin is None else origin


def _floor(
    model: QueueModel,
    chosen: Decision,
    per_token: int | None,
    upper: int,
    bound: float | None,
    cfg: LawConfig,
) -> tuple[int, int | None, Decision, str]:
    """The smallest cap a cut may take (the queue floor), the per-token cap still held (None: given up or
    unknown), the decision, told when the TTFT bound is the one given up, and what the floor is, for the
    detail of a cut it holds."""

    found = _carrying(model, upper, bound, cfg)
    carry = upper if found is None else found
    if per_token is None or per_token >= carry:
        if found is None:  # the floor is the mode's limit, and no cap is claimed to carry the arrivals
            why = (
                f"the limit: no cap up to it carries the arrivals ({model.service(upper):.3g} req/s served "
                f"there, {model.arrivals:.3g} arriving)"
            )
            return carry, per_token, chosen, why
        return carry, per_token, chosen, "the smallest cap that carries the arrivals"
    if bound is None or not model.late_ahead(per_token, cfg.window_s, bound):
        # The per-token bound first: its backlog, a window ahead, waits within the TTFT bound, or the SLO
        # has no TTFT bound (its queue is the replicas' to answer).
        why = (
            "the per-token cap (no TTFT bound: the queue is the replicas')"
            if bound is None
            else "the per-token cap, whose backlog waits within the TTFT bound a window ahead"
        )
        return per_token, per_token, chosen, why
    # No cap meets both: the per-token cap grows the queue until every TTFT is a miss, and the cap that
    # carries the arrivals may make every request's tokens too slow; a request that misses either counts
    # for nothing. The bound given up is the one whose loss keeps more requests within both over the next
    # window. Giving up the per-token bound always: the twin's 70B-shape tight 2x step at 0.34 x static 16,
    # which holds that bound and lets a 22 s TTFT bound absorb the queue; holding it always: the H200 8B
    # tight bursts at 0.05 x static 256 (0.88 given up).
    goodput = _goodput_at(model, chosen.state.quantile_fit, bound, cfg)
    floor = _most_goodput(goodput, per_token, carry)
    if goodput is None or floor > per_token:  # the per-token bound given up
        return floor, None, chosen, "the cap that keeps the most requests within both bounds"
    detail = (
        f"{chosen.detail}; no cap meets both bounds, and the TTFT bound is the one given up: cap {per_token} "
        f"keeps {goodput(per_token):.3g} req/s within both, cap {carry} {goodput(carry):.3g}; replicas "
        "needed"
    )
    return per_token, per_token, replace(chosen, detail=detail, replica_wish=1), "the per-token cap"


def _probe(
    state: LawState,
    obs: Observation,
    cfg: LawConfig,
    base: Decision,
    chosen: Decision,
    plan: CapPlan | None,
    model: QueueModel,
    floor: int,
    per_token: int | None,
    bound: float | None,
    upper: int,
) -> tuple[Decision, bool]:
    """A probe below the queue floor or the raise that ends one (True: the decision), else `chosen` with
    the probe's memory brought up to date (False: the queue side goes on).

    The floor reads a small cap's service on the safe side (below the batches the mean line was measured at, a
    request's tokens are taken as slow as there), so where the per-token plan can give no verdict until the
    line is measured at smaller batches (`explore_down`, or an aim under the smallest cap), refusing every cut
    below the floor kept the law from ever measuring them: the twin's 70B-shape medium prefill-heavy cell held
    cap 8 for 200 s at 0.44 x static 4's goodput. With a TTFT bound, a cut the table makes may go one step (x
    decrease_factor) below the floor when the backlog there, at the model's pessimistic service, still waits
    within the bound a window ahead; a window later, if no confident fit names a cap and the floor measured
    meanwhile still stands above the probed cap, the cap goes back to the floor (at most where the probe left,
    unless the table asks for more), and no other probe follows until a confident fit names a cap (without
    that, a fluid engine whose line is truly linear below a 6 ms target sawed between the floor and the probe
    a window apart: tests/law/test_queue_floor.py). Twin matrix, served cells (docs/measurements.md): mean
    0.918 -> 0.923 on draw 0 (the 8B medium prefill-heavy 1.01 -> 1.19, the 8B tight long tail 1.03 -> 0.96),
    0.934 -> 0.935 on draw 1, the worst cell unchanged on both; a probe as deep as the table's cut (x 0.5):
    worst 0.415 -> 0.380.

    A probe whose window shows the engine carrying the arrivals with the floor's headroom (`_carried`) keeps
    its cap, whatever the floor says, and the next probe leaves from it: on prefill-heavy traffic a lower cap
    queues the prefills that stall everyone's tokens, so the engine carries at caps the line in the batch puts
    under the floor (the twin's 8B loose prefill-heavy cell, where static 8 serves 99 % of the requests within
    both bounds, held cap 16-17 with the floor at 16-18)."""
    carried = ""
    if state.probe_from is not None and (
        per_token is not None or obs.now_s - (state.probe_s or 0.0) >= cfg.window_s
    ):
        ended: dict[str, Any] = {"probe_from": None, "probe_s": None}
        if per_token is None and _carried(obs, cfg, base, model.batch, state.cap):
            # The engine carried the arrivals at the probed cap through its window, whatever the model's
            # floor says: the cap stays, and the next probe may go on from it.
            carried = f"the probe at cap {state.cap} carried the arrivals through its window; "
            chosen = replace(chosen, detail=carried + chosen.detail)
        elif per_token is None and floor > state.cap:  # a raise the table wants goes no lower than the floor
            cap = max(chosen.cap, min(floor, state.probe_from, upper))
            detail = (
                "the probe below the queue floor ends: no fit names a cap that meets the target, and the "
                f"floor measured at cap {state.cap} is {floor}; back to {cap}"
            )
            update = {**_kept(chosen, cap), **ended, "probe_failed": state.cap}
            return _decision(state, base, cap, "probe-back", detail, chosen.replica_wish, update), True
        chosen = replace(chosen, state=chosen.state.model_copy(update=ended))
    if per_token is not None:  # a confident fit names a cap: the episode is over
        if chosen.state.probe_failed is not None:
            chosen = replace(chosen, state=chosen.state.model_copy(update={"probe_failed": None}))
        return chosen, False
    explores = plan is not None and (plan.explore_down or plan.reason == "at-min-cap")
    if bound is None or plan is None or not explores or state.probe_failed is not None:
        return chosen, False
    cap = max(chosen.cap, math.floor(state.cap * cfg.decrease_factor))
    if cap >= min(state.cap, floor) or model.late_ahead(cap, cfg.window_s, bound):
        return chosen, False
    detail = (
        f"{carried}a probe below the queue floor ({floor}) for one window: {plan.detail}; the backlog at the "
        "probed cap still waits within the TTFT bound a window ahead"
    )
    # A probe that follows one that held, on the same tick, leaves from where that one held.
    update = {**_kept(chosen, cap), "probe_from": chosen.state.probe_from or state.cap, "probe_s": obs.now_s}
    return _decision(state, base, cap, "probe", detail, chosen.replica_wish, update), True


def _carried(obs: Observation, cfg: LawConfig, base: Decision, busy: float, cap: int) -> bool:
    """The window just run at `cap` shows the engine carrying its arrivals with the floor's headroom: the
    TTFT P99 within its bound, the queue's growth not counted (rule 9), and the window's busy slots (the queue
    model's mean running batch, by Little's law the arrivals times the time a request holds a slot) at least
    RELIEF_HEADROOM under the cap, as the floor asks of the modelled service. Without the headroom, a
    probe whose batch settled at 25.6 under cap 28 was kept, and a load a sixth higher then grew its queue
    for three minutes before the TTFT bound told (tests/law/test_queue_floor.py)."""
    ttft = known(obs.ttft_p99_s)
    return (
        cfg.ttft_bound_s is not None
        and ttft is not None
        and ttft <= cfg.ttft_bound_s
        and base.state.growth_ticks < cfg.queue_growth_ticks
        and RELIEF_HEADROOM * busy <= cap
    )


def _carrying(model: QueueModel, upper: int, bound: float | None, cfg: LawConfig) -> int | None:
    """The smallest cap up to `upper` that carries the arrivals and whose backlog, a window ahead, waits
    within the bound (None when none does)."""

    def holds(c: int) -> bool:
        return model.carries(c) and (bound is None or not model.late_ahead(c, cfg.window_s, bound))

    return next((c for c in range(1, upper + 1) if holds(c)), None)


def _outlook(
    state: LawState, obs: Observation, cfg: LawConfig, decision: Decision, plan: CapPlan | None
) -> Outlook:
    """What the models say at this tick, for the operator's series and log: the per-token cap, the queue
    floor, the arrivals and the modelled service at the cap decided."""
    model = queue_model(state, obs, decision.state, cfg.tick_s)
    fit = decision.state.step_fit
    step_costs = None if fit is None or obs.step_rates is None else fit.costs()  # blind: it says nothing
    if model is None:
        return Outlook(per_token_cap=_meetable(plan), step_costs=step_costs)
    return Outlook(
        per_token_cap=_meetable(plan),
        queue_floor=_carrying(model, mode_cap(decision.mode, cfg), _wait_bound(obs, cfg), cfg),
        arrivals_rps=model.arrivals,
        service_rps=model.service(decision.cap),
        step_costs=step_costs,
    )


def _share_within(target_s: float, mean_s: float, upper_s: float, quantile: float) -> float:
    """Share of requests whose own per-token time is within `target_s`, for a lognormal spread with this
    mean and this value at `quantile` (the SLO's). Lines that say nothing (not finite) vouch for no
    request: every cap then scores 0, and the tie goes to the cap that keeps the TTFT bound."""
    if not (math.isfinite(mean_s) and math.isfinite(upper_s)):
        return 0.0
    z = NormalDist().inv_cdf(quantile)
    spread = z * z - 2.0 * math.log(upper_s / mean_s) if mean_s > 0 and upper_s > mean_s else z * z
    sigma = z - math.sqrt(max(spread, 0.0))
    if mean_s <= 0 or sigma <= 0:  # no spread (or none that can be told): every request at the mean
        return 1.0 if target_s >= mean_s else 0.0
    if spread <= 0:  # a tail too far above the mean for any lognormal: none is vouched for
        return 0.0
    return NormalDist(math.log(mean_s) - sigma * sigma / 2.0, sigma).cdf(math.log(target_s))


def _goodput_at(
    model: QueueModel, fit: LeverFit | None, bound: float, cfg: LawConfig
) -> Callable[[int], float] | None:
    """Requests per second meeting both bounds at a cap over the next window (the span the fits answer
    for; the law decides again after it): the cap's service, counted only while the queue's wait stays
    within the TTFT bound (the arrivals with the headroom `carries` asks), times the share of requests
    whose own tokens meet the target there (mean line and quantile line). None without both lines."""
    work = model.work
    if work is None or fit is None or fit.count == 0:
        return None

    def goodput(cap: int) -> float:
        lasts = model.within_bound_s(cap, bound, RELIEF_HEADROOM)
        upper = fit.predict((float(cap),)).mean
        share = _share_within(cfg.slo_target_s, work.tpot.at(cap), upper, cfg.quantile)
        return min(model.arrivals, model.service(cap)) * share * min(max(lasts / cfg.window_s, 0.0), 1.0)

    return goodput


def _most_goodput(goodput: Callable[[int], float] | None, low: int, high: int) -> int:
    """The cap in [low, high] that keeps the most goodput (the larger on a tie); `high` when unknown."""
    return high if goodput is None else max(range(low, high + 1), key=lambda c: (goodput(c), c))


def _why_late(bound: float | None) -> str:
    if bound is None:  # no TTFT bound: the queue is late when the arrivals outgrow the cap's service
        return "the arrivals outgrow what the cap serves"
    return "the queue would hold requests past their TTFT bound"


def _meetable(plan: CapPlan | None) -> int | None:
    """The per-token cap when a confident fit finds one that meets the target; None when none is known."""
    if plan is None or plan.cap is None or plan.reason in ("unconfident", "at-min-cap", "infeasible"):
        return None
    return plan.cap


def _held_back(state: LawState, obs: Observation, cfg: LawConfig) -> bool:
    """A queue waits and the cap binds: the cap is what holds requests back."""
    running, waiting = known(obs.running), known(obs.waiting)
    return queued(waiting, cfg) and binding(state.cap, running, waiting, cfg)


def _kept(chosen: Decision, cap: int) -> dict[str, Any]:
    """The chosen decision's memory (fits, verdict), with the cap the queue overrode it to."""
    return {**{name: getattr(chosen.state, name) for name in type(chosen.state).model_fields}, "cap": cap}


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
    if violating and _held_back(state, obs, cfg):
        cap = max(cap, min(upper, math.ceil(state.cap * MAX_RAISE), _reach(state, memory, cfg, upper)))
    pressure = state.pressure_ticks + 1 if violating else 0
    wish: Literal[-1, 0, 1] = 1 if pressure >= cfg.replica_after_ticks else base.replica_wish
    detail = f"the cap does not move the per-token latency ({plan.detail})"
    if violating:
        detail = f"no engine lever reaches the SLO: replicas needed; {detail}"
    update = {**memory, "cap": cap, "pressure_ticks": 0 if wish == 1 else pressure, "verdict": "lever-inert"}
    return _decision(state, base, cap, "lever-inert", detail, wish, update)


def _computed(
    state: LawState,
    obs: Observation,
    base: Decision,
    used: Decision,
    plan: CapPlan,
    memory: dict[str, Any],
    cfg: LawConfig,
) -> Decision:
    """The table's direction, the model's distance: a cut for a miss goes in one move to the per-token cap
    (not a chain of x0.8), a raise with headroom goes up to it (at most doubling). Only where the table
    itself moves: its guards (cooldown, queue growth, binding, confirmation) still decide *whether*. `used`:
    the table's cut taken from the batch in use (`_from_use`; `base` itself when that changes nothing)."""
    assert plan.cap is not None
    cap, detail = base.cap, plan.detail
    if base.reason == "slo-violation" and plan.cap < base.cap:
        # No deeper than the table's strongest cut: a line fitted on lagging windows can overstate the slope.
        cap = max(cfg.min_cap, plan.cap, math.floor(state.cap * cfg.strongest_decrease))
        # ... and no higher than the batch in use: a cut that stays above every batch of the window binds
        # nothing for a cooldown (the CPU engine's reaction run: 64 -> 32 with 13 running, then 16, then
        # 8, one cooldown each, where the line put the per-token cap at 5-6). Only on a plan that meets
        # both bounds: the others' caps answer the queue too.
        if used is not base and plan.reason == "meets-both":
            cap = min(cap, used.cap)
            detail = f"{detail}; from the batch in use ({used.cap}): the cap above it bound nothing"
    elif base.reason == "headroom":
        # Up to the model's cap in one move, and never past it: the table's raise reads a P99 that lags. Past
        # the fit's trust region only as far as the table's own step goes.
        reach = max(_trusted(memory["quantile_fit"]), base.cap)
        cap = max(
            state.cap, min(plan.cap, math.floor(state.cap * MAX_RAISE), mode_cap(base.mode, cfg), reach)
        )
        if reach < min(plan.cap, mode_cap(base.mode, cfg)) and cap == reach:
            support = _support(memory["quantile_fit"])
            detail = f"{plan.detail}; raised within what the line was measured at ({support})"
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
    if base.cap < state.cap <= cap:  # the table's cut was vetoed: none of its cut memory applies, even
        # where `update` copies the chosen decision's memory (the queue floor's `_kept`)
        update.update(cooldown_until_s=state.cooldown_until_s, cut_s=state.cut_s, cut_p99=state.cut_p99)
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
