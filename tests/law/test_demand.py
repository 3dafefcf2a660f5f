"""The demand rule (issue 14): replicas asked for from the measured arrivals, projected one start-up ahead,
against one replica's capacity measured at the SLO; warming replicas count as supply."""

from __future__ import annotations

import dataclasses
import math

from governor.core.demand import (
    DemandMemory,
    Sample,
    arrival_trend,
    capacity,
    demand_replicas,
    estimated_capacity,
    remember,
    sizing_capacity,
    wanted,
)
from governor.core.planner import Cooldowns, PlannerState, ReplicaBounds, ScaleRequest, plan

SLO = 0.025


def _measured(known: float | None, rate: float, running: float, cap: float, p99_s: float) -> float | None:
    """One replica's capacity as the rule remembers it after one tick: `known` before it."""
    before = DemandMemory(measured_rps=known, measured_cap=None if known is None else cap)
    return remember(before, Sample(0.0, 1, rate, running, cap, p99_s, None), SLO, 0.9, 30.0).measured_rps


def test_capacity_is_measured_only_while_the_cap_binds_within_the_slo() -> None:
    assert _measured(None, 30.0, 120.0, 125.0, 0.024) == 30.0
    # not binding: today's rate is the load, not the capacity
    assert _measured(None, 20.0, 60.0, 125.0, 0.015) is None
    # binding past the SLO (a cap pushed for the queue) would overstate it: the last measure stands
    assert _measured(28.0, 40.0, 140.0, 143.0, 0.029) == 28.0


def test_capacity_before_the_cap_binds_is_a_conservative_little_law_estimate() -> None:
    # 40 running at 20 req/s: 2 s a request; the cap 64 at that pace is 32 req/s, stretched by 0.5
    # (the per-token P99 at half the SLO) to 16 req/s
    assert estimated_capacity(20.0, 40.0, 64.0, 0.0125, SLO) == 16.0
    assert estimated_capacity(None, 40.0, 64.0, 0.0125, SLO) is None


def test_trend_needs_a_long_enough_span() -> None:
    rising = [(float(t), 50.0 + 0.5 * t) for t in range(0, 125, 5)]
    assert abs(arrival_trend(rising) - 0.5) < 1e-9
    assert arrival_trend(rising[:10]) == 0.0  # 45 s: noise


def test_demand_asks_ahead_of_a_rising_load_and_counts_warming_replicas() -> None:
    # 60 req/s rising 0.4 req/s per s: in 95 s, 98 req/s; at 30 req/s a replica, 4 replicas
    assert (
        demand_replicas(
            live=2, capacity_rps=30.0, arrivals_rps=60.0, trend_rps_s=0.4, waiting=0.0, horizon_s=95.0
        )
        == 4
    )
    # the 4 already asked for (2 of them warming) cover it: no request
    assert (
        demand_replicas(
            live=4, capacity_rps=30.0, arrivals_rps=60.0, trend_rps_s=0.4, waiting=0.0, horizon_s=95.0
        )
        is None
    )
    # a falling load is not projected down; a queue adds its drain
    assert (
        demand_replicas(
            live=2,
            capacity_rps=30.0,
            arrivals_rps=60.0,
            trend_rps_s=-1.0,
            waiting=1800.0,
            horizon_s=95.0,
            drain_s=60.0,
        )
        == 3
    )
    assert demand_replicas(live=2, capacity_rps=None, arrivals_rps=90.0, trend_rps_s=0.0, waiting=0.0) is None


def test_remembered_arrivals_make_the_request_the_planner_steps_to() -> None:
    memory = DemandMemory()
    for t in range(0, 125, 5):
        sample = Sample(float(t), 2, 27.0, 115.0, 125.0, 0.022, 50.0 + 0.5 * t)
        memory = remember(memory, sample, SLO, 0.9, 30.0)
    assert memory.measured_rps == 27.0
    assert memory.arrivals[0][0] == 0.0 and len(memory.arrivals) == 25
    need = wanted(memory, sample, live=2, waiting=0.0, slo_s=SLO, window_s=30.0)
    # 110 req/s + 0.5 x (95 + 15) s = 165 req/s at 27 a replica: 7
    assert need == 7
    request = ScaleRequest(1, "demand", "arrivals", 120.0, wanted=need)
    step = plan(
        PlannerState(replicas=2), request, ReplicaBounds(max_replicas=12), Cooldowns(), ready_replicas=2
    )
    assert (step.replicas, step.reason) == (6, "scaled-up")  # at most max(4, current) more at once
    again = plan(
        step.state,
        ScaleRequest(1, "demand", "arrivals", 125.0, wanted=6),
        ReplicaBounds(max_replicas=12),
        Cooldowns(),
        ready_replicas=2,
    )
    assert (again.replicas, again.reason) == (6, "supplied")


