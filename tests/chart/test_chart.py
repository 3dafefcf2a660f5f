"""The Helm chart: lint with the real Helm library, install into the Kubernetes emulator, validate what Helm
sent against Kubernetes schemas, and check the operator's Deployment, monitors, rules and dashboards."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from governor.observability import alerts, dashboards, scrape

from tests.chart.helm import CHART, ROOT, InstallFailed, install

KUBERNETES_VERSION = "1.30.0"
HELM_WARNING = 2  # Helm's lint severities: 1 info, 2 warning, 3 error


def test_helm_lint_finds_no_warning_or_error() -> None:
    messages = install().lint["Messages"]
    assert [m for m in messages if m["Severity"] >= HELM_WARNING] == []


def test_install_creates_crd_first_then_every_part() -> None:
    kinds = install().kinds()
    assert kinds[0] == "CustomResourceDefinition"
    assert sorted(kinds) == sorted(
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            "Secret",
            "ConfigMap",
            "ClusterRole",
            "ClusterRoleBinding",
            "Service",
            "Service",
            "Deployment",
            "PrometheusRule",
            "ServiceMonitor",
            "NetworkPolicy",
        ]
    )


def test_the_installed_crd_is_the_repository_crd() -> None:
    crd = install().one("CustomResourceDefinition")
    assert crd == yaml.safe_load((ROOT / "crds" / f"{crd['metadata']['name']}.yaml").read_text())


@pytest.mark.parametrize("values", [{}, {"podMonitor": {"enabled": True}, "watchNamespaces": ["ai"]}])
def test_every_builtin_object_is_valid_for_kubernetes(values: dict[str, Any]) -> None:
    for obj in install(values).objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # not in the Kubernetes schemas; checked field by field below
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_operator_runs_non_root_read_only_with_probes_and_resources() -> None:
    pod = install().one("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["resources"]["limits"]["cpu"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {p["name"] for p in container["ports"]} == {"metrics", "webhook", "probes"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GOVERNOR_WEBHOOK_TOKEN_FILE"] == "/var/run/secrets/governor/webhook/token"


def test_services_expose_metrics_and_webhook_to_the_operator_pods() -> None:
    release = install()
    pod_labels = release.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    for suffix, port in (("-metrics", "metrics"), ("-webhook", "webhook")):
        service = release.one("Service", suffix)["spec"]
        assert service["selector"].items() <= pod_labels.items()
        assert service["ports"][0]["targetPort"] == port


def test_webhook_token_secret_is_generated_and_mounted() -> None:
    release = install()
    secret = release.one("Secret", "-webhook")
    assert len(secret["data"]["token"]) > 40
    volumes = release.one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "webhook-token",
        "secret": {"secretName": secret["metadata"]["name"], "items": [{"key": "token", "path": "token"}]},
    } in volumes


def test_an_existing_secret_replaces_the_generated_one() -> None:
    release = install({"webhook": {"auth": {"existingSecret": "my-alertmanager-token"}}})
    assert "Secret" not in release.kinds()
    volumes = release.one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "my-alertmanager-token" for v in volumes)


def test_monitors_use_the_label_convention_of_the_dashboards() -> None:
    release = install({"podMonitor": {"enabled": True}})
    endpoint = release.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True
    assert endpoint["metricRelabelings"] == scrape.service_monitor_metric_relabelings()
    pods = release.one("PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert pods["relabelings"] == scrape.pod_monitor_relabelings()
    assert pods["port"] == scrape.ENGINE_PORT_NAME


def test_dashboards_configmap_carries_the_sidecar_label_and_the_dashboards() -> None:
    configmap = install().one("ConfigMap", "-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name in dashboards.DASHBOARDS:
        assert json.loads(configmap["data"][name]) == json.loads((ROOT / "dashboards" / name).read_text())


def test_prometheusrule_with_default_values_is_the_plain_rules_file() -> None:
    rule = install().one("PrometheusRule")
    plain = yaml.safe_load((ROOT / "alerts" / "vllm-governor.rules.yaml").read_text())
    assert rule["spec"] == plain


def test_prometheusrule_follows_the_slo_values(tmp_path: Path) -> None:
    settings = alerts.AlertSettings(
        slo_latency="ttft",
        slo_threshold_seconds="0.5",
        slo_objective="0.995",
        queue_time_p95_seconds="1",
        queue_saturated_for="2m",
    )
    rule = install({"alerts": alerts.helm_values(settings)}).one("PrometheusRule")
    assert rule["spec"] == yaml.safe_load(alerts.rules_file(settings))
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    check = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_values_yaml_defaults_are_the_alert_source_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["alerts"] == alerts.helm_values()


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"alerts": {"slo": {"thresholdSeconds": "0.042"}}}, "thresholdSeconds"),
        ({"alerts": {"slo": {"latency": "p99"}}}, "latency"),
        ({"webhook": {"port": 0}}, "port"),
        ({"unknownKey": True}, "unknownKey"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(InstallFailed, match=complaint):
        install(values)


def test_operator_network_policy_opens_only_its_ports() -> None:
    release = install()
    policy = release.one("NetworkPolicy")["spec"]
    pod_labels = release.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert sorted(p["port"] for p in rule["ports"]) == [8080, 8081, 9090] and "from" not in rule
    peers = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    narrowed = install({"networkPolicy": {"ingressFrom": peers}, "webhook": {"enabled": False}})
    (rule,) = narrowed.one("NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == peers and sorted(p["port"] for p in rule["ports"]) == [8080, 9090]
    assert all(o["kind"] != "NetworkPolicy" for o in install({"networkPolicy": {"enabled": False}}).objects)


def test_image_digest_pins_the_operator_image() -> None:
    digest = "sha256:" + "a" * 64
    pod = install({"image": {"digest": digest}}).one("Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"ghcr.io/vllm-governor/operator@{digest}"
    with pytest.raises(InstallFailed, match="digest"):
        install({"image": {"digest": "latest"}})
