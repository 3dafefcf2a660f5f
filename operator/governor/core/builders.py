"""Pure manifest builders for an InferenceService's children. No I/O: golden-tested in tests/operator.

Children (deterministic names): Deployment ``<name>``, Service ``<name>``, PodDisruptionBudget ``<name>-pdb``,
Secret ``<name>-admin-token`` (the runtime's admin token, generated once by the operator), and a PodMonitor
``<name>`` only when the monitoring.coreos.com API exists (else prometheus.io scrape annotations on the pods).
Every child carries an owner reference to the InferenceService, so the API server's garbage collector removes
them with it.

Choices where the issue was silent: the rollout is ``maxSurge: 0, maxUnavailable: 1`` (a rollout never needs
a spare GPU); the pods do not mount a service-account token (the runtime never calls the API); a startup probe
allows 30 minutes for model download and engine start before liveness applies; a pod-template annotation
holds a hash of the admin token, so a re-created Secret rolls the pods onto the new token.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from governor.core import spec as api
from governor.observability.scrape import pod_monitor_relabelings

Manifest = dict[str, Any]

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_OWNER = f"{api.GROUP}/inferenceservice"
ANNOTATION_TOKEN_HASH = f"{api.GROUP}/admin-token-sha256"
TOKEN_KEY = "token"
CONTAINER = "vllm"
CACHE_PATH = "/models-cache"
RUNTIME_PLUGINS = "governor_limits,governor_admin"


@dataclass(frozen=True)
class Owner:
    """The InferenceService the children belong to."""

    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class Names:
    deployment: str
    service: str
    pdb: str
    secret: str
    pod_monitor: str


def names(name: str) -> Names:
    return Names(deployment=name, service=name, pdb=f"{name}-pdb", secret=f"{name}-admin-token",
                 pod_monitor=name)


def selector_labels(name: str) -> dict[str, str]:
    """The pods' identity (contracts.md); also the immutable Deployment selector."""
    return {LABEL_NAME: "vllm", LABEL_INSTANCE: name, LABEL_OWNER: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def labels(name: str) -> dict[str, str]:
    return {**selector_labels(name), "app.kubernetes.io/managed-by": "vllm-governor",
            "app.kubernetes.io/component": "inference"}


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _meta(owner: Owner, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner.name),
        "ownerReferences": [{
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }],
    }


def use_pod_monitor(isvc: api.InferenceServiceSpec, monitoring_api: bool) -> bool:
    """PodMonitor when asked for ('enabled', 'auto') and the monitoring.coreos.com API is installed."""
    return isvc.monitoring.pod_monitor != "disabled" and monitoring_api


def vllm_args(isvc: api.InferenceServiceSpec) -> list[str]:
    """``governor-runtime serve`` arguments: the launcher's own first, then vLLM OpenAI server flags."""
    resolved = isvc.resolve()
    engine = isvc.engine
    args = [
        "--initial-cap", str(resolved.initial_cap),
        "--model", isvc.model,
        "--served-model-name", resolved.served_model_name,
        "--host", "0.0.0.0",
        "--port", str(api.HTTP_PORT),
        "--max-num-seqs", str(resolved.ceiling),
    ]
    optional: list[tuple[str, Any]] = [
        ("--max-model-len", engine.max_model_len),
        ("--max-num-batched-tokens", engine.max_num_batched_tokens),
        ("--gpu-memory-utilization", engine.gpu_memory_utilization),
        ("--block-size", engine.block_size),
        ("--dtype", engine.dtype),
    ]
    if engine.tensor_parallel_size > 1:
        optional.append(("--tensor-parallel-size", engine.tensor_parallel_size))
    args += [item for flag, value in optional if value is not None for item in (flag, str(value))]
    for flag, enabled in (("prefix-caching", engine.enable_prefix_caching),
                          ("chunked-prefill", engine.enable_chunked_prefill)):
        if enabled is not None:
            args.append(f"--{'enable' if enabled else 'no-enable'}-{flag}")
    return args + list(engine.extra_args)


