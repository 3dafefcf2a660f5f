"""The control step's edges in the cluster, and one governed tick of an InferenceService.

The edges: signals from the shared `SignalHub` (Prometheus or the pods' /metrics), the cap held on every
ready pod through the runtime's admin route with the token from the <name>-admin-token Secret, the replica
wish to the one replica writer, the operator's metrics. After the step, status (through the pure builder in
governor.core.status) and an Event when the cap changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import kopf
from pydantic import ValidationError

from governor.adapters import kube, opmetrics
from governor.adapters.engine import Actuator, PodTarget
from governor.adapters.kube import Kube
from governor.core import builders, demand
from governor.core import spec as api
from governor.core import status as status_builders
from governor.core.law import LAWS, Decision, LawConfig, LawState, initial_state
from governor.core.planner import StepLimits, size_request
from governor.core.reading import Key, Reading
from governor.services.control import Applied, Observed, StepReport, control_step
from governor.services.replicas import ReplicaWriter
from governor.services.signal_hub import SignalHub

TOKEN_TTL_S = 60.0


@dataclass(frozen=True)
class PodInfo:
    """A governed pod as the Kopf index holds it."""

    name: str
    uid: str
    url: str | None  # http://IP:PORT of the container port named "http"; None until the pod has an IP
    ready: bool
    restarts: int

    def target(self, token: str | None) -> PodTarget | None:
        if self.url is None or not self.ready:
            return None
        return PodTarget(name=self.name, base_url=self.url, token=token, key=f"{self.uid}/{self.restarts}")


@dataclass
class OperatorContext:
    """The operator's long-lived clients and state, created by a startup handler and kept in Kopf's memo.

    It owns the API client (``kube``; the login handler connects it) and closes it with the others.
    """

    kube: Kube
    hub: SignalHub = field(default_factory=SignalHub)
    actuator: Actuator = field(default_factory=Actuator)
    replicas: ReplicaWriter = field(init=False)
    tokens: dict[Key, tuple[float, str | None]] = field(default_factory=dict)
    demands: dict[Key, demand.DemandMemory] = field(default_factory=dict)  # capacity and arrivals per service
    status_refresh_ticks: int = status_builders.STATUS_REFRESH_TICKS
    alert_steps: dict[Key, Any] = field(default_factory=dict)  # the last Alertmanager step announced (Event)

    def __post_init__(self) -> None:
        self.replicas = ReplicaWriter(self.kube)

    async def token(self, key: Key, refresh: bool = False) -> str | None:
        cached = self.tokens.get(key)
        if cached is not None and not refresh and time.monotonic() - cached[0] < TOKEN_TTL_S:
            return cached[1]
        secret = await self.kube.get("v1", "Secret", key[0], builders.names(key[1]).secret)
        token = kube.secret_value(secret, builders.TOKEN_KEY)
        self.tokens[key] = (time.monotonic(), token)
        return token

    def forget(self, key: Key) -> None:
        self.hub.forget(key)
        self.actuator.forget(key)
        self.tokens.pop(key, None)
        self.demands.pop(key, None)
        self.alert_steps.pop(key, None)

    async def aclose(self) -> None:
        try:
            await self.actuator.aclose()
            await self.hub.aclose()
        finally:
            await self.kube.aclose()


def law_config(spec: api.InferenceServiceSpec, resolved: api.Resolved) -> LawConfig:
    """The law's parameters from the spec (the spec's band is symmetric: ±band around the target)."""
    slo = spec.slo or api.SLO(target_ms=1000.0)
    a = spec.adaptive
    return LawConfig(
        slo_target_s=slo.target_ms / 1000,
        ttft_bound_s=None if slo.ttft_ms is None else slo.ttft_ms / 1000,
        latency_kind=slo.kind,
        quantile=slo.quantile,
        min_cap=resolved.min_cap,
        ceiling=resolved.max_cap,
        initial_cap=resolved.initial_cap,
        decrease_factor=a.decrease_factor,
        increase_factor=a.increase_factor,
        band_low=1 - a.band,
        band_high=1 + a.band,
        alpha=a.ewma_alpha,
        cooldown_s=a.cooldown_seconds,
        tick_s=a.tick_seconds,
        window_s=a.window_seconds,
        long_tail_cap_fraction=a.long_tail.cap_fraction if a.long_tail.enabled else 1.0,
        long_tail_fraction=0.01 if a.long_tail.enabled else float("inf"),
        burst_ticks=a.burst.ticks if a.burst.enabled else 10**9,
    )


def resume(body: Mapping[str, Any], cfg: LawConfig) -> LawState:
    """The law's state from status.law (an operator restart resumes, not resets), else a fresh start."""
    saved = (body.get("status") or {}).get("law")
    if saved:
        try:
            return LawState.model_validate(saved)
        except ValidationError:
            pass
    return initial_state(cfg)


