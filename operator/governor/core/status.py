"""What the operator writes into an InferenceService's status: pure builders over the status models.

Each builder takes the live status and what happened, and answers the merge patch as the status model
dumped by alias (`InferenceServiceStatus` in governor.core.spec is the one schema: the CRD is generated from
it too). Only the fields a builder sets appear in its patch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from governor.core import spec as api
from governor.core.law import Decision, LawConfig
from governor.core.levers.steps import StepCosts
from governor.core.spec import _Model

ConditionType = Literal[
    "Ready", "Progressing", "Degraded", "Invalid", "MetricsAvailable", "SLOMet", "CapEffective"
]
# The levers law's verdicts on the cap itself (governor.core.law.computed), as CapEffective=False reasons.
LEVER_VERDICTS = {"lever-inert": "NoEngineLever", "infeasible": "SLOInfeasible"}


class Condition(_Model):
    model_config = ConfigDict(extra="ignore")

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class LastDecision(_Model):
    model_config = ConfigDict(extra="ignore")

    time: str | None = None
    from_: int | None = Field(default=None, alias="from")
    to: int | None = None
    reason: str = ""


class StepCostsStatus(_Model):
    """An engine step's cost, fitted on the runtime's step counters (governor.core.levers.steps): a fixed
    part, a part per sequence in the batch, per thousand tokens of context the decoding sequences hold, and
    per thousand prefill tokens computed. A part the load has not yet shown, or not told apart from another
    (one batch size alone: the fixed and per-sequence parts), is null."""

    model_config = ConfigDict(extra="ignore")

    mean_ms: float | None = None
    """The mean step over the fit's memory: known before its parts are told apart."""
    base_ms: float | None = None
    per_sequence_ms: float | None = None
    per_1k_context_ms: float | None = Field(default=None, alias="per1kContextMs")
    per_1k_prefill_ms: float | None = Field(default=None, alias="per1kPrefillMs")
    relative_error: float | None = None
    """The fit's residual scale over the engine's mean busy share: how well the linear form holds."""


class ModelOutlook(_Model):
    """What the levers law's models said at the last tick (governor.core.law.Outlook); a field is absent where
    a model said nothing. The cap lies between the two caps when both are known: above the per-token cap the
    fits say the per-token SLO is missed, below the queue floor the arrivals outgrow the service."""

    model_config = ConfigDict(extra="ignore")

    per_token_cap: int | None = None
    """The largest cap a confident fit says meets the per-token target (with the law's margin)."""
    queue_floor: int | None = None
    """The smallest cap whose modelled service carries the arrivals (and, with a TTFT bound, whose backlog
    waits within it a window ahead); absent when no cap up to the law's limit does (replicas are then the
    answer), or when the queue model says nothing."""
    arrivals_rps: float | None = None
    """Requests per second reaching one engine: its completions plus the growth of what it holds."""
    service_rps: float | None = None
    """The queue model's service at the cap decided, in requests per second per engine."""
    step: StepCostsStatus | None = None
    """What one engine step costs, learned from the runtime's step counters; absent until it is."""


