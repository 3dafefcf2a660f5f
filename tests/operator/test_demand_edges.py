"""The demand rule's wiring in the operator's control step (governor.services.governed.ClusterEdges): on a
tick with no law wish, arrivals above what the desired replicas serve at their measured capacity become one
sized "demand" request to the replica writer; arrivals they cover, or an unknown capacity, ask nothing."""

from __future__ import annotations

import logging
from typing import Any

from governor.adapters.kube import Kube
from governor.core import demand
from governor.core.law import LawConfig, initial_state
from governor.core.law.model import Decision
from governor.core.planner import Plan, StepLimits, size_request
from governor.core.promql import latency_signal
from governor.core.reading import Reading
from governor.core.signals import LatencyKind
from governor.services.governed import ClusterEdges, OperatorContext, PodInfo, demand_sample

CFG = LawConfig(slo_target_s=0.025, ceiling=256, tick_s=5.0, window_s=30.0)
KEY = ("ns", "chat")


class Writer:
    """The replica writer's interface, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    async def request_scale(
        self, namespace: str, name: str, direction: int | str, source: str, reason: str, **kwargs: Any
    ) -> Plan | None:
        self.asked.append({"direction": direction, "source": source, **kwargs})
        return None


def edges(arrivals_per_pod: float, replicas: int) -> tuple[ClusterEdges, Writer]:
    ctx = OperatorContext(kube=Kube())
    writer = Writer()
    ctx.replicas = writer  # type: ignore[assignment]
    pods = [
        PodInfo(name=f"p{i}", uid=f"u{i}", url=f"http://10.0.0.{i}:8000", ready=True, restarts=0)
        for i in range(replicas)
    ]
    body = {
        "metadata": {"namespace": "ns", "name": "chat", "resourceVersion": "7"},
        "spec": {"replicas": replicas},
    }
    e = ClusterEdges(ctx, KEY, CFG, pods, logging.getLogger("test"), body=body)
    e.targets = [t for t in (p.target("t") for p in pods) if t is not None]
    # The cap binds at the SLO: each pod completes 10 req/s at cap 64 (its measured capacity), and the
    # queue grows by what it cannot serve.
    e.reading = Reading(
        latency={},
        running=64.0,
        waiting=0.0,
        cap=64.0,
        request_rate=10.0,
        queue_growth=max(0.0, arrivals_per_pod - 10.0),
    )
    memory = demand.DemandMemory()
    for t in range(0, 150, 5):  # steady arrivals over the trend window
        sample = demand.Sample(float(t), replicas, 10.0, 64.0, 64.0, 0.020, arrivals_per_pod * replicas)
        memory = demand.remember(memory, sample, CFG.slo_target_s, CFG.binding_fraction, CFG.window_s)
    ctx.demands[KEY] = memory
    e.sample = demand_sample(e.reading, replicas, 150.0, CFG)
    return e, writer


def decision() -> Decision:
    state = initial_state(CFG)
    return Decision(
        cap=64, reason="in-band", detail="", mode="normal", replica_wish=0, state=state, previous_cap=64
    )


async def test_arrivals_above_the_replicas_capacity_ask_for_the_replicas_they_need() -> None:
    e, writer = edges(arrivals_per_pod=25.0, replicas=2)  # 50 req/s against 2 x 10 req/s
    await e.plan_replicas(0, decision(), 150.0)
    assert len(writer.asked) == 1
    asked = writer.asked[0]
    assert asked["source"] == "demand" and asked["wanted"] == 5  # 50 req/s at 10 req/s each
    assert asked["known"] is e.body  # planned from the daemon's copy, no read


async def test_arrivals_the_replicas_serve_ask_nothing() -> None:
    e, writer = edges(arrivals_per_pod=9.0, replicas=2)
    await e.plan_replicas(0, decision(), 150.0)
    assert writer.asked == []


async def test_a_step_in_is_sized_on_what_the_pods_were_seen_to_serve() -> None:
    # The cap never bound (no capacity measured): a step in counts on the window's completions at its largest
    # batch (20 x 40 / 34 req/s a pod), not on the estimate that extrapolates to the cap from this tick's
    # dip of the batch (160 req/s a pod), on which 4 pods would shrink to 1.
    e, writer = edges(arrivals_per_pod=20.0, replicas=4)
    e.reading = Reading(
        latency={latency_signal(LatencyKind.TPOT, 0.99): 0.0125},
        running=4.0,
        waiting=0.0,
        cap=64.0,
        request_rate=20.0,
    )
    memory = demand.DemandMemory()
    for t in range(0, 30, 5):
        sample = demand.Sample(float(t), 4, 20.0, 40.0, 64.0, 0.0125, 80.0)
        memory = demand.remember(memory, sample, CFG.slo_target_s, CFG.binding_fraction, CFG.window_s)
    e.sample = demand_sample(e.reading, 4, 30.0, CFG)
    memory = demand.remember(memory, e.sample, CFG.slo_target_s, CFG.binding_fraction, CFG.window_s)
    e.ctx.demands[KEY] = memory
    assert memory.measured_rps is None

    await e.plan_replicas(-1, decision(), 30.0)

    def sized(capacity: float) -> tuple[int | None, float | None]:
        return size_request(
            -1,
            ready=4,
            live=4,
            capacity_rps=capacity,
            completions_rps=80.0,
            waiting=0.0,
            growth_rps=0.0,
            down_load=StepLimits().down_load,
        )

    (asked,) = writer.asked
    assert (asked["wanted"], asked["load_after"]) == sized(20.0 * 40.0 / ((5 * 40.0 + 4.0) / 6))
    assert sized(160.0)[0] == 1 < asked["wanted"]
