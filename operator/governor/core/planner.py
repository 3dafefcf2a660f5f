"""The replica planner: the one place that decides replicas. Pure: (state, request, bounds) -> plan.

Inputs are requests from the law's anti-windup hand-off and from Alertmanager; the writer
(governor.services.replicas) writes the plan's replicas together with its state. The rules (DESIGN.md,
"Who owns replicas"; issue 14 made them fleet-aware):
- inside [min_replicas, max_replicas] (bounds that moved under the state clip it);
- an unsized request is one step; a sized one (`wanted`, the replicas the backlog needs, see
  `backlog_replicas`) moves to that count at once, at most max(`max_step`, current) per request. Supply
  already asked for counts: `wanted` is compared with the desired replicas, warming ones included, so a
  replica still starting neither blocks a sized request nor is asked for twice;
- deduplication: an unsized "up" inside the up-cooldown is absorbed, whoever sends it, so an overload
  seen by both the law and an alert is one step; a sized request that the desired count already covers
  is absorbed the same way ("supplied");
- no unsized step up while the last one is pending (ready < desired), as Dynamo's planner does: the
  signal that asked for it is still there, and the planner cannot tell how much the warming replica adds;
- scale-in waits `down_s` after any change (in right after out flaps), never while pending, and, when
  the caller says what share of the remaining replicas' capacity at their caps the load would use
  (`load_after`), only if that share is at most `down_load`; a sized "down" (`wanted`: the replicas that
  hold the load at `down_load`) steps to that count, at most `max_step` at once, never below it.
"""

from __future__ import annotations

import math
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


class StepLimits(BaseModel):
    """How far one sized request may move, and how full the remaining replicas may be after a step in."""

    model_config = ConfigDict(frozen=True)

    # As Kubernetes' HPA by default (4 pods or 100 % per 15 s, the larger): a step adds at most
    # max(max_step, current replicas).
    max_step: int = Field(default=4, ge=1)
    down_load: float = Field(default=0.8, gt=0, le=1, description="load share of the rest's capacity")


class PlannerState(BaseModel):
    """What the planner remembers; JSON-able: the operator keeps it in an annotation (wall-clock times)."""

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
    # up: the replicas the backlog needs in all (warming ones count); down: the replicas that hold the load
    # at `down_load` of their capacity (at most max_step fewer at once); None: one step
    wanted: int | None = None
    load_after: float | None = None  # down: load / capacity at their caps of the replicas that would remain


@dataclass(frozen=True, slots=True)
class Plan:
    replicas: int
    previous: int
    reason: (
        str  # short code: scaled-up, scaled-down, bounds, cooldown, pending, supplied, loaded, at-max, at-min
    )
    detail: str
    state: PlannerState

    @property
    def changed(self) -> bool:
        return self.replicas != self.previous


def backlog_replicas(
    ready: int,
    capacity_rps: float,
    arrivals_rps: float,
    waiting: float,
    drain_s: float,
    startup_s: float = 0.0,
) -> int | None:
    """The replicas that serve the arrivals and drain the queue within `drain_s` of their start, each at
    `capacity_rps` (one replica's completions per second at its cap: measured while the cap binds). The
    queue is the one they will find: what waits now plus what the `ready` replicas cannot serve while new
    ones take `startup_s` to start. Totals, not per pod. None when the capacity is unknown."""
    if capacity_rps <= 0 or not math.isfinite(capacity_rps) or ready < 1:
        return None
    arrivals = max(arrivals_rps, 0.0)
    found = max(waiting, 0.0) + max(arrivals - ready * capacity_rps, 0.0) * max(startup_s, 0.0)
    demand = arrivals + found / max(drain_s, 1e-9)
    return max(1, math.ceil(demand / capacity_rps - 1e-9))


# Sizing a request from the metrics (the operator's cluster edges and the fleet benchmark both use it).
DRAIN_S = 60.0  # a sized step drains the queue it finds within a minute of its replicas' start
STARTUP_S = 95.0  # the measured 86-100 s from scheduling to ready (H200, vLLM 0.26, dummy weights)


