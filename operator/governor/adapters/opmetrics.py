"""The operator's own Prometheus metrics (prometheus-client), served on ``governor operator --metrics-port``.

A plain module of metric objects: handlers and the control loop import and update them. Names come from
governor.core.signals (OP_*); labels are namespace/name of the InferenceService where one applies.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from governor.core import signals

RECONCILES = Counter(
    signals.OP_RECONCILES, "Reconciles of an InferenceService's children, by trigger and result.",
    ["namespace", "name", "trigger", "result"],
)
RECONCILE_ERRORS = Counter(
    signals.OP_RECONCILE_ERRORS, "Failed reconciles, by reason (invalid, api, conflict, ...).",
    ["namespace", "name", "reason"],
)
MANAGED = Gauge(
    signals.OP_MANAGED, "Objects the operator manages, by kind (InferenceService and each child kind).",
    ["kind"],
)
CHILD_CHANGES = Counter(
    signals.OP_CHILD_WRITES, "Children created or patched (drift repaired), by kind and action.",
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
    signals.OP_DECISIONS, "Control-law decisions, by direction (up, down, hold) and reason.",
    [*_ISVC, "direction", "reason"],
)
DESIRED_REPLICAS = Gauge(
    signals.OP_DESIRED_REPLICAS, "Replicas the replica planner wants (exported even when it does not write).",
    _ISVC,
)
