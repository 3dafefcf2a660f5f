"""The control law: (state, observation) -> decision. Pure: no clock, no I/O, no randomness.

Every tick the loop reads one Observation (the SLO latency quantile over the window, queue, running...)
and calls `decide`. The Decision carries the new cap, a short reason code (a metric label), a sentence
for humans, the mode, a replica wish (-1, 0, +1) for the replica planner, and the next state. The state
is JSON-able: it is stored in the InferenceService status, so an operator restart resumes, not resets.

The seed (001 §3.2) law, kept verbatim in `seed_step`/`seed_decide` for the benchmark:
    P99 > 1.1·SLO -> cap = max(1, int(cap·0.8));  P99 < 0.9·SLO -> cap = min(256, int(cap·1.15)).
Its defects, and the rule that fixes each one:
 1. A raw P99 over a short window is noisy -> EWMA smoothing (alpha) before comparing with the SLO.
 2. int(cap·1.15) never grows a cap below 7 -> every step moves the cap by at least 1.
 3. One noisy tick moves the cap -> a hysteresis band [band_low·SLO, band_high·SLO] holds it, and a
    raise needs `raise_after_ticks` comfortable ticks in a row.
 4. A fixed x0.8 is slow for a large miss and nothing else bounds it -> a decrease is proportional to
    the miss (x SLO/P99) but between x decrease_factor and x strongest_decrease (0.8 and 0.5), so
    |step| <= max(1, ceil(cap·max(1-strongest, increase-1))), and <= max_step when set (`step_bound`).
 5. A lower cap only bites as running requests finish (vLLM drains, it does not preempt), and the window
    still holds old samples -> after a decrease, `cooldown_s` without a further move, and until the
    window has turned over a further decrease needs a P99 worse than band_high x the one acted on
    (step2x: four x0.8 cuts on one stale 30 ms window took 256 to 104 and built a queue).
 6. 256 is a constant -> bounds [min_cap, ceiling]; the ceiling is the engine's startup max_num_seqs,
    which can never be raised live.
 7. Low load gives a low P99, and the cap creeps up for ever -> raise only while the cap binds (running
    near the cap, or a queue while nearly all slots are busy: `queue_binding_fraction`, just under
    `binding_fraction`, as a closed loop's gaps between requests keep the mean; 0.5 cost the twin 30 points
    of steady-state SLO windows; a queue beside idle slots is not the cap's doing).
    Unknown running: "not binding".
 8. The cap is the wrong lever for queue-driven latency (DESIGN.md, H200 data: a lower cap buys TPOT and
    pays in queueing) -> per-token SLOs (TPOT, inter-token) move the cap; TTFT and e2e SLOs never lower
    it: they raise it while it binds, then ask for replicas.
 9. Lowering the cap while arrivals outrun service starves the queue -> a queue growing by more than
    `queue_growth_fraction` of the completion rate for `queue_growth_ticks` holds the cap, and after
    `replica_after_ticks` more asks for a replica.
10. At the floor and still violating, the law has nothing left (windup) -> after `replica_after_ticks`
    such ticks, replica_wish = +1; a cap with headroom and an idle engine for `idle_after_ticks`: -1.
Seed §4.3 inputs, with caps relative to the ceiling (the seed's 256 -> 64 is 0.25·ceiling):
11. Long-tail mode: prompts above 1.3 x the windowed prompt P95 (the runtime counts them). By
    construction ~5 % of a heavy-tailed stream exceed its P95 and some exceed 1.3·P95 (Azure replay:
    the mode pinned the cap on 106 of 181 ticks), so only a *shift* counts, once the traffic is
    established (rule 12's baseline) and the slow P95 has `long_tail_baseline_s` of history (it follows
    the reported P95 for the first half, while the runtime's 60 s window fills and a heavy tail's P95 is
    still low, then averages): a long-prompt share above `long_tail_base` + `long_tail_fraction`
    and the prompt P95 above `long_tail_shift` x its slow EWMA, two ticks in a row -> cap limited to
    long_tail_cap_fraction·ceiling for `long_tail_hold_s`, imposed only under per-token pressure
    (smoothed P99 not below the band); otherwise the limit only stops raises past it. Twin: Azure's
    stationary stream reaches a 6 % share against the lagged P95, the longtail shift 11-16 %.
12. Burst pre-emption: the EWMA of the request rate rising by more than `burst_slope` per tick for
    `burst_ticks` ticks in a row, from a baseline established for `burst_baseline_ticks` (a rate rising
    from ~zero, at start-up or after idling, is not a burst: H200 fired 10 s into an 8 req/s phase)
    -> one pre-emptive decrease step and `burst_hold_s` of additive-only raises. A hedge, not a verdict:
    while the smoothed P99 is below the band, burst mode neither lowers nor blocks a (cautious) raise.
    Modes and bursts only ever lower the cap for per-token SLOs (rule 8).
13. Initial cap: the GPU profile table (governor.core.profiles) and the SLO (the largest measured cap whose
    TPOT P99 meets the SLO), else the ceiling (vLLM's own behaviour; the law then walks down).
14. Overshoot after recovery (step2x: mean cap 164 vs knee 128; H200: 40 -> 116 in 14 s, P99 23 ms)
    -> the cap at which the SLO was last missed is remembered (TCP's ssthresh); raises are
    multiplicative below `cautious_fraction` of it and `cautious_step` above it. The memory rises by
    `memory_decay` per tick, and is forgotten once passed without a miss (it was set in another regime)
    or when its cautious fraction passes the ceiling: the law explores again.
No data (Prometheus down, no traffic, NaN, stale) holds the cap: the law never acts on a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from governor.core import profiles
from governor.core.signals import LatencyKind

Mode = Literal["normal", "long-tail", "burst"]


class LawConfig(BaseModel):
    """Everything the law needs to know about one governed service. Built from the spec or the CLI flags."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo_target_s: float = Field(gt=0)
    latency_kind: LatencyKind = LatencyKind.TPOT
    quantile: float = Field(default=0.99, gt=0, lt=1)
    min_cap: int = Field(default=1, ge=1)
    ceiling: int = Field(default=256, ge=1, description="startup max_num_seqs, or the user's lower max cap")
    initial_cap: int | None = Field(default=None, ge=1)
    gpu_type: str | None = None
    model_class: str | None = None
    decrease_factor: float = Field(default=0.8, gt=0, lt=1)
    strongest_decrease: float = Field(default=0.5, gt=0, lt=1, description="factor for a P99 far above SLO")
    increase_factor: float = Field(default=1.15, gt=1, le=4)
    band_low: float = Field(default=0.9, gt=0, le=1)
    band_high: float = Field(default=1.1, ge=1)
    alpha: float = Field(default=0.5, gt=0, le=1, description="EWMA weight of the newest P99")
    max_step: int | None = Field(default=None, ge=1)
    cooldown_s: float = Field(default=10.0, ge=0)
    raise_after_ticks: int = Field(default=2, ge=1)
    tick_s: float = Field(default=5.0, gt=0)
    window_s: float = Field(default=30.0, gt=0)
    binding_fraction: float = Field(default=0.9, gt=0, le=1)
    queue_binding_fraction: float = Field(
        default=0.85, gt=0, le=1, description="busy share that binds when a queue waits beside it"
    )
    queue_min: float = Field(default=1.0, ge=0, description="waiting requests that count as a queue")
    queue_growth_fraction: float = Field(default=0.1, gt=0, description="arrivals above completions, share")
    queue_growth_min: float = Field(default=0.2, ge=0, description="req/s of queue growth that always counts")
    replica_after_ticks: int = Field(default=3, ge=1)
    queue_growth_ticks: int = Field(default=2, ge=1, description="ticks of queue growth that stop decreases")
    idle_after_ticks: int = Field(default=12, ge=1)
    idle_fraction: float = Field(default=0.5, gt=0, lt=1)
    long_tail_fraction: float = Field(default=0.01, ge=0)
    long_tail_cap_fraction: float = Field(default=0.25, gt=0, le=1)
    long_tail_hold_s: float = Field(default=60.0, ge=0)
    long_tail_base: float = Field(default=0.08, ge=0, description="long share, stationary traffic")
    long_tail_shift: float = Field(default=1.3, gt=1, description="prompt P95 / its slow EWMA: a shift")
    long_tail_alpha: float = Field(default=0.05, gt=0, le=1, description="EWMA weight, slow prompt P95")
    long_tail_baseline_s: float = Field(
        default=120.0, ge=0, description="prompt P95 history first: the runtime's 60 s window filled, twice"
    )
    burst_slope: float = Field(default=0.15, gt=0)
    burst_ticks: int = Field(default=3, ge=1)
    burst_min_rate: float = Field(default=0.5, ge=0)
    burst_hold_s: float = Field(default=30.0, ge=0)
    burst_baseline_ticks: int = Field(default=7, ge=0, description="ticks above burst_min_rate first")
    cautious_fraction: float = Field(default=0.85, gt=0, le=1, description="of the last violation cap")
    cautious_step: int = Field(default=2, ge=1, description="additive raise near the last violation cap")
    memory_decay: float = Field(default=0.003, ge=0, description="per-tick rise of the violation cap")

    @model_validator(mode="after")
    def _coherent(self) -> LawConfig:
        if self.min_cap > self.ceiling:
            raise ValueError(f"min_cap {self.min_cap} is above the ceiling {self.ceiling}")
        if self.band_low >= self.band_high:
            raise ValueError("band_low must be below band_high")
        return self

    @property
    def step_limit_fraction(self) -> float:
        return max(1 - min(self.decrease_factor, self.strongest_decrease), self.increase_factor - 1)


