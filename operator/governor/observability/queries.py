"""PromQL for the dashboards and alert rules, built from the metric names in governor.core.signals.

Label convention (what the scrape configuration in scrape.py guarantees, on every series the queries read):
- vLLM and runtime series scraped from the engine pods carry ``namespace`` and ``inferenceservice`` (the pod
  label ``governor.vllm.ai/inferenceservice`` relabelled) beside vLLM's own ``model_name`` and ``engine``.
- The operator's series are exported with ``namespace`` and ``name``; the scrape keeps the exported
  ``namespace`` (honor_labels) and copies ``name`` to ``inferenceservice``, so one selector reads both.
"""

from __future__ import annotations

from governor.core import signals
from governor.core.signals import LatencyKind

NAMESPACE_LABEL = "namespace"
ISVC_LABEL = "inferenceservice"
BY_ISVC = f"{NAMESPACE_LABEL}, {ISVC_LABEL}"

# Grafana's selector for the two dashboard variables.
DASHBOARD_SELECTOR = f'{NAMESPACE_LABEL}="$namespace", {ISVC_LABEL}="$inferenceservice"'
RATE_WINDOW = "$__rate_interval"

LATENCY_TITLES: dict[LatencyKind, str] = {
    LatencyKind.E2E: "End-to-end latency",
    LatencyKind.TTFT: "Time to first token",
    LatencyKind.INTER_TOKEN: "Inter-token latency",
    LatencyKind.TPOT: "Time per output token",
}


def _sel(selector: str) -> str:
    return "{" + selector + "}" if selector else ""


def _bucket_sel(selector: str, le: str | None = None) -> str:
    parts = [p for p in (selector, f'le="{le}"' if le is not None else "") if p]
    return "{" + ", ".join(parts) + "}" if parts else ""


def quantile(histogram: str, q: float, selector: str, window: str, by: str = "") -> str:
    """The q-quantile of a vLLM histogram over all pods matched by selector, per ``by`` group."""
    group = f"{by}, le" if by else "le"
    return (
        f"histogram_quantile({q}, sum by ({group}) "
        f"(rate({histogram}_bucket{_bucket_sel(selector)}[{window}])))"
    )


def latency_p99(kind: LatencyKind, selector: str = DASHBOARD_SELECTOR, window: str = RATE_WINDOW) -> str:
    return quantile(kind.histogram, 0.99, selector, window)


def latency_p50(kind: LatencyKind, selector: str = DASHBOARD_SELECTOR, window: str = RATE_WINDOW) -> str:
    return quantile(kind.histogram, 0.5, selector, window)


def queue_time_p95(selector: str = DASHBOARD_SELECTOR, window: str = RATE_WINDOW, by: str = "") -> str:
    return quantile(signals.QUEUE_TIME, 0.95, selector, window, by)


def total(metric: str, selector: str = DASHBOARD_SELECTOR, by: str = "") -> str:
    """Sum of a gauge over the pods of one InferenceService."""
    group = f" by ({by})" if by else ""
    return f"sum{group} ({metric}{_sel(selector)})"


def lowest(metric: str, selector: str = DASHBOARD_SELECTOR, by: str = "") -> str:
    group = f" by ({by})" if by else ""
    return f"min{group} ({metric}{_sel(selector)})"


def highest(metric: str, selector: str = DASHBOARD_SELECTOR, by: str = "") -> str:
    group = f" by ({by})" if by else ""
    return f"max{group} ({metric}{_sel(selector)})"


def per_second(
    counter: str, selector: str = DASHBOARD_SELECTOR, window: str = RATE_WINDOW, by: str = ""
) -> str:
    group = f" by ({by})" if by else ""
    return f"sum{group} (rate({counter}{_sel(selector)}[{window}]))"


def mean_step(selector: str = DASHBOARD_SELECTOR, window: str = RATE_WINDOW) -> str:
    """The mean engine step over the pods, in seconds, from the runtime's step counters."""
    return (
        f"{per_second(signals.RUNTIME_STEP_SECONDS, selector, window)}"
        f" / {per_second(signals.RUNTIME_STEPS, selector, window)}"
    )


def cap_utilisation(selector: str = DASHBOARD_SELECTOR, by: str = "") -> str:
    """Running requests over the live cap, summed over the pods (1.0: every admitted slot is busy)."""
    return f"{total(signals.RUNNING, selector, by)} / {total(signals.RUNTIME_CAP, selector, by)}"


def ready_replicas(selector: str = DASHBOARD_SELECTOR) -> str:
    """Engine pods Prometheus scrapes successfully (`up` carries the relabelled target labels)."""
    return f"sum (up{_sel(selector)})"


def operator(metric: str, selector: str = DASHBOARD_SELECTOR) -> str:
    """An operator gauge for one InferenceService (one series: the operator exports one per object)."""
    return f"max ({metric}{_sel(selector)})"


def cap_decisions(selector: str = DASHBOARD_SELECTOR) -> str:
    """Points in time where the operator's cap changed, valued at the new cap (Grafana annotations)."""
    cap = f"{signals.OP_CAP}{_sel(selector)}"
    return f"{cap} and changes({cap}[2m]) > 0"


def burn_rate_record(window: str) -> str:
    """Name of the recording rule holding the error-budget burn rate over one window (see alerts.py)."""
    return f"governor:slo_burn_rate:{window}"


def error_ratio_record(window: str) -> str:
    return f"governor:slo_errors:ratio_rate{window}"


def burn_rate(window: str, selector: str = DASHBOARD_SELECTOR) -> str:
    return f"{burn_rate_record(window)}{_sel(selector)}"
