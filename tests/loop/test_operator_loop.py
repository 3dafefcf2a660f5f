"""The control loop in the operator: the real Kopf operator against the API emulator, an InferenceService
whose pod points at the real local vLLM runtime, and a real Prometheus scraping it.

Asserted: status reports the cap the engine really holds, decisions land in status (law state, mode, last
decision) with an Event when the cap changes, MetricsAvailable follows Prometheus (stopped -> False, cap
held; back -> True).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
import pytest_asyncio
from governor.core import builders

from tests.loop.load import closed_loop
from tests.support.engine import Engine
from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, SECRETS, Cluster
from tests.support.fixtures_prometheus import ConfigureTargets
from tests.support.kube import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]
PODS = kmock.resource("", "v1", "pods")
NAME = "tiny"


def spec(engine: Engine, target_ms: float, initial_cap: int) -> dict[str, Any]:
    return {
        "model": "tiny-llama",
        "resources": {"gpu": {"count": 0}},
        "engine": {"maxNumSeqs": engine.ceiling},
        "slo": {"kind": "tpot", "targetMs": target_ms},
        "adaptive": {
            "tickSeconds": 1,
            "windowSeconds": 4,
            "cooldownSeconds": 2,
            "initialCap": initial_cap,
            "burst": {"enabled": False},
        },  # the clients' start-up ramp would read as a burst
    }


@pytest_asyncio.fixture
async def governed(
    governor_cluster: Cluster,
    engine_limits: Engine,
    prometheus_for: ConfigureTargets,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Cluster, str, Engine, Any]]:
    """An InferenceService (TPOT SLO 1 s: always met) with one ready pod at the engine's address."""
    c, engine = governor_cluster, engine_limits
    ns = c.namespace()
    prom = prometheus_for({(ns, NAME): [engine.base_url.removeprefix("http://")]})
    monkeypatch.setenv("GOVERNOR_PROMETHEUS_URL", prom.url)
    await c.apply_isvc(ns, NAME, spec(engine, target_ms=1000, initial_cap=6))
    await eventually(lambda: c.get(SECRETS, ns, f"{NAME}-admin-token"), what="admin Secret")
    token = base64.b64encode(engine.admin_token.encode()).decode()
    await c.patch(SECRETS, ns, f"{NAME}-admin-token", {"data": {builders.TOKEN_KEY: token}})
    port = int(engine.base_url.rsplit(":", 1)[1])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{NAME}-0", "namespace": ns, "labels": {builders.LABEL_OWNER: NAME}},
        "spec": {
            "containers": [
                {"name": "vllm", "image": "runtime", "ports": [{"name": "http", "containerPort": port}]}
            ]
        },
    }
    await c.request("POST", f"/api/v1/namespaces/{ns}/pods", pod, "application/json")
    # No Deployment controller in the emulator: report its one replica ready, as the controller would.
    await eventually(lambda: c.get(DEPLOYMENTS, ns, NAME), what="Deployment")
    ready = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}
    await c.patch(DEPLOYMENTS, ns, NAME, {"status": ready}, subresource="status")
    await c.patch(
        PODS,
        ns,
        f"{NAME}-0",
        {
            "status": {
                "podIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "vllm", "restartCount": 0}],
            }
        },
        subresource="status",
    )
    try:
        yield c, ns, engine, prom
    finally:  # stop the loop before the engine's cap is put back
        await c.delete(PODS, ns, f"{NAME}-0")
        await c.delete(ISVC, ns, NAME)


def status(c: Cluster, ns: str) -> dict[str, Any]:
    return (c.get(ISVC, ns, NAME) or {}).get("status") or {}


