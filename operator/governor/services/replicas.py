"""The replica planner's writer: the only code that writes an InferenceService's spec.replicas.

Everyone who wants replicas calls `request_scale` (the control loop's anti-windup hand-off, the Alertmanager
webhook); the pure planner (governor.core.planner) decides, deduplicating requests from different sources and
applying cooldowns and [minReplicas, maxReplicas]; this module writes the result. What it does with a plan
depends on spec.autoscaling:
- disabled: the user's spec.replicas stands; nothing is planned or written.
- mode "planner": the planned replicas are written.
- mode "external" (HPA/KEDA own the scale subresource): nothing is written; the wish is only exported
  (governor_desired_replicas) and returned.

The planner's memory (its PlannerState: the last step up and the last change, on the wall clock) is written
with the replicas, in one merge patch of the InferenceService that sets spec.replicas and the annotation
`governor.vllm.ai/planner`, with the resourceVersion it was planned from as a precondition (409: read and
plan again). So an operator killed between any two requests either never wrote the step (it is lost; the
next request, after the cooldown, steps again) or wrote it together with the cooldown that absorbs its
repeat: a restarted operator, or the peer that takes over, never repeats a step. The scale subresource is
the users' and HPA's (`kubectl scale` works as ever); the operator does not use it.

One `ReplicaWriter` per operator process (in Kopf's memo) keeps the state between requests; it adopts the
annotation whenever the annotation differs from what this process last saw (its first request for an
object, a peer's write, a re-created object). A spec.replicas moved by someone else (a user, HPA) is planned
from as it is, with the cooldown clock kept. Wall-clock times, because a restarted process or a peer has
another monotonic clock; a time ahead of the clock (the clock stepped back, a peer's clock ahead) counts as
now, so a clock step delays the next step by at most one cooldown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from governor.adapters import opmetrics
from governor.adapters.kube import Conflict, Kube, NotFound
from governor.core import spec as api
from governor.core.planner import Cooldowns, Plan, PlannerState, ReplicaBounds, ScaleRequest, plan

log = logging.getLogger("governor.services.replicas")

STATE_ANNOTATION = f"{api.GROUP}/planner"
ATTEMPTS = 4  # reads and plans per request when the object changes under the write (409)


def _direction(direction: int | str) -> Literal[-1, 1]:
    if direction in (1, "+1", "up", "out"):
        return 1
    if direction in (-1, "-1", "down", "in"):
        return -1
    raise ValueError(f"direction must be up/+1 or down/-1, not {direction!r}")


def restored(annotation: str | None, now_s: float) -> PlannerState | None:
    """The state written in the annotation, its times no later than now; None when absent or unreadable."""
    if not annotation:
        return None
    try:
        state = PlannerState.model_validate_json(annotation)
    except ValidationError:
        log.warning("ignoring an unreadable %s annotation: %.200s", STATE_ANNOTATION, annotation)
        return None
    times = {"last_up_s": state.last_up_s, "last_change_s": state.last_change_s}
    ahead = {field: now_s for field, value in times.items() if value is not None and value > now_s}
    return state.model_copy(update=ahead) if ahead else state


def write_patch(state: PlannerState, resource_version: str | None) -> dict[str, Any]:
    """One merge patch: the replicas, the state that planned them, and the version they were planned from."""
    metadata: dict[str, Any] = {"annotations": {STATE_ANNOTATION: state.model_dump_json()}}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata, "spec": {"replicas": state.replicas}}


@dataclass(frozen=True)
class _Memory:
    state: PlannerState
    annotation: str | None  # the annotation as this process last saw or wrote it


class ReplicaWriter:
    """The one writer of replicas, with the planner's memory per InferenceService."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.clock = clock  # wall-clock seconds (epoch): the state outlives this process
        self._memory: dict[tuple[str, str], _Memory] = {}
        self._locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

    async def request_scale(
        self,
        namespace: str,
        name: str,
        direction: int | str,
        source: str,
        reason: str,
        *,
        wanted: int | None = None,
        load_after: float | None = None,
        known: Mapping[str, Any] | None = None,
    ) -> Plan | None:
        """Ask for one replica more (+1/"up") or fewer (-1/"down"), or, with `wanted`, for that many in all
        (governor.core.planner.backlog_replicas sizes it; `load_after` is the load share the replicas left
        after a step in would carry). Returns the plan, or None when the object is gone, invalid, or not
        autoscaled. Raises kube.KubeError only if writing the replicas fails. `known`, an up-to-date copy of
        the object (a Kopf daemon's body), replaces the first read; the write's resourceVersion precondition
        catches a stale one, and the retry reads the object."""
        step = _direction(direction)
        key = (namespace, name)
        # A copy without a resourceVersion could not guard the write: read the object instead.
        first = known if known is not None and (known.get("metadata") or {}).get("resourceVersion") else None
        async with self._locks[key]:
            for attempt in range(ATTEMPTS):
                obj = (
                    first
                    if attempt == 0 and first is not None
                    else await self.kube.get_inferenceservice(namespace, name)
                )
                if obj is None:
                    self._memory.pop(key, None)
                    return None
                try:
                    spec = api.parse_spec(obj.get("spec"))
                except ValidationError:
                    return None
                if not spec.autoscaling.enabled:
                    return None
                request = ScaleRequest(
                    direction=step,
                    source=source,
                    reason=reason,
                    now_s=self.clock(),
                    wanted=wanted,
                    load_after=load_after,
                )
                try:
                    return await self._plan_and_write(key, obj, spec, request)
                except Conflict:  # changed since the read (a user, a status write): plan from the new one
                    continue
                except NotFound:
                    self._memory.pop(key, None)
                    return None
            raise Conflict(409, "Conflict", f"{namespace}/{name} kept changing under {ATTEMPTS} attempts")

    async def _plan_and_write(
        self,
        key: tuple[str, str],
        obj: Mapping[str, Any],
        spec: api.InferenceServiceSpec,
        request: ScaleRequest,
    ) -> Plan:
        namespace, name = key
        metadata = obj.get("metadata") or {}
        annotation = (metadata.get("annotations") or {}).get(STATE_ANNOTATION)
        state = self._state(key, annotation, spec.replicas, request.now_s)
        scaling = spec.autoscaling
        ready = (obj.get("status") or {}).get("readyReplicas")
        result = plan(
            state,
            request,
            ReplicaBounds(min_replicas=scaling.min_replicas, max_replicas=scaling.max_replicas),
            Cooldowns(up_s=scaling.scale_up_cooldown_seconds, down_s=scaling.scale_down_cooldown_seconds),
            ready_replicas=int(ready) if ready is not None else None,
        )
        opmetrics.DESIRED_REPLICAS.labels(namespace=namespace, name=name).set(result.replicas)
        if result.changed and scaling.mode == "planner":
            patch = write_patch(result.state, metadata.get("resourceVersion"))
            await self.kube.merge_patch(api.API_VERSION, api.KIND, namespace, name, patch)
            annotation = patch["metadata"]["annotations"][STATE_ANNOTATION]
            log.info(
                "%s/%s replicas %d -> %d (%s)",
                namespace,
                name,
                result.previous,
                result.replicas,
                result.detail,
            )
        self._memory[key] = _Memory(result.state, annotation)
        return result

    def _state(
        self, key: tuple[str, str], annotation: str | None, replicas: int, now_s: float
    ) -> PlannerState:
        """What to plan from: this process's memory, or the annotation when it changed since (or is new to
        this process); the replicas as they are on the object."""
        memory = self._memory.get(key)
        if memory is not None and memory.annotation == annotation:
            state = memory.state
        else:
            state = restored(annotation, now_s) or PlannerState(replicas=replicas)
        if state.replicas != replicas:  # someone else (a user, HPA) moved it: plan from what is there
            state = state.model_copy(update={"replicas": replicas})
        return state

    def forget(self, namespace: str, name: str) -> None:
        self._memory.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)
