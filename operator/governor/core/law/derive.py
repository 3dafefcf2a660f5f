"""The signals the rules read, each derived from the last state and this tick's reading by a pure function.

Every function reads only the *previous* state and the reading, never another function's result unless it
takes it as an argument, so the order in which `decide` calls them is visible in its arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from governor.core.law.model import LawConfig, LawState, Mode


def known(value: float | None) -> float | None:
    """A reading the law may act on: None, NaN and inf are unknown."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class Latency:
    """Rule 1: the smoothed SLO quantile and where it sits against the hysteresis band (rule 3)."""

    p99: float | None  # this tick's reading, if known
    smoothed: float | None  # an unknown reading keeps the old smoothed value
    violating: bool  # above band_high x SLO
    comfortable: bool  # below band_low x SLO


def latency(state: LawState, p99: float | None, cfg: LawConfig) -> Latency:
    smoothed = state.p99_smoothed
    if p99 is not None:
        smoothed = p99 if smoothed is None else cfg.alpha * p99 + (1 - cfg.alpha) * smoothed
    return Latency(
        p99=p99,
        smoothed=smoothed,
        violating=smoothed is not None and smoothed > cfg.band_high * cfg.slo_target_s,
        comfortable=smoothed is not None and smoothed < cfg.band_low * cfg.slo_target_s,
    )


def queued(waiting: float | None, cfg: LawConfig) -> bool:
    """Enough requests wait to count as a queue."""
    return waiting is not None and waiting >= max(cfg.queue_min, 1.0)


@dataclass(frozen=True, slots=True)
class QueueGrowth:
    """Rule 9: arrivals outrun completions by a meaningful share, for long enough."""

    growth_ticks: int
    overloaded: bool


def growth_rate(state: LawState, now: float, waiting: float | None, reported: float | None) -> float | None:
    """The queue's growth in req/s: the window's as reported, else since the last tick's reading."""
    if reported is not None:
        return reported
    if waiting is None or state.waiting_prev is None or not state.waiting_prev_s:
        return None
    dt = now - state.waiting_prev_s
    return (waiting - state.waiting_prev) / dt if dt > 0 else None


