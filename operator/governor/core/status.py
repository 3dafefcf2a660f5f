"""What the operator writes into an InferenceService's status: pure builders over the status models.

Each builder takes the live status and what happened, and answers the merge patch as the status model
dumped by alias (`InferenceServiceStatus` in governor.core.spec is the one schema: the CRD is generated from
it too). Only the fields a builder sets appear in its patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.core import spec as api
from governor.core.law import Decision, LawConfig


def _dump(status: api.InferenceServiceStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_unset=True, mode="json")


def loop_status(
    live: Mapping[str, Any],
    *,
    decision: Decision,
    cfg: LawConfig,
    ceiling: int,
    observed_p99_s: float | None,
    metrics: tuple[bool, str, str],
    held_cap: int | None,
    desired_replicas: int | None,
    now: str,
) -> dict[str, Any]:
    """The control loop's status after one step. `metrics` is (fresh, reason, message)."""
    status = live.get("status") or {}
    generation = (live.get("metadata") or {}).get("generation")
    fresh, why, message = metrics
    conditions = api.set_condition(
        list(status.get("conditions") or []), "MetricsAvailable", fresh, why, message, generation, now
    )
    smoothed = decision.state.p99_smoothed
    met = None if smoothed is None or not fresh else smoothed <= cfg.slo_target_s
    conditions = api.set_condition(
        conditions,
        "SLOMet",
        met,
        "Unknown" if met is None else ("WithinTarget" if met else "AboveTarget"),
        ""
        if smoothed is None
        else f"smoothed P{cfg.quantile * 100:g} {smoothed * 1000:.1f} ms,"
        f" target {cfg.slo_target_s * 1000:g} ms",
        generation,
        now,
    )
    fields: dict[str, Any] = {
        "conditions": conditions,
        "cap": held_cap if held_cap is not None else status.get("cap"),
        "ceiling": ceiling,
        "observed_p99_ms": None if observed_p99_s is None else round(observed_p99_s * 1000, 3),
        "smoothed_p99_ms": None if smoothed is None else round(smoothed * 1000, 3),
        "slo_target_ms": cfg.slo_target_s * 1000,
        "mode": decision.mode,
        "law": decision.state.model_dump(mode="json"),
    }
    if desired_replicas is not None:
        fields["desired_replicas"] = desired_replicas
    if decision.cap != decision.previous_cap or not status.get("lastDecision"):
        fields["last_decision"] = api.LastDecision(
            time=now,
            from_=decision.previous_cap,
            to=decision.cap,
            reason=f"{decision.reason}: {decision.detail}",
        )
    return _dump(api.InferenceServiceStatus(**fields))


def children_status(
    live: Mapping[str, Any],
    *,
    isvc: api.InferenceServiceSpec,
    deployment: Mapping[str, Any] | None,
    selector: str,
    generation: int | None,
    now: str,
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    """Status from the children (Ready/Progressing/Degraded, replicas, the static fields). Answers the patch
    (None when nothing changed) and the Ready/Degraded flips, each (type, new status), for Events."""
    status = dict(live.get("status") or {})
    conditions = list(status.get("conditions") or [])
    before = {c.get("type"): c.get("status") for c in conditions}
    for kind, ok, why, message in api.deployment_conditions(dict(deployment) if deployment else None,
                                                            isvc.replicas):
        conditions = api.set_condition(conditions, kind, ok, why, message, generation, now)
    conditions = api.set_condition(conditions, "Invalid", False, "SpecValid", "", generation, now)
    flips = [(c["type"], c["status"]) for c in conditions
             if c["type"] in ("Ready", "Degraded") and before.get(c["type"]) != c["status"]]
    resolved = isvc.resolve()
    dstatus = (deployment or {}).get("status") or {}
    fields: dict[str, Any] = {
        "conditions": conditions,
        "replicas": int(dstatus.get("replicas") or 0),
        "ready_replicas": int(dstatus.get("readyReplicas") or 0),
        "selector": selector,
        "ceiling": resolved.ceiling,
        "slo_target_ms": isvc.slo.target_ms if isvc.slo else None,
        "observed_generation": generation,
    }
    if status.get("desiredReplicas") is None:
        fields["desired_replicas"] = isvc.replicas
    if not resolved.adaptive:
        fields.update(cap=resolved.initial_cap, mode="static")
    else:
        if status.get("cap") is None:
            fields["cap"] = resolved.initial_cap
        if status.get("mode") in (None, "static"):
            fields["mode"] = "starting"
    patch = _dump(api.InferenceServiceStatus(**fields))
    changed = {k: v for k, v in patch.items() if status.get(k) != v}
    return changed or None, flips


def invalid_status(live: Mapping[str, Any], message: str, generation: int | None, now: str) -> dict[str, Any]:
    """An invalid spec: condition Invalid with the message naming each field."""
    status = live.get("status") or {}
    conditions = api.set_condition(
        list(status.get("conditions") or []), "Invalid", True, "InvalidSpec", message, generation, now
    )
    return _dump(api.InferenceServiceStatus(conditions=conditions, observed_generation=generation))
