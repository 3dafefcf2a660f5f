"""The control loop's status patch as the tests build it: governor.core.status.loop_status with what most
of them hold fixed (fresh metrics, the decision's cap held by the engines, no replica wish, one time)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.core import status as status_builders
from governor.core.law import Decision, LawConfig

FRESH = (True, "Fresh", "")
NOW = "2026-12-01T00:00:00Z"


def loop_patch(
    decision: Decision,
    cfg: LawConfig,
    *,
    ceiling: int,
    observed_p99_s: float | None,
    live: Mapping[str, Any] | None = None,
    metrics: tuple[bool, str, str] = FRESH,
    held_budget: int | None = None,
    now: str = NOW,
) -> dict[str, Any]:
    """The patch one step writes, onto `live` (a fresh object at generation 1 when None)."""
    return status_builders.loop_status(
        live if live is not None else {"metadata": {"generation": 1}, "status": {}},
        decision=decision,
        cfg=cfg,
        ceiling=ceiling,
        observed_p99_s=observed_p99_s,
        metrics=metrics,
        held_cap=decision.cap,
        desired_replicas=None,
        now=now,
        held_budget=held_budget,
    )
