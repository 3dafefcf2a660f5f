"""Fixtures: a Kubernetes API emulator (tests/support/kube.py) and the real, unmodified Kopf operator
(governor.handlers) running in the test session's event loop against it.

``governor_cluster`` is session-scoped: Kopf starts once (about a second), and each test works in its own
namespace so tests do not see each other's objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kmock
import pytest_asyncio

from tests.support.kube import Emulator, eventually

if TYPE_CHECKING:
    from governor.adapters.kube import Kube

ISVC = kmock.resource("governor.vllm.ai", "v1alpha1", "inferenceservices")
DEPLOYMENTS = kmock.resource("apps", "v1", "deployments")
SERVICES = kmock.resource("", "v1", "services")
SECRETS = kmock.resource("", "v1", "secrets")
PDBS = kmock.resource("policy", "v1", "poddisruptionbudgets")
EVENTS = kmock.resource("", "v1", "events")
_namespaces = itertools.count(1)


@dataclass
class Cluster:
    """The emulator plus the operator, with the few verbs tests need (through HTTP, as kubectl would)."""

    emulator: Emulator
    operator: asyncio.Task[None]
    kube: Kube  # the operator's own API client (from Kopf's memo), for tests that drive its services
    seen_namespaces: list[str] = field(default_factory=list)

    def namespace(self) -> str:
        name = f"test-{next(_namespaces)}"
        self.seen_namespaces.append(name)
        return name

    def get(self, resource: kmock.resource, namespace: str, name: str) -> dict[str, Any] | None:
        key = (resource, namespace, name)
        if key not in self.emulator.objects or self.emulator.objects[key].deleted:
            return None
        raw: dict[str, Any] = self.emulator.objects[key].raw
        return raw

    def must(self, resource: kmock.resource, namespace: str, name: str) -> dict[str, Any]:
        obj = self.get(resource, namespace, name)
        assert obj is not None, f"{resource.plural} {namespace}/{name} does not exist"
        return obj

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/merge-patch+json"
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        async with self.emulator.request(method, path, json=body, headers=headers) as response:
            payload: dict[str, Any] = await response.json()
            assert response.status < 400, f"{method} {path}: {response.status} {payload.get('message')}"
            return payload

    async def apply_isvc(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "governor.vllm.ai/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        return await self.request(
            "POST",
            f"/apis/governor.vllm.ai/v1alpha1/namespaces/{namespace}/inferenceservices",
            body,
            "application/json",
        )

    async def patch(
        self,
        resource: kmock.resource,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        subresource: str = "",
    ) -> dict[str, Any]:
        return await self.request("PATCH", _path(resource, namespace, name, subresource), patch)

    async def pods_ready(
        self, namespace: str, name: str, ready: int = 1, created_within_s: float = 10.0
    ) -> None:
        """The kubelet's part (the emulator runs no pods): the Deployment's pods are ready, and the operator
        has copied that into the InferenceService's status (the planner steps only from ready replicas)."""
        await eventually(
            lambda: self.get(DEPLOYMENTS, namespace, name), timeout=created_within_s, what="the Deployment"
        )
        status = {"replicas": ready, "readyReplicas": ready, "availableReplicas": ready}
        await self.patch(DEPLOYMENTS, namespace, name, {"status": status}, subresource="status")
        await eventually(
            lambda: (self.must(ISVC, namespace, name).get("status") or {}).get("readyReplicas") == ready,
            what=f"status.readyReplicas {ready}",
        )

    async def delete(self, resource: kmock.resource, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("DELETE", _path(resource, namespace, name))

    def events(self, namespace: str, name: str | None) -> list[dict[str, Any]]:
        """Events about one object (``name``) or every object (None) in a namespace."""
        found = []
        for (res, ns, _), obj in self.emulator.objects.items():
            if res == EVENTS and ns == namespace and not obj.deleted:
                raw = obj.raw
                if name is None or raw.get("involvedObject", {}).get("name") == name:
                    found.append(raw)
        return found

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get(ISVC, namespace, name) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def _path(resource: kmock.resource, namespace: str, name: str, subresource: str = "") -> str:
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    return f"{base}/namespaces/{namespace}/{resource.plural}/{name}" + (
        f"/{subresource}" if subresource else ""
    )


@pytest_asyncio.fixture(scope="session")
async def kube_emulator() -> AsyncIterator[Emulator]:
    """An empty API server: the bundled core resources and the InferenceService CRD (all verbs)."""
    from governor import crd

    async with Emulator() as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        emulator.register_crd(crd.build_crd())
        yield emulator


@pytest_asyncio.fixture(scope="session")
async def governor_cluster(kube_emulator: Emulator) -> AsyncIterator[Cluster]:
    """The unmodified operator (``governor.handlers``) running against the emulator."""
    import governor.handlers  # noqa: F401  (registers the handlers in Kopf's default registry)
    import kopf
    from governor.adapters.kube import Connection
    from governor.handlers.startup import operator_memo

    # Explicit: the operator's login handler hands this server to Kopf and to its own API client.
    memo = operator_memo(Connection(server=str(kube_emulator.url)))
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(clusterwide=True, standalone=True, stop_flag=stop, ready_flag=ready, memo=memo)
    )
    await asyncio.wait_for(ready.wait(), timeout=30)
    cluster = Cluster(emulator=kube_emulator, operator=task, kube=memo.governor.kube)
    await eventually(
        lambda: any(r.resource == ISVC and r.action == kmock.action.WATCH for r in list(kube_emulator)),
        what="Kopf watching InferenceServices",
    )
    yield cluster
    stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=30)
    assert not cluster.kube.connected, "the cleanup handler closes the operator's API client"
