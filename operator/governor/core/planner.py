"""The replica planner: the one place that decides replicas. Pure: (state, request, bounds) -> plan.

Inputs are requests for one step (+1 or -1) from the law's anti-windup hand-off and from Alertmanager;
the writer (governor.services.replicas) applies the plan through the scale subresource. The rules (DESIGN.md,
"Who owns replicas"):
- one step at a time, inside [min_replicas, max_replicas] (bounds that moved under the state clip it);
- deduplication: an overload seen by both the law and an alert is one step, because a second "up"
  inside the up-cooldown is absorbed, whoever sends it;
- no new step up while the last one is pending (ready < desired), as Dynamo's planner does: a replica
  that is still starting has absorbed nothing yet, so the signal that asked for it is still there;
- scale-in waits `down_s` after any change (in right after out flaps), and never while pending.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ReplicaBounds(BaseModel):
    model_config = ConfigDict(frozen=True)

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=1, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaBounds:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas is above max_replicas")
        return self


class Cooldowns(BaseModel):
    model_config = ConfigDict(frozen=True)

    up_s: float = Field(default=60.0, ge=0)
    down_s: float = Field(default=300.0, ge=0)


class PlannerState(BaseModel):
    """What the planner remembers; JSON-able so it can live in status."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    replicas: int = Field(ge=0)
    last_up_s: float | None = None
    last_change_s: float | None = None
    last_reason: str = ""


@dataclass(frozen=True, slots=True)
class ScaleRequest:
    direction: Literal[-1, 1]
    source: str  # "law", "alertmanager", ...
    reason: str
    now_s: float


@dataclass(frozen=True, slots=True)
class Plan:
    replicas: int
    previous: int
    reason: str  # short code: scaled-up, scaled-down, bounds, cooldown, pending, at-max, at-min
    detail: str
    state: PlannerState

    @property
    def changed(self) -> bool:
        return self.replicas != self.previous


def plan(
    state: PlannerState,
    request: ScaleRequest,
    bounds: ReplicaBounds,
    cooldowns: Cooldowns,
    ready_replicas: int | None = None,
) -> Plan:
    now, current = request.now_s, state.replicas
    clipped = max(bounds.min_replicas, min(bounds.max_replicas, current))
    pending = ready_replicas is not None and ready_replicas < current
    since_up = None if state.last_up_s is None else now - state.last_up_s
    since_change = None if state.last_change_s is None else now - state.last_change_s
    source = f"{request.source}: {request.reason}"

    if clipped != current:
        target, reason, detail = (
            clipped,
            "bounds",
            f"replicas brought into [{bounds.min_replicas}, {bounds.max_replicas}]",
        )
    elif request.direction > 0 and current >= bounds.max_replicas:
        target, reason, detail = current, "at-max", f"{source}; already at max_replicas {bounds.max_replicas}"
    elif request.direction > 0 and pending:
        target, reason, detail = current, "pending", f"{source}; the last step is not ready yet"
    elif request.direction > 0 and since_up is not None and since_up < cooldowns.up_s:
        target, reason, detail = current, "cooldown", f"{source}; absorbed by the step up {since_up:.0f}s ago"
    elif request.direction > 0:
        target, reason, detail = current + 1, "scaled-up", source
    elif current <= bounds.min_replicas:
        target, reason, detail = current, "at-min", f"{source}; already at min_replicas {bounds.min_replicas}"
    elif pending:
        target, reason, detail = current, "pending", f"{source}; replicas are still starting"
    elif since_change is not None and since_change < cooldowns.down_s:
        target, reason, detail = current, "cooldown", f"{source}; last change {since_change:.0f}s ago"
    else:
        target, reason, detail = current - 1, "scaled-down", source

    if target == current:
        return Plan(replicas=current, previous=current, reason=reason, detail=detail, state=state)
    new_state = PlannerState(
        replicas=target,
        last_up_s=now if target > current else state.last_up_s,
        last_change_s=now,
        last_reason=detail,
    )
    return Plan(replicas=target, previous=current, reason=reason, detail=detail, state=new_state)
