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

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
OWNER = builders.Owner(name="llama-8b", namespace="inference", uid="00000000-0000-4000-8000-000000000001")
TOKEN = "test-token"


def _children(example: str, monitoring_api: bool) -> list[dict[str, Any]]:
    isvc = parse_spec(yaml.safe_load((ROOT / "examples" / example).read_text())["spec"])
    return [builders.build_admin_secret(OWNER, TOKEN), *builders.build_children(
        OWNER, isvc, admin_token_hash=builders.token_hash(TOKEN), monitoring_api=monitoring_api)]


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
    assert {"name": "GOVERNOR_ADMIN_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "llama-8b-admin-token", "key": "token"}}} in container["env"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert pod["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert "prometheus.io/scrape" not in deployment["spec"]["template"]["metadata"]["annotations"]
    assert set(children) == {"Secret", "Service", "PodDisruptionBudget", "Deployment", "PodMonitor"}
    for child in children.values():
        assert child["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
        assert child["metadata"]["labels"][builders.LABEL_OWNER] == "llama-8b"


def test_without_the_monitoring_api_pods_get_scrape_annotations() -> None:
    children = {c["kind"]: c for c in _children("full.yaml", monitoring_api=False)}
    assert "PodMonitor" not in children
    annotations = children["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "8000"


def test_builders_are_pure() -> None:
    assert _children("full.yaml", True) == _children("full.yaml", True)
