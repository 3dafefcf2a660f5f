"""Kopf: the control loop, one per InferenceService with an SLO.

Every tick (spec.adaptive.tickSeconds, default 5 s, on a fixed grid) the loop of one InferenceService:
1. reads its signals from the shared `SignalHub`: one query per signal for every InferenceService at once
   (Prometheus at GOVERNOR_PROMETHEUS_URL; without it, the pods' /metrics scraped directly);
2. decides with governor.core.law, starting from the law state kept in status.law (an operator restart
resumes);
3. holds the cap on every ready pod (pods from a Kopf index, never a LIST per tick) through the runtime's
   admin route with the token from the <name>-admin-token Secret;
4. hands a replica wish to governor.services.replicas (the one writer of replicas);
5. writes status (cap the engines answered, observed and smoothed P99, SLO target, mode, last decision,
   law state, desiredReplicas, conditions MetricsAvailable and SLOMet), an Event when the cap changes, and
   the operator metrics.
Without metrics the cap is held (the law's "no-data" rule) and MetricsAvailable turns False.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from pydantic import ValidationError

from governor.adapters import kube, opmetrics
from governor.adapters.engine import Actuator, PodTarget
from governor.adapters.prometheus import Key, PromReader, Reading, Snapshot
from governor.adapters.scrape import DirectScraper
from governor.core import builders, promql
from governor.core import spec as api
from governor.core.law import Decision, LawConfig, LawState, decide, initial_state
from governor.core.signals import LatencyKind
from governor.services import replicas

ISVC = (api.GROUP, api.VERSION, api.PLURAL)
PROMETHEUS_ENV = "GOVERNOR_PROMETHEUS_URL"
TOKEN_TTL_S = 60.0
log = logging.getLogger("governor.loop")


def law_config(spec: api.InferenceServiceSpec, resolved: api.Resolved) -> LawConfig:
    """The law's parameters from the spec (the spec's band is symmetric: ±band around the target)."""
    slo = spec.slo or api.SLO(target_ms=1000.0)
    a = spec.adaptive
    return LawConfig(
        slo_target_s=slo.target_ms / 1000,
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


# --- pods: a Kopf index, so a tick never LISTs -------------------------------------------------------------


@dataclass(frozen=True)
class PodInfo:
    name: str
    uid: str
    url: str | None  # http://IP:PORT of the container port named "http"; None until the pod has an IP
    ready: bool
    restarts: int

    def target(self, token: str | None) -> PodTarget | None:
        if self.url is None or not self.ready:
            return None
        return PodTarget(name=self.name, base_url=self.url, token=token, key=f"{self.uid}/{self.restarts}")


@kopf.index("v1", "pods", labels={builders.LABEL_OWNER: kopf.PRESENT})
def governed_pods(
    namespace: str | None,
    name: str,
    uid: str | None,
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    **_: Any,
) -> dict[tuple[str, str], PodInfo]:
    port = api.HTTP_PORT
    for container in spec.get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == "http" and p.get("containerPort"):
                port = int(p["containerPort"])
    ip = status.get("podIP")
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])
    info = PodInfo(
        name=name,
        uid=uid or name,
        url=f"http://{ip}:{port}" if ip else None,
        ready=conditions.get("Ready") == "True",
        restarts=restarts,
    )
    return {(namespace or "", labels[builders.LABEL_OWNER]): info}


# --- signals: one query per signal per tick for all InferenceServices ---------------------------------------


class SignalHub:
    """Shares one round of queries among the loops that tick within half a tick of each other.

    The source follows GOVERNOR_PROMETHEUS_URL (read at every refresh, so tests and operators can point the
    running operator at a Prometheus): set -> Prometheus, unset -> the pods' /metrics scraped directly.
    """

    def __init__(self) -> None:
        self.prometheus_url: str | None = None
        self.prometheus: PromReader | None = None
        self.scraper = DirectScraper()
        self._wanted: dict[Key, tuple[LatencyKind, float, float, tuple[str, ...]]] = {}
        self._cache: dict[float, tuple[float, Snapshot]] = {}  # window -> (when, snapshot)
        self._lock = asyncio.Lock()

    def forget(self, key: Key) -> None:
        self._wanted.pop(key, None)

    async def read(self, key: Key, cfg: LawConfig, pod_urls: tuple[str, ...]) -> tuple[Snapshot, Reading]:
        self._wanted[key] = (cfg.latency_kind, cfg.quantile, cfg.window_s, pod_urls)
        async with self._lock:
            now = time.monotonic()
            cached = self._cache.get(cfg.window_s)
            if cached is None or now - cached[0] > cfg.tick_s / 2 or key not in cached[1].services:
                cached = (now, await self._refresh(cfg.window_s, min(cfg.window_s, 2 * cfg.tick_s)))
                self._cache[cfg.window_s] = cached
        return cached[1], cached[1].get(key)

    async def _refresh(self, window_s: float, gauge_window_s: float) -> Snapshot:
        same_window = {k: w for k, w in self._wanted.items() if w[2] == window_s}
        latencies = {(kind, q) for kind, q, _, _ in same_window.values()}
        url = os.environ.get(PROMETHEUS_ENV) or None
        if url != self.prometheus_url:
            if self.prometheus is not None:
                await self.prometheus.aclose()
            self.prometheus_url, self.prometheus = url, PromReader(url) if url else None
        if self.prometheus is not None:
            return await self.prometheus.read(promql.OPERATOR, window_s, gauge_window_s, latencies)
        return await self.scraper.read(
            {k: list(w[3]) for k, w in same_window.items()}, window_s, gauge_window_s, latencies
        )


@dataclass
class LoopContext:
    hub: SignalHub
    actuator: Actuator
    tokens: dict[Key, tuple[float, str | None]]


_context: LoopContext | None = None


@kopf.on.startup()
async def start_loop_context(**_: Any) -> None:
    global _context
    _context = LoopContext(hub=SignalHub(), actuator=Actuator(), tokens={})


@kopf.on.cleanup()
async def stop_loop_context(**_: Any) -> None:
    global _context
    if _context is not None:
        await _context.actuator.aclose()
        for source in (_context.hub.prometheus, _context.hub.scraper):
            if source is not None:
                await source.aclose()
        _context = None


async def _token(ctx: LoopContext, key: Key, refresh: bool = False) -> str | None:
    cached = ctx.tokens.get(key)
    if cached is not None and not refresh and time.monotonic() - cached[0] < TOKEN_TTL_S:
        return cached[1]
    secret = await kube.get("v1", "Secret", key[0], builders.names(key[1]).secret)
    token = kube.secret_value(secret, builders.TOKEN_KEY)
    ctx.tokens[key] = (time.monotonic(), token)
    return token


# --- the loop -----------------------------------------------------------------------------------------------


@kopf.daemon(*ISVC, cancellation_timeout=10.0, initial_delay=1.0)
async def control_loop(
    name: str,
    namespace: str | None,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    governed_pods: kopf.Index[tuple[str, str], PodInfo] | None = None,
    **_: Any,
) -> None:
    key = (namespace or "", name)
    state: LawState | None = None
    start, slot = time.monotonic(), 0
    try:
        while not stopped:
            tick_s = 5.0
            try:
                spec = api.parse_spec(body.get("spec"))
                resolved = spec.resolve()
            except ValidationError:
                spec = None  # children.py reports Invalid; the loop waits for a valid spec
            if spec is not None and _context is not None:
                tick_s = spec.adaptive.tick_seconds
                cfg = law_config(spec, resolved)
                if state is None:
                    state = _resume(body, cfg)
                indexed: Iterable[PodInfo] = governed_pods.get(key, []) if governed_pods is not None else []
                pods = [p for p in indexed if p.url and p.ready]
                try:
                    if pods:  # no ready pod: nothing to govern, and nothing new to report
                        state = await tick(_context, key, body, spec, resolved, cfg, state, pods, logger)
                except (kube.KubeError, OSError) as exc:
                    logger.warning(f"control loop tick failed, retrying next tick: {exc}")
            slot += 1
            behind = time.monotonic() - (start + slot * tick_s)
            if behind > 0:  # sharp: skip missed slots instead of bunching ticks
                slot += int(behind // tick_s) + 1
            await stopped.wait(max(0.0, start + slot * tick_s - time.monotonic()))
    finally:
        if _context is not None:
            _context.hub.forget(key)
        for metric in (opmetrics.CAP, opmetrics.P99, opmetrics.P99_SMOOTHED):
            metric.labels(namespace=key[0], name=name).set(float("nan"))


def _resume(body: Mapping[str, Any], cfg: LawConfig) -> LawState:
    saved = (body.get("status") or {}).get("law")
    if saved:
        try:
            return LawState.model_validate(saved)
        except ValidationError:
            pass
    return initial_state(cfg)


async def tick(
    ctx: LoopContext,
    key: tuple[str, str],
    body: kopf.Body,
    spec: api.InferenceServiceSpec,
    resolved: api.Resolved,
    cfg: LawConfig,
    state: LawState,
    pods: list[PodInfo],
    logger: kopf.Logger | logging.Logger,
) -> LawState:
    namespace, name = key
    token = await _token(ctx, key)
    targets = [t for t in (p.target(token) for p in pods) if t is not None]
    snapshot, reading = await ctx.hub.read(key, cfg, tuple(t.base_url for t in targets))
    now = time.monotonic()
    observed = reading.p99(cfg.latency_kind, cfg.quantile)
    if resolved.adaptive:
        decision = decide(state, reading.observation(now, cfg.latency_kind, cfg.quantile), cfg)
    else:  # static: hold the configured cap; the law only watches
        decision = Decision(
            cap=resolved.initial_cap,
            reason="static",
            detail="adaptive control is off",
            mode="normal",
            replica_wish=0,
            state=state.model_copy(update={"cap": resolved.initial_cap}),
            previous_cap=state.cap,
        )
    results = await ctx.actuator.ensure(targets, decision.cap)
    if any(r.error and "401" in r.error for r in results):  # the Secret was rotated: read it again
        token = await _token(ctx, key, refresh=True)
        targets = [t for t in (p.target(token) for p in pods) if t is not None]
        results = await ctx.actuator.ensure(targets, decision.cap, force=True)
    for r in results:
        if not r.ok:
            logger.warning(f"pod {r.pod}: cap {decision.cap} not applied: {r.error}")
    held = ctx.actuator.held([t for t, r in zip(targets, results, strict=True) if r.ok])
    step = None
    if decision.replica_wish:
        try:
            step = await replicas.request_scale(
                namespace, name, decision.replica_wish, "law", decision.detail
            )
        except kube.KubeError as exc:
            logger.warning(f"replica request not written: {exc}")
    _export(key, cfg, decision, observed)
    if decision.cap != decision.previous_cap:
        kopf.info(
            body,
            reason="CapChanged",
            message=f"cap {decision.previous_cap} -> {decision.cap}: {decision.reason}: {decision.detail}",
        )
    metrics_ok = snapshot.available and key in snapshot.services

    def change(live: Mapping[str, Any]) -> dict[str, Any]:
        status = live.get("status") or {}
        generation = (live.get("metadata") or {}).get("generation")
        stamp = api.now_iso()
        conditions = list(status.get("conditions") or [])
        conditions = api.set_condition(
            conditions,
            "MetricsAvailable",
            metrics_ok,
            "Fresh" if metrics_ok else ("SourceUnavailable" if not snapshot.available else "NoSeries"),
            "" if metrics_ok else (snapshot.error or "no fresh series for this InferenceService"),
            generation,
            stamp,
        )
        smoothed = decision.state.p99_smoothed
        met = None if smoothed is None or not metrics_ok else smoothed <= cfg.slo_target_s
        conditions = api.set_condition(
            conditions,
            "SLOMet",
            met,
            "Unknown" if met is None else ("WithinTarget" if met else "AboveTarget"),
            ""
            if smoothed is None
            else f"smoothed P{cfg.quantile * 100:g} {smoothed * 1000:.1f} ms,"
            f" target {cfg.slo_target_s * 1000:g} ms",
            generation,
            stamp,
        )
        patch: dict[str, Any] = {
            "conditions": conditions,
            "cap": held if held is not None else status.get("cap"),
            "ceiling": resolved.ceiling,
            "observedP99Ms": None if observed is None else round(observed * 1000, 3),
            "smoothedP99Ms": None if smoothed is None else round(smoothed * 1000, 3),
            "sloTargetMs": cfg.slo_target_s * 1000,
            "mode": decision.mode,
            "law": decision.state.model_dump(mode="json"),
        }
        if step is not None:
            patch["desiredReplicas"] = step.replicas
        if decision.cap != decision.previous_cap or not status.get("lastDecision"):
            patch["lastDecision"] = {
                "time": stamp,
                "from": decision.previous_cap,
                "to": decision.cap,
                "reason": f"{decision.reason}: {decision.detail}",
            }
        return patch

    await kube.update_inferenceservice_status(namespace, name, change)
    return decision.state


def _export(key: Key, cfg: LawConfig, decision: Decision, observed: float | None) -> None:
    labels = {"namespace": key[0], "name": key[1]}
    opmetrics.CAP.labels(**labels).set(decision.cap)
    opmetrics.CEILING.labels(**labels).set(cfg.ceiling)
    opmetrics.CAP_FLOOR.labels(**labels).set(cfg.min_cap)
    opmetrics.SLO_TARGET.labels(**labels).set(cfg.slo_target_s)
    opmetrics.P99.labels(**labels).set(float("nan") if observed is None else observed)
    if decision.state.p99_smoothed is not None:
        opmetrics.P99_SMOOTHED.labels(**labels).set(decision.state.p99_smoothed)
    opmetrics.DECISIONS.labels(**labels, direction=decision.direction, reason=decision.reason).inc()
