"""What the project deploys, as Kubernetes objects: the chart's render and the operator's children."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from governor.core import builders
from governor.core.spec import parse_spec

from tests.chart.helm import install

ROOT = Path(__file__).resolve().parents[2]
OWNER = builders.Owner(name="llama-8b", namespace="inference", uid="00000000-0000-4000-8000-000000000001")
# Specs that cover each branch of the pod template: emptyDir and PVC cache, GPU and CPU, a CPU limit.
SPECS: dict[str, dict[str, Any]] = {
    "minimal": yaml.safe_load((ROOT / "examples" / "minimal.yaml").read_text())["spec"],
    "full": yaml.safe_load((ROOT / "examples" / "full.yaml").read_text())["spec"],
    "cpu": {
        "model": "m",
        "resources": {"gpu": {"count": 0}, "cpu": "4", "cpuLimit": "4", "memory": "8Gi"},
        "modelCache": {"sizeLimit": "20Gi"},
        "networkPolicy": {"clients": [{"podLabels": {"a": "b"}}]},
    },
}


def children(spec: dict[str, Any], *, monitoring_api: bool = True) -> list[dict[str, Any]]:
    isvc = parse_spec(spec)
    return [
        builders.build_admin_secret(OWNER, "not-a-real-token"),
        *builders.build_children(
            OWNER,
            isvc,
            admin_token_hash=builders.token_hash("not-a-real-token"),
            monitoring_api=monitoring_api,
            operator_namespace="governor-system",
        ),
    ]


def chart_objects() -> list[dict[str, Any]]:
    """The chart with its defaults (every optional object on)."""
    return [dict(o) for o in install().objects]


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod template among ``objects``, by 'Kind/name'."""
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    }


def dump(directory: Path) -> list[Path]:
    """Write every object to ``directory`` as YAML files, one file per source."""
    written = []
    sources = {"chart": chart_objects(), **{f"children-{k}": children(v) for k, v in SPECS.items()}}
    for name, objects in sources.items():
        path = directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        written.append(path)
    return written
