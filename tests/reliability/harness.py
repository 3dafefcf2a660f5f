"""What the reliability tests share: the real ``governor operator`` process against the fault-injecting
emulator, one InferenceService whose pod is the twin engine, and the watchers that measure what the
operator did (caps outside their bounds, children re-created or duplicated, status.law going back).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kmock
from governor import crd
from governor.core import builders
from governor_runtime import contract

from tests.support import operator_process
from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, PDBS, SECRETS, SERVICES
from tests.support.kube import eventually, live_object
from tests.support.kube_faults import HARNESS_AGENT, FaultyEmulator
from tests.support.operator_process import Operator

PODS = kmock.resource("", "v1", "pods")
NS, TOKEN = "faults", "twin-admin-token-for-tests"
MIN_CAP, CEILING, INITIAL_CAP = 4, 32, 16
CHILDREN = ((DEPLOYMENTS, ""), (SERVICES, ""), (PDBS, "-pdb"), (SECRETS, "-admin-token"))
BIN = Path(sys.executable).parent


def isvc(name: str, target_ms: int = 1000) -> dict[str, Any]:
    return {
        "apiVersion": "governor.vllm.ai/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": "tiny-llama",
            "resources": {"gpu": {"count": 0}},
            "engine": {"maxNumSeqs": CEILING},
            "slo": {"targetMs": target_ms},
            "adaptive": {"tickSeconds": 1, "windowSeconds": 4, "initialCap": INITIAL_CAP, "minCap": MIN_CAP},
        },
    }


@contextlib.contextmanager
def twin_engine() -> Iterator[int]:
    """The twin engine as the governed pod, with this harness's token and bounds; yields its port."""
    with operator_process.twin_engine(TOKEN, INITIAL_CAP, CEILING) as port:
        yield port


@contextlib.asynccontextmanager
async def faulty_emulator() -> AsyncIterator[FaultyEmulator]:
    async with FaultyEmulator(validate_schemas=True) as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        emulator.register_crd(crd.build_crd())
        yield emulator


def live(emulator: FaultyEmulator, resource: kmock.resource, name: str) -> dict[str, Any] | None:
    return live_object(emulator, resource, NS, name)


def status(emulator: FaultyEmulator, name: str) -> dict[str, Any]:
    return dict((live(emulator, ISVC, name) or {}).get("status") or {})


def reconciled(emulator: FaultyEmulator, name: str) -> bool:
    """Every child exists and status reports the current generation."""
    obj = live(emulator, ISVC, name) or {}
    children = all(live(emulator, res, name + suffix) for res, suffix in CHILDREN)
    return children and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]


def ticks(emulator: FaultyEmulator, name: str) -> int:
    return int((status(emulator, name).get("law") or {}).get("ticks", -1))


def uids(emulator: FaultyEmulator, names: tuple[str, ...]) -> dict[str, str]:
    return {
        f"{res.plural}/{name}{suffix}": (live(emulator, res, name + suffix) or {})["metadata"]["uid"]
        for name in names
        for res, suffix in CHILDREN
    }


def child_count(emulator: FaultyEmulator) -> dict[str, int]:
    """How many objects of each child kind exist in the namespace (duplicates would show here)."""
    counts: dict[str, int] = {}
    for (resource, namespace, _), obj in list(emulator.objects.items()):
        if namespace == NS and not obj.deleted and any(resource == res for res, _ in CHILDREN):
            counts[str(resource.plural)] = counts.get(str(resource.plural), 0) + 1
    return counts


async def write(
    emulator: FaultyEmulator, method: str, path: str, body: Any, content: str = "application/merge-patch+json"
) -> dict[str, Any]:
    """What a user or the cluster's own parts (kubelet) would write (never faulted)."""
    async with emulator.request(
        method, path, json=body, headers={"Content-Type": content, "User-Agent": HARNESS_AGENT}
    ) as response:
        payload: dict[str, Any] = await response.json()
        assert response.status < 400, payload
        return payload


async def create_isvc(emulator: FaultyEmulator, name: str) -> None:
    await write(
        emulator,
        "POST",
        f"/apis/governor.vllm.ai/v1alpha1/namespaces/{NS}/inferenceservices",
        isvc(name),
        "application/json",
    )


async def pod_at_twin(emulator: FaultyEmulator, name: str, port: int) -> None:
    """The kubelet's part: the governed pod runs (it is the twin) and the token Secret holds the twin's."""
    token = base64.b64encode(TOKEN.encode()).decode()
    await write(
        emulator,
        "PATCH",
        f"/api/v1/namespaces/{NS}/secrets/{name}-admin-token",
        {"data": {builders.TOKEN_KEY: token}},
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": NS, "labels": {builders.LABEL_OWNER: name}},
        "spec": {
            "containers": [
                {"name": "vllm", "image": "runtime", "ports": [{"name": "http", "containerPort": port}]}
            ]
        },
    }
    await write(emulator, "POST", f"/api/v1/namespaces/{NS}/pods", pod, "application/json")
    await write(
        emulator,
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/{name}-0/status",
        {
            "status": {
                "phase": "Running",
                "podIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
    )


@dataclass
class Bounds:
    """Samples status.cap and the twin's live cap until stopped; counts those outside [minCap, ceiling]."""

    emulator: FaultyEmulator
    name: str
    twin_port: int
    outside: list[tuple[str, int]] = field(default_factory=list)
    samples: int = 0
    law_ticks: list[int] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.twin_port}", headers=headers) as twin:
            while not stop.is_set():
                caps = [("status", status(self.emulator, self.name).get("cap"))]
                with contextlib.suppress(httpx.HTTPError):
                    caps.append(("engine", (await twin.get(contract.LIMITS_PATH)).json().get("cap")))
                for where, cap in caps:
                    if cap is not None and not MIN_CAP <= int(cap) <= CEILING:
                        self.outside.append((where, int(cap)))
                self.law_ticks.append(ticks(self.emulator, self.name))
                self.samples += 1
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def watching(bounds: Bounds) -> AsyncIterator[Bounds]:
    stop = asyncio.Event()
    task = asyncio.create_task(bounds.run(stop))
    try:
        yield bounds
    finally:
        stop.set()
        await task


async def governed(emulator: FaultyEmulator, name: str, port: int, operator: Operator) -> float:
    """Create ``name``, wait for its children, put its pod at the twin, wait for the law to tick; seconds."""
    started = time.monotonic()
    await create_isvc(emulator, name)
    await eventually(lambda: reconciled(emulator, name), timeout=30, what=f"{name} reconciled")
    await pod_at_twin(emulator, name, port)
    await eventually(lambda: ticks(emulator, name) >= 2, timeout=30, what=f"{name}: status.law ticking")
    assert operator.alive
    return time.monotonic() - started
