"""Render the chart by installing it into the kmock emulator in a child process (see helm_emulator.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vllm-governor"


@dataclass(frozen=True)
class Release:
    lint: dict[str, Any]
    manifest: str
    objects: tuple[dict[str, Any], ...]  # what the API server received, in order

    def documents(self) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all(self.manifest) if doc]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"{len(found)} {kind} objects ending in {name_suffix!r}"
        return found[0]

    def kinds(self) -> list[str]:
        return [o["kind"] for o in self.objects]


class InstallFailed(Exception):
    pass


def _run(values_json: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.chart.helm_emulator", str(CHART), values_json],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        check=False,
        env={**os.environ, "HELM_DRIVER": "memory"},
    )
    try:
        payload: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise InstallFailed(result.stdout[-2000:] + result.stderr[-4000:]) from None
    return payload


@cache
def _install(values_json: str) -> Release:
    payload = _run(values_json)
    if "error" in payload:
        raise InstallFailed(payload["error"])
    return Release(payload["lint"], payload["manifest"], tuple(payload["objects"]))


def install(values: dict[str, Any] | None = None) -> Release:
    """`helm install` of the chart with these values into a fresh emulator (cached per values)."""
    return _install(json.dumps(values or {}, sort_keys=True))