class InferenceServiceStatus(_Model):
    """Written by the operator. The law's state lives here so a restarted operator resumes, not resets."""

    model_config = ConfigDict(extra="allow")

    conditions: list[Condition] = Field(default_factory=list)
    replicas: int | None = None
    ready_replicas: int | None = None
    desired_replicas: int | None = None
    selector: str | None = None
    """Label selector of the pods (the scale subresource's labelSelectorPath)."""
    cap: int | None = None
    ceiling: int | None = None
    token_budget: int | None = None
    """The per-step token budget the engines hold, once the levers law has moved it (inter-token SLOs)."""
    observed_p99_ms: float | None = Field(default=None, alias="observedP99Ms")
    smoothed_p99_ms: float | None = Field(default=None, alias="smoothedP99Ms")
    slo_target_ms: float | None = None
    mode: str | None = None
    last_decision: LastDecision | None = None
    outlook: ModelOutlook | None = None
    """What the levers law's models said at the last tick; absent under the rule table and in static mode."""
    law: dict[str, Any] | None = None
    """Opaque control-law state."""
    observed_generation: int | None = None


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def set_condition(
    conditions: list[dict[str, Any]],
    type: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """Return conditions with one replaced; lastTransitionTime only moves when the status flips."""
    value = "Unknown" if status is None else ("True" if status else "False")
    old = next((c for c in conditions if c.get("type") == type), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == value else now
    new = {
        "type": type,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now,
        "observedGeneration": generation,
    }
    return [c for c in conditions if c.get("type") != type] + [new]


def deployment_conditions(
    deployment: dict[str, Any] | None,
    desired: int,
) -> list[tuple[str, bool, str, str]]:
    """Ready / Progressing / Degraded (type, status, reason, message) read from the Deployment. Pure."""
    if deployment is None:
        return [
            ("Ready", False, "DeploymentMissing", "the Deployment does not exist (yet)"),
            ("Progressing", True, "Creating", "creating the Deployment"),
            ("Degraded", False, "AsExpected", ""),
        ]
    st = deployment.get("status") or {}
    ready = int(st.get("readyReplicas") or 0)
    updated = int(st.get("updatedReplicas") or 0)
    generation = (deployment.get("metadata") or {}).get("generation")
    seen = st.get("observedGeneration")
    dconds = {c.get("type"): c for c in st.get("conditions") or []}
    stalled = dconds.get("Progressing", {}).get("status") == "False"
    failure = dconds.get("ReplicaFailure", {}).get("status") == "True"
    out: list[tuple[str, bool, str, str]] = []
    if desired == 0:
        out.append(("Ready", False, "ScaledToZero", "spec.replicas is 0"))
    elif ready >= desired:
        out.append(("Ready", True, "AllReplicasReady", f"{ready}/{desired} replicas ready"))
    else:
        out.append(("Ready", False, "ReplicasNotReady", f"{ready}/{desired} replicas ready"))
    rolling = (generation is not None and seen != generation) or updated < desired or ready < desired
    out.append(
        (
            "Progressing",
            rolling and not stalled,
            "RollingOut" if rolling else "Stable",
            f"{updated}/{desired} replicas updated, {ready} ready" if rolling else "all replicas up to date",
        )
    )
    if stalled or failure:
        reason = "ProgressDeadlineExceeded" if stalled else "ReplicaFailure"
        cond = dconds.get("Progressing" if stalled else "ReplicaFailure", {})
        out.append(("Degraded", True, reason, str(cond.get("message") or reason)))
    else:
        out.append(("Degraded", False, "AsExpected", ""))
    return out


def _outlook(decision: Decision) -> ModelOutlook | None:
    """The decision's outlook for status, rates to four digits. A rate that is not finite (the queue model's
    service is inf where its hold time is 0) is written as unknown: JSON has no inf, and the API server
    would refuse the whole status patch."""
    seen = decision.outlook
    if seen is None:
        return None
    rps = {
        name: float(f"{value:.4g}")
        if (value := getattr(seen, name)) is not None and math.isfinite(value)
        else None
        for name in ("arrivals_rps", "service_rps")
    }
    step = _step_costs(seen.step_costs)
    if (
        seen.per_token_cap is None
        and seen.queue_floor is None
        and step is None
        and all(v is None for v in rps.values())
    ):
        return None
    return ModelOutlook(per_token_cap=seen.per_token_cap, queue_floor=seen.queue_floor, step=step, **rps)


def _step_costs(costs: StepCosts | None) -> StepCostsStatus | None:
    """Milliseconds to four digits; None until a step is seen."""

    def ms(seconds: float | None, per: float = 1.0) -> float | None:
        return None if seconds is None else float(f"{seconds * per * 1e3:.4g}")

    if costs is None or costs.mean_step_s is None:
        return None
    error = costs.relative_error
    return StepCostsStatus(
        mean_ms=ms(costs.mean_step_s),
        base_ms=ms(costs.base_s),
        per_sequence_ms=ms(costs.per_sequence_s),
        per_1k_context_ms=ms(costs.per_context_token_s, 1000),
        per_1k_prefill_ms=ms(costs.per_prefill_token_s, 1000),
        relative_error=float(f"{error:.3g}") if error is not None and math.isfinite(error) else None,
    )


def _dump(status: InferenceServiceStatus) -> dict[str, Any]:
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
    held_budget: int | None = None,
) -> dict[str, Any]:
    """The control loop's status after one step. `metrics` is (fresh, reason, message)."""
    status = live.get("status") or {}
    generation = (live.get("metadata") or {}).get("generation")
    fresh, why, message = metrics
    conditions = set_condition(
        list(status.get("conditions") or []), "MetricsAvailable", fresh, why, message, generation, now
    )
    smoothed = decision.state.p99_smoothed
    met = None if smoothed is None or not fresh else smoothed <= cfg.slo_target_s
    conditions = set_condition(
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
    # The levers law's verdict: this tick's, or the one that stands (kept in its state between verdict ticks).
    verdict = LEVER_VERDICTS.get(decision.reason) or LEVER_VERDICTS.get(decision.state.verdict or "")
    current = next((c for c in conditions if c.get("type") == "CapEffective"), None)
    if verdict or current is not None:
        # Set by the first verdict, then kept current: False while the cap cannot answer the SLO.
        why, message = (verdict, decision.detail) if verdict else ("CapGoverns", "the cap moves the signal")
        if verdict and decision.reason not in LEVER_VERDICTS and current is not None:
            message = str(current.get("message") or message)  # a standing verdict keeps its sentence
        conditions = set_condition(conditions, "CapEffective", not verdict, why, message, generation, now)
    fields: dict[str, Any] = {
        "conditions": conditions,
        "cap": held_cap if held_cap is not None else status.get("cap"),
        "ceiling": ceiling,
        "observed_p99_ms": None if observed_p99_s is None else round(observed_p99_s * 1000, 3),
        "smoothed_p99_ms": None if smoothed is None else round(smoothed * 1000, 3),
        "slo_target_ms": cfg.slo_target_s * 1000,
        "mode": decision.mode,
        "law": decision.state.model_dump(mode="json"),
        # Set to null when no model spoke, so a merge patch clears the last tick's figures.
        "outlook": _outlook(decision),
    }
    if desired_replicas is not None:
        fields["desired_replicas"] = desired_replicas
    if decision.token_budget is not None and held_budget is not None:
        fields["token_budget"] = held_budget
    if decision.cap != decision.previous_cap or not status.get("lastDecision"):
        fields["last_decision"] = LastDecision(
            time=now,
            from_=decision.previous_cap,
            to=decision.cap,
            reason=f"{decision.reason}: {decision.detail}",
        )
    return _dump(InferenceServiceStatus(**fields))


# The loop's status is written at once when something users or automation act on changes, and otherwise
# refreshed every this many ticks (30 s at the default 5 s tick). Why not every tick: at 1,000 objects the
# per-tick write and the watch event it comes back as were half of the operator's CPU (py-spy, issue 13),
# while between decisions only the measured P99s and the law's memory move. Why a refresh at all: the law
# resumes from status after a restart, and `kubectl get` shows the P99s.
STATUS_REFRESH_TICKS = 6


def _material(status: Mapping[str, Any]) -> tuple[Any, ...]:
    conditions = sorted(
        (str(c.get("type")), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
    )
    return (
        conditions,
        *(
            status.get(k)
            for k in ("cap", "ceiling", "sloTargetMs", "mode", "desiredReplicas", "lastDecision")
        ),
    )


def loop_write_due(live_status: Mapping[str, Any], patch: Mapping[str, Any], refresh_ticks: int) -> bool:
    """Whether the control loop writes `patch` (from `loop_status`) this tick: a changed cap, ceiling, target,
    mode or replica wish, a new decision or a condition's new status or reason go out at once; otherwise the
    status is refreshed when the law's memory in it is `refresh_ticks` ticks old (1: every tick). Pure."""
    if _material({**live_status, **patch}) != _material(live_status):
        return True
    written = (live_status.get("law") or {}).get("ticks")
    ticks = (patch.get("law") or {}).get("ticks")
    return not isinstance(written, int) or not isinstance(ticks, int) or ticks - written >= refresh_ticks


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
    for kind, ok, why, message in deployment_conditions(
        dict(deployment) if deployment else None, isvc.replicas
    ):
        conditions = set_condition(conditions, kind, ok, why, message, generation, now)
    conditions = set_condition(conditions, "Invalid", False, "SpecValid", "", generation, now)
    flips = [
        (c["type"], c["status"])
        for kind in ("Ready", "Degraded")
        if (c := condition_flip(status, {"conditions": conditions}, kind)) is not None
    ]
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
    patch = _dump(InferenceServiceStatus(**fields))
    changed = {k: v for k, v in patch.items() if status.get(k) != v}
    return changed or None, flips


def invalid_status(live: Mapping[str, Any], message: str, generation: int | None, now: str) -> dict[str, Any]:
    """An invalid spec: condition Invalid with the message naming each field."""
    status = live.get("status") or {}
    conditions = set_condition(
        list(status.get("conditions") or []), "Invalid", True, "InvalidSpec", message, generation, now
    )
    return _dump(InferenceServiceStatus(conditions=conditions, observed_generation=generation))


def condition_flip(before: Mapping[str, Any], after: Mapping[str, Any], type: str) -> dict[str, Any] | None:
    """The condition `type` of `after` (a status or its patch) when its status differs from `before`'s."""

    def find(status: Mapping[str, Any]) -> dict[str, Any] | None:
        return next((c for c in status.get("conditions") or [] if c.get("type") == type), None)

    new, old = find(after), find(before)
    if new is None or (old is not None and old.get("status") == new.get("status")):
        return None
    return new