def size_request(
    direction: int,
    *,
    ready: int,
    live: int,
    capacity_rps: float | None,
    completions_rps: float | None,
    waiting: float,
    growth_rps: float,
    down_load: float,
) -> tuple[int | None, float | None]:
    """(wanted, load_after) for a ScaleRequest, from service totals: completions and the queue's growth (so
    arrivals), the queue, and one replica's capacity at its cap (measured while the cap binds). (None, None)
    when the capacity is not known yet: the request then steps by one, as an unsized one does."""
    if not capacity_rps or completions_rps is None:
        return None, None
    if direction > 0:
        arrivals = completions_rps + max(growth_rps, 0.0)
        return backlog_replicas(ready, capacity_rps, arrivals, waiting, DRAIN_S, STARTUP_S), None
    if live > 1:
        demand = completions_rps + waiting / DRAIN_S
        wanted = max(1, math.ceil(demand / (capacity_rps * down_load)))
        return wanted, demand / ((live - 1) * capacity_rps)
    return None, None


def plan(
    state: PlannerState,
    request: ScaleRequest,
    bounds: ReplicaBounds,
    cooldowns: Cooldowns,
    ready_replicas: int | None = None,
    limits: StepLimits | None = None,
) -> Plan:
    now, current = request.now_s, state.replicas
    clipped = max(bounds.min_replicas, min(bounds.max_replicas, current))
    if clipped != current:
        detail = f"replicas brought into [{bounds.min_replicas}, {bounds.max_replicas}]"
        return _moved(state, clipped, "bounds", detail, now)
    pending = ready_replicas is not None and ready_replicas < current
    source = f"{request.source}: {request.reason}"
    if request.direction > 0:
        target, reason, detail = _up(state, request, bounds, cooldowns, pending, limits or StepLimits())
    else:
        target, reason, detail = _down(state, request, bounds, cooldowns, pending, limits or StepLimits())
    detail = f"{source}; {detail}" if detail else source
    if target == current:
        return Plan(replicas=current, previous=current, reason=reason, detail=detail, state=state)
    return _moved(state, target, reason, detail, now)


def _moved(state: PlannerState, target: int, reason: str, detail: str, now: float) -> Plan:
    new_state = PlannerState(
        replicas=target,
        last_up_s=now if target > state.replicas else state.last_up_s,
        last_change_s=now,
        last_reason=detail,
    )
    return Plan(replicas=target, previous=state.replicas, reason=reason, detail=detail, state=new_state)


def _up(
    state: PlannerState,
    request: ScaleRequest,
    bounds: ReplicaBounds,
    cooldowns: Cooldowns,
    pending: bool,
    limits: StepLimits,
) -> tuple[int, str, str]:
    current = state.replicas
    since_up = None if state.last_up_s is None else request.now_s - state.last_up_s
    if current >= bounds.max_replicas:
        return current, "at-max", f"already at max_replicas {bounds.max_replicas}"
    if request.wanted is not None:
        if request.wanted <= current:
            return current, "supplied", f"{request.wanted} wanted, {current} asked for (warming ones count)"
        target = min(request.wanted, current + max(limits.max_step, current), bounds.max_replicas)
        return target, "scaled-up", f"{request.wanted} wanted"
    if pending:
        return current, "pending", "the last step is not ready yet"
    if since_up is not None and since_up < cooldowns.up_s:
        return current, "cooldown", f"absorbed by the step up {since_up:.0f}s ago"
    return current + 1, "scaled-up", ""


def _down(
    state: PlannerState,
    request: ScaleRequest,
    bounds: ReplicaBounds,
    cooldowns: Cooldowns,
    pending: bool,
    limits: StepLimits,
) -> tuple[int, str, str]:
    current = state.replicas
    since_change = None if state.last_change_s is None else request.now_s - state.last_change_s
    if current <= bounds.min_replicas:
        return current, "at-min", f"already at min_replicas {bounds.min_replicas}"
    if pending:
        return current, "pending", "replicas are still starting"
    if since_change is not None and since_change < cooldowns.down_s:
        return current, "cooldown", f"last change {since_change:.0f}s ago"
    if request.load_after is not None and request.load_after > limits.down_load:
        return current, "loaded", f"the rest would run at {request.load_after:.0%} of their capacity"
    if request.wanted is not None:
        if request.wanted >= current:
            return current, "loaded", f"{request.wanted} replicas hold the load at {limits.down_load:.0%}"
        target = max(request.wanted, bounds.min_replicas, current - limits.max_step)
        return target, "scaled-down", f"{request.wanted} replicas hold the load"
    return current - 1, "scaled-down", ""
