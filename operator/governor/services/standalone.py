"""Standalone mode: the same law governing plain vLLM endpoints, without Kubernetes.

The endpoints are the replicas of one service: every tick reads the signals (from Prometheus, grouped by one
target label, or by scraping the endpoints' /metrics directly), decides with governor.core.law, and holds
the cap
on every endpoint through the runtime's admin route. There are no replicas to write here: the planner's
wish (current endpoints + the law's replica wish, within bounds) is exported as governor_desired_replicas and
logged, for whatever scales the endpoints.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from governor.adapters import opmetrics
from governor.adapters.engine import Actuator, Limits, PodTarget
from governor.adapters.prometheus import PromReader, Reading, Snapshot
from governor.adapters.scrape import DirectScraper, resolution_warning
from governor.core import promql
from governor.core.law import Decision, LawConfig, LawState, decide, initial_state
from governor.core.planner import Cooldowns, Plan, PlannerState, ReplicaBounds, ScaleRequest, plan

log = logging.getLogger("governor.services.standalone")
NAMESPACE = "standalone"


@dataclass(frozen=True)
class TickReport:
    decision: Decision
    snapshot_available: bool
    held_cap: int | None  # what the engines answered, min over endpoints; None if none answered
    desired_replicas: int
    reading: Reading
    errors: list[str] = field(default_factory=list)


async def discover_limits(actuator: Actuator, pods: Sequence[PodTarget]) -> Limits | None:
    """The engines' current limits (lowest cap and ceiling over the endpoints that answer)."""
    results = [r for r in await asyncio.gather(*(actuator.read(p) for p in pods)) if r.limits is not None]
    if not results:
        return None
    return Limits(
        cap=min(r.limits.cap for r in results if r.limits),
        ceiling=min(r.limits.ceiling for r in results if r.limits),
    )


class Standalone:
    def __init__(
        self,
        *,
        name: str,
        endpoints: Sequence[str],
        token: str | None,
        cfg: LawConfig,
        state: LawState | None = None,
        prometheus: PromReader | None = None,
        grouping: promql.Grouping | None = None,
        group_value: str | None = None,
        actuator: Actuator | None = None,
        scraper: DirectScraper | None = None,
        replica_bounds: ReplicaBounds | None = None,
        cooldowns: Cooldowns | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.state = state or initial_state(cfg)
        self.pods = [PodTarget(name=url, base_url=url, token=token) for url in endpoints]
        self.prometheus = prometheus
        self.grouping = grouping or promql.standalone()
        self.group_value = group_value or name
        self.actuator = actuator or Actuator()
        self.scraper = scraper or (None if prometheus else DirectScraper())
        n = len(self.pods)
        self.replica_bounds = replica_bounds or ReplicaBounds(min_replicas=1, max_replicas=max(n, 1) * 4)
        self.cooldowns = cooldowns or Cooldowns(up_s=cfg.window_s, down_s=cfg.window_s * 5)
        self.planner = PlannerState(replicas=n)
        self.clock = clock
        self._labels = {"namespace": NAMESPACE, "name": name}
        opmetrics.SLO_TARGET.labels(**self._labels).set(cfg.slo_target_s)
        opmetrics.CEILING.labels(**self._labels).set(cfg.ceiling)
        opmetrics.CAP_FLOOR.labels(**self._labels).set(cfg.min_cap)
        warning = resolution_warning(cfg.latency_kind, cfg.slo_target_s, cfg.band_high - 1)
        if warning:
            log.warning(warning)

    async def _snapshot(self) -> Snapshot:
        wanted = {(self.cfg.latency_kind, self.cfg.quantile)}
        gauge_window = min(self.cfg.window_s, 2 * self.cfg.tick_s)
        if self.prometheus is not None:
            return await self.prometheus.read(self.grouping, self.cfg.window_s, gauge_window, wanted)
        assert self.scraper is not None
        key = (self.group_value,)
        return await self.scraper.read(
            {key: [p.base_url for p in self.pods]}, self.cfg.window_s, gauge_window, wanted
        )

    async def tick(self) -> TickReport:
        now = self.clock()
        snapshot = await self._snapshot()
        reading = snapshot.get((self.group_value,))
        decision = decide(
            self.state, reading.observation(now, self.cfg.latency_kind, self.cfg.quantile), self.cfg
        )
        self.state = decision.state
        results = await self.actuator.ensure(self.pods, decision.cap)
        errors = [f"{r.pod}: {r.error}" for r in results if not r.ok]
        if snapshot.error:
            errors.append(f"metrics: {snapshot.error}")
        held = self.actuator.held([p for p, r in zip(self.pods, results, strict=True) if r.ok])
        step: Plan | None = None
        if decision.replica_wish:
            request = ScaleRequest(
                direction=decision.replica_wish, source="law", reason=decision.reason, now_s=now
            )
            step = plan(self.planner, request, self.replica_bounds, self.cooldowns)
            self.planner = step.state
        self._export(decision, reading)
        log.info(
            "cap %d -> %d (%s, mode %s): %s; p99 %s smoothed %s slo %gs; desired replicas %d%s%s",
            decision.previous_cap,
            decision.cap,
            decision.reason,
            decision.mode,
            decision.detail,
            _fmt(reading.p99(self.cfg.latency_kind, self.cfg.quantile)),
            _fmt(decision.state.p99_smoothed),
            self.cfg.slo_target_s,
            self.planner.replicas,
            f" ({step.reason}: {step.detail})" if step else "",
            f"; errors: {'; '.join(errors)}" if errors else "",
        )
        return TickReport(
            decision=decision,
            snapshot_available=snapshot.available,
            held_cap=held,
            desired_replicas=self.planner.replicas,
            reading=reading,
            errors=errors,
        )

    def _export(self, decision: Decision, reading: Reading) -> None:
        labels = self._labels
        opmetrics.CAP.labels(**labels).set(decision.cap)
        opmetrics.DESIRED_REPLICAS.labels(**labels).set(self.planner.replicas)
        opmetrics.DECISIONS.labels(**labels, direction=decision.direction, reason=decision.reason).inc()
        p99 = reading.p99(self.cfg.latency_kind, self.cfg.quantile)
        if p99 is not None:
            opmetrics.P99.labels(**labels).set(p99)
        if decision.state.p99_smoothed is not None:
            opmetrics.P99_SMOOTHED.labels(**labels).set(decision.state.p99_smoothed)

    async def run(self, ticks: int | None = None) -> list[TickReport]:
        """Tick every cfg.tick_s on a fixed grid (sharp: a slow tick does not shift the next ones)."""
        reports: list[TickReport] = []
        start, slot = self.clock(), 0
        while ticks is None or len(reports) < ticks:
            reports.append(await self.tick())
            if ticks is not None and len(reports) >= ticks:
                break
            slot += 1
            behind = self.clock() - (start + slot * self.cfg.tick_s)
            if behind > 0:  # fell behind: skip the missed slots rather than bursting through them
                slot += int(behind // self.cfg.tick_s) + 1
            await asyncio.sleep(max(0.0, start + slot * self.cfg.tick_s - self.clock()))
        return reports

    async def aclose(self) -> None:
        await self.actuator.aclose()
        if self.scraper is not None:
            await self.scraper.aclose()
        if self.prometheus is not None:
            await self.prometheus.aclose()


def _fmt(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.4g}s"
