"""Pure manifest builders for an InferenceService's children. No I/O: golden-tested in tests/operator.

Children (deterministic names): Deployment ``<name>``, Service ``<name>``, PodDisruptionBudget ``<name>-pdb``,
Secret ``<name>-admin-token`` (the runtime's admin token, generated once by the operator), NetworkPolicy
``<name>`` (unless spec.networkPolicy.enabled is false), and a PodMonitor ``<name>`` only when the
monitoring.coreos.com API exists (else prometheus.io scrape annotations on the pods).
Every child carries an owner reference to the InferenceService, so the API server's garbage collector removes
them with it.

Choices where the issue was silent: the rollout is ``maxSurge: 0, maxUnavailable: 1`` (a rollout never needs
a spare GPU); the pods do not mount a service-account token (the runtime never calls the API); a startup probe
allows 30 minutes for model download and engine start before liveness applies; a pod-template annotation
holds a hash of the admin token, so a re-created Secret rolls the pods onto the new token.

Pod security: the engine pods meet the Kubernetes "restricted" Pod Security profile (tests/security checks
the rules). The admin token is a mounted Secret file (GOVERNOR_ADMIN_TOKEN_FILE, read by the runtime at each
request), never an env var: env vars show in ``kubectl describe``, crash dumps and /proc/<pid>/environ. The
root filesystem is read-only; vLLM writes only to emptyDirs: /tmp, and a home directory that holds
~/.cache (vLLM's compile cache, FlashInfer), ~/.triton, ~/.nv and ~/.config.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from governor.core import spec as api
from governor.core.signals import LONG_PROMPT_FACTOR, LONG_PROMPT_FACTOR_ENV
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
TOKEN_DIR = "/var/run/secrets/governor/admin"
HOME_PATH = "/home/vllm"
# A UID/GID of 10000 or more is outside the range of the host's own users (checkov CKV_K8S_40).
ENGINE_UID = 10001
# Scratch sizes: the torch/Triton/FlashInfer compile caches reach a few GiB on a GPU; /tmp holds sockets,
# Prometheus multiprocess files and torch inductor's default cache.
HOME_SIZE = "16Gi"
TMP_SIZE = "4Gi"
# The operator's pods carry this label (charts/vllm-governor); the NetworkPolicy admits them to the engines.
OPERATOR_POD_LABELS = {f"{api.GROUP}/role": "operator"}


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
    network_policy: str


def names(name: str) -> Names:
    return Names(
        deployment=name,
        service=name,
        pdb=f"{name}-pdb",
        secret=f"{name}-admin-token",
        pod_monitor=name,
        network_policy=name,
    )


def selector_labels(name: str) -> dict[str, str]:
    """The pods' identity (contracts.md); also the immutable Deployment selector."""
    return {LABEL_NAME: "vllm", LABEL_INSTANCE: name, LABEL_OWNER: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/managed-by": "vllm-governor",
        "app.kubernetes.io/component": "inference",
    }


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _meta(owner: Owner, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner.name),
        "ownerReferences": [
            {
                "apiVersion": api.API_VERSION,
                "kind": api.KIND,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def use_pod_monitor(isvc: api.InferenceServiceSpec, monitoring_api: bool) -> bool:
    """PodMonitor when asked for ('enabled', 'auto') and the monitoring.coreos.com API is installed."""
    return isvc.monitoring.pod_monitor != "disabled" and monitoring_api


def vllm_args(isvc: api.InferenceServiceSpec) -> list[str]:
    """``governor-runtime serve`` arguments: the launcher's own first, then vLLM OpenAI server flags."""
    resolved = isvc.resolve()
    engine = isvc.engine
    args = [
        "--initial-cap",
        str(resolved.initial_cap),
        "--model",
        isvc.model,
        "--served-model-name",
        resolved.served_model_name,
        "--host",
        "0.0.0.0",
        "--port",
        str(api.HTTP_PORT),
        "--max-num-seqs",
        str(resolved.ceiling),
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
    for flag, enabled in (
        ("prefix-caching", engine.enable_prefix_caching),
        ("chunked-prefill", engine.enable_chunked_prefill),
    ):
        if enabled is not None:
            args.append(f"--{'enable' if enabled else 'no-enable'}-{flag}")
    return args + list(engine.extra_args)


def _long_prompt_factor(isvc: api.InferenceServiceSpec) -> list[dict[str, str]]:
    """spec.adaptive.longTail.promptFactor for the runtime's long-prompt count; set only where it is not the
    runtime's default, so a default spec's pod template (and its hash) stays as it was."""
    factor = isvc.adaptive.long_tail.prompt_factor
    if factor == LONG_PROMPT_FACTOR:
        return []
    return [{"name": LONG_PROMPT_FACTOR_ENV, "value": repr(factor)}]


def build_deployment(
    owner: Owner, isvc: api.InferenceServiceSpec, *, admin_token_hash: str, pod_monitor: bool
) -> Manifest:
    res = isvc.resources
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if res.gpu.count:
        limits["nvidia.com/gpu"] = str(res.gpu.count)
    if res.cpu:
        requests["cpu"] = res.cpu
    if res.cpu_limit:
        limits["cpu"] = res.cpu_limit
    if res.memory:
        requests["memory"] = res.memory
        limits["memory"] = res.memory
    resources = {key: value for key, value in (("limits", limits), ("requests", requests)) if value}
    annotations = {ANNOTATION_TOKEN_HASH: admin_token_hash}
    if not pod_monitor:
        annotations.update(
            {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(api.HTTP_PORT),
                "prometheus.io/path": "/metrics",
            }
        )

    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": "http"},
            "timeoutSeconds": 5,
            "periodSeconds": period_s,
            "failureThreshold": failures,
        }

    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": isvc.image,
        "command": ["governor-runtime", "serve"],
        "args": vllm_args(isvc),
        "ports": [{"name": "http", "containerPort": api.HTTP_PORT, "protocol": "TCP"}],
        "env": [
            {"name": "VLLM_PLUGINS", "value": RUNTIME_PLUGINS},
            {"name": "HF_HOME", "value": CACHE_PATH},
            {"name": "GOVERNOR_ADMIN_TOKEN_FILE", "value": f"{TOKEN_DIR}/{TOKEN_KEY}"},
            # The UID has no /etc/passwd entry: HOME and USER keep ~ and getpass.getuser() (torch's
            # inductor cache path) working.
            {"name": "HOME", "value": HOME_PATH},
            {"name": "USER", "value": "vllm"},
            *_long_prompt_factor(isvc),
        ],
        "startupProbe": probe(10, 180),
        "readinessProbe": probe(5, 3),
        "livenessProbe": probe(10, 3),
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "model-cache", "mountPath": CACHE_PATH},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "home", "mountPath": HOME_PATH},
            {"name": "admin-token", "mountPath": TOKEN_DIR, "readOnly": True},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": ENGINE_UID,
            "runAsGroup": ENGINE_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if resources:
        container["resources"] = resources
    cache = isvc.model_cache
    cache_volume: dict[str, Any] = (
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache.pvc_name}}
        if cache.pvc_name
        else {"name": "model-cache", "emptyDir": {"sizeLimit": cache.size_limit} if cache.size_limit else {}}
    )
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ENGINE_UID,
            "runAsGroup": ENGINE_UID,
            "fsGroup": ENGINE_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": res.shm_size}},
            cache_volume,
            {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
            {"name": "home", "emptyDir": {"sizeLimit": HOME_SIZE}},
            # 0440: the owner and fsGroup (the engine's group) read it, no one else.
            {
                "name": "admin-token",
                "secret": {
                    "secretName": names(owner.name).secret,
                    "defaultMode": 0o440,
                    "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}],
                },
            },
        ],
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


