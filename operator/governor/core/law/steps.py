"""How far the cap may move: its bounds, a mode's limit, the largest step, and the two moves."""

from __future__ import annotations

import math

from governor.core.law.model import LawConfig, Mode


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


def lower_cap(cap: int, cfg: LawConfig, p99: float) -> int:
    """Proportional to the miss (x SLO/P99), between x decrease_factor and x strongest_decrease."""
    factor = max(
        min(cfg.decrease_factor, cfg.slo_target_s / p99), min(cfg.strongest_decrease, cfg.decrease_factor)
    )
    return clip(max(cap - step_bound(cap, cfg), min(cap - 1, math.floor(cap * factor))), cfg)


def raise_cap(cap: int, limit: int, cfg: LawConfig, memory: float | None = None, hedge: bool = False) -> int:
    """Multiplicative below cautious_fraction x the last violation cap, additive above it or in a burst."""
    new = min(cap + step_bound(cap, cfg), max(cap + 1, math.floor(cap * cfg.increase_factor)))
    additive = cap + min(cfg.cautious_step, step_bound(cap, cfg))
    if hedge or (memory is not None and cap >= cfg.cautious_fraction * memory):
        new = min(new, additive)
    elif memory is not None:  # multiplicative up to the threshold, not past it
        new = min(new, max(additive, math.floor(cfg.cautious_fraction * memory)))
    return min(limit, new)
