"""The operator at scale, quick: the real `governor operator` process against the API emulator, one twin
process serving every engine, a real Prometheus. The Prometheus queries per tick must not grow with the
number of InferenceServices (one query per signal for all of them), every object must keep ticking, and an
object whose status has nothing new is not rewritten every tick."""

from __future__ import annotations

import shutil

import pytest
from governor.core import promql
from governor.core.signals import LatencyKind

from tests.support.scale import measure

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="the Debian prometheus is not installed"),
]
N = 10


async def test_prometheus_queries_per_tick_do_not_grow_with_the_objects() -> None:
    small = await measure(N, 16.0, say=lambda _: None)
    large = await measure(2 * N, 16.0, say=lambda _: None)
    for run in (small, large):
        assert min(run.ticks_per_object) >= 2, f"N={run.n}: objects stopped ticking: {run.ticks_per_object}"
        assert run.prom_queries > 0
        # Idle engines: nothing users act on changes, so status is refreshed every 6 ticks, not every tick
        # (every tick would be N writes per tick). The 16 s window holds at most one refresh per object,
        # and none when it falls between two.
        writes = run.api_per_tick().get("update inferenceservices/status", 0.0)
        assert writes <= run.n / 3, f"N={run.n}: {writes:.1f} status writes per tick"
    # One round of the control loop's queries per tick whatever N is (the specs' default SLO: TPOT P99, and
    # TTFT at its quantile); one query per object would double it.
    one_round = len(promql.queries(promql.OPERATOR, 30, 10, {(LatencyKind.TPOT, 0.99)}))
    figures = (small.queries_per_tick, large.queries_per_tick, one_round)
    assert large.queries_per_tick < 1.3 * small.queries_per_tick + 2, figures
    assert large.queries_per_tick < 1.3 * one_round, ("queries grow with the objects", figures)