def demand_sample(reading: Reading, pods: int, now_s: float, cfg: LawConfig) -> demand.Sample:
    """The demand rule's measurements from a per-pod reading: arrivals are completions plus queue growth."""
    rate = reading.request_rate
    arrivals = None if rate is None else (rate + max(reading.queue_growth or 0.0, 0.0)) * pods
    p99 = reading.p99(cfg.latency_kind, cfg.quantile)
    return demand.Sample(now_s, pods, rate, reading.running, reading.cap, p99, arrivals)


@dataclass
class ClusterEdges:
    """The control step's I/O for one InferenceService's ready pods."""

    ctx: OperatorContext
    key: tuple[str, str]
    cfg: LawConfig
    pods: list[PodInfo]
    logger: kopf.Logger | logging.Logger
    body: Mapping[str, Any] | None = None  # the daemon's copy of the object, kept current by Kopf's watch
    token: str | None = None  # the admin token from the Secret index, when the caller has it
    targets: list[PodTarget] = field(default_factory=list)
    reading: Reading | None = None
    sample: demand.Sample | None = None

    async def observe(self) -> Observed:
        token = self.token or await self.ctx.token(self.key)
        self.targets = [t for t in (p.target(token) for p in self.pods) if t is not None]
        urls = tuple(t.base_url for t in self.targets)
        snapshot, reading = await self.ctx.hub.read(self.key, self.cfg, urls)
        self.reading = reading
        self.sample = demand_sample(reading, len(self.targets), time.time(), self.cfg)
        memory = self.ctx.demands.get(self.key, demand.DemandMemory())
        self.ctx.demands[self.key] = demand.remember(
            memory, self.sample, self.cfg.slo_target_s, self.cfg.binding_fraction, self.cfg.window_s
        )
        return Observed(reading, snapshot.available, self.key in snapshot.services, snapshot.error)

    async def actuate(self, cap: int, token_budget: int | None = None) -> Applied:
        ensure = self.ctx.actuator.ensure
        results = await ensure(self.targets, cap, token_budget=token_budget, group=self.key)
        if any(r.error and "401" in r.error for r in results):  # the Secret was rotated: read it again
            token = await self.ctx.token(self.key, refresh=True)
            self.targets = [t for t in (p.target(token) for p in self.pods) if t is not None]
            results = await ensure(self.targets, cap, token_budget=token_budget, force=True, group=self.key)
        errors = tuple(f"pod {r.pod}: cap {cap} not applied: {r.error}" for r in results if not r.ok)
        for error in errors:
            self.logger.warning(error)
        ok = [t for t, r in zip(self.targets, results, strict=True) if r.ok]
        return Applied(self.ctx.actuator.held(ok), errors, self.ctx.actuator.held_budget(ok))

    def _demand(self) -> int | None:
        """The replicas the measured demand needs, when above spec.replicas (governor.core.demand)."""
        memory, r = self.ctx.demands.get(self.key), self.reading
        if memory is None or self.sample is None or r is None:
            return None
        live = ((self.body or {}).get("spec") or {}).get("replicas")
        return demand.wanted(
            memory,
            self.sample,
            live=int(live) if isinstance(live, int) else len(self.targets),
            waiting=(r.waiting or 0.0) * len(self.targets),
            slo_s=self.cfg.slo_target_s,
            window_s=self.cfg.window_s,
        )

    async def plan_replicas(self, wish: Literal[-1, 0, 1], decision: Decision, now_s: float) -> int | None:
        try:
            namespace, name = self.key
            pods, r = len(self.targets), self.reading
            if not wish:  # no law wish: ask for what the measured demand needs, if more than asked for
                needed = self._demand()
                if needed is None:
                    return None
                step = await self.ctx.replicas.request_scale(
                    namespace,
                    name,
                    1,
                    "demand",
                    "arrivals above the replicas' capacity",
                    wanted=needed,
                    known=self.body,
                )
                return None if step is None else step.replicas
            memory, sample = self.ctx.demands.get(self.key), self.sample
            capacity = (
                None
                if memory is None or sample is None
                else demand.sizing_capacity(memory, sample, self.cfg.slo_target_s, wish)
            )
            wanted, load_after = size_request(  # readings are per pod: the planner sizes from totals
                wish,
                ready=pods,
                live=pods,
                capacity_rps=capacity,
                completions_rps=None if r is None or r.request_rate is None else r.request_rate * pods,
                waiting=0.0 if r is None else (r.waiting or 0.0) * pods,
                growth_rps=0.0 if r is None else (r.queue_growth or 0.0) * pods,
                down_load=StepLimits().down_load,
            )
            step = await self.ctx.replicas.request_scale(
                namespace,
                name,
                wish,
                "law",
                decision.detail,
                wanted=wanted,
                load_after=load_after,
                known=self.body,
            )
        except kube.KubeError as exc:
            self.logger.warning(f"replica request not written: {exc}")
            return None
        return None if step is None else step.replicas

    def export(self, report: StepReport) -> None:
        namespace, name = self.key
        opmetrics.export_step(namespace, name, self.cfg, report)


