"""The levers law on real parts (issue 12, item 3): the real vLLM CPU runtime under load, a real Prometheus,
the standalone governor with `--law levers`. Where the cap cannot reach the target (a TPOT target below
what this engine gives one sequence alone), the law must say so and stop cutting, not walk the cap to the
floor; the status the operator writes from that decision must name the reason (CapEffective=False).

Two cores are shared with everything else: the target is set from the engine's own P99 at cap 1, measured
first, and the assertions are about the law's verdict and the caps it holds, never exact latencies.
"""

from __future__ import annotations

import itertools
import math

import pytest
from governor.core import signals
from governor.core import status as status_builders
from governor.core.law import LAWS
from governor.services.standalone import NAMESPACE as STANDALONE
from prometheus_client import REGISTRY

from tests.loop.load import closed_loop
from tests.loop.test_standalone_e2e import governor, law, p99_alone_and_at_ceiling, run_until
from tests.support.engine import Engine
from tests.support.fixtures_prometheus import ConfigureTargets

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]
KEY = ("loop", "svc")
VERDICTS = set(status_builders.LEVER_VERDICTS)  # "lever-inert", "infeasible"


async def test_a_target_no_cap_reaches_is_named_and_the_cap_is_not_walked_to_the_floor(
    engine_limits: Engine, prometheus_for: ConfigureTargets
) -> None:
    engine = engine_limits
    prom = prometheus_for({KEY: [engine.base_url.removeprefix("http://")]})
    async with closed_loop(engine, concurrency=engine.ceiling, max_tokens=96):
        alone, _ = await p99_alone_and_at_ceiling(engine)
        slo = 0.5 * alone  # half of what one sequence alone gets: no cap reaches it
        gov = governor(engine, law(engine, slo), prom.url)
        gov.law = LAWS["levers"]
        # Ticks after the first verdict: enough to see a walk down, had the law gone on cutting.
        reports = await run_until(
            gov, lambda rs: sum(r.decision.reason in VERDICTS for r in rs) >= 12, ticks=70
        )
        await gov.aclose()
    trail = [
        (r.decision.cap, r.decision.reason, round((r.decision.state.p99_smoothed or 0) * 1e3, 2))
        for r in reports
    ]
    verdicts = [i for i, r in enumerate(reports) if r.decision.reason in VERDICTS]
    assert verdicts, f"no verdict at {slo * 1e3:.2f} ms (one sequence: {alone * 1e3:.2f} ms): {trail}"
    after = [r.decision.cap for r in reports[verdicts[0] :]]
    assert all(b >= a for a, b in itertools.pairwise(after)), f"cut after the verdict: {trail}"
    # Before the verdict the table's bounded exploratory cuts are how the fit learns the slope; after it
    # the cap does not stay at the floor.
    assert reports[-1].decision.cap > gov.cfg.min_cap, f"left at the floor: {trail}"
    assert engine.limits()["cap"] == reports[-1].decision.cap  # the engine holds what was decided

    last = reports[verdicts[-1]].decision
    status = status_builders.loop_status(
        {"metadata": {"generation": 1}, "status": {}},
        decision=last,
        cfg=gov.cfg,
        ceiling=engine.ceiling,
        observed_p99_s=None,
        metrics=(True, "Fresh", ""),
        held_cap=last.cap,
        desired_replicas=None,
        now="2026-12-01T00:00:00Z",
    )
    condition = next(c for c in status["conditions"] if c["type"] == "CapEffective")
    assert condition["status"] == "False"
    assert condition["reason"] == status_builders.LEVER_VERDICTS[last.reason]
    if last.reason == "infeasible":  # no replica helps a target one sequence alone misses
        assert "infeasible on this hardware" in condition["message"] and last.replica_wish == 0
    else:
        assert "no engine lever reaches the SLO" in condition["message"]

    # What the models saw, as the dashboard shows it: no per-token cap (none reaches the target), the
    # arrivals a closed loop keeps coming, and the exported series are the last tick's.
    outlook = reports[-1].decision.outlook
    assert outlook is not None and outlook.per_token_cap is None, outlook
    assert outlook.arrivals_rps is not None and outlook.arrivals_rps > 0, outlook
    labels = {"namespace": STANDALONE, "name": "svc"}
    per_token = REGISTRY.get_sample_value(signals.OP_MODEL_PER_TOKEN_CAP, labels)
    assert per_token is not None and math.isnan(per_token)
    assert REGISTRY.get_sample_value(signals.OP_MODEL_ARRIVALS, labels) == outlook.arrivals_rps
    assert REGISTRY.get_sample_value(signals.OP_MODEL_SERVICE, labels) == outlook.service_rps
