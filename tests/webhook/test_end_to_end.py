"""End to end: real Prometheus evaluates the shipped rules on a real vLLM CPU runtime's metrics -> real
Alertmanager routes the alert to the operator's webhook -> the replica planner patches replicas -> the
Deployment in the API emulator changes (Kopf reconciling it, as in a cluster).

The rules are the shipped ones rendered with test values (what a Helm user sets in values.yaml): the
queue-time threshold and `for` are lowered so a 2-core CPU engine with its cap at 1 saturates in seconds.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from governor.observability import alerts, scrape
from governor.services.alert_receiver import Receiver, ReceiverConfig, start
from governor.services.replicas import ReplicaWriter

from tests.observability.stack import RulesPrometheus, running_alertmanager
from tests.support.engine import Engine, free_port, prompt_ids
from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, Cluster
from tests.support.kube import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]

TOKEN = "e2e-alertmanager-token"
SETTINGS = alerts.AlertSettings(queue_time_p95_seconds="0.05", queue_saturated_for="0s")
SPEC: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "resources": {"gpu": {"type": "H200"}},
    "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "scaleUpCooldownSeconds": 0},
}


@pytest_asyncio.fixture
async def webhook_port(governor_cluster: Cluster) -> AsyncIterator[int]:
    port = free_port()
    runner = await start(
        Receiver(
            ReceiverConfig(token=TOKEN, port=port, host="127.0.0.1"),
            ReplicaWriter(governor_cluster.kube).request_scale,
            governor_cluster.kube,
        )
    )
    yield port
    await runner.cleanup()


def _alertmanager_config(webhook_port: int) -> dict[str, Any]:
    """What docs/autoscaling.md tells users to add to Alertmanager (the bearer token: the chart's Secret)."""
    return {
        "route": {
            "receiver": "vllm-governor",
            "group_by": ["alertname", "namespace", "inferenceservice"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "2s",
        },
        "receivers": [
            {
                "name": "vllm-governor",
                "webhook_configs": [
                    {
                        "url": f"http://127.0.0.1:{webhook_port}/alertmanager",
                        "send_resolved": True,
                        "http_config": {"authorization": {"type": "Bearer", "credentials": TOKEN}},
                    }
                ],
            }
        ],
    }


def _overload(engine: Engine, stop: threading.Event) -> None:
    """16 clients against a cap of 1: requests queue."""

    def client(seed: int) -> None:
        with httpx.Client(base_url=engine.base_url, timeout=120) as http:
            while not stop.is_set():
                http.post("/v1/completions", json=engine.completion_body(prompt_ids(32, seed=seed), 24))

    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(180)


@pytest.fixture
def overloaded(engine_limits: Engine) -> Iterator[Engine]:
    engine_limits.set_limits(cap=1)
    stop = threading.Event()
    driver = threading.Thread(target=_overload, args=(engine_limits, stop), daemon=True)
    driver.start()
    yield engine_limits
    stop.set()
    driver.join(180)


async def test_a_saturated_engine_gets_a_replica_through_prometheus_and_alertmanager(
    governor_cluster: Cluster,
    webhook_port: int,
    overloaded: Engine,
    tmp_path: Path,
) -> None:
    c = governor_cluster
    ns = c.namespace()
    await c.apply_isvc(ns, "chat", SPEC)
    # Kopf shares 2 cores with vLLM, Prometheus and Alertmanager here: give the first reconcile time.
    await c.pods_ready(ns, "chat", created_within_s=60)

    rules = tmp_path / "rules.yaml"
    rules.write_text(alerts.rules_file(SETTINGS))
    with running_alertmanager(tmp_path, _alertmanager_config(webhook_port)) as alertmanager:
        prometheus = RulesPrometheus(tmp_path, [rules], alertmanager=alertmanager)
        prometheus.scrape_configs = scrape.static_scrape_configs(
            engine_targets=[overloaded.base_url.removeprefix("http://")],
            operator_targets=[],
            namespace=ns,
            inferenceservice="chat",
        )[:1]
        prometheus._write()
        prometheus.start()
        try:
            await eventually(
                lambda: c.must(DEPLOYMENTS, ns, "chat")["spec"]["replicas"] == 2,
                timeout=120,
                what="the Deployment scaled to 2 by the alert",
            )
            firing = [a for a in prometheus.alerts() if a["state"] == "firing"]
            assert {(a["labels"]["alertname"], a["labels"]["namespace"]) for a in firing} >= {
                ("VLLMGovernorQueueSaturated", ns)
            }
        finally:
            prometheus.stop()

    isvc = c.must(ISVC, ns, "chat")
    assert isvc["spec"]["replicas"] == 2
    step = isvc["status"]["alertmanager"]["lastStep"]
    assert (step["direction"], step["alerts"], step["outcome"]) == (
        1,
        ["VLLMGovernorQueueSaturated"],
        "scaled-up",
    )
    # Alertmanager repeated the notification every 2 s meanwhile: still one step.
    assert c.must(DEPLOYMENTS, ns, "chat")["spec"]["replicas"] == 2
    await eventually(
        lambda: any(e["reason"] == "AlertScaleOut" for e in c.events(ns, "chat")),
        what="an AlertScaleOut Event",
    )
