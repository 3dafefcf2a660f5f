"""Kopf handlers: an InferenceService's children, its status from them, and drift repair.

Thin on purpose: parse the object (governor.core.spec), build the children (governor.core.builders, pure),
apply them
(governor.adapters.kube, the only API adapter), and report (status conditions, Events,
governor.adapters.opmetrics).

* create / update / resume of an InferenceService → reconcile every child, then status.
* a child (found by the ``governor.vllm.ai/inferenceservice`` label) modified or deleted by hand → the same
  reconcile for its owner, found in a Kopf index (no LIST calls): the edit is reverted, a deleted child is
  re-created. Deployment changes also refresh Ready/Progressing/Degraded.
* an invalid spec → condition ``Invalid`` with a message naming each field, a Warning Event, and
  ``kopf.PermanentError`` (no retries until the spec changes again; the operator keeps running).
* deletion → nothing to delete by hand (children carry owner references, the garbage collector removes
  them); the handler releases the finalizer once the bookkeeping is done.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import secrets
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, cast

import kopf
from pydantic import ValidationError

from governor.adapters import kube, opmetrics
from governor.core import builders
from governor.core import spec as api

ISVC = (api.GROUP, api.VERSION, api.PLURAL)
CHILD_LABELS = {builders.LABEL_OWNER: kopf.PRESENT}
MONITORING_GROUP = "monitoring.coreos.com"

_locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)
_managed: dict[tuple[str, str], set[str]] = {}


class InvalidSpec(Exception):
    """The object cannot be reconciled until the user changes it."""


# --- operator set-up ----------------------------------------------------------------------------------------

@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Kopf keeps its bookkeeping in our annotations (not in status, which users read)."""
    settings.persistence.finalizer = f"{api.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=api.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=api.GROUP)
    settings.posting.level = logging.INFO


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """One notion of the cluster for Kopf and governor.adapters.kube.

    When governor.adapters.kube was configured explicitly before start (tests, ``governor operator
    --server``), Kopf
    uses that server; otherwise the in-cluster service account or the kubeconfig, handed to
    governor.adapters.kube.
    """
    explicit = kube.explicit_connection()
    if explicit is not None:
        return kopf.ConnectionInfo(server=explicit.server, token=explicit.token, insecure=explicit.insecure)
    info: kopf.ConnectionInfo | None = (
        kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    )
    if info is not None:
        kube.configure(
            info.server, token=info.token, ca_path=_text(info.ca_path), ca_data=info.ca_data,
            insecure=bool(info.insecure), cert_path=_text(info.certificate_path),
            cert_data=info.certificate_data, key_path=_text(info.private_key_path),
            key_data=info.private_key_data, explicit=False,
        )
    return info


def _text(path: Any) -> str | None:
    return None if path is None else str(path)


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    await kube.close_implicit()


@kopf.index(*ISVC)
def inferenceservices(
    namespace: str | None, name: str, body: kopf.Body, **_: Any,
) -> dict[tuple[str, str], Any]:
    """(namespace, name) → the object, for child events to find their owner without a LIST."""
    return {(namespace or "", name): copy.deepcopy(dict(body))}


# --- the InferenceService itself ----------------------------------------------------------------------------

@kopf.on.resume(*ISVC)
@kopf.on.create(*ISVC)
@kopf.on.update(*ISVC)
async def reconcile_inferenceservice(body: kopf.Body, reason: str, logger: kopf.Logger, **_: Any) -> None:
    await _reconcile(dict(body), trigger=str(reason), logger=logger)


@kopf.on.delete(*ISVC)
def release(name: str, namespace: str | None, logger: kopf.Logger, **_: Any) -> None:
    _managed.pop((namespace or "", name), None)
    _locks.pop((namespace or "", name), None)
    _count_managed()
    logger.info("Released; the garbage collector removes the children through their owner references.")


# --- children -----------------------------------------------------------------------------------------------

@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event("v1", "services", labels=CHILD_LABELS)
@kopf.on.event("v1", "secrets", labels=CHILD_LABELS)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=CHILD_LABELS)
async def child_changed(
    type: str, labels: Mapping[str, str], namespace: str | None, logger: kopf.Logger,
    inferenceservices: kopf.Index[tuple[str, str], Any] | None = None, **_: Any,
) -> None:
    """A child was edited or deleted (by hand, or its status moved): bring it back to the spec."""
    if type not in ("MODIFIED", "DELETED"):
        return  # ADDED: our own create, or the initial listing (the resume handler covers that)
    owner = (namespace or "", labels.get(builders.LABEL_OWNER, ""))
    store = inferenceservices.get(owner) if inferenceservices is not None else None
    if not store:
        return
    body = next(iter(store))
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return
    try:
        await _reconcile(body, trigger="child", logger=logger)
    except (kopf.PermanentError, kopf.TemporaryError) as error:
        logger.debug(f"Child reconcile of {owner} deferred: {error}")


# --- the reconcile (shared) ---------------------------------------------------------------------------------

async def _reconcile(body: dict[str, Any], *, trigger: str, logger: kopf.Logger) -> None:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    labels = {"namespace": namespace, "name": name}
    async with _locks[(namespace, name)]:
        try:
            isvc = _parse(body)
            outcomes = await _apply_children(body, isvc)
            await _report(body, isvc, outcomes, trigger=trigger)
        except InvalidSpec as error:
            opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="invalid").inc()
            if trigger == "child":
                raise kopf.PermanentError(str(error)) from None  # reported when the spec arrived
            opmetrics.RECONCILE_ERRORS.labels(**labels, reason="invalid").inc()
            await _report_invalid(body, str(error))
            raise kopf.PermanentError(f"Invalid spec: {error}") from None
        except kube.Busy as error:
            opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="retry").inc()
            raise kopf.TemporaryError(str(error), delay=2) from None
        except kube.KubeError as error:
            opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="error").inc()
            opmetrics.RECONCILE_ERRORS.labels(**labels, reason=f"api-{error.status}").inc()
            raise kopf.TemporaryError(f"Kubernetes API: {error}", delay=10) from None
    opmetrics.RECONCILES.labels(**labels, trigger=trigger, result="ok").inc()


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


