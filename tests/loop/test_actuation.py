"""Actuation against the real runtime: every reachable pod follows, a dead one is reported, a restarted one
gets the cap again, a wrong token is an answer (no retry storm)."""

from __future__ import annotations

import asyncio

import pytest
from governor.adapters.engine import Actuator, PodTarget

from tests.support.engine import Engine, free_port

pytestmark = pytest.mark.vllm


def pod(engine: Engine, key: str = "uid-1/0", token: str | None = None) -> PodTarget:
    return PodTarget(name="engine", base_url=engine.base_url, token=token or engine.admin_token, key=key)


async def test_one_unreachable_pod_does_not_stop_the_others(engine_limits: Engine) -> None:
    dead = PodTarget(name="dead", base_url=f"http://127.0.0.1:{free_port()}", token="x", key="dead/0")
    actuator = Actuator(timeout_s=1.0, attempts=2, backoff_s=0.05)
    results = await actuator.ensure([dead, pod(engine_limits)], 5)
    assert [r.ok for r in results] == [False, True]
    assert results[1].limits is not None and results[1].limits.cap == 5
    assert engine_limits.limits()["cap"] == 5
    assert actuator.held([pod(engine_limits)]) == 5 and actuator.held([dead, pod(engine_limits)]) is None
    await actuator.aclose()


async def test_a_restarted_pod_gets_the_cap_again(engine_limits: Engine) -> None:
    actuator = Actuator(verify_s=3600)
    assert (await actuator.ensure([pod(engine_limits)], 6))[0].written
    assert not (await actuator.ensure([pod(engine_limits)], 6))[0].written  # already holds it: no write
    engine_limits.set_limits(cap=engine_limits.ceiling)  # the process came back with its startup cap
    result = (await actuator.ensure([pod(engine_limits, key="uid-1/1")], 6))[0]  # restartCount went up
    assert result.written and engine_limits.limits()["cap"] == 6
    await actuator.aclose()


async def test_periodic_verification_repairs_a_cap_changed_behind_its_back(engine_limits: Engine) -> None:
    actuator = Actuator(verify_s=0.0)
    await actuator.ensure([pod(engine_limits)], 7)
    engine_limits.set_limits(cap=3)
    await actuator.ensure([pod(engine_limits)], 7)
    assert engine_limits.limits()["cap"] == 7
    await actuator.aclose()


async def test_a_wrong_token_is_refused_once_not_retried(engine_limits: Engine) -> None:
    actuator = Actuator(attempts=5, backoff_s=1.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = (await actuator.ensure([pod(engine_limits, token="wrong")], 4))[0]
    assert not result.ok and "401" in (result.error or "") and loop.time() - started < 1.0
    above = (await actuator.ensure([pod(engine_limits)], engine_limits.ceiling + 1))[0]
    assert not above.ok and "422" in (above.error or "")
    await actuator.aclose()


async def test_the_token_budget_moves_beside_the_cap_and_is_repaired(engine_limits: Engine) -> None:
    actuator = Actuator(verify_s=0.0)
    ceiling = int(engine_limits.limits()["token_budget_ceiling"])
    budget = max(ceiling // 2, 16)
    result = (await actuator.ensure([pod(engine_limits)], 8, token_budget=budget))[0]
    assert result.written and result.limits is not None and result.limits.token_budget == budget
    assert engine_limits.limits()["token_budget"] == budget and engine_limits.limits()["cap"] == 8
    assert actuator.held_budget([pod(engine_limits)]) == budget
    engine_limits.set_limits(token_budget=ceiling)  # moved behind its back: the next verification repairs it
    await actuator.ensure([pod(engine_limits)], 8, token_budget=budget)
    assert engine_limits.limits()["token_budget"] == budget
    await actuator.ensure([pod(engine_limits)], 8)  # no budget given: the engine keeps the one it holds
    assert engine_limits.limits()["token_budget"] == budget
    await actuator.aclose()
