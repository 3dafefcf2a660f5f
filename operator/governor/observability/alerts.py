"""Alert and recording rules: one model, rendered as a plain Prometheus rules file and as the body of the Helm
chart's PrometheusRule template (where the SLO and thresholds come from values.yaml).

Rules
- SLO error budget (multi-window, multi-burn-rate, Google SRE workbook ch. 5): a request is good when its
  latency (the chart's SLO latency kind) falls in a bucket at or below the threshold.
  Burn rate = error ratio / (1 - objective). Fast burn: 14.4x over 1 h and 5 m, or 6x over 6 h and 30 m
  (2 % / 5 % of a 30-day budget). Slow burn: 3x over 1 d and 2 h, or 1x over 3 d and 6 h. The short window
  resets the alert quickly once the burn stops, so these alerts need no `for`.
- Saturation (these drive alert-driven autoscaling, label ``governor_scale``): queue-time P95 above 2 s
  (seed 001 §4.2), and the cap pinned at its floor while the governed P99 still misses: vertical scaling is
  exhausted. Sustained headroom (cap utilisation below 20 % with an empty queue) allows a scale-in.
- Absence: the operator exports nothing, or governs an InferenceService whose runtime exports nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

import yaml

from governor.core import signals
from governor.core.signals import LatencyKind
from governor.observability import queries
from governor.observability.queries import BY_ISVC

SCALE_LABEL = "governor_scale"
SCALE_OUT = "out"
SCALE_IN = "in"

SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
# (long window, short window, burn-rate factor)
FAST_BURN = (("1h", "5m", "14.4"), ("6h", "30m", "6"))
SLOW_BURN = (("1d", "2h", "3"), ("3d", "6h", "1"))

# Thresholds must be bucket boundaries present both in vLLM's default buckets and in the governor runtime's
# finer ones, or no `le` series matches; the chart's values.schema.json offers exactly these.
_PER_TOKEN = ("0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.5", "1.0", "2.5")
SLO_THRESHOLDS: dict[LatencyKind, tuple[str, ...]] = {
    LatencyKind.TPOT: _PER_TOKEN,
    LatencyKind.INTER_TOKEN: _PER_TOKEN,
    LatencyKind.TTFT: (
        "0.01",
        "0.025",
        "0.05",
        "0.075",
        "0.1",
        "0.15",
        "0.2",
        "0.25",
        "0.3",
        "0.4",
        "0.5",
        "0.8",
        "1.0",
        "2.5",
        "5.0",
        "7.5",
        "10.0",
        "20.0",
        "30.0",
        "60.0",
        "120.0",
    ),
    LatencyKind.E2E: (
        "0.3",
        "0.5",
        "0.8",
        "1.0",
        "1.5",
        "2.0",
        "2.5",
        "5.0",
        "10.0",
        "15.0",
        "20.0",
        "30.0",
        "60.0",
        "120.0",
    ),
}


@dataclass(frozen=True)
class AlertSettings:
    """Everything a user tunes (Helm: .Values.alerts). Strings, as they appear in PromQL and durations."""

    slo_latency: str = LatencyKind.TPOT.value
    slo_threshold_seconds: str = "0.05"
    slo_objective: str = "0.99"
    queue_time_p95_seconds: str = "2"
    queue_saturated_for: str = "5m"
    cap_at_floor_for: str = "10m"
    headroom_utilisation: str = "0.2"
    headroom_for: str = "15m"
    metrics_absent_for: str = "5m"


# Helm value paths of each setting, under .Values.alerts.
HELM_VALUE_PATHS: dict[str, str] = {
    "slo_latency": ".Values.alerts.slo.latency",
    "slo_threshold_seconds": ".Values.alerts.slo.thresholdSeconds",
    "slo_objective": ".Values.alerts.slo.objective",
    "queue_time_p95_seconds": ".Values.alerts.queueTimeP95Seconds",
    "queue_saturated_for": ".Values.alerts.for.queueSaturated",
    "cap_at_floor_for": ".Values.alerts.for.capAtFloor",
    "headroom_utilisation": ".Values.alerts.headroom.utilisation",
    "headroom_for": ".Values.alerts.for.headroom",
    "metrics_absent_for": ".Values.alerts.for.metricsAbsent",
}


def helm_values(settings: AlertSettings = AlertSettings()) -> dict[str, Any]:
    """The `alerts` section of values.yaml holding these settings (the chart's defaults come from here)."""
    return {
        "slo": {
            "latency": settings.slo_latency,
            "thresholdSeconds": settings.slo_threshold_seconds,
            "objective": settings.slo_objective,
        },
        "queueTimeP95Seconds": settings.queue_time_p95_seconds,
        "headroom": {"utilisation": settings.headroom_utilisation},
        "for": {
            "queueSaturated": settings.queue_saturated_for,
            "capAtFloor": settings.cap_at_floor_for,
            "headroom": settings.headroom_for,
            "metricsAbsent": settings.metrics_absent_for,
        },
    }


@dataclass(frozen=True)
class _Text:
    """The settings as they are spliced into rules: literal values, or Helm expressions."""

    histogram: str
    slo_threshold_seconds: str
    slo_objective: str
    queue_time_p95_seconds: str
    queue_saturated_for: str
    cap_at_floor_for: str
    headroom_utilisation: str
    headroom_for: str
    metrics_absent_for: str


def _literal(settings: AlertSettings) -> _Text:
    kind = LatencyKind(settings.slo_latency)
    if settings.slo_threshold_seconds not in SLO_THRESHOLDS[kind]:
        raise ValueError(
            f"SLO threshold {settings.slo_threshold_seconds} s is not a bucket boundary of {kind.histogram}; "
            f"choose one of {', '.join(SLO_THRESHOLDS[kind])}"
        )
    values = {f.name: getattr(settings, f.name) for f in fields(settings) if f.name != "slo_latency"}
    return _Text(histogram=kind.histogram, **values)


def _error_ratio(t: _Text, window: str) -> str:
    good = f'sum by ({BY_ISVC}) (rate({t.histogram}_bucket{{le="{t.slo_threshold_seconds}"}}[{window}]))'
    every = f"sum by ({BY_ISVC}) (rate({t.histogram}_count[{window}]))"
    return f"1 - ({good} / {every})"


def _burn_condition(pairs: tuple[tuple[str, str, str], ...]) -> str:
    clauses = [
        f"({queries.burn_rate_record(long)} > {factor} and {queries.burn_rate_record(short)} > {factor})"
        for long, short, factor in pairs
    ]
    return "\n  or\n".join(clauses)


def _isvc(text: str) -> str:
    return text + " {{ $labels.namespace }}/{{ $labels.inferenceservice }}"


def _groups(t: _Text) -> list[dict[str, Any]]:
    recording: list[dict[str, Any]] = []
    for window in SLO_WINDOWS:
        recording.append({"record": queries.error_ratio_record(window), "expr": _error_ratio(t, window)})
        recording.append(
            {
                "record": queries.burn_rate_record(window),
                "expr": f"{queries.error_ratio_record(window)} / (1 - {t.slo_objective})",
            }
        )
    slo_alerts: list[dict[str, Any]] = [
        {
            "alert": "VLLMGovernorErrorBudgetFastBurn",
            "expr": _burn_condition(FAST_BURN),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": _isvc("Latency SLO error budget burning fast for"),
                "description": "Burn rate {{ $value | humanize }}x: at this pace the 30-day error budget "
                "of the latency SLO is gone within days. The cap loop acts first; check "
                "the cap and replica panels.",
            },
        },
        {
            "alert": "VLLMGovernorErrorBudgetSlowBurn",
            "expr": _burn_condition(SLOW_BURN),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _isvc("Latency SLO error budget burning slowly for"),
                "description": "Burn rate {{ $value | humanize }}x over days: the latency SLO will be missed "
                "this month at this pace.",
            },
        },
    ]
    by = BY_ISVC
    saturation: list[dict[str, Any]] = [
        {
            "alert": "VLLMGovernorQueueSaturated",
            "expr": f"{queries.queue_time_p95(selector='', window='5m', by=by)} > {t.queue_time_p95_seconds}",
            "for": t.queue_saturated_for,
            "labels": {"severity": "warning", SCALE_LABEL: SCALE_OUT},
            "annotations": {
                "summary": _isvc("Requests queue too long for"),
                "description": "Queue-time P95 is {{ $value | humanizeDuration }}: the engines admit less "
                "than arrives. A replica is asked for (alert-driven autoscaling).",
            },
        },
        {
            "alert": "VLLMGovernorCapAtFloor",
            "expr": (
                f"(max by ({by}) ({signals.OP_CAP}) <= on ({by}) max by ({by}) ({signals.OP_CAP_FLOOR}))\n"
                f"and on ({by})\n"
                f"(max by ({by}) ({signals.OP_P99_SMOOTHED})\n"
                f"  > on ({by}) max by ({by}) ({signals.OP_SLO_TARGET}))"
            ),
            "for": t.cap_at_floor_for,
            "labels": {"severity": "warning", SCALE_LABEL: SCALE_OUT},
            "annotations": {
                "summary": _isvc("Cap pinned at its floor and the SLO still missed for"),
                "description": "The cap cannot go lower: vertical scaling is exhausted. "
                "A replica is asked for.",
            },
        },
        {
            "alert": "VLLMGovernorHeadroom",
            "expr": (
                f"({queries.cap_utilisation(selector='', by=by)}) < {t.headroom_utilisation}\n"
                f"and on ({by})\n"
                f"{queries.total(signals.WAITING, selector='', by=by)} == 0"
            ),
            "for": t.headroom_for,
            "labels": {"severity": "info", SCALE_LABEL: SCALE_IN},
            "annotations": {
                "summary": _isvc("Sustained headroom on"),
                "description": "Cap utilisation {{ $value | humanizePercentage }} with an empty queue: one "
                "replica fewer would do (scale-in once no scale-out alert is firing).",
            },
        },
    ]
    absence: list[dict[str, Any]] = [
        {
            "alert": "VLLMGovernorOperatorMetricsAbsent",
            "expr": 'absent({__name__=~"governor_.+"})',
            "for": t.metrics_absent_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The vLLM Governor operator exports no metrics",
                "description": "Prometheus scrapes no governor_* series: the operator is down or its "
                "ServiceMonitor does not match. Caps and replicas are frozen meanwhile.",
            },
        },
        {
            "alert": "VLLMGovernorRuntimeMetricsAbsent",
            "expr": (
                f"max by ({by}) ({signals.OP_CAP})\nunless on ({by})\nmax by ({by}) ({signals.RUNTIME_CAP})"
            ),
            "for": t.metrics_absent_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _isvc("No runtime metrics from"),
                "description": "The operator governs this InferenceService but Prometheus holds no "
                f"{signals.RUNTIME_CAP} for it: the pods are down, the runtime plugin is not "
                "loaded, or the PodMonitor does not match. The cap loop is blind.",
            },
        },
    ]
    return [
        {"name": "vllm-governor-slo-recording", "rules": recording},
        {"name": "vllm-governor-slo", "rules": slo_alerts},
        {"name": "vllm-governor-saturation", "rules": saturation},
        {"name": "vllm-governor-absence", "rules": absence},
    ]


