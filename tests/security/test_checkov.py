"""checkov's Kubernetes checks on the rendered chart and the operator's children (tests/security/checkov.yaml
lists what still fails and why).

checkov lives in its own virtualenv (.cache/checkov-venv, or the `checkov` on PATH, or $CHECKOV): its pins
(packaging<24, networkx<2.7) conflict with pytest 9 and torch in the project's .venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.security.manifests import ROOT, dump

CONFIG = Path(__file__).with_name("checkov.yaml")


def _checkov() -> str | None:
    candidates = [
        os.environ.get("CHECKOV"),
        str(ROOT / ".cache" / "checkov-venv" / "bin" / "checkov"),
        shutil.which("checkov"),
    ]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def _failures(directory: Path) -> set[tuple[str, str]]:
    checkov = _checkov()
    if checkov is None:
        pytest.skip(
            "checkov is not installed: python -m venv .cache/checkov-venv &&"
            " .cache/checkov-venv/bin/pip install checkov"
        )
    result = subprocess.run(
        [
            checkov,
            "--directory",
            str(directory),
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--quiet",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report: Any = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    assert reports and all(r.get("check_type") == "kubernetes" for r in reports), result.stdout[:500]
    return {(c["check_id"], c["resource"]) for r in reports for c in r["results"]["failed_checks"]}


def test_skip_list_gives_a_reason_for_each_check() -> None:
    skips = yaml.safe_load(CONFIG.read_text())["skip"]
    assert len({s["id"] for s in skips}) == len(skips)
    for skip in skips:
        assert len(skip["reason"].split()) >= 10, skip["id"]
        assert skip["resources"], skip["id"]


def test_checkov_passes_but_for_the_listed_skips(tmp_path: Path) -> None:
    assert len(dump(tmp_path)) == 4
    failed = _failures(tmp_path)
    allowed = {
        (s["id"], resource) for s in yaml.safe_load(CONFIG.read_text())["skip"] for resource in s["resources"]
    }
    assert failed - allowed == set(), "new checkov failures: fix them, or list them with a reason"
    assert allowed - failed == set(), "skips that no longer fail: remove them from checkov.yaml"


def test_checkov_sees_what_it_should(tmp_path: Path) -> None:
    """The scan is not vacuous: an engine pod that runs as root with a writable root fs fails it."""
    from tests.security.manifests import SPECS, children

    deployment = next(c for c in children(SPECS["full"]) if c["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"] |= {"readOnlyRootFilesystem": False, "runAsUser": 0}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(deployment))
    failed = {check for check, _ in _failures(tmp_path)}
    assert {"CKV_K8S_22", "CKV_K8S_40"} <= failed
