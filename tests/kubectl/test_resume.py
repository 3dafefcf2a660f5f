"""Restart and resume: InferenceServices that exist before the operator starts, and an operator SIGKILLed
mid-run and started again. The operator is the real ``governor operator`` process against the API emulator
(a fresh one, with schema validation); the users' objects come from kubectl; one InferenceService's pod is
the twin engine (``python -m governor_twin serve``), so its control loop runs and keeps status.law.
"""

from __future__ import annotations

import base64
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import pytest_asyncio
from governor import crd
from governor.core import builders

from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, PDBS, SECRETS, SERVICES
from tests.support.kube import Emulator, eventually, live_object
from tests.support.kubectl import KUBECTL, Kubectl, write_kubeconfig
from tests.support.operator_process import Operator, twin_engine

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
PODS = kmock.resource("", "v1", "pods")
NS, NAMES, TOKEN = "resume", ("alpha", "beta", "gamma"), "twin-admin-token-for-tests"
CHILDREN = ((DEPLOYMENTS, ""), (SERVICES, ""), (PDBS, "-pdb"), (SECRETS, "-admin-token"))
BIN = Path(sys.executable).parent


def manifest(name: str) -> str:
    return f"""apiVersion: governor.vllm.ai/v1alpha1
kind: InferenceService
metadata: {{name: {name}, namespace: {NS}}}
spec:
  model: tiny-llama
  resources: {{gpu: {{count: 0}}}}
  engine: {{maxNumSeqs: 32}}
  slo: {{targetMs: 1000}}
  adaptive: {{tickSeconds: 1, windowSeconds: 4, initialCap: 16}}
"""


@pytest.fixture(scope="module")
def twin() -> Iterator[int]:
    with twin_engine(TOKEN, initial_cap=16, ceiling=32) as port:
        yield port


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(validate_schemas=True) as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        emulator.register_crd(crd.build_crd())
        yield emulator


def _live(emulator: Emulator, resource: kmock.resource, name: str) -> dict[str, Any] | None:
    return live_object(emulator, resource, NS, name)


def _reconciled(emulator: Emulator, name: str) -> bool:
    isvc = _live(emulator, ISVC, name) or {}
    children = all(_live(emulator, res, name + suffix) for res, suffix in CHILDREN)
    return children and bool((isvc.get("status") or {}).get("observedGeneration"))


def _ticks(emulator: Emulator) -> int:
    law = ((_live(emulator, ISVC, "alpha") or {}).get("status") or {}).get("law") or {}
    return int(law.get("ticks", -1))


def _uids(emulator: Emulator) -> dict[str, str]:
    return {
        f"{res.plural}/{name}{suffix}": (_live(emulator, res, name + suffix) or {})["metadata"]["uid"]
        for name in NAMES
        for res, suffix in CHILDREN
    }


async def _write(emulator: Emulator, method: str, path: str, body: dict[str, Any], content: str) -> None:
    """What the cluster's own parts (kubelet, a secret manager) would write; the user only uses kubectl."""
    async with emulator.request(method, path, json=body, headers={"Content-Type": content}) as response:
        assert response.status < 400, await response.text()


async def _pod_at_twin(emulator: Emulator, port: int) -> None:
    token = base64.b64encode(TOKEN.encode()).decode()
    await _write(
        emulator,
        "PATCH",
        f"/api/v1/namespaces/{NS}/secrets/alpha-admin-token",
        {"data": {builders.TOKEN_KEY: token}},
        "application/merge-patch+json",
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "alpha-0", "namespace": NS, "labels": {builders.LABEL_OWNER: "alpha"}},
        "spec": {
            "containers": [
                {"name": "vllm", "image": "runtime", "ports": [{"name": "http", "containerPort": port}]}
            ]
        },
    }
    await _write(emulator, "POST", f"/api/v1/namespaces/{NS}/pods", pod, "application/json")
    status = {
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }
    await _write(
        emulator,
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/alpha-0/status",
        status,
        "application/merge-patch+json",
    )


async def test_existing_objects_are_reconciled_and_a_killed_operator_resumes(
    emulator: Emulator, twin: int, tmp_path: Path
) -> None:
    url = str(emulator.url).rstrip("/")
    k = Kubectl(write_kubeconfig(tmp_path / "kubeconfig", url, NS), tmp_path / "cache")
    for name in NAMES:
        await k("apply", "-f", "-", stdin=manifest(name))
    operator = Operator(url)
    try:
        started = time.monotonic()
        await operator.start()
        await eventually(
            lambda: all(_reconciled(emulator, n) for n in NAMES), timeout=30, what="every one reconciled"
        )
        print(f"all pre-existing InferenceServices reconciled {time.monotonic() - started:.1f}s after start")

        await _pod_at_twin(emulator, twin)
        await eventually(lambda: _ticks(emulator) >= 3, timeout=30, what="the control loop keeps status.law")
        await operator.kill()
        before, uids = _ticks(emulator), _uids(emulator)
        token = (_live(emulator, SECRETS, "alpha-admin-token") or {})["data"][builders.TOKEN_KEY]

        await operator.start()
        seen: list[int] = []

        def advanced() -> bool:
            seen.append(_ticks(emulator))
            return seen[-1] > before + 2

        await eventually(advanced, timeout=30, interval=0.05, what="status.law ticking again")
        assert min(seen) >= before, f"status.law restarted from scratch: {before} then {sorted(set(seen))}"
        assert _uids(emulator) == uids  # no child re-created, none duplicated
        assert (_live(emulator, SECRETS, "alpha-admin-token") or {})["data"][builders.TOKEN_KEY] == token
        names = (await k("get", "deployments,services,poddisruptionbudgets,secrets", "-o", "name")).split()
        assert len(names) == len(set(names)) == len(NAMES) * len(CHILDREN)
    finally:
        await operator.stop()
