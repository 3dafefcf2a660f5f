"""The receiver over HTTP, in the operator (Kopf against the API emulator), feeding the real replica writer
(governor.services.replicas): a firing alert scales out by one, its repeat does nothing, refusals change
nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest_asyncio
from governor.services.alert_receiver import Receiver, ReceiverConfig, start
from governor.services.replicas import ReplicaWriter

from tests.support.engine import free_port
from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, Cluster
from tests.support.kube import eventually
from tests.webhook.alertmanager import alert, notification

TOKEN = "alertmanager-s3cret"
AUTOSCALED: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "resources": {"gpu": {"type": "H200"}},
    "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "scaleUpCooldownSeconds": 0},
}


@pytest_asyncio.fixture
async def receiver_url(governor_cluster: Cluster) -> AsyncIterator[str]:
    port = free_port()
    runner = await start(
        Receiver(
            ReceiverConfig(token=TOKEN, port=port, host="127.0.0.1"),
            ReplicaWriter(governor_cluster.kube).request_scale,
            governor_cluster.kube,
        )
    )
    yield f"http://127.0.0.1:{port}/alertmanager"
    await runner.cleanup()


async def _isvc(cluster: Cluster, spec: dict[str, Any]) -> str:
    ns = cluster.namespace()
    await cluster.apply_isvc(ns, "chat", spec)
    await cluster.pods_ready(ns, "chat")
    return ns


async def _post(url: str, body: Any, token: str | None = TOKEN) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, content=content, headers=headers)


def _replicas(cluster: Cluster, ns: str) -> tuple[int, int]:
    """(spec.replicas, the Deployment's replicas); an unset spec.replicas is the CRD's default, 1."""
    spec_replicas = cluster.must(ISVC, ns, "chat")["spec"].get("replicas", 1)
    return spec_replicas, cluster.must(DEPLOYMENTS, ns, "chat")["spec"]["replicas"]


async def test_a_firing_alert_scales_out_by_one_and_its_repeat_is_idempotent(
    governor_cluster: Cluster, receiver_url: str
) -> None:
    c = governor_cluster
    ns = await _isvc(c, AUTOSCALED)
    firing = notification(alert("VLLMGovernorQueueSaturated", namespace=ns))

    answer = await _post(receiver_url, firing)
    assert answer.status_code == 200, answer.text
    (step,) = answer.json()["steps"]
    assert (step["direction"], step["outcome"]) == (1, "scaled-up")
    await eventually(lambda: _replicas(c, ns) == (2, 2), what="spec and Deployment at 2 replicas")

    again = await _post(receiver_url, firing)
    assert again.json()["steps"] == []
    assert again.json()["skipped"] == [
        {"alert": "VLLMGovernorQueueSaturated", "why": "repeat of a notification already acted on"}
    ]
    assert _replicas(c, ns) == (2, 2)

    await eventually(
        lambda: any(e["reason"] == "AlertScaleOut" for e in c.events(ns, "chat")),
        what="an AlertScaleOut Event",
    )
    last = c.must(ISVC, ns, "chat")["status"]["alertmanager"]["lastStep"]
    assert (last["direction"], last["alerts"], last["outcome"]) == (
        1,
        ["VLLMGovernorQueueSaturated"],
        "scaled-up",
    )


async def test_wrong_credentials_and_bad_payloads_are_refused_and_change_nothing(
    governor_cluster: Cluster, receiver_url: str
) -> None:
    c = governor_cluster
    ns = await _isvc(c, AUTOSCALED)
    firing = notification(alert("VLLMGovernorQueueSaturated", namespace=ns))
    refusals = [
        (await _post(receiver_url, firing, token="wrong"), 401, "unauthorized"),
        (await _post(receiver_url, firing, token=None), 401, "unauthorized"),
        (await _post(receiver_url, b"{broken", token=TOKEN), 400, "malformed"),
        (await _post(receiver_url, {**firing, "version": "3"}), 422, "invalid"),
    ]
    for response, status, code in refusals:
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code
        assert response.json()["error"]["message"]
    assert _replicas(c, ns) == (1, 1)
    assert not any(e["reason"].startswith("AlertScale") for e in c.events(ns, "chat"))


async def test_an_inferenceservice_without_autoscaling_is_left_alone(
    governor_cluster: Cluster, receiver_url: str
) -> None:
    c = governor_cluster
    ns = await _isvc(c, {**AUTOSCALED, "autoscaling": {"enabled": False}})
    answer = await _post(receiver_url, notification(alert("VLLMGovernorCapAtFloor", namespace=ns)))
    (step,) = answer.json()["steps"]
    assert step["outcome"].startswith("ignored: autoscaling is off")
    assert _replicas(c, ns) == (1, 1)
