"""The operator's own Prometheus metrics (prometheus-client), served on ``governor operator --metrics-port``.

A plain module of metric objects: handlers and the control loop import and update them. Names come from
governor.signals (OP_*); labels are namespace/name of the InferenceService where one applies.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from governor import signals

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
