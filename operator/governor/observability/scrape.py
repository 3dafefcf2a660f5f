"""How Prometheus must scrape, so that every series the dashboards and rules read carries `namespace` and
`inferenceservice` (queries.py). Three forms of one convention:

- the chart's PodMonitor (engines) and ServiceMonitor (operator), for the Prometheus Operator;
- `kubernetes_sd` scrape jobs for a plain Prometheus (docs/observability.md prints them);
- static jobs for tests, where the target labels are what relabelling would have produced.

Engines: the pod's namespace becomes `namespace`; its label governor.vllm.ai/inferenceservice becomes
`inferenceservice`; the pod name becomes `pod`. vLLM's own `model_name` and `engine` stay.
Operator: its series already name the object (`namespace`, `name`); `honor_labels` keeps that `namespace` over
the operator pod's, and `name` is copied to `inferenceservice`.
"""

from __future__ import annotations

from typing import Any

from governor.observability.queries import ISVC_LABEL, NAMESPACE_LABEL

ISVC_POD_LABEL = "governor.vllm.ai/inferenceservice"
ENGINE_PORT_NAME = "http"
OPERATOR_PORT_NAME = "metrics"


def _sd_label(pod_label: str, prefix: str = "__meta_kubernetes_pod_label_") -> str:
    return prefix + "".join(c if c.isalnum() else "_" for c in pod_label)


def engine_relabel_configs() -> list[dict[str, Any]]:
    """kubernetes_sd (role: pod) relabelling of engine pods: keep governed pods' http port, label them."""
    isvc = _sd_label(ISVC_POD_LABEL)
    return [
        {
            "source_labels": [_sd_label(ISVC_POD_LABEL, "__meta_kubernetes_pod_labelpresent_")],
            "regex": "true",
            "action": "keep",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": ENGINE_PORT_NAME,
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": NAMESPACE_LABEL},
        {"source_labels": [isvc], "target_label": ISVC_LABEL},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]


def operator_metric_relabel_configs() -> list[dict[str, Any]]:
    return [{"source_labels": ["name"], "regex": "(.+)", "target_label": ISVC_LABEL}]


def pod_monitor_relabelings() -> list[dict[str, Any]]:
    """The PodMonitor form (Prometheus Operator spells the keys in camelCase)."""
    isvc = _sd_label(ISVC_POD_LABEL)
    return [
        {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": NAMESPACE_LABEL},
        {"sourceLabels": [isvc], "targetLabel": ISVC_LABEL},
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
    ]


def service_monitor_metric_relabelings() -> list[dict[str, Any]]:
    return [{"sourceLabels": ["name"], "regex": "(.+)", "targetLabel": ISVC_LABEL}]


def kubernetes_scrape_configs(interval: str = "15s") -> list[dict[str, Any]]:
    """Scrape jobs for a plain Prometheus in the cluster (no Prometheus Operator)."""
    return [
        {
            "job_name": "vllm-governor-engines",
            "scrape_interval": interval,
            "kubernetes_sd_configs": [{"role": "pod"}],
            "relabel_configs": engine_relabel_configs(),
        },
        {
            "job_name": "vllm-governor-operator",
            "scrape_interval": interval,
            "honor_labels": True,
            "kubernetes_sd_configs": [{"role": "pod"}],
            "relabel_configs": [
                {
                    "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                    "regex": "vllm-governor",
                    "action": "keep",
                },
                {
                    "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                    "regex": OPERATOR_PORT_NAME,
                    "action": "keep",
                },
            ],
            "metric_relabel_configs": operator_metric_relabel_configs(),
        },
    ]


def static_scrape_configs(
    *,
    engine_targets: list[str],
    operator_targets: list[str],
    namespace: str,
    inferenceservice: str,
    interval: str = "1s",
) -> list[dict[str, Any]]:
    """The same labels for targets outside Kubernetes (tests, the demo): relabelling's result, spelled out."""
    return [
        {
            "job_name": "vllm-governor-engines",
            "scrape_interval": interval,
            "static_configs": [
                {
                    "targets": engine_targets,
                    "labels": {
                        NAMESPACE_LABEL: namespace,
                        ISVC_LABEL: inferenceservice,
                        "pod": f"{inferenceservice}-0",
                    },
                }
            ],
        },
        {
            "job_name": "vllm-governor-operator",
            "scrape_interval": interval,
            "honor_labels": True,
            "static_configs": [{"targets": operator_targets}],
            "metric_relabel_configs": operator_metric_relabel_configs(),
        },
    ]
