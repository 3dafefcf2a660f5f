"""Our policy in the fleet: the operator's own control step (governor.services.control.control_step), law
(governor.core.law.decide) and replica planner (governor.core.planner.plan), driven through an `Edges`
whose methods read the fleet twin instead of Prometheus and the scale subresource.

- observe: the pool's P99 of the governed latency over the law's window (sum by le over pods), and the
  per-pod averages of running / waiting / KV use and the per-pod success rate, as governor.core.promql asks;
- actuate: the law's cap on every engine (the cluster sets it on every pod; held = the lowest);
- plan_replicas: the pure planner exactly as governor.services.replicas.ReplicaWriter calls it (ready
  replicas passed, so a pending step blocks the next), then the fleet adds or drains replicas.
Not wired: the Alertmanager path (governor.core.notifications over the rules of
governor.observability.alerts): its scale-out/in alerts need PromQL over 5-minute windows that this twin
does not evaluate; the planner's dedup makes the law's hand-off the first to act in any case.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from governor.core import promql
from governor.core.law import Decision, LawConfig, LawState, Observation, decide, initial_state
from governor.core.planner import Cooldowns, PlannerState, ReplicaBounds, ScaleRequest, plan
from governor.core.reading import Reading
from governor.services.control import Applied, Observed, StepReport, control_step

from governor_twin.fleet.fleet import Fleet
from governor_twin.fleet.metrics import FleetMetrics


def fleet_aware_decide(state: LawState, obs: Observation, cfg: LawConfig, *, ttft_s: float) -> Decision:
    """NOT YET THE OPERATOR'S: the law plus one fleet rule the benchmark showed missing. With a per-token SLO
    the law holds the cap while the TPOT P99 sits in its band, and asks for a replica only at the floor or
    under pressure, so a queue that grows for minutes behind an in-band TPOT (TTFT blown) asks for nothing
    (step3x: 10 000 waiting, no wish). Here the queue's expected wait (waiting per pod / completions per
    pod) above half the TTFT bound, while the cap binds, asks for a replica; scale-in is left to the law's
    idle rule. The proposal for governor.core.law: a TTFT bound in LawConfig and this rule in `_hand_off`."""
    d = decide(state, obs, cfg)
    if d.replica_wish or obs.waiting is None or obs.running is None or not obs.request_rate:
        return d
    binding = obs.running >= cfg.binding_fraction * d.cap
    if binding and obs.waiting >= cfg.queue_min and obs.waiting / obs.request_rate > 0.5 * ttft_s:
        return replace_wish(d)
    return d


def replace_wish(d: Decision) -> Decision:
    return dataclasses.replace(d, replica_wish=1, detail=d.detail + "; queue wait above half the TTFT bound")


@dataclass
class FleetEdges:
    fleet: Fleet
    metrics: FleetMetrics
    cfg: LawConfig
    bounds: ReplicaBounds
    cooldowns: Cooldowns
    planner: PlannerState
    now: float = 0.0
    reports: list[StepReport] = field(default_factory=list)

    async def observe(self) -> Observed:
        m, cfg = self.metrics, self.cfg
        s = m.samples[-1]
        p = m.quantile(cfg.latency_kind, cfg.quantile, cfg.window_s)
        reading = Reading(
            latency={promql.latency_signal(cfg.latency_kind, cfg.quantile): p},
            running=s.running,
            waiting=s.waiting,
            kv_usage=s.kv,
            request_rate=m.rate_per_pod(cfg.window_s),
            cap=float(self.fleet.cap),
        )
        return Observed(reading=reading, available=True, fresh=True)

    async def actuate(self, cap: int) -> Applied:
        return Applied(held_cap=self.fleet.set_cap(cap))

    async def plan_replicas(self, wish: Literal[-1, 1], decision: Decision, now_s: float) -> int | None:
        request = ScaleRequest(direction=wish, source="law", reason=decision.reason, now_s=now_s)
        ready = len(self.fleet.ready(now_s))
        result = plan(self.planner, request, self.bounds, self.cooldowns, ready_replicas=ready)
        self.planner = result.state
        if result.changed:
            self.fleet.scale_to(result.replicas, now_s)
        return result.replicas

    def export(self, report: StepReport) -> None:
        self.reports.append(report)


class Ours:
    """The cap-plus-replicas policy: one control step per law tick."""

    name = "ours (control step: law + planner)"

    def __init__(
        self,
        cfg: LawConfig,
        bounds: ReplicaBounds,
        cooldowns: Cooldowns,
        knob: str = "defaults",
        ttft_s: float | None = None,
    ) -> None:
        self.law = decide if ttft_s is None else partial(fleet_aware_decide, ttft_s=ttft_s)
        if ttft_s is not None:
            self.name = "ours + fleet-aware hand-off"
        self.cfg = cfg
        self.bounds = bounds
        self.cooldowns = cooldowns
        self.tick_s = cfg.tick_s
        self.knob = knob
        self.state: LawState = initial_state(cfg)
        self.cap = self.state.cap
        self.edges: FleetEdges | None = None

    def attach(self, fleet: Fleet, metrics: FleetMetrics) -> None:
        planner = PlannerState(replicas=len(fleet.live()))
        self.edges = FleetEdges(fleet, metrics, self.cfg, self.bounds, self.cooldowns, planner)

    async def step(self, now: float) -> None:
        assert self.edges is not None, "attach() first"
        self.edges.now = now
        report = await control_step(self.state, self.cfg, self.edges, now, law=self.law)
        self.state = report.decision.state