async def _apply_children(body: Mapping[str, Any], isvc: api.InferenceServiceSpec) -> list[kube.Outcome]:
    meta = body["metadata"]
    owner = builders.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    token, secret = await kube.ensure_secret(
        lambda token: builders.build_admin_secret(owner, token), builders.TOKEN_KEY,
        lambda: secrets.token_urlsafe(32),
    )
    monitoring = isvc.monitoring.pod_monitor != "disabled" and await kube.has_api_group(MONITORING_GROUP)
    if isvc.monitoring.pod_monitor == "enabled" and not monitoring:
        kopf.warn(_ref(body), reason="NoPodMonitorAPI",
                  message=f"{MONITORING_GROUP} is not installed: pods carry prometheus.io scrape annotations")
    children = builders.build_children(owner, isvc, admin_token_hash=builders.token_hash(token),
                                       monitoring_api=monitoring)
    outcomes = [secret]
    for manifest in children:
        outcomes.append(await kube.ensure(manifest))
    _managed[(owner.namespace, owner.name)] = {outcome.kind for outcome in outcomes}
    _count_managed()
    return outcomes


_EVENT_REASONS = {
    ("created", "child"): "ChildRestored",
    ("patched", "child"): "DriftRepaired",
    ("created", "other"): "ChildCreated",
    ("patched", "other"): "ChildUpdated",
}


async def _report(body: dict[str, Any], isvc: api.InferenceServiceSpec, outcomes: list[kube.Outcome],
                  *, trigger: str) -> None:
    for outcome in outcomes:
        if outcome.action == "unchanged":
            continue
        opmetrics.CHILD_CHANGES.labels(kind=outcome.kind, action=outcome.action).inc()
        reason = _EVENT_REASONS[(outcome.action, "child" if trigger == "child" else "other")]
        kopf.info(_ref(body), reason=reason, message=f"{outcome.kind} {outcome.name} {outcome.action}")
    deployment = next((o.body for o in outcomes if o.kind == "Deployment"), None)
    resolved = isvc.resolve()
    generation = body["metadata"].get("generation")
    name = body["metadata"]["name"]
    flips: list[tuple[str, str]] = []

    def change(live: Mapping[str, Any]) -> dict[str, Any] | None:
        status = dict(live.get("status") or {})
        now = api.now_iso()
        conditions = list(status.get("conditions") or [])
        before = {c.get("type"): c.get("status") for c in conditions}
        for kind, ok, why, message in api.deployment_conditions(deployment, isvc.replicas):
            conditions = api.set_condition(conditions, kind, ok, why, message, generation, now)
        conditions = api.set_condition(conditions, "Invalid", False, "SpecValid", "", generation, now)
        flips[:] = [(c["type"], c["status"]) for c in conditions
                    if c["type"] in ("Ready", "Degraded") and before.get(c["type"]) != c["status"]]
        dstatus = (deployment or {}).get("status") or {}
        patch: dict[str, Any] = {
            "conditions": conditions,
            "replicas": int(dstatus.get("replicas") or 0),
            "readyReplicas": int(dstatus.get("readyReplicas") or 0),
            "selector": builders.selector_string(name),
            "ceiling": resolved.ceiling,
            "sloTargetMs": isvc.slo.target_ms if isvc.slo else None,
            "observedGeneration": generation,
        }
        if status.get("desiredReplicas") is None:
            patch["desiredReplicas"] = isvc.replicas
        if not resolved.adaptive:
            patch.update(cap=resolved.initial_cap, mode="static")
        else:
            if status.get("cap") is None:
                patch["cap"] = resolved.initial_cap
            if status.get("mode") in (None, "static"):
                patch["mode"] = "starting"
        changed = {k: v for k, v in patch.items() if status.get(k) != v}
        return changed or None

    await kube.update_inferenceservice_status(body["metadata"]["namespace"], name, change)
    for kind, value in flips:
        if kind == "Ready":
            kopf.info(_ref(body), reason="Ready" if value == "True" else "NotReady",
                      message=f"Ready is now {value}")
        elif value == "True":
            kopf.warn(_ref(body), reason="Degraded", message="the Deployment is not progressing")


async def _report_invalid(body: dict[str, Any], message: str) -> None:
    meta = body["metadata"]
    generation = meta.get("generation")

    def change(live: Mapping[str, Any]) -> dict[str, Any] | None:
        status = live.get("status") or {}
        conditions = api.set_condition(list(status.get("conditions") or []), "Invalid", True, "InvalidSpec",
                                       message, generation, api.now_iso())
        return {"conditions": conditions, "observedGeneration": generation}

    kopf.warn(_ref(body), reason="InvalidSpec", message=message)
    await kube.update_inferenceservice_status(meta["namespace"], meta["name"], change)


def _ref(body: Mapping[str, Any]) -> kopf.Body:
    """The object an Event is about (Kopf takes a Body; ours may come from the index as a plain dict)."""
    return kopf.Body(cast(kopf.RawBody, body))


def _count_managed() -> None:
    opmetrics.MANAGED.labels(kind=api.KIND).set(len(_managed))
    for kind in ("Deployment", "Service", "PodDisruptionBudget", "Secret", "PodMonitor"):
        opmetrics.MANAGED.labels(kind=kind).set(sum(kind in kinds for kinds in _managed.values()))
