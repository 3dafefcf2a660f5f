"""The operator's one Actuator serves every InferenceService (one group each): a pod that already holds the
cap is not written again on the next tick because another object's tick came in between. Before groups, each
object's tick forgot every other object's pods, so at N objects every pod was re-written every tick."""

from __future__ import annotations

from typing import Any

import kmock
from governor.adapters.engine import Actuator, PodTarget
from governor_runtime import contract


def held(request: kmock.Request) -> dict[str, Any]:
    """What the runtime's admin route answers: the cap it now holds."""
    return {"cap": int(request.data["cap"]), "ceiling": 32}


async def test_each_objects_pods_are_written_once_while_they_hold_the_cap() -> None:
    async with kmock.RawHandler() as engine, kmock.Server(engine):
        writes = engine["put", contract.LIMITS_PATH] << held
        url = str(engine.url).rstrip("/")
        pods = {g: PodTarget(name=g, base_url=url, token="t", key=f"{g}-uid/0") for g in "abc"}
        actuator = Actuator(verify_s=3600)
        for _ in range(3):  # three ticks of three objects
            for group, pod in pods.items():
                [result] = await actuator.ensure([pod], 16, group=group)
                assert result.ok, result.error
        assert len(list(writes)) == 3, "each pod written once, on its first tick"

        # A pod that leaves its object is forgotten: were it to return, it is written again.
        await actuator.ensure([], 16, group="a")
        assert (await actuator.ensure([pods["a"]], 16, group="a"))[0].written
        # So is every pod of an object that is no longer governed.
        actuator.forget("b")
        assert (await actuator.ensure([pods["b"]], 16, group="b"))[0].written
        assert not (await actuator.ensure([pods["c"]], 16, group="c"))[0].written
        assert len(list(writes)) == 5
        await actuator.aclose()
