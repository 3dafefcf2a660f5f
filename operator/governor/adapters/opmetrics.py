"""The operator's own Prometheus metrics (prometheus-client), served on ``governor operator --metrics-port``.

A plain module of metric objects: handlers and the control loop import and update them. Names come from
governor.core.signals (OP_*); labels are namespace/name of the InferenceService where one applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

from governor.core import signals

if TYPE_CHECKING:
    from governor.core.law import LawConfig
    from governor.services.control import StepReport

RECONCILES = Counter(
    signals.OP_RECONCILES,
    "Reconciles of an InferenceService's children, by trigger and result.",
    ["namespace", "name", "trigger", "result"],
)
RECONCILE_ERRORS = Counter(
    signals.OP_RECONCILE_ERRORS,
    "Failed reconciles, by reason (invalid, api, conflict, ...).",
    ["namespace", "name", "reason"],
)
MANAGED = Gauge(
    signals.OP_MANAGED,
    "Objects the operator manages, by kind (InferenceService and each child kind).",
    ["kind"],
)
CHILD_CHANGES = Counter(
    signals.OP_CHILD_WRITES,
    "Children created or patched (drift repaired), by kind and action.",
    ["kind", "action"],
)

# --- the control loop (governor.handlers.loop; standalone mode uses namespace "standalone") ---
_ISVC = ["namespace", "name"]
CAP = Gauge(signals.OP_CAP, "Cap (max_num_active_seqs) the governor holds on the engines.", _ISVC)
CEILING = Gauge(signals.OP_CEILING, "The cap's ceiling: the engines' startup max_num_seqs.", _ISVC)
CAP_FLOOR = Gauge(signals.OP_CAP_FLOOR, "The cap's floor (adaptive.minCap).", _ISVC)
P99 = Gauge(signals.OP_P99, "Observed SLO latency quantile over the window (seconds).", _ISVC)
P99_SMOOTHED = Gauge(signals.OP_P99_SMOOTHED, "EWMA-smoothed SLO latency quantile the law acts on.", _ISVC)
SLO_TARGET = Gauge(signals.OP_SLO_TARGET, "The SLO's latency target (seconds).", _ISVC)
DECISIONS = Counter(
    signals.OP_DECISIONS,
    "Control-law decisions, by direction (up, down, hold) and reason.",
    [*_ISVC, "direction", "reason"],
)
DESIRED_REPLICAS = Gauge(
    signals.OP_DESIRED_REPLICAS,
    "Replicas the replica planner wants (exported even when it does not write).",
    _ISVC,
)

MODEL_PER_TOKEN_CAP = Gauge(
    signals.OP_MODEL_PER_TOKEN_CAP,
    "The largest cap the levers law's fit says meets the per-token SLO (NaN: no confident fit finds one).",
    _ISVC,
)
MODEL_QUEUE_FLOOR = Gauge(
    signals.OP_MODEL_QUEUE_FLOOR,
    "The smallest cap the levers law's queue model says carries the arrivals (NaN: unknown).",
    _ISVC,
)
MODEL_ARRIVALS = Gauge(
    signals.OP_MODEL_ARRIVALS,
    "Requests per second reaching the engines, as the levers law counts them (completions + growth held).",
    _ISVC,
)
MODEL_SERVICE = Gauge(
    signals.OP_MODEL_SERVICE,
    "Requests per second the levers law's queue model says the engines serve at the cap decided.",
    _ISVC,
)
MODEL_STEP_COST = Gauge(
    signals.OP_MODEL_STEP_COST,
    "What one engine step costs as the levers law fits it on the runtime's step counters, by part: base (per "
    "step), sequence, context_token, prefill_token (NaN: not learned yet).",
    [*_ISVC, "part"],
)
_STEP_PARTS = (
    ("base", "base_s"),
    ("sequence", "per_sequence_s"),
    ("context_token", "per_context_token_s"),
    ("prefill_token", "per_prefill_token_s"),
)
_OUTLOOK = (
    (MODEL_PER_TOKEN_CAP, "per_token_cap"),
    (MODEL_QUEUE_FLOOR, "queue_floor"),
    (MODEL_ARRIVALS, "arrivals_rps"),
    (MODEL_SERVICE, "service_rps"),
)


def export_step(namespace: str, name: str, cfg: LawConfig, report: StepReport) -> None:
    """One control step's series (the Kopf loop and `governor run` export the same ones)."""
    labels = {"namespace": namespace, "name": name}
    decision = report.decision
    CAP.labels(**labels).set(decision.cap)
    CEILING.labels(**labels).set(cfg.ceiling)
    CAP_FLOOR.labels(**labels).set(cfg.min_cap)
    SLO_TARGET.labels(**labels).set(cfg.slo_target_s)
    P99.labels(**labels).set(float("nan") if report.observed_p99 is None else report.observed_p99)
    if decision.state.p99_smoothed is not None:
        P99_SMOOTHED.labels(**labels).set(decision.state.p99_smoothed)
    if report.desired_replicas is not None:
        DESIRED_REPLICAS.labels(**labels).set(report.desired_replicas)
    DECISIONS.labels(**labels, direction=decision.direction, reason=decision.reason).inc()
    for gauge, field in _OUTLOOK:  # NaN (absent in PromQL) where the model says nothing, or no model runs
        value = None if decision.outlook is None else getattr(decision.outlook, field)
        gauge.labels(**labels).set(float("nan") if value is None else value)
    costs = None if decision.outlook is None else decision.outlook.step_costs
    for part, field in _STEP_PARTS:
        cost = None if costs is None else getattr(costs, field)
        MODEL_STEP_COST.labels(**labels, part=part).set(float("nan") if cost is None else cost)


def forget_service(namespace: str, name: str) -> None:
    """A loop that stops leaves no stale value behind: its gauges read NaN (absent in PromQL)."""
    for metric in (CAP, P99, P99_SMOOTHED, *(gauge for gauge, _ in _OUTLOOK)):
        metric.labels(namespace=namespace, name=name).set(float("nan"))
    for part, _ in _STEP_PARTS:
        MODEL_STEP_COST.labels(namespace=namespace, name=name, part=part).set(float("nan"))