def _peer(peer: api.NetworkPeer) -> dict[str, Any]:
    if peer.cidr is not None:
        return {"ipBlock": {"cidr": peer.cidr}}
    out: dict[str, Any] = {}
    if peer.pod_labels is not None:
        out["podSelector"] = {"matchLabels": dict(peer.pod_labels)}
    if peer.namespace_labels is not None:
        out["namespaceSelector"] = {"matchLabels": dict(peer.namespace_labels)}
    return out


def operator_peer(operator_namespace: str | None) -> dict[str, Any]:
    """The operator's pods: in its namespace when known, else any namespace (a pod elsewhere that copies
    the label passes too; the admin token still guards the route)."""
    namespaces = (
        {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}} if operator_namespace else {}
    )
    return {"podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)}, "namespaceSelector": namespaces}


def build_network_policy(
    owner: Owner, isvc: api.InferenceServiceSpec, *, operator_namespace: str | None = None
) -> Manifest:
    """Ingress to the engine pods: port 8000 only, from the clients, the operator and the scrapers.

    What it cannot do: the OpenAI API, /metrics and the admin route (PUT /governor/v1/limits) share vLLM's
    one port, and a NetworkPolicy sees ports, not HTTP paths. Whoever may call the API can also reach the
    admin route, where the bearer token is the guard. With spec.networkPolicy.clients unset, port 8000 is
    open to every source and the policy only closes the other ports. Egress is not restricted (the engines
    download models). Kubelet probes come from the node and are not subject to the policy.
    """
    policy = isvc.network_policy
    port = {"protocol": "TCP", "port": api.HTTP_PORT}
    rule: dict[str, Any] = {"ports": [port]}
    if policy.clients is not None:
        rule["from"] = [
            *(_peer(p) for p in policy.clients),
            operator_peer(operator_namespace),
            *(_peer(p) for p in policy.scrapers),
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(owner, names(owner.name).network_policy),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(owner.name)},
            "policyTypes": ["Ingress"],
            "ingress": [rule],
        },
    }


def build_children(
    owner: Owner,
    isvc: api.InferenceServiceSpec,
    *,
    admin_token_hash: str,
    monitoring_api: bool,
    operator_namespace: str | None = None,
) -> list[Manifest]:
    """Every child but the Secret (whose content is created once, not reconciled), in apply order.

    The NetworkPolicy comes before the Deployment, so no engine pod ever runs unprotected.
    """
    pod_monitor = use_pod_monitor(isvc, monitoring_api)
    children = [build_service(owner, isvc), build_pdb(owner, isvc)]
    if isvc.network_policy.enabled:
        children.append(build_network_policy(owner, isvc, operator_namespace=operator_namespace))
    children += [
        build_deployment(owner, isvc, admin_token_hash=admin_token_hash, pod_monitor=pod_monitor),
    ]
    if pod_monitor:
        children.append(build_pod_monitor(owner, isvc))
    return children