def queue_growth(
    state: LawState,
    now: float,
    waiting: float | None,
    reported_growth: float | None,
    rate: float | None,
    cfg: LawConfig,
) -> QueueGrowth:
    growth = growth_rate(state, now, waiting, reported_growth)
    growing = (
        queued(waiting, cfg)
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
    return QueueGrowth(growth_ticks=growth_ticks, overloaded=growth_ticks >= cfg.queue_growth_ticks)


def established(state: LawState, cfg: LawConfig) -> bool:
    """Rule 12's baseline: the traffic has run above burst_min_rate for a while (not a start from idle)."""
    return state.baseline_ticks >= cfg.burst_baseline_ticks


@dataclass(frozen=True, slots=True)
class LongTail:
    """Rule 11: a shift to longer prompts, against the slow EWMA of the prompt P95."""

    shift_ticks: int
    triggered: bool
    prompt_p95_slow: float | None


def long_tail(
    state: LawState, rate: float | None, long_rate: float | None, prompt_p95: float | None, cfg: LawConfig
) -> LongTail:
    slow = state.prompt_p95_slow
    share_up = (
        long_rate is not None
        and rate is not None
        and rate > 0
        and long_rate > (cfg.long_tail_base + cfg.long_tail_fraction) * rate
    )
    p95_up = prompt_p95 is not None and slow is not None and prompt_p95 > cfg.long_tail_shift * slow
    fill_ticks = math.ceil(cfg.long_tail_baseline_s / 2 / cfg.tick_s)
    p95_known = state.ticks >= 2 * fill_ticks  # a start-up P95 is no baseline
    shifted = established(state, cfg) and p95_known and share_up and p95_up
    shift_ticks = state.shift_ticks + 1 if shifted else 0
    if prompt_p95 is not None:  # follows while the window fills, then a running mean, then an EWMA
        since = state.ticks - fill_ticks
        weight = 1.0 if since < 0 else max(cfg.long_tail_alpha, 1 / (since + 1))
        slow = prompt_p95 if slow is None else weight * prompt_p95 + (1 - weight) * slow
    return LongTail(
        shift_ticks=shift_ticks,
        triggered=math.isfinite(cfg.long_tail_fraction) and shift_ticks >= 2,  # inf: mode off
        prompt_p95_slow=slow,
    )


@dataclass(frozen=True, slots=True)
class Burst:
    """Rule 12: the smoothed request rate rising steeply for `burst_ticks` ticks, from an established base."""

    rate_ewma: float | None
    burst_ticks: int  # reset on confirmation: one pre-emptive step per confirmation
    baseline_ticks: int
    confirmed: bool


def burst(state: LawState, rate: float | None, cfg: LawConfig) -> Burst:
    if rate is None:
        return Burst(state.rate_ewma, burst_ticks=0, baseline_ticks=state.baseline_ticks, confirmed=False)
    prev = state.rate_ewma
    rate_ewma = rate if prev is None else cfg.alpha * rate + (1 - cfg.alpha) * prev
    rising = (
        established(state, cfg)
        and prev is not None
        and prev >= cfg.burst_min_rate
        and rate_ewma > prev * (1 + cfg.burst_slope)
    )
    burst_ticks = state.burst_ticks + 1 if rising else 0
    confirmed = burst_ticks >= cfg.burst_ticks
    return Burst(
        rate_ewma=rate_ewma,
        burst_ticks=0 if confirmed else burst_ticks,
        baseline_ticks=state.baseline_ticks + 1 if rate_ewma >= cfg.burst_min_rate else 0,
        confirmed=confirmed,
    )


@dataclass(frozen=True, slots=True)
class ModeSpan:
    mode: Mode
    until_s: float


def mode(state: LawState, now: float, tail: LongTail, rising: Burst, cfg: LawConfig) -> ModeSpan:
    """Rules 11, 12: a mode lasts until its hold ends; a long tail outranks a burst."""
    span = ModeSpan(state.mode if now < state.mode_until_s else "normal", state.mode_until_s)
    if tail.triggered:
        span = ModeSpan("long-tail", now + cfg.long_tail_hold_s)
    if rising.confirmed and span.mode != "long-tail":
        span = ModeSpan("burst", now + cfg.burst_hold_s)
    return span


def violation_memory(state: LawState, cfg: LawConfig) -> float | None:
    """Rule 14: the last violation cap, rising slowly; forgotten once passed or past the ceiling."""
    if state.violation_cap is None:
        return None
    memory = state.violation_cap * (1 + cfg.memory_decay)
    return memory if cfg.cautious_fraction * memory < cfg.ceiling and state.cap <= memory else None


def binding(cap: int, running: float | None, waiting: float | None, cfg: LawConfig) -> bool:
    """Rule 7: busy slots bind; so does a queue while most slots are busy (a closed loop's gaps between
    requests keep the mean running just under the cap). A queue beside mostly idle slots is not the cap's
    doing. Unknown running: not binding."""
    return running is not None and (
        running >= cfg.binding_fraction * cap
        or (queued(waiting, cfg) and running >= min(cfg.queue_binding_fraction * cap, max(cap - 1, 1)))
    )


@dataclass(frozen=True, slots=True)
class Drain:
    """Rule 5: the last decrease is still draining."""

    cooling: bool  # inside cooldown_s after it
    stale: bool  # the window still holds the samples it acted on, and the P99 is not clearly worse


def drain(state: LawState, now: float, smoothed: float | None, cfg: LawConfig) -> Drain:
    return Drain(
        cooling=now < state.cooldown_until_s,
        stale=state.cut_p99 is not None
        and now < state.cut_s + cfg.window_s
        and smoothed is not None
        and smoothed <= cfg.band_high * state.cut_p99,
    )


def ttft_pressure(
    ttft: float | None, binding: bool, queued: bool, overloaded: bool, headroom: bool, cfg: LawConfig
) -> bool:
    """Rule 10's TTFT half (issue 14): with a per-token SLO in its band, a queue behind a binding cap can
    blow the TTFT bound for minutes and no cap move answers it (a raise would blow the per-token bound, a
    cut would grow the queue): that is replica pressure. Not while the cap still has headroom the law is
    raising into, and off without a TTFT bound."""
    return (
        cfg.ttft_bound_s is not None
        and ttft is not None
        and ttft > cfg.ttft_bound_s
        and binding
        and (queued or overloaded)
        and not headroom
    )
