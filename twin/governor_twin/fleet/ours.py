"""Our policy in the fleet: the operator's own control step (governor.services.control.control_step), law
(the operator's default, governor.core.law.DEFAULT_LAW, or the one named) and replica planner
(governor.core.planner.plan, sized by governor.core.planner.backlog_replicas), driven through an `Edges`
whose methods read the fleet twin instead of Prometheus and the scale subresource. Nothing here decides:
the Edges only measure.

- observe: the pool's P99 of the governed latency and of TTFT over the law's window (sum by le over pods),
  and the per-pod averages of running / waiting / KV use and the per-pod success rate, as
  governor.core.promql asks;
- actuate: the law's cap on every engine (the cluster sets it on every pod; held = the lowest);
- plan_replicas: the pure planner as governor.services.replicas.ReplicaWriter calls it (ready replicas
  passed), plus what the planner's sized requests need from the metrics: one replica's completions per
  second at its cap (the last rate seen while the cap bound), the arrivals (completions plus the queue's
  growth over the window) and the queue, or, for a step in, the load share the rest would carry.
- the Alertmanager path (governor_twin.fleet.alerting): the shipped scale alerts evaluated by promtool over
  the series these edges and the pods export, Alertmanager's grouping and timing, the receiver's decisions
  (governor.core.notifications.decide) and its unsized steps to the same planner, as the receiver asks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from governor.core import demand, notifications, promql
from governor.core.law import DEFAULT_LAW, LAWS, Decision, LawConfig, LawName, LawState, initial_state
from governor.core.planner import (
    Cooldowns,
    PlannerState,
    ReplicaBounds,
    ScaleRequest,
    StepLimits,
    plan,
    size_request,
)
from governor.core.reading import Reading
from governor.core.signals import LatencyKind
from governor.services.control import Applied, Observed, StepReport, control_step

from governor_twin.fleet.alerting import AlertPath
from governor_twin.fleet.fleet import Fleet
from governor_twin.fleet.metrics import FleetMetrics

MEANS = tuple(promql.MEANS)  # the Reading's lever inputs, each as the operator queries it
RECENT_S = 10.0  # arrivals from the queue's growth over the last two scrapes: a step shows at once


@dataclass
class FleetEdges:
    fleet: Fleet
    metrics: FleetMetrics
    cfg: LawConfig
    bounds: ReplicaBounds
    cooldowns: Cooldowns
    planner: PlannerState
    limits: StepLimits = field(default_factory=StepLimits)
    sized: bool = True
    now: float = 0.0
    demand_on: bool = True  # the demand rule (governor.core.demand); off: replicas on the law's wish only
    memory: demand.DemandMemory = field(default_factory=demand.DemandMemory)
    sample: demand.Sample | None = None
    reports: list[StepReport] = field(default_factory=list)
    alert_plans: list[tuple[float, int, str, int]] = field(default_factory=list)  # (t, direction, why, to)

    async def observe(self) -> Observed:
        m, cfg = self.metrics, self.cfg
        s = m.samples[-1]
        p = m.quantile(cfg.latency_kind, cfg.quantile, cfg.window_s)
        latency = {promql.latency_signal(cfg.latency_kind, cfg.quantile): p}
        if cfg.latency_kind is not LatencyKind.TTFT:
            ttft = m.quantile(LatencyKind.TTFT, cfg.quantile, cfg.window_s)
            latency[promql.latency_signal(LatencyKind.TTFT, cfg.quantile)] = ttft
        rate = m.rate_per_pod(cfg.window_s)
        # the run starts with empty engines: a rate over a window not yet full understates the capacity
        if s.t >= cfg.window_s:
            self.sample = demand.Sample(
                s.t, s.ready, rate, s.running, float(self.fleet.cap), p, self._arrivals()
            )
            self.memory = demand.remember(
                self.memory, self.sample, cfg.slo_target_s, cfg.binding_fraction, cfg.window_s
            )
        reading = Reading(
            latency=latency,
            running=s.running,
            waiting=s.waiting,
            kv_usage=s.kv,
            request_rate=rate,
            cap=float(self.fleet.cap),
            token_budget=float(self.fleet.token_budget),
            **{name: m.mean(name, cfg.window_s) for name in MEANS},
        )
        return Observed(reading=reading, available=True, fresh=True)

    async def actuate(self, cap: int, token_budget: int | None = None) -> Applied:
        if token_budget is not None:
            self.fleet.set_token_budget(token_budget)
        return Applied(held_cap=self.fleet.set_cap(cap), held_budget=self.fleet.token_budget)

    def _arrivals(self) -> float | None:
        """Completions over the law's window plus the queue's recent growth (service totals)."""
        m = self.metrics
        s, base = m.samples[-1], m._base(RECENT_S)
        completions = m.rate_total(self.cfg.window_s)
        if base is None or completions is None:
            return None
        growth = (s.waiting * s.ready - base.waiting * base.ready) / (s.t - base.t)
        return completions + max(growth, 0.0)

    def _demand(self, now_s: float) -> ScaleRequest | None:
        if not (self.demand_on and self.sized) or self.sample is None:
            return None
        s = self.metrics.samples[-1]
        wanted = demand.wanted(
            self.memory,
            self.sample,
            live=self.planner.replicas,
            waiting=s.waiting * s.ready,
            slo_s=self.cfg.slo_target_s,
            window_s=self.cfg.window_s,
        )
        if wanted is None:
            return None
        return ScaleRequest(1, "demand", "arrivals above the replicas' capacity", now_s, wanted=wanted)

    def _request(self, wish: Literal[-1, 1], decision: Decision, now_s: float) -> ScaleRequest:
        m, window = self.metrics, self.cfg.window_s
        s, base = m.samples[-1], m._base(RECENT_S)
        completions = m.rate_total(window)
        capacity = None
        if self.sized and self.sample is not None:
            capacity = demand.sizing_capacity(self.memory, self.sample, self.cfg.slo_target_s, wish)
        wanted = load_after = None
        if base is not None:
            queue, queue_before = s.waiting * s.ready, base.waiting * base.ready
            wanted, load_after = size_request(
                wish,
                ready=s.ready,
                live=s.live,
                capacity_rps=capacity,
                completions_rps=completions,
                waiting=queue,
                growth_rps=(queue - queue_before) / (s.t - base.t),
                down_load=self.limits.down_load,
            )
        return ScaleRequest(
            direction=wish,
            source="law",
            reason=decision.reason,
            now_s=now_s,
            wanted=wanted,
            load_after=load_after,
        )

    async def plan_replicas(self, wish: Literal[-1, 0, 1], decision: Decision, now_s: float) -> int | None:
        request = self._request(wish, decision, now_s) if wish else self._demand(now_s)
        if request is None:
            return None
        ready = len(self.fleet.ready(now_s))
        result = plan(
            self.planner, request, self.bounds, self.cooldowns, ready_replicas=ready, limits=self.limits
        )
        self.planner = result.state
        if result.changed:
            self.fleet.scale_to(result.replicas, now_s)
        return result.replicas

    def export(self, report: StepReport) -> None:
        self.reports.append(report)

    def alert_step(self, step: notifications.Step, now_s: float) -> None:
        """One step the receiver asks for, planned as governor.services.replicas.request_scale plans it
        (unsized: one replica)."""
        request = ScaleRequest(step.direction, notifications.SOURCE, step.reason, now_s)
        ready = len(self.fleet.ready(now_s))
        result = plan(
            self.planner, request, self.bounds, self.cooldowns, ready_replicas=ready, limits=self.limits
        )
        self.planner = result.state
        self.alert_plans.append((now_s, step.direction, result.reason, result.replicas))
        if result.changed:
            self.fleet.scale_to(result.replicas, now_s)

    def alert_series(self, path: AlertPath, report: StepReport) -> dict[str, float]:
        """What Prometheus holds for the alert rules at this scrape."""
        f, s = self.fleet, self.metrics.samples[-1]
        cumulative = None
        for r in f.replicas:  # deleted pods' counters kept, as FleetMetrics does
            c = r.engine.queue_hist.cumulative()
            cumulative = c if cumulative is None else cumulative + c
        assert cumulative is not None
        edges = [f"{e:g}" for e in f.replicas[0].engine.queue_hist.edges] + ["+Inf"]
        return path.series(
            queue_buckets=list(zip(edges, (float(c) for c in cumulative), strict=True)),
            running=s.running * s.ready,
            waiting=s.waiting * s.ready,
            runtime_cap=float(f.cap) * s.ready,
            cap=float(f.cap),
            floor=float(self.cfg.min_cap),
            p99_smoothed=report.decision.state.p99_smoothed,
            slo_s=self.cfg.slo_target_s,
        )


class Ours:
    """The cap-plus-replicas policy: one control step per law tick."""

    name = "ours (control step: law + planner)"

    def __init__(
        self,
        cfg: LawConfig,
        bounds: ReplicaBounds,
        cooldowns: Cooldowns,
        knob: str = "defaults",
        limits: StepLimits | None = None,
        sized: bool = True,
        demand_on: bool = True,
        law: LawName = DEFAULT_LAW,
        alert_path: bool = True,
    ) -> None:
        self.cfg = cfg
        self.law = law
        self.bounds = bounds
        self.cooldowns = cooldowns
        self.limits = limits or StepLimits()
        self.sized = sized
        self.demand_on = demand_on
        self.tick_s = cfg.tick_s
        self.knob = knob
        # Without the demand rule or the sizing, a configuration no InferenceService can ask for: an ablation,
        # reported beside ours but never what ours is judged by.
        self.ablation = not (demand_on and sized)
        self.state: LawState = initial_state(cfg)
        self.cap = self.state.cap
        self.edges: FleetEdges | None = None
        self.alerts = AlertPath("fleet", "svc") if alert_path else None

    def attach(self, fleet: Fleet, metrics: FleetMetrics) -> None:
        planner = PlannerState(replicas=len(fleet.live()))
        self.edges = FleetEdges(
            fleet,
            metrics,
            self.cfg,
            self.bounds,
            self.cooldowns,
            planner,
            self.limits,
            self.sized,
            demand_on=self.demand_on,
        )

    async def step(self, now: float) -> None:
        assert self.edges is not None, "attach() first"
        self.edges.now = now
        report = await control_step(self.state, self.cfg, self.edges, now, law=LAWS[self.law])
        self.state = report.decision.state
        if self.alerts is not None:
            self.alerts.record(now, self.edges.alert_series(self.alerts, report))
            for step in self.alerts.steps(now):
                self.edges.alert_step(step, now)