def test_a_step_in_takes_no_more_than_the_pods_were_seen_to_serve() -> None:
    # 20 req/s per pod at a batch of 40 for the window, then one tick at 4. With no capacity measured, a step
    # in may count on the window's completions at its largest batch (20 x 40 / 34), not on the estimate that
    # extrapolates to the cap of 64 (on this tick's batch: 160 req/s, eight times more).
    memory = DemandMemory()
    for t in range(0, 30, 5):
        memory = remember(memory, Sample(float(t), 4, 20.0, 40.0, 64.0, 0.0125, 80.0), SLO, 0.9, 30.0)
    dip = Sample(30.0, 4, 20.0, 4.0, 64.0, 0.0125, 80.0)
    memory = remember(memory, dip, SLO, 0.9, 30.0)
    assert memory.measured_rps is None  # the cap never bound
    assert [r for _, r in memory.running] == [40.0] * 5 + [4.0]  # the window's ticks, the oldest forgotten
    assert sizing_capacity(memory, dip, SLO, -1) == 20.0 * 40.0 / ((5 * 40.0 + 4.0) / 6)
    assert estimated_capacity(20.0, 4.0, 64.0, 0.0125, SLO) == 160.0
    # a step out takes the window's median estimate (sized low, it asks for a replica too many, never too
    # few): the dip's own tick, 160, is one tick's Little's law at a batch the pods held for five seconds;
    # but never less than the 20 req/s a pod completes now within the SLO
    assert [e for _, e in memory.estimates] == [16.0] * 5 + [160.0]
    assert sizing_capacity(memory, dip, SLO, 1) == 20.0
    measured = DemandMemory(measured_rps=27.0, running=memory.running)
    assert sizing_capacity(measured, dip, SLO, -1) == 27.0  # a measure at the SLO stands


def test_a_capacity_measured_at_one_cap_is_not_taken_for_another() -> None:
    # Measured at cap 73 (the batch at the cap, the P99 within the SLO), then the law raised the cap to 95
    # and the batch fell away from it: the measure is no longer this cap's, the window's estimates are.
    memory = DemandMemory()
    for t in range(0, 30, 5):
        memory = remember(memory, Sample(float(t), 6, 16.2, 72.0, 73.0, 0.017, 97.0), SLO, 0.9, 30.0)
    assert (memory.measured_rps, memory.measured_cap) == (16.2, 73.0)
    at_73 = Sample(30.0, 6, 16.2, 72.0, 73.0, 0.017, 97.0)
    assert capacity(memory, at_73, SLO) == 16.2
    assert capacity(memory, dataclasses.replace(at_73, cap=78.0), SLO) == 16.2  # within SAME_CAP
    for t in range(30, 65, 5):
        memory = remember(memory, Sample(float(t), 8, 12.5, 25.0, 95.0, 0.012, 100.0), SLO, 0.9, 30.0)
    assert memory.measured_rps == 16.2  # kept: the cap may come back
    now = Sample(65.0, 8, 12.5, 25.0, 95.0, 0.012, 100.0)
    estimate = estimated_capacity(12.5, 25.0, 95.0, 0.012, SLO)
    assert abs(capacity(memory, now, SLO) - estimate) < 1e-9 and estimate > 22.0
    # sized on the measure, 100 req/s projected would want 7 replicas; on this cap's estimate 5
    assert wanted(memory, now, live=4, waiting=0.0, slo_s=SLO, window_s=30.0) == math.ceil(100.0 / estimate)


def test_a_capacity_is_never_below_what_a_pod_serves_within_the_slo() -> None:
    # 16 req/s a pod at a batch of 56 under cap 73, P99 14.8 ms: stretched to a P99 at the SLO, Little's law
    # says 73 x 16 / 56 x 0.59 = 12.3 req/s, less than the pods serve now within the SLO
    memory, sample = DemandMemory(), Sample(60.0, 6, 16.0, 56.0, 73.0, 0.0148, 98.0)
    memory = remember(memory, sample, SLO, 0.9, 30.0)
    assert estimated_capacity(16.0, 56.0, 73.0, 0.0148, SLO) < 12.5
    assert capacity(memory, sample, SLO) == 16.0
    # 98 req/s on 16 a pod: 7 replicas, where the stretched estimate asked for 8
    assert wanted(memory, sample, live=6, waiting=0.0, slo_s=SLO, window_s=30.0) == 7
    # a stale measure at this cap under today's rate gives way too
    stale = dataclasses.replace(memory, measured_rps=13.0, measured_cap=73.0)
    assert capacity(stale, sample, SLO) == 16.0
    # past the SLO the pods' rate is no capacity at the SLO: the estimate stands
    late = dataclasses.replace(sample, p99_s=0.031)
    assert capacity(remember(DemandMemory(), late, SLO, 0.9, 30.0), late, SLO) == estimated_capacity(
        16.0, 56.0, 73.0, 0.031, SLO
    )
