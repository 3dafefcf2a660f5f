"""Grafana dashboards (JSON model, schemaVersion 39), built from the queries in queries.py.

One dashboard, "vLLM Governor", with the variables datasource, namespace and inferenceservice. Rows: SLO
(P99 vs SLO per latency, error-budget burn), cap (cap vs ceiling, utilisation with the seed's 20 % warning),
queue (depth, queue-time P95 with the 2 s warning), engine (throughput, KV cache, preemptions, prompts),
replicas. Cap decisions are annotations.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from governor.core import signals
from governor.core.signals import LatencyKind
from governor.observability import queries as q

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    description: str = ""
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    width: int = 12
    height: int = 8
    extra_defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Annotation:
    name: str
    expr: str
    title: str
    text: str
    color: str


def _latency_panel(kind: LatencyKind) -> Panel:
    return Panel(
        title=f"{q.LATENCY_TITLES[kind]}: P99 vs SLO",
        description=(
            f"P99 and P50 of {kind.histogram} over all pods. The SLO line is the operator's target; it "
            "applies to the latency the InferenceService's spec.slo names."
        ),
        targets=(
            Target(q.latency_p99(kind), "P99"),
            Target(q.latency_p50(kind), "P50"),
            Target(q.operator(signals.OP_SLO_TARGET), "SLO target"),
        ),
        unit="s",
        width=6,
    )


def rows() -> tuple[Row, ...]:
    return (
        Row(
            "SLO",
            (
                Panel(
                    title="Governed latency: P99 vs SLO",
                    description="What the control law sees: the P99 it measured, the EWMA-smoothed P99 it "
                    "acts on, and the SLO target from the InferenceService.",
                    targets=(
                        Target(q.operator(signals.OP_P99), "P99 observed"),
                        Target(q.operator(signals.OP_P99_SMOOTHED), "P99 smoothed"),
                        Target(q.operator(signals.OP_SLO_TARGET), "SLO target"),
                    ),
                    unit="s",
                ),
                Panel(
                    title="Error-budget burn rate",
                    description="Error ratio over the window divided by the budget (1 - objective). 1x "
                    "spends the budget exactly over 30 days; the fast-burn alert fires above 14.4x "
                    "(1 h and 5 m), the slow-burn alert above 1x (3 d and 6 h).",
                    targets=tuple(Target(q.burn_rate(w), w) for w in ("5m", "1h", "6h", "3d")),
                    unit="x",
                    thresholds=((None, "green"), (1.0, "orange"), (14.4, "red")),
                ),
                *(
                    _latency_panel(kind)
                    for kind in (LatencyKind.E2E, LatencyKind.TTFT, LatencyKind.INTER_TOKEN, LatencyKind.TPOT)
                ),
            ),
        ),
        Row(
            "Cap",
            (
                Panel(
                    title="Cap vs ceiling",
                    description="The live admission cap held by the engines (lowest over pods), the cap the "
                    "operator decided, and the startup ceiling (max_num_seqs) it can never exceed.",
                    targets=(
                        Target(q.lowest(signals.RUNTIME_CAP), "cap (engines)"),
                        Target(q.operator(signals.OP_CAP), "cap (operator)"),
                        Target(q.lowest(signals.RUNTIME_CEILING), "ceiling"),
                    ),
                    width=8,
                ),
                Panel(
                    title="Cap utilisation",
                    description="Running requests / cap over all pods. Below 20 % the cap is not the "
                    "bottleneck (seed 001 §4.2): raising it will not help, and replicas may be spare.",
                    targets=(Target(q.cap_utilisation(), "running / cap"),),
                    unit="percentunit",
                    kind="stat",
                    thresholds=((None, "orange"), (0.2, "green")),
                    width=4,
                ),
                Panel(
                    title="Running requests vs cap",
                    targets=(
                        Target(q.total(signals.RUNNING), "running"),
                        Target(q.total(signals.RUNTIME_CAP), "cap (sum over pods)"),
                    ),
                    width=12,
                ),
                Panel(
                    title="The law's model: the caps around its choice",
                    description="The cap decided between the two the levers law computes each tick: above "
                    "the per-token cap its fitted line says the per-token SLO is missed, below the queue "
                    "floor its queue model says the arrivals outgrow the service. A per-token cap under "
                    "the floor means no cap meets both bounds (replicas). Absent for the rule-table law.",
                    targets=(
                        Target(q.operator(signals.OP_CAP), "cap decided"),
                        Target(q.operator(signals.OP_MODEL_PER_TOKEN_CAP), "per-token cap"),
                        Target(q.operator(signals.OP_MODEL_QUEUE_FLOOR), "queue floor"),
                    ),
                ),
                Panel(
                    title="The law's model: arrivals vs service at the cap",
                    description="Requests per second reaching the engines (completions plus the growth of "
                    "what they hold) against what the queue model says the decided cap serves: while "
                    "arrivals stay above the service the queue has no end at that cap.",
                    targets=(
                        Target(q.operator(signals.OP_MODEL_ARRIVALS), "arrivals"),
                        Target(q.operator(signals.OP_MODEL_SERVICE), "service at the cap"),
                    ),
                    unit="reqps",
                ),
            ),
        ),
        Row(
            "Queue",
            (
                Panel(
                    title="Queue depth",
                    targets=(Target(q.total(signals.WAITING), "waiting"),),
                    width=8,
                ),
                Panel(
                    title="Queue time P95",
                    description="Time requests wait before they are scheduled. Above 2 s the queue, not the "
                    "engine, dominates latency (seed 001 §4.2): a replica is the lever, not the cap.",
                    targets=(Target(q.queue_time_p95(), "queue time P95"),),
                    unit="s",
                    thresholds=((None, "green"), (2.0, "red")),
                    width=8,
                    extra_defaults={"custom": {"thresholdsStyle": {"mode": "line"}}},
                ),
                Panel(
                    title="Queue time P95 now",
                    targets=(Target(q.queue_time_p95(), "P95"),),
                    unit="s",
                    kind="stat",
                    thresholds=((None, "green"), (2.0, "red")),
                    width=8,
                ),
            ),
        ),
        Row(
            "Engine",
            (
                Panel(
                    title="Throughput",
                    targets=(
                        Target(q.per_second(signals.GENERATION_TOKENS), "generated tokens/s"),
                        Target(q.per_second(signals.PROMPT_TOKENS), "prompt tokens/s"),
                        Target(q.per_second(signals.REQUEST_SUCCESS), "requests/s"),
                    ),
                    unit="short",
                    width=8,
                ),
                Panel(
                    title="KV-cache usage",
                    targets=(Target(q.highest(signals.KV_CACHE_USAGE), "highest pod"),),
                    unit="percentunit",
                    thresholds=((None, "green"), (0.9, "red")),
                    width=8,
                ),
                Panel(
                    title="Preemptions",
                    description="Requests evicted for lack of KV-cache blocks; a cap that only drains never "
                    "preempts, so these mean memory, not the cap, binds.",
                    targets=(Target(q.per_second(signals.PREEMPTIONS), "preemptions/s"),),
                    width=8,
                ),
                Panel(
                    title="Prompt length P95 (runtime, 60 s window)",
                    targets=(
                        Target(q.highest(signals.RUNTIME_PROMPT_P95), "prompt tokens P95"),
                        Target(q.per_second(signals.RUNTIME_LONG_PROMPTS), "long prompts/s (> 1.3 x P95)"),
                    ),
                    width=12,
                ),
                Panel(
                    title="Engine step time (runtime)",
                    description="The mean engine step over the pods, from the runtime's step counters, and "
                    "the fixed part of a step as the levers law fits it on them (the rest is per sequence, "
                    "per context token and per prefill token: governor_model_step_cost_seconds by part, "
                    "and status.outlook.step).",
                    targets=(
                        Target(q.mean_step(), "mean step"),
                        Target(
                            q.operator(signals.OP_MODEL_STEP_COST, f'{q.DASHBOARD_SELECTOR}, part="base"'),
                            "fitted fixed part",
                        ),
                    ),
                    unit="s",
                    width=12,
                ),
            ),
        ),
        Row(
            "Replicas",
            (
                Panel(
                    title="Replicas desired / ready",
                    description="Desired: what the replica planner wants (also exported for HPA/KEDA). "
                    "Ready: engine pods Prometheus scrapes.",
                    targets=(
                        Target(q.operator(signals.OP_DESIRED_REPLICAS), "desired"),
                        Target(q.ready_replicas(), "ready (scraped)"),
                    ),
                    width=12,
                ),
            ),
        ),
    )


def cap_annotations() -> tuple[Annotation, ...]:
    return (
        Annotation(
            name="Cap decisions",
            expr=q.cap_decisions(),
            title="cap decision",
            text="cap → {{value}}",
            color="#8F3BB8",
        ),
    )


def expressions() -> Iterator[tuple[str, str]]:
    """(where, expr) for every PromQL expression the dashboard runs, variables included."""
    for row in rows():
        for panel in row.panels:
            for target in panel.targets:
                yield f"{row.title} / {panel.title} / {target.legend}", target.expr
    for annotation in cap_annotations():
        yield f"annotation / {annotation.name}", annotation.expr
    for variable in _variables():
        query = variable.get("query")
        if variable["type"] == "query" and isinstance(query, dict):
            yield f"variable / {variable['name']}", str(query["query"])


def _variables() -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"qryType": 1, "query": query, "refId": f"{name}-variable"},
            "definition": query,
            "refresh": 2,
            "sort": 1,
            "includeAll": False,
            "multi": False,
            "current": {},
            "options": [],
        }

    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "options": [],
            "refresh": 1,
            "hide": 0,
        },
        query_var("namespace", "Namespace", f"label_values({signals.RUNTIME_CAP}, {q.NAMESPACE_LABEL})"),
        query_var(
            "inferenceservice",
            "InferenceService",
            f'label_values({signals.RUNTIME_CAP}{{{q.NAMESPACE_LABEL}="$namespace"}}, {q.ISVC_LABEL})',
        ),
    ]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    steps = [{"color": color, "value": value} for value, color in panel.thresholds]
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "thresholds": {"mode": "absolute", "steps": steps},
        "color": {"mode": "thresholds" if panel.kind == "stat" else "palette-classic"},
    }
    defaults.update(panel.extra_defaults)
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": target.expr,
                "legendFormat": target.legend,
                "range": True,
                "editorMode": "code",
            }
            for i, target in enumerate(panel.targets)
        ],
    }
    if panel.kind == "stat":
        body["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "area",
            "textMode": "auto",
        }
    else:
        body["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        }
    return body


def governor_dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    panel_id = 1
    y = 0
    for row in rows():
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel_json(panel, panel_id, x, y))
            panel_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return {
        "uid": "vllm-governor",
        "title": "vLLM Governor",
        "description": "SLO, cap, queue, engine and replicas of one InferenceService governed by "
        "vLLM Governor.",
        "tags": ["vllm", "vllm-governor", "slo"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                *(
                    {
                        "name": a.name,
                        "datasource": DATASOURCE,
                        "enable": True,
                        "iconColor": a.color,
                        "expr": a.expr,
                        "step": "30s",
                        "titleFormat": a.title,
                        "textFormat": a.text,
                        "useValueForTime": False,
                    }
                    for a in cap_annotations()
                ),
            ]
        },
        "templating": {"list": _variables()},
        "panels": panels,
    }


DASHBOARDS = {"vllm-governor.json": governor_dashboard}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"
