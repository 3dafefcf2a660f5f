"""Every pod the project deploys meets the "restricted" Pod Security profile, and more: a read-only root
filesystem, a UID outside the host's range, and writable emptyDirs where vLLM writes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from governor.core import builders

from tests.security.manifests import SPECS, chart_objects, children, pod_specs
from tests.security.pod_security import restricted_violations

HIGH_UID = 10000


def _all_pods() -> dict[str, dict[str, Any]]:
    pods = {f"chart {k}": v for k, v in pod_specs(chart_objects()).items()}
    for name, spec in SPECS.items():
        pods |= {f"{name} {k}": v for k, v in pod_specs(children(spec)).items()}
    return pods


@pytest.fixture(scope="module")
def pods() -> dict[str, dict[str, Any]]:
    found = _all_pods()
    assert len(found) == 1 + len(SPECS)
    return found


def test_every_pod_meets_the_restricted_profile(pods: dict[str, dict[str, Any]]) -> None:
    assert {name: restricted_violations(pod) for name, pod in pods.items()} == {name: [] for name in pods}


def test_every_container_has_a_read_only_root_and_a_high_uid(pods: dict[str, dict[str, Any]]) -> None:
    for name, pod in pods.items():
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, name
            uid = ctx.get("runAsUser", pod["securityContext"].get("runAsUser"))
            assert uid is not None and uid >= HIGH_UID, name


def test_engines_write_only_to_emptydirs_and_read_the_token_from_a_file() -> None:
    pod = pod_specs(children(SPECS["minimal"]))["Deployment/llama-8b"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    for path in ("/tmp", env["HOME"], builders.CACHE_PATH, "/dev/shm"):
        assert "emptyDir" in volumes[mounts[path]], path
    # ~/.cache (vLLM, FlashInfer), ~/.triton, ~/.nv, ~/.config all live under the writable HOME.
    assert env["HOME"] == builders.HOME_PATH and env["USER"]
    token_dir = next(p for p, n in mounts.items() if n == "admin-token")
    assert env["GOVERNOR_ADMIN_TOKEN_FILE"].startswith(token_dir)
    assert "GOVERNOR_ADMIN_TOKEN" not in env


@pytest.mark.parametrize(
    ("break_it", "rule"),
    [
        (
            lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
            "Privilege Escalation",
        ),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
            "does not drop ALL",
        ),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "adds more than NET_BIND_SERVICE",
        ),
        (lambda p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "HostPath Volumes"),
        (lambda p: p.update(hostNetwork=True), "Host Namespaces"),
        (lambda p: [c["securityContext"].update(runAsUser=0) for c in p["containers"]], "runAsUser is 0"),
        (
            lambda p: [
                p["securityContext"].pop("seccompProfile"),
                p["containers"][0]["securityContext"].pop("seccompProfile"),
            ],
            "Seccomp",
        ),
        (
            lambda p: [
                p["securityContext"].pop("runAsNonRoot"),
                p["containers"][0]["securityContext"].pop("runAsNonRoot"),
            ],
            "Running as Non-root",
        ),
        (lambda p: p["containers"][0]["ports"][0].update(hostPort=8000), "Host Ports"),
    ],
)
def test_the_check_catches_each_broken_rule(break_it: Any, rule: str) -> None:
    pod = copy.deepcopy(pod_specs(children(SPECS["full"]))["Deployment/llama-8b"])
    break_it(pod)
    assert any(rule in v for v in restricted_violations(pod)), restricted_violations(pod)