class LawState(BaseModel):
    """What the law remembers between ticks; stored as-is in status.law."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cap: int = Field(ge=1)
    p99_smoothed: float | None = None
    mode: Mode = "normal"
    mode_until_s: float = 0.0
    cooldown_until_s: float = 0.0
    comfortable_ticks: int = 0
    pressure_ticks: int = 0
    idle_ticks: int = 0
    rate_ewma: float | None = None
    burst_ticks: int = 0
    baseline_ticks: int = 0
    prompt_p95_slow: float | None = None
    violation_cap: float | None = None
    cut_p99: float | None = None
    shift_ticks: int = 0
    cut_s: float = 0.0
    waiting_prev: float | None = None
    waiting_prev_s: float | None = None
    growth_ticks: int = 0
    ticks: int = 0


@dataclass(frozen=True, slots=True)
class Observation:
    """One tick's reading. None means unknown (no data, NaN, stale): the law never guesses it."""

    now_s: float
    p99_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemption_rate: float | None = None
    request_rate: float | None = None
    prompt_p95: float | None = None
    long_prompt_rate: float | None = None
    queue_growth: float | None = None  # d(waiting)/dt in req/s over the window; else derived from `waiting`


@dataclass(frozen=True, slots=True)
class Decision:
    cap: int
    reason: str  # short code, a metric label
    detail: str  # a sentence for Events and status
    mode: Mode
    replica_wish: Literal[-1, 0, 1]
    state: LawState
    previous_cap: int

    @property
    def direction(self) -> Literal["up", "down", "hold"]:
        return "up" if self.cap > self.previous_cap else "down" if self.cap < self.previous_cap else "hold"