async def test_status_reports_the_cap_the_engine_holds_and_follows_prometheus(
    governed: tuple[Cluster, str, Engine, Any],
) -> None:
    c, ns, engine, prom = governed
    async with closed_loop(engine, concurrency=10, max_tokens=48):
        await eventually(
            lambda: status(c, ns).get("law") and status(c, ns).get("cap") == 6,
            timeout=30,
            what="the first decisions in status",
        )
        assert engine.limits()["cap"] == status(c, ns)["cap"]
        # SLO met, cap binding (10 in flight at cap 6): the law raises it, the engine and status follow.
        await eventually(lambda: status(c, ns)["cap"] > 6, timeout=40, what="a raise")
        held = engine.limits()["cap"]
        await eventually(
            lambda: status(c, ns)["cap"] == engine.limits()["cap"], timeout=10, what="status = held"
        )
        st = status(c, ns)
        assert 6 < held <= engine.ceiling and st["ceiling"] == engine.ceiling and st["sloTargetMs"] == 1000
        assert st["lastDecision"]["to"] > st["lastDecision"]["from"]
        assert st["mode"] in (
            "normal",
            "long-tail",
            "burst",
        )  # long-tail: prompts longer than the warm-up ones
        assert c.condition(ns, NAME, "MetricsAvailable")["status"] == "True"  # type: ignore[index]
        assert c.condition(ns, NAME, "SLOMet")["status"] == "True"  # type: ignore[index]
        # Kopf posts Events from its own queue, after the tick that wrote status: a rehearsal read the
        # events once, in between, and missed it.
        await eventually(
            lambda: "CapChanged" in {e["reason"] for e in c.events(ns, NAME)}, timeout=10, what="the Event"
        )
        # The levers law's models reach the object: the arrivals it measured, per engine.
        await eventually(
            lambda: (status(c, ns).get("outlook") or {}).get("arrivalsRps", 0) > 0,
            timeout=20,
            what="the models' outlook in status",
        )

        # What the engine's steps cost, fitted on the runtime's step counters through Prometheus: the mean
        # step at once, the parts as the load tells them apart (never negative).
        def step_learned() -> bool:
            step = (status(c, ns).get("outlook") or {}).get("step") or {}
            assert all(value >= 0 for value in step.values() if value is not None), step
            return (step.get("meanMs") or 0) > 0

        await eventually(
            step_learned,
            timeout=20,
            what="the engine's step costs in status",
        )

        with prom.stopped():
            await eventually(
                lambda: c.condition(ns, NAME, "MetricsAvailable")["status"] == "False",  # type: ignore[index]
                timeout=20,
                what="MetricsAvailable=False",
            )
            frozen, ticks = engine.limits()["cap"], status_ticks(c, ns)
            await eventually(lambda: status_ticks(c, ns) >= ticks + 3, timeout=15, what="three blind ticks")
            assert engine.limits()["cap"] == frozen == status(c, ns)["cap"]  # held while blind
            assert not status(c, ns).get("outlook")  # blind, the models say nothing: no stale figures
        await eventually(
            lambda: c.condition(ns, NAME, "MetricsAvailable")["status"] == "True",  # type: ignore[index]
            timeout=30,
            what="MetricsAvailable=True again",
        )


def status_ticks(c: Cluster, ns: str) -> int:
    return int((status(c, ns).get("law") or {}).get("ticks", 0))


async def test_at_the_floor_and_still_missing_the_law_asks_the_planner_for_a_replica(
    governed: tuple[Cluster, str, Engine, Any],
) -> None:
    c, ns, engine, _ = governed
    # An SLO no cap can meet (TPOT 0.01 ms), a floor of 2 and autoscaling by the planner: vertical first,
    # then one replica through the scale subresource.
    await c.patch(
        ISVC,
        ns,
        NAME,
        {
            "spec": {
                "slo": {"kind": "tpot", "targetMs": 0.01},
                "adaptive": {"minCap": 2},
                "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3},
            }
        },
    )
    async with closed_loop(engine, concurrency=6, max_tokens=32):
        # The replica may come before the floor: the demand rule (governor.core.demand) asks as soon as the
        # arrivals outrun what the cap serves. The law goes on to the floor either way.
        await eventually(
            lambda: (
                (c.get(ISVC, ns, NAME) or {})["spec"].get("replicas") == 2 and status(c, ns).get("cap") == 2
            ),
            timeout=60,
            what="spec.replicas 1 -> 2 and the cap at its floor",
        )
        assert engine.limits()["cap"] == 2
    await eventually(lambda: status(c, ns).get("desiredReplicas") == 2, timeout=20, what="desiredReplicas 2")
    assert c.condition(ns, NAME, "SLOMet")["status"] == "False"  # type: ignore[index]
