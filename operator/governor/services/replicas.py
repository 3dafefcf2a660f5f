"""The replica planner's writer: the only code that writes an InferenceService's spec.replicas.

Everyone who wants replicas calls `request_scale` (the control loop's anti-windup hand-off, the Alertmanager
webhook); the pure planner (governor.core.planner) decides, deduplicating requests from different sources and
applying cooldowns and [minReplicas, maxReplicas]; this module writes the result through the scale
subresource. What it does with a plan depends on spec.autoscaling:
- disabled: the user's spec.replicas stands; nothing is planned or written.
- mode "planner": the planned replicas are written.
- mode "external" (HPA/KEDA own the scale subresource): nothing is written; the wish is only exported
  (governor_desired_replicas) and returned.
The planner's memory lives in one `ReplicaWriter` per operator process (kept in Kopf's memo; one operator
replica is the leader) and restarts from the object's spec.replicas; a restart therefore forgets a running
cooldown, which errs on the side of one extra step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Literal

from pydantic import ValidationError

from governor.adapters import opmetrics
from governor.adapters.kube import Kube
from governor.core import spec as api
from governor.core.planner import Cooldowns, Plan, PlannerState, ReplicaBounds, ScaleRequest, plan

log = logging.getLogger("governor.services.replicas")


def _direction(direction: int | str) -> Literal[-1, 1]:
    if direction in (1, "+1", "up", "out"):
        return 1
    if direction in (-1, "-1", "down", "in"):
        return -1
    raise ValueError(f"direction must be up/+1 or down/-1, not {direction!r}")


class ReplicaWriter:
    """The one writer of replicas, with the planner's memory per InferenceService."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.clock = clock
        self._states: dict[tuple[str, str], PlannerState] = {}
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
    ) -> Plan | None:
        """Ask for one replica more (+1/"up") or fewer (-1/"down"), or, with `wanted`, for that many in all
        (governor.core.planner.backlog_replicas sizes it; `load_after` is the load share the replicas left
        after a step in would carry). Returns the plan, or None when the object is gone, invalid, or not
        autoscaled. Raises kube.KubeError only if writing the scale subresource fails."""
        step = _direction(direction)
        key = (namespace, name)
        async with self._locks[key]:
            obj = await self.kube.get_inferenceservice(namespace, name)
            if obj is None:
                self._states.pop(key, None)
                return None
            try:
                spec = api.parse_spec(obj.get("spec"))
            except ValidationError:
                return None
            scaling = spec.autoscaling
            if not scaling.enabled:
                return None
            current = spec.replicas
            state = self._states.get(key) or PlannerState(replicas=current)
            if state.replicas != current:  # someone else (a user, HPA) moved it: plan from what is there
                state = state.model_copy(update={"replicas": current})
            ready = (obj.get("status") or {}).get("readyReplicas")
            result = plan(
                state,
                ScaleRequest(
                    direction=step,
                    source=source,
                    reason=reason,
                    now_s=self.clock(),
                    wanted=wanted,
                    load_after=load_after,
                ),
                ReplicaBounds(min_replicas=scaling.min_replicas, max_replicas=scaling.max_replicas),
                Cooldowns(up_s=scaling.scale_up_cooldown_seconds, down_s=scaling.scale_down_cooldown_seconds),
                ready_replicas=int(ready) if ready is not None else None,
            )
            opmetrics.DESIRED_REPLICAS.labels(namespace=namespace, name=name).set(result.replicas)
            if result.changed and scaling.mode == "planner":
                await self.kube.merge_patch(
                    api.API_VERSION,
                    api.KIND,
                    namespace,
                    name,
                    {"spec": {"replicas": result.replicas}},
                    subresource="scale",
                )
                log.info(
                    "%s/%s replicas %d -> %d (%s)",
                    namespace,
                    name,
                    result.previous,
                    result.replicas,
                    result.detail,
                )
            self._states[key] = result.state
            return result

    def forget(self, namespace: str, name: str) -> None:
        self._states.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)