def clip(cap: int, cfg: LawConfig) -> int:
    return max(cfg.min_cap, min(cfg.ceiling, cap))


def mode_cap(mode: Mode, cfg: LawConfig) -> int:
    """The upper limit a mode puts on the cap, relative to the ceiling (rule 11)."""
    if mode == "long-tail" and cfg.latency_kind.per_token:
        return clip(math.floor(cfg.long_tail_cap_fraction * cfg.ceiling), cfg)
    return cfg.ceiling


def step_bound(cap: int, cfg: LawConfig) -> int:
    """The largest move one SLO-driven tick may make from `cap` (rule 4)."""
    bound = max(1, math.ceil(cap * cfg.step_limit_fraction))
    return bound if cfg.max_step is None else min(bound, cfg.max_step)


def _lower(cap: int, cfg: LawConfig, p99: float) -> int:
    """Proportional to the miss (x SLO/P99), between x decrease_factor and x strongest_decrease."""
    factor = max(
        min(cfg.decrease_factor, cfg.slo_target_s / p99), min(cfg.strongest_decrease, cfg.decrease_factor)
    )
    return clip(max(cap - step_bound(cap, cfg), min(cap - 1, math.floor(cap * factor))), cfg)


def _raise(cap: int, limit: int, cfg: LawConfig, memory: float | None = None, hedge: bool = False) -> int:
    """Multiplicative below cautious_fraction x the last violation cap, additive above it or in a burst."""
    new = min(cap + step_bound(cap, cfg), max(cap + 1, math.floor(cap * cfg.increase_factor)))
    additive = cap + min(cfg.cautious_step, step_bound(cap, cfg))
    if hedge or (memory is not None and cap >= cfg.cautious_fraction * memory):
        new = min(new, additive)
    elif memory is not None:  # multiplicative up to the threshold, not past it
        new = min(new, max(additive, math.floor(cfg.cautious_fraction * memory)))
    return min(limit, new)


