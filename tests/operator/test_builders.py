"""Golden manifests for the children of the example InferenceServices (pure builders, no cluster).

Regenerate after an intended change: ``GOVERNOR_UPDATE_GOLDEN=1 pytest tests/operator/test_builders.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from governor.core import builders
from governor.core.spec import parse_spec
from governor_runtime.prompts import long_factor

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
OWNER = builders.Owner(name="llama-8b", namespace="inference", uid="00000000-0000-4000-8000-000000000001")
TOKEN = "test-token"


def _children(example: str, monitoring_api: bool) -> list[dict[str, Any]]:
    isvc = parse_spec(yaml.safe_load((ROOT / "examples" / example).read_text())["spec"])
    return [
        builders.build_admin_secret(OWNER, TOKEN),
        *builders.build_children(
            OWNER, isvc, admin_token_hash=builders.token_hash(TOKEN), monitoring_api=monitoring_api
        ),
    ]


@pytest.mark.parametrize(("example", "monitoring_api"), [("minimal.yaml", False), ("full.yaml", True)])
def test_children_match_golden(example: str, monitoring_api: bool) -> None:
    text = yaml.safe_dump_all(_children(example, monitoring_api), sort_keys=False)
    golden = GOLDEN / example.replace(".yaml", "-children.yaml")
    if os.environ.get("GOVERNOR_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("example", ["minimal.yaml", "full.yaml"])
def test_children_are_valid_kubernetes_objects(example: str) -> None:
    for manifest in _children(example, monitoring_api=False):
        kubernetes_validate.validate(manifest, "1.30.0", strict=True)


def test_deployment_carries_the_contract() -> None:
    children = {c["kind"]: c for c in _children("full.yaml", monitoring_api=True)}
    deployment = children["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    assert container["command"] == ["governor-runtime", "serve"]
    assert args[:2] == ["--initial-cap", "64"]
    assert args[args.index("--max-num-seqs") + 1] == "256"
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    # The token is a mounted file the runtime reads at each request, never an env var.
    token_dir = "/var/run/secrets/governor/admin"
    assert {"name": "GOVERNOR_ADMIN_TOKEN_FILE", "value": f"{token_dir}/token"} in container["env"]
    assert not any(e["name"] == "GOVERNOR_ADMIN_TOKEN" or "valueFrom" in e for e in container["env"])
    assert {"name": "admin-token", "mountPath": token_dir, "readOnly": True} in container["volumeMounts"]
    token_volume = next(v for v in pod["volumes"] if v["name"] == "admin-token")
    assert token_volume["secret"]["secretName"] == "llama-8b-admin-token"
    assert token_volume["secret"]["items"] == [{"key": "token", "path": "token"}]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert pod["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert "prometheus.io/scrape" not in deployment["spec"]["template"]["metadata"]["annotations"]
    assert set(children) == {
        "Secret",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "Deployment",
        "PodMonitor",
    }
    for child in children.values():
        assert child["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
        assert child["metadata"]["labels"][builders.LABEL_OWNER] == "llama-8b"


def test_the_prompt_factor_reaches_the_runtime_only_when_it_is_not_the_default() -> None:
    spec = yaml.safe_load((ROOT / "examples" / "minimal.yaml").read_text())["spec"]

    def env(factor: float | None) -> dict[str, str]:
        adaptive = {} if factor is None else {"adaptive": {"longTail": {"promptFactor": factor}}}
        isvc = parse_spec({**spec, **adaptive})
        pod = builders.build_deployment(OWNER, isvc, admin_token_hash="h", pod_monitor=False)
        return {e["name"]: e["value"] for e in pod["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "GOVERNOR_LONG_PROMPT_FACTOR" not in env(None)  # a default spec's template is unchanged
    assert "GOVERNOR_LONG_PROMPT_FACTOR" not in env(1.3)
    assert long_factor(env(1.75)) == 1.75  # what the runtime reads from the pod's environment


def test_without_the_monitoring_api_pods_get_scrape_annotations() -> None:
    children = {c["kind"]: c for c in _children("full.yaml", monitoring_api=False)}
    assert "PodMonitor" not in children
    annotations = children["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "8000"


def test_builders_are_pure() -> None:
    assert _children("full.yaml", True) == _children("full.yaml", True)


def _policy(network_policy: dict[str, Any], operator_namespace: str | None = None) -> dict[str, Any]:
    isvc = parse_spec({"model": "m", "networkPolicy": network_policy})
    children = builders.build_children(
        OWNER, isvc, admin_token_hash="h", monitoring_api=False, operator_namespace=operator_namespace
    )
    policies = [c for c in children if c["kind"] == "NetworkPolicy"]
    assert len(policies) <= 1
    if policies:
        kubernetes_validate.validate(policies[0], "1.30.0", strict=True)
        # Applied before the Deployment: no engine pod runs before its policy exists.
        assert children.index(policies[0]) < [c["kind"] for c in children].index("Deployment")
    return policies[0] if policies else {}


def test_network_policy_without_clients_opens_only_the_serving_port() -> None:
    policy = _policy({})
    assert policy["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    assert policy["spec"]["podSelector"] == {"matchLabels": builders.selector_labels("llama-8b")}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8000}]}]


def test_network_policy_with_clients_admits_them_the_operator_and_the_scrapers_only() -> None:
    policy = _policy(
        {
            "clients": [{"podLabels": {"app": "gateway"}}, {"cidr": "10.0.0.0/8"}],
            "scrapers": [{"namespaceLabels": {"name": "monitoring"}}],
        },
        operator_namespace="governor-system",
    )
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app": "gateway"}}},
        {"ipBlock": {"cidr": "10.0.0.0/8"}},
        {
            "podSelector": {"matchLabels": {"governor.vllm.ai/role": "operator"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "governor-system"}},
        },
        {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}},
    ]
    default_scrapers = _policy({"clients": [{"podLabels": {"app": "gateway"}}]})["spec"]["ingress"][0]["from"]
    assert default_scrapers[-1] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        "namespaceSelector": {"matchLabels": {}},
    }
    assert default_scrapers[-2]["namespaceSelector"] == {}  # operator namespace unknown: any namespace


def test_network_policy_can_be_turned_off() -> None:
    assert _policy({"enabled": False}) == {}


def test_operator_pods_carry_the_label_the_policy_admits() -> None:
    from tests.chart.helm import install

    labels = install().one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert builders.OPERATOR_POD_LABELS.items() <= labels.items()


def test_cpu_limit_only_when_asked() -> None:
    def limits(resources: dict[str, Any]) -> dict[str, str]:
        isvc = parse_spec({"model": "m", "resources": resources})
        deployment = builders.build_deployment(OWNER, isvc, admin_token_hash="h", pod_monitor=False)
        return dict(deployment["spec"]["template"]["spec"]["containers"][0]["resources"].get("limits", {}))

    assert "cpu" not in limits({"cpu": "8"})
    assert limits({"cpu": "8", "cpuLimit": "12"})["cpu"] == "12"