async def govern(
    ctx: OperatorContext,
    body: kopf.Body,
    spec: api.InferenceServiceSpec,
    resolved: api.Resolved,
    cfg: LawConfig,
    state: LawState,
    pods: list[PodInfo],
    logger: kopf.Logger | logging.Logger,
    token: str | None = None,
) -> LawState:
    """One tick of one InferenceService: the control step, then status and an Event on a cap change.
    `token`: the admin token when the caller holds it (the Secret index); otherwise read and cached."""
    key = (body["metadata"].get("namespace") or "", body["metadata"]["name"])
    edges = ClusterEdges(ctx, key, cfg, pods, logger, body=body, token=token)
    report = await control_step(
        state,
        cfg,
        edges,
        time.monotonic(),
        law=LAWS[spec.adaptive.law],
        static_cap=None if resolved.adaptive else resolved.initial_cap,
    )
    decision, observed = report.decision, report.observed
    if decision.cap != decision.previous_cap:
        kopf.info(
            body,
            reason="CapChanged",
            message=f"cap {decision.previous_cap} -> {decision.cap}: {decision.reason}: {decision.detail}",
        )
    fresh = observed.available and observed.fresh
    metrics = (
        fresh,
        "Fresh" if fresh else ("SourceUnavailable" if not observed.available else "NoSeries"),
        "" if fresh else (observed.error or "no fresh series for this InferenceService"),
    )

    written: list[dict[str, Any]] = []

    def change(live: Mapping[str, Any]) -> dict[str, Any] | None:
        before = live.get("status") or {}
        patch = status_builders.loop_status(
            live,
            decision=decision,
            cfg=cfg,
            ceiling=resolved.ceiling,
            observed_p99_s=report.observed_p99,
            metrics=metrics,
            held_cap=report.applied.held_cap,
            desired_replicas=report.desired_replicas,
            now=status_builders.now_iso(),
            held_budget=report.applied.held_budget,
        )
        if not status_builders.loop_write_due(before, patch, ctx.status_refresh_ticks):
            written.clear()
            return None
        written[:] = [before, patch]
        return patch

    await ctx.kube.update_inferenceservice_status(*key, change, known=body)
    flip = status_builders.condition_flip(written[0], written[1], "CapEffective") if written else None
    if flip is not None:  # the levers law's verdict on the cap changed: say it where users look
        event = kopf.warn if flip["status"] == "False" else kopf.info
        event(body, reason=flip["reason"], message=flip["message"])
    return decision.state