def initial_state(cfg: LawConfig) -> LawState:
    """Rule 13: an explicit initial cap, else the GPU profile and the SLO, else the ceiling.

    Queue-driven SLOs start at the ceiling: the cap is never lowered for them (rule 8).
    """
    if cfg.initial_cap is not None:
        return LawState(cap=clip(cfg.initial_cap, cfg))
    if cfg.gpu_type is None or not cfg.latency_kind.per_token:
        return LawState(cap=cfg.ceiling)
    size = profiles.ModelSize(cfg.model_class) if cfg.model_class else profiles.ModelSize.SMALL
    tpot_ms = cfg.slo_target_s * 1000 if cfg.latency_kind is LatencyKind.TPOT else None
    return LawState(cap=clip(profiles.lookup(cfg.gpu_type, size).initial_cap(tpot_ms), cfg))


def _known(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def decide(state: LawState, obs: Observation, cfg: LawConfig) -> Decision:
    now = obs.now_s
    p99, running, waiting = _known(obs.p99_s), _known(obs.running), _known(obs.waiting)
    rate = _known(obs.request_rate)
    per_token = cfg.latency_kind.per_token

    # Rule 1: smoothing. Unknown P99 keeps the old smoothed value (and the cap: rule "no-data" below).
    smoothed = state.p99_smoothed
    if p99 is not None:
        smoothed = p99 if smoothed is None else cfg.alpha * p99 + (1 - cfg.alpha) * smoothed
    violating = smoothed is not None and smoothed > cfg.band_high * cfg.slo_target_s
    comfortable = smoothed is not None and smoothed < cfg.band_low * cfg.slo_target_s

    # Rule 9: is the queue growing, i.e. arrivals outrun completions by a meaningful share?
    growth = _known(obs.queue_growth)
    if growth is None and waiting is not None and state.waiting_prev is not None and state.waiting_prev_s:
        dt = now - state.waiting_prev_s
        growth = (waiting - state.waiting_prev) / dt if dt > 0 else None
    growing = (
        waiting is not None
        and waiting >= max(cfg.queue_min, 1.0)
        and growth is not None
        and growth > max(cfg.queue_growth_min, cfg.queue_growth_fraction * (rate or 0.0))
    )
    # A leaky count, not a streak: one noisy or blind tick must not release a queue that keeps growing.
    if waiting is None:
        growth_ticks = state.growth_ticks
    elif growing:
        growth_ticks = min(state.growth_ticks + 1, 2 * cfg.queue_growth_ticks)
    else:
        growth_ticks = max(0, state.growth_ticks - 1)
    overloaded = growth_ticks >= cfg.queue_growth_ticks

    # Rules 11, 12: modes.
    mode, mode_until = state.mode, state.mode_until_s
    if now >= mode_until:
        mode = "normal"
    long_rate, prompt_p95 = _known(obs.long_prompt_rate), _known(obs.prompt_p95)
    slow = state.prompt_p95_slow
    share_up = (
        long_rate is not None
        and rate is not None
        and rate > 0
        and long_rate > (cfg.long_tail_base + cfg.long_tail_fraction) * rate
    )
    p95_up = prompt_p95 is not None and slow is not None and prompt_p95 > cfg.long_tail_shift * slow
    established = state.baseline_ticks >= cfg.burst_baseline_ticks
    fill_ticks = math.ceil(cfg.long_tail_baseline_s / 2 / cfg.tick_s)
    p95_known = state.ticks >= 2 * fill_ticks  # a start-up P95 is no baseline
    shift_ticks = state.shift_ticks + 1 if established and p95_known and share_up and p95_up else 0
    if math.isfinite(cfg.long_tail_fraction) and shift_ticks >= 2:  # inf: mode off
        mode, mode_until = "long-tail", now + cfg.long_tail_hold_s
    if prompt_p95 is not None:  # follows while the window fills, then a running mean, then an EWMA
        since = state.ticks - fill_ticks
        weight = 1.0 if since < 0 else max(cfg.long_tail_alpha, 1 / (since + 1))
        slow = prompt_p95 if slow is None else weight * prompt_p95 + (1 - weight) * slow
    rate_ewma = state.rate_ewma
    burst_ticks, baseline_ticks = 0, state.baseline_ticks
    if rate is not None:
        rate_ewma = rate if rate_ewma is None else cfg.alpha * rate + (1 - cfg.alpha) * rate_ewma
        prev = state.rate_ewma
        rising = (
            established
            and prev is not None
            and prev >= cfg.burst_min_rate
            and rate_ewma > prev * (1 + cfg.burst_slope)
        )
        burst_ticks = state.burst_ticks + 1 if rising else 0
        baseline_ticks = baseline_ticks + 1 if rate_ewma >= cfg.burst_min_rate else 0
    burst = burst_ticks >= cfg.burst_ticks
    if burst:
        burst_ticks = 0  # one pre-emptive step per confirmation
        if mode != "long-tail":
            mode, mode_until = "burst", now + cfg.burst_hold_s

    # Busy slots bind; so does a queue while most slots are busy (a closed loop's gaps between requests keep
    # the mean running just under the cap). A queue beside mostly idle slots is not the cap's doing.
    binding = running is not None and (
        running >= cfg.binding_fraction * state.cap
        or (
            waiting is not None
            and waiting >= max(cfg.queue_min, 1.0)
            and running >= cfg.queue_binding_fraction * state.cap
        )
    )
    cooling = now < state.cooldown_until_s
    stale = (  # rule 5: the window still holds the samples the last decrease acted on
        state.cut_p99 is not None
        and now < state.cut_s + cfg.window_s
        and smoothed is not None
        and smoothed <= cfg.band_high * state.cut_p99
    )
    upper = mode_cap(mode, cfg)
    cap = state.cap
    floor = cfg.min_cap
    pressure = False
    cooldown_until, cut_p99, cut_s = state.cooldown_until_s, state.cut_p99, state.cut_s
    memory = state.violation_cap  # rule 14, rising slowly toward the ceiling, where it is forgotten
    if memory is not None:  # rule 14: rising, forgotten once passed or past the ceiling
        memory = memory * (1 + cfg.memory_decay)
        memory = memory if cfg.cautious_fraction * memory < cfg.ceiling and state.cap <= memory else None
    hedge = burst and not comfortable  # rule 12: a burst below the band lowers nothing

    if clip(cap, cfg) != cap:
        new, reason, detail = clip(cap, cfg), "bounds", f"cap brought into [{cfg.min_cap}, {cfg.ceiling}]"
    elif p99 is None or smoothed is None:
        new, reason, detail = cap, "no-data", "no latency data (no traffic, or metrics unavailable): cap held"
    elif per_token and cap > upper and not comfortable:
        new, reason, detail = upper, mode, f"{mode} mode caps at {upper} (a fraction of the ceiling)"
    elif per_token and violating and overloaded:
        new, reason, pressure = cap, "queue-overload", True
        detail = (
            "per-token SLO missed but the queue grows: cap held (lower starves the queue), replica wanted"
        )
    elif per_token and (violating or hedge) and (cooling or stale):
        new, reason, detail = cap, "cooldown", "waiting for the last decrease to drain"
        pressure = violating and cap <= floor
    elif per_token and (violating or hedge) and cap <= floor:
        new, reason, pressure = cap, "at-floor", violating
        detail = f"cap at its floor {floor} and the SLO is still missed"
    elif per_token and (violating or hedge):
        memory = float(cap) if violating else memory
        new, reason = _lower(cap, cfg, smoothed), "slo-violation" if violating else "burst"
        detail = (
            f"P99 {smoothed:.4g}s above {cfg.band_high:g} x SLO"
            if violating
            else "request rate rising: pre-emptive decrease"
        )
        cooldown_until, cut_p99, cut_s = now + cfg.cooldown_s, smoothed, now
    elif not per_token and violating:
        queue = waiting is not None and waiting >= max(cfg.queue_min, 1.0)
        if queue and binding and cap < upper:
            new, reason, detail = (
                _raise(cap, upper, cfg),
                "queue-pressure",
                "queue-driven latency: cap up first",
            )
        else:
            new, reason, pressure = cap, "queue-pressure", True
            detail = "queue-driven latency past the cap: cap held (never lowered for it), replica wanted"
    elif comfortable and cooling:
        new, reason, detail = cap, "cooldown", "waiting for the last decrease to drain"
    elif comfortable and not binding:
        new, reason, detail = cap, "not-binding", "P99 low but the cap is not the bottleneck: no creep"
    elif comfortable and cap >= upper:
        new, reason, detail = cap, "at-limit", f"cap at its {mode}-mode limit"
    elif comfortable and state.comfortable_ticks + 1 < cfg.raise_after_ticks:
        new, reason, detail = cap, "confirming", "P99 low: confirming before a raise"
    elif comfortable:
        new, reason, detail = (
            _raise(cap, upper, cfg, memory, hedge=mode == "burst"),
            "headroom",
            f"P99 {smoothed:.4g}s below band, cap binds",
        )
    else:
        new, reason, detail = cap, "in-band", "P99 inside the hysteresis band"

    # Rule 10: anti-windup hand-off to the replica planner.
    pressure_ticks = state.pressure_ticks + 1 if pressure else 0
    quiet = waiting is not None and waiting < 1 and running is not None and running <= cfg.idle_fraction * new
    no_traffic = p99 is None and rate == 0.0  # no requests at all: the quantile is undefined, the engine idle
    idle = quiet and ((comfortable and not violating and p99 is not None) or no_traffic)
    idle_ticks = state.idle_ticks + 1 if idle else 0
    wish: Literal[-1, 0, 1] = 0
    if pressure_ticks >= cfg.replica_after_ticks:
        wish, pressure_ticks = 1, 0
    elif idle_ticks >= cfg.idle_after_ticks:
        wish, idle_ticks = -1, 0

    next_state = LawState(
        cap=new,
        p99_smoothed=smoothed,
        mode=mode,
        mode_until_s=mode_until,
        cooldown_until_s=cooldown_until,
        comfortable_ticks=state.comfortable_ticks + 1 if comfortable else 0,
        pressure_ticks=pressure_ticks,
        idle_ticks=idle_ticks,
        rate_ewma=rate_ewma,
        burst_ticks=burst_ticks,
        baseline_ticks=baseline_ticks,
        prompt_p95_slow=slow,
        violation_cap=memory,
        cut_p99=cut_p99,
        shift_ticks=shift_ticks,
        cut_s=cut_s,
        waiting_prev=waiting if waiting is not None else state.waiting_prev,
        waiting_prev_s=now if waiting is not None else state.waiting_prev_s,
        growth_ticks=growth_ticks,
        ticks=state.ticks + 1,
    )
    return Decision(
        cap=new,
        reason=reason,
        detail=detail,
        mode=mode,
        replica_wish=wish,
        state=next_state,
        previous_cap=cap,
    )


# --- The seed law, verbatim (001 §3.2), for the benchmark. Do not use it to govern anything. ---


def seed_step(cap: int, p99_s: float, slo_s: float) -> int:
    if p99_s > slo_s * 1.1:
        return max(1, int(cap * 0.8))
    if p99_s < slo_s * 0.9:
        return min(256, int(cap * 1.15))
    return cap


def seed_decide(state: LawState, obs: Observation, cfg: LawConfig) -> Decision:
    """The seed law behind `decide`'s signature: raw P99, no band memory, no bounds but [1, 256]."""
    p99 = _known(obs.p99_s)
    new = state.cap if p99 is None else seed_step(state.cap, p99, cfg.slo_target_s)
    reason = "no-data" if p99 is None else "seed"
    return Decision(
        cap=new,
        reason=reason,
        detail="seed law (001 §3.2)",
        mode="normal",
        replica_wish=0,
        state=state.model_copy(update={"cap": new, "p99_smoothed": p99, "ticks": state.ticks + 1}),
        previous_cap=state.cap,
    )
