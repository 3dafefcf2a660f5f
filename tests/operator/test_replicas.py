"""The replica writer's memory outlives its process (governor.services.replicas): each step is one merge patch
of spec.replicas and the planner's state (annotation governor.vllm.ai/planner), and a new writer (a restarted
operator, the peer that takes over) restores the cooldown from it. Against the API emulator, with a fake
wall clock; a "process" is a fresh ReplicaWriter."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest_asyncio
from governor import crd
from governor.adapters.kube import Connection, Kube
from governor.core.planner import PlannerState
from governor.services.replicas import STATE_ANNOTATION, ReplicaWriter, restored

from tests.support.fixtures_kube import ISVC
from tests.support.kube import live_object
from tests.support.kube_faults import HARNESS_AGENT, Fault, FaultyEmulator

T0 = 1_767_225_600.0  # 2026-01-01, wall clock
UP_S, DOWN_S = 60, 300
SPEC: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "resources": {"gpu": {"type": "H200"}},
    "autoscaling": {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 5,
        "scaleUpCooldownSeconds": UP_S,
        "scaleDownCooldownSeconds": DOWN_S,
    },
}
_namespaces = itertools.count(1)


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[FaultyEmulator]:
    async with FaultyEmulator(validate_schemas=True) as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        emulator.register_crd(crd.build_crd())
        yield emulator


@pytest_asyncio.fixture
async def kube(emulator: FaultyEmulator) -> AsyncIterator[Kube]:
    async with Kube(Connection(server=str(emulator.url)), backoff_s=0.01) as client:
        yield client


async def _user(
    emulator: FaultyEmulator, method: str, path: str, body: Any, content: str = "application/merge-patch+json"
) -> None:
    headers = {"Content-Type": content, "User-Agent": HARNESS_AGENT}
    async with emulator.request(method, path, json=body, headers=headers) as response:
        assert response.status < 400, await response.text()


async def _isvc(emulator: FaultyEmulator, annotations: dict[str, str] | None = None) -> str:
    ns = f"replicas-{next(_namespaces)}"
    body = {
        "apiVersion": "governor.vllm.ai/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns, "annotations": annotations or {}},
        "spec": SPEC,
    }
    await _user(
        emulator,
        "POST",
        f"/apis/governor.vllm.ai/v1alpha1/namespaces/{ns}/inferenceservices",
        body,
        "application/json",
    )
    return ns


def _object(emulator: FaultyEmulator, ns: str) -> dict[str, Any]:
    obj = live_object(emulator, ISVC, ns, "chat")
    assert obj is not None
    return obj


def _replicas(emulator: FaultyEmulator, ns: str) -> int:
    return int(_object(emulator, ns)["spec"].get("replicas", 1))


def _writes(emulator: FaultyEmulator, ns: str) -> list[Any]:
    return [r for r in list(emulator) if r.namespace == ns and r.method == "PATCH" and r.resource == ISVC]


async def test_a_step_is_one_patch_of_the_replicas_and_the_state(
    emulator: FaultyEmulator, kube: Kube
) -> None:
    ns = await _isvc(emulator)
    step = await ReplicaWriter(kube, Clock()).request_scale(ns, "chat", "up", "alertmanager", "queue")

    assert step is not None and (step.reason, step.replicas) == ("scaled-up", 2)
    (write,) = _writes(emulator, ns)
    assert write.subresource is None  # the object itself: the scale subresource is the users'
    assert write.data["spec"] == {"replicas": 2} and write.data["metadata"]["resourceVersion"]
    annotation = _object(emulator, ns)["metadata"]["annotations"][STATE_ANNOTATION]
    assert json.loads(annotation) | {"last_reason": ""} == {
        "replicas": 2,
        "last_up_s": T0,
        "last_change_s": T0,
        "last_reason": "",
    }
    assert _replicas(emulator, ns) == 2


async def test_a_new_process_keeps_the_cooldown_and_never_repeats_the_step(
    emulator: FaultyEmulator, kube: Kube
) -> None:
    ns = await _isvc(emulator)
    await ReplicaWriter(kube, Clock()).request_scale(ns, "chat", "up", "law", "at the floor")

    restarted = ReplicaWriter(kube, clock := Clock(T0 + UP_S - 1))
    again = await restarted.request_scale(ns, "chat", "up", "alertmanager", "queue")
    assert again is not None and (again.reason, again.replicas) == ("cooldown", 2)
    assert _replicas(emulator, ns) == 2 and len(_writes(emulator, ns)) == 1

    clock.now = T0 + UP_S + 1  # the cooldown ran out on the wall clock: the next request steps
    later = await restarted.request_scale(ns, "chat", "up", "alertmanager", "queue")
    assert later is not None and (later.reason, later.replicas) == ("scaled-up", 3)
    assert _replicas(emulator, ns) == 3


async def test_replicas_moved_by_the_user_are_planned_from_with_the_cooldown_kept(
    emulator: FaultyEmulator, kube: Kube
) -> None:
    ns = await _isvc(emulator)
    await ReplicaWriter(kube, Clock()).request_scale(ns, "chat", "up", "law", "at the floor")
    # kubectl scale --replicas=4, while the operator was down
    await _user(
        emulator,
        "PATCH",
        f"/apis/governor.vllm.ai/v1alpha1/namespaces/{ns}/inferenceservices/chat/scale",
        {"spec": {"replicas": 4}},
    )

    restarted = ReplicaWriter(kube, clock := Clock(T0 + 10))
    up = await restarted.request_scale(ns, "chat", "up", "law", "at the floor")
    down = await restarted.request_scale(ns, "chat", "down", "law", "headroom")
    assert up is not None and (up.reason, up.previous, up.replicas) == ("cooldown", 4, 4)
    assert down is not None and (down.reason, down.replicas) == ("cooldown", 4)  # scale-in waits after a step
    clock.now = T0 + DOWN_S + 1
    down = await restarted.request_scale(ns, "chat", "down", "law", "headroom")
    assert down is not None and (down.reason, down.replicas) == ("scaled-down", 3)
    assert _replicas(emulator, ns) == 3


async def test_a_peers_step_is_adopted_over_this_processs_memory(
    emulator: FaultyEmulator, kube: Kube
) -> None:
    ns = await _isvc(emulator)
    first, clock = ReplicaWriter(kube, Clock()), Clock(T0 + UP_S + 1)
    await first.request_scale(ns, "chat", "up", "law", "at the floor")
    peer = ReplicaWriter(kube, clock)  # took over while the first one was paused, and stepped
    stepped = await peer.request_scale(ns, "chat", "up", "law", "at the floor")
    assert stepped is not None and stepped.replicas == 3

    first.clock = Clock(T0 + UP_S + 10)  # active again: its memory (a step at T0) would allow a step
    again = await first.request_scale(ns, "chat", "up", "alertmanager", "queue")
    assert again is not None and (again.reason, again.replicas) == ("cooldown", 3)
    assert _replicas(emulator, ns) == 3


async def test_a_conflicting_write_is_planned_again_from_a_fresh_read(
    emulator: FaultyEmulator, kube: Kube
) -> None:
    ns = await _isvc(emulator)
    fault = Fault(effect="conflict", on={"patch"}, resource="inferenceservices", times=2)
    emulator.inject(fault)
    step = await ReplicaWriter(kube, Clock()).request_scale(ns, "chat", "up", "law", "at the floor")
    assert fault.injected == 2
    assert step is not None and step.replicas == 2 == _replicas(emulator, ns)


async def test_a_state_ahead_of_the_clock_counts_from_now(emulator: FaultyEmulator, kube: Kube) -> None:
    """A peer's clock ahead, or this clock stepped back: the cooldown runs from now, not from the future."""
    ahead = PlannerState(replicas=1, last_up_s=T0 + 3600, last_change_s=T0 + 3600).model_dump_json()
    ns = await _isvc(emulator, {STATE_ANNOTATION: ahead})
    writer = ReplicaWriter(kube, clock := Clock())
    first = await writer.request_scale(ns, "chat", "up", "law", "at the floor")
    assert first is not None and first.reason == "cooldown"
    clock.now = T0 + UP_S + 1
    later = await writer.request_scale(ns, "chat", "up", "law", "at the floor")
    assert later is not None and (later.reason, later.replicas) == ("scaled-up", 2)


async def test_an_unreadable_state_is_planned_from_the_spec(emulator: FaultyEmulator, kube: Kube) -> None:
    ns = await _isvc(emulator, {STATE_ANNOTATION: "{not json"})
    step = await ReplicaWriter(kube, Clock()).request_scale(ns, "chat", "up", "law", "at the floor")
    assert step is not None and (step.reason, step.replicas) == ("scaled-up", 2)
    assert restored("{not json", T0) is None and restored(None, T0) is None
    assert restored('{"replicas": -1}', T0) is None