_SOURCE = "governor/observability/alerts.py"


class _Dumper(yaml.SafeDumper):
    """Multi-line PromQL as literal blocks, the way people write rules files."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)


def rule_groups(settings: AlertSettings = AlertSettings()) -> list[dict[str, Any]]:
    return _groups(_literal(settings))


def rules_file(settings: AlertSettings = AlertSettings()) -> str:
    """The plain Prometheus rules file (`rule_files:` of prometheus.yml)."""
    header = f"# Generated by `python -m governor.observability generate` from {_SOURCE}.\n"
    return header + _dump({"groups": rule_groups(settings)})


_TOKEN = "@@HELM_{}@@"
_HISTOGRAMS_DICT = " ".join(f'"{kind.value}" "{kind.histogram}"' for kind in LatencyKind)


def helm_prometheusrule_template() -> str:
    """The chart's PrometheusRule template: the same groups, each setting replaced by its Helm value."""
    tokens = {f.name: _TOKEN.format(f.name.upper()) for f in fields(_Text)}
    body = _dump({"groups": _groups(_Text(**tokens))})
    # Prometheus' own template braces pass through Helm verbatim.
    body = re.sub(r"\{\{|\}\}", lambda m: "{{`" + m.group(0) + "`}}", body)
    body = body.replace(tokens["histogram"], "{{ $histogram }}")
    for name, path in HELM_VALUE_PATHS.items():
        if name in tokens:
            body = body.replace(tokens[name], "{{ " + path + " }}")
    indented = "".join("  " + line if line.strip() else line for line in body.splitlines(keepends=True))
    return (
        f"{{{{- /* Generated by `python -m governor.observability generate` from {_SOURCE}; edit there."
        " */ -}}\n"
        "{{- if .Values.prometheusRule.enabled }}\n"
        f"{{{{- $histogram := get (dict {_HISTOGRAMS_DICT}) .Values.alerts.slo.latency }}}}\n"
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: PrometheusRule\n"
        "metadata:\n"
        '  name: {{ include "vllm-governor.fullname" . }}\n'
        "  namespace: {{ .Release.Namespace }}\n"
        "  labels:\n"
        '    {{- include "vllm-governor.labels" . | nindent 4 }}\n'
        "    {{- with .Values.prometheusRule.labels }}\n"
        "    {{- toYaml . | nindent 4 }}\n"
        "    {{- end }}\n"
        "spec:\n"
        f"{indented}"
        "{{- end }}\n"
    )
