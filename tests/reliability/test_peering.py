"""Two operator replicas with Kopf's peering: exactly one acts, and the other takes over when it dies.

Both are the real ``governor operator --peering governor`` against one emulator that serves Kopf's
ClusterKopfPeering CRD. Each replica reaches the emulator under its own host name (127.0.0.1 and
localhost), so the Host header of every request tells which replica wrote it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import harness
from tests.reliability.harness import Bounds, faulty_emulator, governed, watching
from tests.support.kube import eventually
from tests.support.kube_faults import WRITES, FaultyEmulator, request_kind
from tests.support.operator_process import Operator

LIFETIME_S = 15  # settings.peering.lifetime in governor.handlers.startup.configure


def peering_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    """Kopf's peering resource, as its docs install it (kopf.dev/v1, status kept in the object)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def twin() -> Iterator[int]:
    with harness.twin_engine() as port:
        yield port


def writes_by(emulator: FaultyEmulator, host: str, since: int = 0) -> list[str]:
    """The operator's writes (not the peering keep-alives) a replica sent, by its Host header."""
    found = []
    for request in list(emulator)[since:]:
        if request.resource is None or request.resource.group == "kopf.dev":
            continue
        sent_to = next((v for k, v in request.headers.items() if k.lower() == "host"), "")
        kind = request_kind(request)
        if sent_to.startswith(host) and kind in WRITES and request.resource.plural != "events":
            found.append(f"{request.method} {request.url.path}")
    return found


def _peers(emulator: FaultyEmulator) -> dict[str, Any]:
    """The operators announced in the ClusterKopfPeering object (Kopf keeps one status key per peer)."""
    for key, obj in emulator.objects.items():
        if key[0].plural == "clusterkopfpeerings" and not obj.deleted:
            return dict(obj.raw.get("status") or {})
    return {}


async def test_one_replica_acts_and_the_other_takes_over(twin: int, tmp_path: Path) -> None:
    async with faulty_emulator() as emulator:
        emulator.register_crd(peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"))
        emulator.register_crd(peering_crd("KopfPeering", "kopfpeerings", "Namespaced"))
        await harness.write(
            emulator,
            "POST",
            "/apis/kopf.dev/v1/clusterkopfpeerings",
            {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "governor"}},
            "application/json",
        )
        port = emulator.url.port
        first = Operator(
            f"http://127.0.0.1:{port}", tmp_path / "first.log", "--peering", "governor", "--priority", "200"
        )
        second = Operator(
            f"http://localhost:{port}", tmp_path / "second.log", "--peering", "governor", "--priority", "100"
        )
        # One after the other, as a Deployment rolls replicas out: two operators started in the same instant
        # both act until each has seen the other's peering record (Kopf's peering is not a lock).
        await first.start()
        try:
            await governed(emulator, "alpha", twin, first)
            await second.start()
            await eventually(lambda: len(_peers(emulator)) >= 2, timeout=30, what="both replicas peered")
            uids, mark = harness.uids(emulator, ("alpha",)), len(list(emulator))
            async with watching(Bounds(emulator, "alpha", twin)) as bounds:
                ticks = harness.ticks(emulator, "alpha")
                await eventually(lambda: harness.ticks(emulator, "alpha") >= ticks + 3, timeout=20)
                assert writes_by(emulator, "127.0.0.1", mark), "the first replica does not act"
                assert not writes_by(emulator, "localhost"), "the paused replica wrote"

                await first.kill()
                killed, mark = time.monotonic(), len(list(emulator))
                await eventually(
                    lambda: any("/status" in w for w in writes_by(emulator, "localhost", mark)),
                    timeout=LIFETIME_S + 20,
                    interval=0.2,
                    what="the second replica takes over",
                )
                takeover_s = time.monotonic() - killed
                ticks = harness.ticks(emulator, "alpha")
                await eventually(lambda: harness.ticks(emulator, "alpha") >= ticks + 2, timeout=15)
            print(
                f"\nRELIABILITY | first of 2 peered replicas SIGKILLed | "
                f"second acts after {takeover_s:.1f} s "
                f"(peering lifetime {LIFETIME_S} s) | children re-created "
                f"{sum(harness.uids(emulator, ('alpha',))[k] != v for k, v in uids.items())} | "
                f"caps outside bounds {len(bounds.outside)} of {bounds.samples} samples x2"
            )
            assert second.alive
            assert takeover_s <= LIFETIME_S + 10
            assert harness.uids(emulator, ("alpha",)) == uids
            assert not bounds.outside, bounds.outside
        finally:
            await first.stop()
            await second.stop()