def build_deployment(owner: Owner, isvc: api.InferenceServiceSpec, *, admin_token_hash: str,
                     pod_monitor: bool) -> Manifest:
    res = isvc.resources
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if res.gpu.count:
        limits["nvidia.com/gpu"] = str(res.gpu.count)
    if res.cpu:
        requests["cpu"] = res.cpu
    if res.memory:
        requests["memory"] = res.memory
        limits["memory"] = res.memory
    resources = {key: value for key, value in (("limits", limits), ("requests", requests)) if value}
    annotations = {ANNOTATION_TOKEN_HASH: admin_token_hash}
    if not pod_monitor:
        annotations.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(api.HTTP_PORT),
                            "prometheus.io/path": "/metrics"})
    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 5,
                "periodSeconds": period_s, "failureThreshold": failures}

    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": isvc.image,
        "command": ["governor-runtime", "serve"],
        "args": vllm_args(isvc),
        "ports": [{"name": "http", "containerPort": api.HTTP_PORT, "protocol": "TCP"}],
        "env": [
            {"name": "VLLM_PLUGINS", "value": RUNTIME_PLUGINS},
            {"name": "HF_HOME", "value": CACHE_PATH},
            {"name": "GOVERNOR_ADMIN_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": names(owner.name).secret, "key": TOKEN_KEY}}},
        ],
        "startupProbe": probe(10, 180),
        "readinessProbe": probe(5, 3),
        "livenessProbe": probe(10, 3),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "model-cache", "mountPath": CACHE_PATH}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True},
    }
    if resources:
        container["resources"] = resources
    cache = isvc.model_cache
    cache_volume: dict[str, Any] = (
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache.pvc_name}} if cache.pvc_name
        else {"name": "model-cache", "emptyDir": {"sizeLimit": cache.size_limit} if cache.size_limit else {}}
    )
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": res.shm_size}},
                    cache_volume],
    }
    if res.node_selector:
        pod_spec["nodeSelector"] = dict(res.node_selector)
    if res.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in res.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(owner, names(owner.name).deployment),
        "spec": {
            "replicas": isvc.replicas,
            "selector": {"matchLabels": selector_labels(owner.name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels(owner.name), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def build_service(owner: Owner, isvc: api.InferenceServiceSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(owner, names(owner.name).service),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(owner.name),
            "ports": [{"name": "http", "port": api.HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def build_pdb(owner: Owner, isvc: api.InferenceServiceSpec) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(owner, names(owner.name).pdb),
        "spec": {
            "maxUnavailable": isvc.disruption.max_unavailable,
            "selector": {"matchLabels": selector_labels(owner.name)},
        },
    }


def build_admin_secret(owner: Owner, token: str) -> Manifest:
    """The admin token Secret. The caller generates ``token`` once; the operator never rewrites it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(owner, names(owner.name).secret),
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def build_pod_monitor(owner: Owner, isvc: api.InferenceServiceSpec) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(owner, names(owner.name).pod_monitor),
        "spec": {
            "selector": {"matchLabels": selector_labels(owner.name)},
            "podMetricsEndpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": isvc.monitoring.interval,
                    # namespace/inferenceservice labels: the dashboards' and alerts' convention
                    "relabelings": pod_monitor_relabelings(),
                },
            ],
        },
    }


def build_children(owner: Owner, isvc: api.InferenceServiceSpec, *, admin_token_hash: str,
                   monitoring_api: bool) -> list[Manifest]:
    """Every child but the Secret (whose content is created once, not reconciled), in apply order."""
    pod_monitor = use_pod_monitor(isvc, monitoring_api)
    children = [
        build_service(owner, isvc),
        build_pdb(owner, isvc),
        build_deployment(owner, isvc, admin_token_hash=admin_token_hash, pod_monitor=pod_monitor),
    ]
    if pod_monitor:
        children.append(build_pod_monitor(owner, isvc))
    return children
