"""The operator SIGKILLed right after a replica step, and started again.

The real ``governor operator`` (with its Alertmanager webhook receiver) governs one InferenceService whose pod
is the twin engine. A firing alert makes the planner step replicas 1 -> 2; the operator is killed the moment
the step is visible on the object (before it may have answered the webhook), the step's pod becomes ready,
and the operator is started again. The restarted receiver has forgotten the alert, so the same notification
acts again: the planner must absorb it with the cooldown it restores from the object (the step is not
repeated). Meanwhile the twin's cap and status.cap stay in [minCap, ceiling] at every sample, the law
resumes from status, and a delete with the operator running leaves nothing behind (no finalizer).
Prints one line of figures, ``RELIABILITY | ...``; docs/reliability.md holds one run's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from governor_dev.ports import free_port

from tests.reliability import harness
from tests.reliability.harness import NS, Bounds, faulty_emulator, watching
from tests.support.fixtures_kube import DEPLOYMENTS, ISVC
from tests.support.kube import eventually
from tests.support.kube_faults import FaultyEmulator
from tests.support.operator_process import Operator
from tests.webhook.alertmanager import alert, notification

TOKEN = "webhook-token-for-tests"
ISVC_PATH = f"/apis/governor.vllm.ai/v1alpha1/namespaces/{NS}/inferenceservices/alpha"
DEPLOYMENT_STATUS = f"/apis/apps/v1/namespaces/{NS}/deployments/alpha/status"
AUTOSCALING = {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "scaleUpCooldownSeconds": 600}


@pytest.fixture(scope="module")
def twin() -> Iterator[int]:
    with harness.twin_engine() as port:
        yield port


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> str:
    """The operator's receiver on a free port (the Operator process inherits this environment)."""
    port = free_port()
    for key, value in {"ENABLED": "true", "TOKEN": TOKEN, "HOST": "127.0.0.1", "PORT": str(port)}.items():
        monkeypatch.setenv(f"GOVERNOR_WEBHOOK_{key}", value)
    return f"http://127.0.0.1:{port}"


def spec_replicas(emulator: FaultyEmulator) -> int:
    return int(((harness.live(emulator, ISVC, "alpha") or {}).get("spec") or {}).get("replicas", 1))


def deployment_replicas(emulator: FaultyEmulator) -> int | None:
    return ((harness.live(emulator, DEPLOYMENTS, "alpha") or {}).get("spec") or {}).get("replicas")


async def pods_ready(emulator: FaultyEmulator, ready: int) -> None:
    """The kubelet's part: the Deployment's pods are ready; the operator copies that into status."""
    await harness.write(
        emulator,
        "PATCH",
        DEPLOYMENT_STATUS,
        {"status": {"replicas": ready, "readyReplicas": ready, "availableReplicas": ready}},
    )
    await eventually(
        lambda: harness.status(emulator, "alpha").get("readyReplicas") == ready,
        timeout=20,
        what=f"status.readyReplicas {ready}",
    )


async def alert_fires(webhook: str) -> dict[str, Any]:
    """Alertmanager's notification: alpha's queue is saturated (the same notification every time)."""
    firing = notification(alert("VLLMGovernorQueueSaturated", namespace=NS, name="alpha"))
    async with httpx.AsyncClient(timeout=20) as client:

        async def listening() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return (await client.get(f"{webhook}/healthz")).status_code == 200
            return False

        await eventually(listening, timeout=20, what="the webhook receiver listening")
        response = await client.post(
            f"{webhook}/alertmanager", json=firing, headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_killed_operator_never_repeats_a_replica_step(
    twin: int, webhook: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    async with faulty_emulator() as emulator:
        operator = Operator(str(emulator.url).rstrip("/"), tmp_path / "operator.log")
        await operator.start()
        try:
            body = harness.isvc("alpha")
            body["spec"]["autoscaling"] = AUTOSCALING
            await harness.write(emulator, "POST", ISVC_PATH.rsplit("/", 1)[0], body, "application/json")
            await eventually(lambda: harness.reconciled(emulator, "alpha"), timeout=30, what="reconciled")
            await harness.pod_at_twin(emulator, "alpha", twin)
            await pods_ready(emulator, 1)
            await eventually(lambda: harness.ticks(emulator, "alpha") >= 2, timeout=30, what="law ticking")

            async with watching(Bounds(emulator, "alpha", twin)) as bounds:
                first = asyncio.create_task(alert_fires(webhook))
                await eventually(
                    lambda: spec_replicas(emulator) == 2,
                    timeout=20,
                    interval=0.01,
                    what="the planner's step 1 -> 2",
                )
                await operator.kill()  # the moment the step is visible, whatever the receiver was doing
                killed_at, ticks_before = time.monotonic(), harness.ticks(emulator, "alpha")
                answered = "after" if first.done() else "before"
                with contextlib.suppress(httpx.HTTPError, AssertionError):
                    await first  # answered, or cut by the kill
                await harness.write(emulator, "PATCH", DEPLOYMENT_STATUS, {"status": {"readyReplicas": 2}})

                await operator.start()
                await pods_ready(emulator, 2)  # so that only the cooldown can absorb the repeat
                again = await alert_fires(webhook)
                await eventually(
                    lambda: harness.ticks(emulator, "alpha") >= ticks_before + 2,
                    timeout=30,
                    what="the law ticking again",
                )
                resumed_s = time.monotonic() - killed_at
            (step,) = again["steps"]
            assert step["outcome"] == "cooldown", step
            assert spec_replicas(emulator) == 2
            await eventually(lambda: deployment_replicas(emulator) == 2, what="the Deployment at 2 replicas")
            went_back = [t for t in bounds.law_ticks if 0 <= t < ticks_before]
            assert not went_back, f"status.law restarted: {ticks_before} then {sorted(set(went_back))}"
            assert not bounds.outside, bounds.outside

            await harness.write(emulator, "DELETE", ISVC_PATH, None, "application/json")
            deleting = time.monotonic()
            await eventually(
                lambda: harness.live(emulator, ISVC, "alpha") is None,
                timeout=20,
                what="alpha deleted (its finalizer released)",
            )
            print(
                f"\nRELIABILITY | operator SIGKILLed after a replica step ({answered} it answered) | "
                f"replicas 1 -> 2, the repeated alert after the restart: {step['outcome']} | "
                f"law resumed {resumed_s:.1f} s after the kill | "
                f"caps outside [{harness.MIN_CAP}, {harness.CEILING}] {len(bounds.outside)} of "
                f"{bounds.samples} samples x2 | deleted {time.monotonic() - deleting:.1f} s | "
                f"test {time.monotonic() - started:.0f} s"
            )
            assert operator.alive
        finally:
            await operator.stop()
