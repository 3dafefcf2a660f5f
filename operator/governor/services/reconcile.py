"""Reconciling an InferenceService: parse the object, build its children (pure), apply them, report status.

Called by the Kopf handlers (governor.handlers.children) for create/update/resume of the object and for any
hand edit or deletion of a child. Errors become Kopf's vocabulary: an invalid spec a `kopf.PermanentError`
(after condition Invalid and a Warning Event), a busy or failing API a `kopf.TemporaryError` with a delay.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import kopf
from pydantic import ValidationError

from governor.adapters import opmetrics
from governor.adapters.kube import Busy, Kube, KubeError, Outcome
from governor.core import builders
from governor.core import spec as api
from governor.core import status as status_builders

MONITORING_GROUP = "monitoring.coreos.com"


class InvalidSpec(Exception):
    """The object cannot be reconciled until the user changes it."""


@dataclass
class Reconciler:
    """One per operator (in Kopf's memo): the API client, a lock per object, and which child kinds each
    object has."""

    kube: Kube
    locks: defaultdict[tuple[str, str], asyncio.Lock] = field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )
    managed: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def release(self, namespace: str, name: str) -> None:
        self.managed.pop((namespace, name), None)
        self.locks.pop((namespace, name), None)
        self._count_managed()

    async def reconcile(self, body: dict[str, Any], *, trigger: str) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        labels = {"namespace": namespace, "name": name}
        async with self.locks[(namespace, name)]:
            try:
                isvc = _parse(body)
                outcomes = await self._apply_children(body, isvc)
                await _report(self.kube, body, isvc, outcomes, trigger=trigger)
            except InvalidSpec as error:
                opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="invalid").inc()
                if trigger == "child":
                    raise kopf.PermanentError(str(error)) from None  # reported when the spec arrived
                opmetrics.RECONCILE_ERRORS.labels(**labels, reason="invalid").inc()
                await _report_invalid(self.kube, body, str(error))
                raise kopf.PermanentError(f"Invalid spec: {error}") from None
            except Busy as error:
                opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="retry").inc()
                raise kopf.TemporaryError(str(error), delay=2) from None
            except KubeError as error:
                opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="error").inc()
                opmetrics.RECONCILE_ERRORS.labels(**labels, reason=f"api-{error.status}").inc()
                raise kopf.TemporaryError(f"Kubernetes API: {error}", delay=10) from None
        opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="ok").inc()

    async def _apply_children(self, body: Mapping[str, Any], isvc: api.InferenceServiceSpec) -> list[Outcome]:
        meta = body["metadata"]
        owner = builders.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        token, secret = await self.kube.ensure_secret(
            lambda token: builders.build_admin_secret(owner, token),
            builders.TOKEN_KEY,
            lambda: secrets.token_urlsafe(32),
        )
        wanted = isvc.monitoring.pod_monitor != "disabled"
        monitoring = wanted and await self.kube.has_api_group(MONITORING_GROUP)
        if isvc.monitoring.pod_monitor == "enabled" and not monitoring:
            message = f"{MONITORING_GROUP} is not installed: pods carry prometheus.io scrape annotations"
            kopf.warn(_ref(body), reason="NoPodMonitorAPI", message=message)
        children = builders.build_children(
            owner, isvc, admin_token_hash=builders.token_hash(token), monitoring_api=monitoring
        )
        outcomes = [secret]
        for manifest in children:
            outcomes.append(await self.kube.ensure(manifest))
        self.managed[(owner.namespace, owner.name)] = {outcome.kind for outcome in outcomes}
        self._count_managed()
        return outcomes

    def _count_managed(self) -> None:
        opmetrics.MANAGED.labels(kind=api.KIND).set(len(self.managed))
        for kind in ("Deployment", "Service", "PodDisruptionBudget", "Secret", "PodMonitor"):
            opmetrics.MANAGED.labels(kind=kind).set(sum(kind in kinds for kinds in self.managed.values()))


def _parse(body: Mapping[str, Any]) -> api.InferenceServiceSpec:
    problems = api.name_problems(body["metadata"]["name"])
    try:
        isvc = api.parse_spec(body.get("spec"))
    except ValidationError as error:
        problems.append(api.describe(error))
        isvc = None
    if problems or isvc is None:
        raise InvalidSpec("; ".join(problems))
    return isvc


_EVENT_REASONS = {
    ("created", "child"): "ChildRestored",
    ("patched", "child"): "DriftRepaired",
    ("created", "other"): "ChildCreated",
    ("patched", "other"): "ChildUpdated",
}


async def _report(
    client: Kube,
    body: dict[str, Any],
    isvc: api.InferenceServiceSpec,
    outcomes: list[Outcome],
    *,
    trigger: str,
) -> None:
    for outcome in outcomes:
        if outcome.action == "unchanged":
            continue
        opmetrics.CHILD_CHANGES.labels(kind=outcome.kind, action=outcome.action).inc()
        reason = _EVENT_REASONS[(outcome.action, "child" if trigger == "child" else "other")]
        kopf.info(_ref(body), reason=reason, message=f"{outcome.kind} {outcome.name} {outcome.action}")
    deployment = next((o.body for o in outcomes if o.kind == "Deployment"), None)
    meta = body["metadata"]
    flips: list[tuple[str, str]] = []

    def change(live: Mapping[str, Any]) -> dict[str, Any] | None:
        patch, flipped = status_builders.children_status(
            live,
            isvc=isvc,
            deployment=deployment,
            selector=builders.selector_string(meta["name"]),
            generation=meta.get("generation"),
            now=status_builders.now_iso(),
        )
        flips[:] = flipped
        return patch

    await client.update_inferenceservice_status(meta["namespace"], meta["name"], change)
    for kind, value in flips:
        if kind == "Ready":
            kopf.info(
                _ref(body), reason="Ready" if value == "True" else "NotReady", message=f"Ready is now {value}"
            )
        elif value == "True":
            kopf.warn(_ref(body), reason="Degraded", message="the Deployment is not progressing")


async def _report_invalid(client: Kube, body: dict[str, Any], message: str) -> None:
    meta = body["metadata"]
    kopf.warn(_ref(body), reason="InvalidSpec", message=message)
    await client.update_inferenceservice_status(
        meta["namespace"],
        meta["name"],
        lambda live: status_builders.invalid_status(
            live, message, meta.get("generation"), status_builders.now_iso()
        ),
    )


def _ref(body: Mapping[str, Any]) -> kopf.Body:
    """The object an Event is about (Kopf takes a Body; ours may come from the index as a plain dict)."""
    return kopf.Body(cast(kopf.RawBody, body))
