"""Rule 13: the cap a service starts with, before the law has seen a tick."""

from __future__ import annotations

from governor.core import profiles
from governor.core.law.model import LawConfig, LawState
from governor.core.law.steps import clip
from governor.core.signals import LatencyKind


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
