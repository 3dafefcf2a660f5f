"""The second lever, in the levers law: the per-step token budget (vLLM's max_num_batched_tokens, which the
runtime moves live beside the cap).

Why it is a lever: a prefill chunk shares its step with every running decode, so the step, and the gap between
two tokens of every decode in it, grows with the chunk. The budget bounds that stall and pays in TTFT: a
prompt of P tokens needs ceil(P / budget) steps to prefill. Measured (DESIGN.md, "The second lever"; GPU
report section 3e): on the demo's CPU engine with a few long prompts among short chats, budget 2048 -> 256
took the inter-token P99 from ~340 to ~77 ms while the cap could not; on the H200 at cap 64 with 10 % prompts
of 6-8k tokens, 8192 -> 512 took it from 167 to 21 ms and the TPOT P99 from 25 to 17 ms, TTFT P99 0.49 ->
0.77 s. Where prompts are short the budget binds no step and moves nothing.

In one paragraph: the law keeps a line of the governed per-token quantile in the budget (the same online fit
as the cap's, fed only with windows that saw one budget). The budget moves only while a per-token SLO is
missed (its band lies around the aim, plan_margin x target, so it rests under the target) and the cap does
not answer it: the cap holds, its model says it does not move the signal or cannot reach the target (its
verdict), the queue holds the cap up, or the cap is at its floor. Then a confident line with a
real slope sets the budget in one move to the largest budget whose predicted quantile (upper confidence side)
is under the aim, margin x target; a line that cannot tell yet gets one halving per window (the spread that
makes it confident); a line confidently flat says the budget is not the lever either: it goes back to the
engine's own and the verdict says no engine lever reaches the SLO. Never below what lets the window's P95
prompt prefill within the TTFT bound, nor below what the running batch needs. With the per-token signal
comfortable, or the TTFT bound missed, it goes back up (doubling, as far as a confident line allows): there it
costs TTFT and buys nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from governor.core.law.derive import known
from governor.core.law.model import Decision, LawConfig, LawState, Observation
from governor.core.levers.fit import LeverFit
from governor.core.levers.plan import PlanSettings
from governor.core.signals import LatencyKind

# The smallest budget the law sets, and the share of a step left to prefill: every running decode takes one
# token of the step, so a budget of 2 x cap still advances a prompt by at least as much as the batch decodes.
# 256 is the smallest budget measured to keep the CPU engine's throughput (DESIGN.md); on the H200, 512.
MIN_BUDGET = 256
DECODE_SHARE = 2
# Largest cut of the budget in one move on the line's word: a line fitted between two budgets is
# extrapolation further down (the stall is linear in the chunk only while long prompts fill every chunk).
MAX_CUT = 4
# Spread of the budgets the line was measured at, as a share of the ceiling, below which its slope is a guess.
MIN_SPREAD = 0.05
# How long the P99 stays comfortable before the budget of the last miss is forgotten and raises double again:
# a minute, in seconds, not ticks (counted as the table's 12 idle ticks, 24 s at the H200's 2-s tick: GPU
# report 3n, run 2, 1362 -> 2724 after 24 s below the band, P99 back to 88 ms).
FORGET_MISS_S = 60.0
# Reasons (the cap side's) that say the cap cannot answer the miss.
_CAP_STUCK = ("lever-inert", "infeasible")
_CAP_WAITS = ("queue-floor", "budget-first")
_MEMORY = ("budget", "budget_ceiling", "budget_fit", "budget_moved_s", "budget_verdict", "budget_missed")


def budget_floor(cap: int, ceiling: int) -> int:
    return min(ceiling, max(MIN_BUDGET, DECODE_SHARE * cap))


def ttft_floor(obs: Observation, cfg: LawConfig) -> int | None:
    """The smallest budget at which the window's P95 prompt still prefills within the TTFT bound: ceil(P / B)
    steps of about the mean decode gap each, after the mean time queued. None when nothing bounds it."""
    prompt, step, waited = known(obs.prompt_p95), known(obs.tpot_mean_s), known(obs.queue_time_mean_s)
    if cfg.ttft_bound_s is None or prompt is None or step is None or step <= 0:
        return None
    allowance = cfg.ttft_bound_s - (waited or 0.0)
    if allowance <= step:
        return math.ceil(prompt)  # no room to chunk at all: a prompt must go in one step
    return math.ceil(prompt / math.floor(allowance / step))


def _chunk(budget: float, obs: Observation) -> float:
    """The largest prefill chunk a step takes at `budget`: the budget, or the long prompts' size (the window's
    P95 prompt) where they are smaller. A budget above every prompt binds nothing, so the line is fitted in
    this chunk, not in the budget itself."""
    prompt = known(obs.prompt_p95)
    return min(budget, prompt) if prompt is not None and prompt >= 1 else budget


def _lowest(obs: Observation, cfg: LawConfig, cap: int, ceiling: int) -> int:
    return max(budget_floor(cap, ceiling), ttft_floor(obs, cfg) or 0)


def _ceiling(state: LawState, reported: int) -> int:
    """The engine's own budget: what it reports while the law holds none (a restart with another
    --max-num-batched-tokens is followed), else the largest it reported (it then reports the law's)."""
    return reported if state.budget is None else max(state.budget_ceiling or reported, reported)


def budget_left(state: LawState, obs: Observation, cfg: LawConfig, cap: int) -> bool:
    """The token budget may still answer a per-token miss at `cap`: it is known, has not been judged (this
    episode) not to reach the SLO, and its chunk can still go down."""
    budget = known(obs.token_budget)
    if budget is None or cfg.latency_kind is not LatencyKind.INTER_TOKEN or state.budget_verdict is not None:
        return False
    ceiling = _ceiling(state, int(budget))
    held = state.budget if state.budget is not None else int(budget)
    return _chunk(held, obs) > _lowest(obs, cfg, cap, ceiling)


def with_budget(state: LawState, obs: Observation, cfg: LawConfig, chosen: Decision) -> Decision:
    """`chosen` (the cap side's decision) with the budget to hold beside its cap."""
    budget = known(obs.token_budget)
    # The inter-token SLO's lever. For TPOT it was tried where the cap is stuck (its verdict, its floor) and
    # at a queue-held cap: the matrix's median fell 0.96 -> 0.93 (prefill-heavy cells 0.96 -> 0.86, where
    # every prompt is long and a smaller chunk slows every prefill), so a TPOT SLO keeps the cap alone.
    kind_ok = cfg.latency_kind is LatencyKind.INTER_TOKEN
    # The rule table builds its state afresh: the budget's memory is carried over from the last tick's.
    kept = {name: getattr(state, name) for name in _MEMORY}
    if budget is None or budget < 1:
        return _hold(state, chosen, kept)
    held = int(budget)
    ceiling = _ceiling(state, held)
    settled = state.budget_moved_s is None or obs.now_s - state.budget_moved_s >= cfg.window_s
    fit = state.budget_fit or LeverFit()
    if kind_ok and settled and (state.budget is None or state.budget == held):
        fit = fit.update((_chunk(held, obs),), known(obs.p99_s))
    memory: dict[str, Any] = {**kept, "budget_ceiling": ceiling, "budget_fit": fit}
    floor = budget_floor(chosen.cap, ceiling)
    if not kind_ok and state.budget is not None and state.budget < ceiling:
        # The SLO no longer asks for the budget (its kind was changed): the engine's own comes back.
        detail = f"the SLO is not inter-token: token budget {state.budget} -> {ceiling}"
        return _move(obs, chosen, memory, ceiling, "budget-raise", detail)
    if not kind_ok or known(obs.p99_s) is None:
        return _hold(state, chosen, memory, floor)
    smoothed = chosen.state.p99_smoothed or 0.0
    low, high = _band(cfg)
    missed = smoothed > high
    # The budget answers its own miss while the cap holds: its band lies under the cap's (below).
    stuck = chosen.cap == state.cap or (
        chosen.cap > state.cap
        and (chosen.state.verdict in _CAP_STUCK or chosen.reason in _CAP_WAITS or state.cap <= cfg.min_cap)
    )
    if not (missed and stuck):
        memory["budget_verdict"] = None
    current = state.budget if state.budget is not None else held
    if not settled:
        return _hold(state, chosen, memory, floor)
    if missed and stuck:
        # The floor is where the budget waits for its line, not a verdict: at the floor the line keeps
        # learning, and once it is confidently flat the budget goes back (a floor verdict that stuck kept a
        # budget of 256 that bought nothing, TTFT paying for it, when the explorations came a window apart).
        # The give-back tests an inert verdict: its window, fed to the line, makes the line rise with the
        # budget where the verdict was wrong, and then the budget answers again (H200, GPU report 3n: a line
        # flattened by the first windows of the load, a verdict at 1593, the give-back to 8192 took the
        # inter-token P99 from 56 to 242 ms; a cap cut cleared that verdict there, but beside a cap verdict
        # nothing else would have, and the budget stayed at 8192).
        if state.budget_verdict == "budget-inert" and _rises(fit, ceiling):
            memory["budget_verdict"] = None
        elif state.budget_verdict not in (None, "budget-floor"):
            return _hold(state, chosen, memory, floor)
        return _cut(_Tick(state, obs, cfg, chosen, memory, current, ceiling, floor))
    ttft_missed = (
        cfg.ttft_bound_s is not None and (known(obs.ttft_p99_s) or 0.0) > cfg.ttft_bound_s and not missed
    )
    comfortable = smoothed < low
    if current < ceiling and (comfortable or ttft_missed):
        tick = _Tick(state, obs, cfg, chosen, memory, current, ceiling, floor)
        return _raise(tick, ttft_missed)
    return _hold(state, chosen, memory, floor)


def _band(cfg: LawConfig) -> tuple[float, float]:
    """The budget's hold band: the rule table's, around the aim (plan_margin x target), not around the
    target, so the P99 the budget settles at is under the SLO. Around the target (H200, GPU report 3n) the
    budget held 1622 for two minutes at a P99 of 50-55 ms against 50, the engine-side P99 settled at a
    median of 48.5 ms, and half the client's 10-s windows missed where a static budget met them all."""
    aim = _aim(cfg)
    return cfg.band_low * aim, cfg.band_high * aim


def _aim(cfg: LawConfig) -> float:
    """Where the budget puts the quantile: plan_margin x the target, as the cap's model does."""
    return cfg.plan_margin * cfg.slo_target_s


def _line(fit: LeverFit, ceiling: int) -> tuple[bool, float, float]:
    """(confident?, slope per token, its standard error) of the quantile's line in the budget."""
    conf = fit.confidence()
    settings = PlanSettings()
    confident = conf.effective_samples >= settings.min_samples and conf.excitation >= MIN_SPREAD * ceiling
    return confident and math.isfinite(conf.slope_stderr), conf.slope, conf.slope_stderr


def _rises(fit: LeverFit, ceiling: int) -> bool:
    """The line is confident and rises with the budget beyond its noise: the budget moves the signal."""
    confident, slope, stderr = _line(fit, ceiling)
    return confident and slope > PlanSettings().significance_t * stderr


def _meets(fit: LeverFit, obs: Observation, cfg: LawConfig, low: int, high: int) -> int | None:
    """The largest budget in [low, high] whose predicted quantile, upper confidence side, is under the aim."""
    z, aim = PlanSettings().confidence_z, _aim(cfg)

    def ok(b: int) -> bool:
        mean, stderr = fit.predict((_chunk(b, obs),))
        return mean + z * stderr <= aim

    if not ok(low):
        return None
    while low < high:  # the line rises with the budget: bisect for the last budget that meets the aim
        mid = (low + high + 1) // 2
        low, high = (mid, high) if ok(mid) else (low, mid - 1)
    return low


@dataclass(frozen=True)
class _Tick:
    """One tick's inputs to a budget move: the cap side's decision, the memory it will carry, and the budget
    held now, its ceiling and the batch's floor."""

    state: LawState
    obs: Observation
    cfg: LawConfig
    chosen: Decision
    memory: dict[str, Any]
    current: int
    ceiling: int
    floor: int


def _cut(t: _Tick) -> Decision:
    state, obs, cfg, chosen, memory = t.state, t.obs, t.cfg, t.chosen, t.memory
    current, ceiling, floor = t.current, t.ceiling, t.floor
    fit: LeverFit = memory["budget_fit"]
    lowest = _lowest(obs, cfg, chosen.cap, ceiling)
    chunk = int(_chunk(current, obs))
    confident, slope, stderr = _line(fit, ceiling)
    settings = PlanSettings()
    if confident and (slope + settings.confidence_z * stderr) * max(chunk - lowest, 0) < (
        settings.inert_fraction * cfg.slo_target_s
    ):
        memory["budget_verdict"] = "budget-inert"
        detail = (
            "no engine lever reaches the SLO: replicas needed; the token budget does not move the per-token "
            f"latency either (slope {slope * 1e6:.2f} us per token): back to {ceiling}"
        )
        return _move(obs, chosen, memory, ceiling, "budget-inert", detail)
    if chunk <= lowest:
        memory["budget_verdict"] = "budget-floor"
        detail = f"the token budget is at its floor ({lowest}: the batch and the TTFT bound); {chosen.detail}"
        return _hold(state, chosen, memory, floor, detail)
    if _rises(fit, ceiling):
        target = _meets(fit, obs, cfg, lowest, chunk) or lowest
        budget = max(target, math.ceil(chunk / MAX_CUT), lowest)
        meets = target == budget and _meets(fit, obs, cfg, budget, budget) is not None
        reach = "meets the aim" if meets else "its lowest"
        detail = (
            f"the cap cannot answer the per-token miss ({chosen.reason}); the token budget's line "
            f"({slope * 1e6:.2f} us per token) puts {budget} at {reach}"
        )
        memory["budget_missed"] = chunk
        return _move(obs, chosen, memory, budget, "budget-model", detail)
    budget = max(lowest, chunk // 2)
    memory["budget_missed"] = chunk
    detail = (
        f"the cap cannot answer the per-token miss ({chosen.reason}); the token budget's effect is not known "
        f"yet: an exploratory step {current} -> {budget}"
    )
    return _move(obs, chosen, memory, budget, "budget-explore", detail)


def _raise(t: _Tick, ttft_missed: bool) -> Decision:
    state, obs, cfg, chosen, memory = t.state, t.obs, t.cfg, t.chosen, t.memory
    current, ceiling, floor = t.current, t.ceiling, t.floor
    fit: LeverFit = memory["budget_fit"]
    budget = min(ceiling, 2 * current)
    missed = state.budget_missed
    if missed is not None and chosen.state.comfortable_ticks * cfg.tick_s < FORGET_MISS_S and not ttft_missed:
        # Below the budget of the last miss, half way back to it: doubling straight back re-made the miss
        # (twin: 509 <-> 1018 every three minutes). Forgotten once comfortable a minute (the load changed).
        budget = min(budget, (current + missed) // 2)
    if _rises(fit, ceiling) and not ttft_missed:
        budget = _meets(fit, obs, cfg, current, budget) or current
    if budget <= current:
        return _hold(state, chosen, memory, floor)
    why = "the TTFT bound is missed" if ttft_missed else "the per-token latency has room"
    detail = f"{why}: token budget {current} -> {budget}"
    return _move(obs, chosen, memory, budget, "budget-raise", detail)


def _move(
    obs: Observation,
    chosen: Decision,
    memory: dict[str, Any],
    budget: int,
    reason: str,
    detail: str,
) -> Decision:
    """The cap side's decision with a budget move (the cap side's own move, if any, said first)."""
    memory = {**memory, "budget": budget, "budget_moved_s": obs.now_s}
    moved = chosen.cap != chosen.previous_cap
    return replace(
        chosen,
        reason=chosen.reason if moved else reason,
        detail=f"{chosen.detail}; {detail}" if moved else detail,
        state=chosen.state.model_copy(update=memory),
        token_budget=budget,
    )


def _hold(
    state: LawState,
    chosen: Decision,
    memory: dict[str, Any],
    floor: int | None = None,
    detail: str | None = None,
) -> Decision:
    """The cap side's decision, the budget held (raised to the batch's floor when the cap outgrew it)."""
    budget = state.budget
    if budget is not None and floor is not None and budget < floor:
        budget = floor
    memory = {**memory, "budget": budget}
    return replace(
        chosen,
        detail=detail if detail is not None else chosen.detail,
        state=chosen.state.model_copy(update=memory),
        token_budget=budget,
    )
