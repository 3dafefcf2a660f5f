"""The token budget on real parts (issue 12, item 3): the real vLLM CPU runtime, a few clients with long
prompts among short chats, a real Prometheus, the standalone governor with `--law levers` and an
inter-token SLO. Each step that carries a prefill chunk stalls every running decode, so the inter-token P99
is the chunk's; the law must answer with the budget (moved live in the engine beside the cap), not by
walking the cap down.

Two cores are shared with everything else: the target is set from this engine's own inter-token P99 at its
startup budget and at the smallest budget the law may set, measured first; the assertions are about where
the levers went and the P99 relative to those two, never exact latencies.
"""

from __future__ import annotations

import math

import pytest
from governor.core.law import LAWS
from governor.core.law.budget import MIN_BUDGET
from governor.core.signals import LatencyKind

from tests.loop.load import closed_loop
from tests.loop.test_standalone_e2e import governor, law, run_until, tpot_p99
from tests.support.engine import Engine
from tests.support.fixtures_prometheus import ConfigureTargets

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]
KEY = ("loop", "svc")
ITL = (LatencyKind.INTER_TOKEN, 0.99)


async def test_an_inter_token_slo_broken_by_long_prompts_is_met_with_the_budget_not_the_cap(
    engine_limits: Engine, prometheus_for: ConfigureTargets
) -> None:
    engine = engine_limits
    startup = int(engine.limits()["token_budget"])
    prom = prometheus_for({KEY: [engine.base_url.removeprefix("http://")]})
    # DESIGN.md's measurement, scaled to the test engine: short chats, and three clients with long prompts.
    async with (
        closed_loop(engine, concurrency=12, max_tokens=64),
        closed_loop(engine, concurrency=3, max_tokens=16, prompt_tokens=(1200, 1500)),
    ):
        engine.set_limits(cap=engine.ceiling)
        at_startup = await tpot_p99(engine, 8, signal=ITL)
        engine.set_limits(token_budget=MIN_BUDGET)
        await tpot_p99(engine, 6, signal=ITL)  # the startup budget's samples leave the window
        at_floor = await tpot_p99(engine, 8, signal=ITL)
        engine.set_limits(token_budget=startup)
        assert at_floor < 0.7 * at_startup, (
            f"the budget moves the inter-token P99 only {at_startup * 1e3:.0f} -> {at_floor * 1e3:.0f} ms "
            "on this engine: nothing for the budget to do (are the long-prompt clients running?)"
        )
        slo = math.sqrt(at_floor * at_startup)  # missed at the startup budget, met by a smaller one
        cfg = law(engine, slo, latency_kind=LatencyKind.INTER_TOKEN, initial_cap=engine.ceiling)
        gov = governor(engine, cfg, prom.url)
        gov.law = LAWS["levers"]
        reports = await run_until(
            gov,
            lambda rs: (
                len(rs) > 20
                and all((r.decision.state.p99_smoothed or math.inf) <= cfg.band_high * slo for r in rs[-4:])
            ),
            ticks=80,
        )
        await gov.aclose()
        held = engine.limits()
    trail = [
        (r.decision.cap, r.decision.token_budget, r.decision.reason,
         round((r.decision.state.p99_smoothed or 0) * 1e3))
        for r in reports
    ]  # fmt: skip
    budgets = [r.decision.token_budget for r in reports if r.decision.token_budget is not None]
    assert budgets and min(budgets) < startup, f"the budget never moved: {trail}"
    assert held["token_budget"] == reports[-1].decision.token_budget  # the engine holds what was decided
    assert held["token_budget"] < startup
    # The cap was not what moved: its cuts wait while the budget can still answer.
    assert min(r.decision.cap for r in reports) == engine.ceiling, f"the cap was cut: {trail}"
    smoothed = [r.decision.state.p99_smoothed or math.inf for r in reports[-4:]]
    assert max(smoothed) <= cfg.band_high * slo, (
        f"inter-token P99 not back under {slo * 1e3:.0f} ms (startup budget {at_startup * 1e3:.0f} ms, "
        f"{MIN_BUDGET}: {at_floor * 1e3:.0f} ms): {trail}"
    )
