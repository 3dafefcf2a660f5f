"""Standalone mode: the same law governing plain vLLM endpoints, without Kubernetes.

The endpoints are the replicas of one service: every tick reads the signals (from Prometheus, grouped by one
target label, or by scraping the endpoints' /metrics directly), decides with the law, and holds the cap on
every endpoint through the runtime's admin route: the control step (governor.services.control) with these
edges. There are no replicas to write here: the planner's wish (current endpoints + the law's replica wish,
within bounds) is exported as governor_desired_replicas and logged, for whatever scales the endpoints.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from governor.adapters import opmetrics
from governor.adapters.engine import Actuator, Limits, PodTarget
from governor.adapters.prometheus import PromReader
from governor.adapters.scrape import DirectScraper, resolution_warning
from governor.core import promql
from governor.core.law import Decision, Law, LawConfig, LawState, initial_state
from governor.core.planner import Cooldowns, PlannerState, ReplicaBounds, ScaleRequest, plan
from governor.core.reading import Reading
from governor.services.control import Applied, Observed, StepReport, control_step, on_grid

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
    """The control step's edges for plain endpoints, and its driver (`tick`, `run`).

    `static_cap` set: the step holds that cap and only watches (the demo's static pass); else `law` decides.
    """

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
        law: Law | None = None,
        static_cap: int | None = None,
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
        self.law = law
        self.static_cap = static_cap
        self._plan_note = ""
        warning = resolution_warning(cfg.latency_kind, cfg.slo_target_s, cfg.band_high - 1)
        if warning:
            log.warning(warning)

    # --- the step's edges ---

    async def observe(self) -> Observed:
        wanted = {(self.cfg.latency_kind, self.cfg.quantile)}
        gauge_window = min(self.cfg.window_s, 2 * self.cfg.tick_s)
        key = (self.group_value,)
        if self.prometheus is not None:
            snapshot = await self.prometheus.read(self.grouping, self.cfg.window_s, gauge_window, wanted)
        else:
            assert self.scraper is not None
            snapshot = await self.scraper.read(
                {key: [p.base_url for p in self.pods]}, self.cfg.window_s, gauge_window, wanted
            )
        return Observed(
            reading=snapshot.get(key),
            available=snapshot.available,
            fresh=key in snapshot.services,
            error=snapshot.error,
        )

    async def actuate(self, cap: int, token_budget: int | None = None) -> Applied:
        results = await self.actuator.ensure(self.pods, cap, token_budget=token_budget)
        ok = [p for p, r in zip(self.pods, results, strict=True) if r.ok]
        errors = tuple(f"{r.pod}: {r.error}" for r in results if not r.ok)
        return Applied(self.actuator.held(ok), errors, self.actuator.held_budget(ok))

    async def plan_replicas(self, wish: Literal[-1, 0, 1], decision: Decision, now_s: float) -> int | None:
        """No replicas to write here: the planner's answer is exported and logged for whatever scales."""
        if not wish:
            return None
        request = ScaleRequest(direction=wish, source="law", reason=decision.reason, now_s=now_s)
        step = plan(self.planner, request, self.replica_bounds, self.cooldowns)
        self.planner = step.state
        self._plan_note = f" ({step.reason}: {step.detail})"
        return self.planner.replicas

    def export(self, report: StepReport) -> None:
        opmetrics.export_step(NAMESPACE, self.name, self.cfg, report)
        opmetrics.DESIRED_REPLICAS.labels(namespace=NAMESPACE, name=self.name).set(self.planner.replicas)
        d, errors = report.decision, report.errors
        log.info(
            "cap %d -> %d (%s, mode %s): %s; p99 %s smoothed %s slo %gs%s; desired replicas %d%s%s%s",
            d.previous_cap,
            d.cap,
            d.reason,
            d.mode,
            d.detail,
            _fmt(report.observed_p99),
            _fmt(d.state.p99_smoothed),
            self.cfg.slo_target_s,
            "" if self.cfg.ttft_bound_s is None else f" ttft {self.cfg.ttft_bound_s:g}s",
            self.planner.replicas,
            self._plan_note,
            f"; model: {seen}" if d.outlook is not None and (seen := d.outlook.describe()) else "",
            f"; errors: {'; '.join(errors)}" if errors else "",
        )
        self._plan_note = ""

    # --- the driver ---

    async def tick(self) -> TickReport:
        law = {} if self.law is None else {"law": self.law}
        report = await control_step(
            self.state, self.cfg, self, self.clock(), static_cap=self.static_cap, **law
        )
        self.state = report.decision.state
        return TickReport(
            decision=report.decision,
            snapshot_available=report.observed.available,
            held_cap=report.applied.held_cap,
            desired_replicas=self.planner.replicas,
            reading=report.observed.reading,
            errors=list(report.errors),
        )

    async def run(self, ticks: int | None = None) -> list[TickReport]:
        """Tick every cfg.tick_s on a fixed grid (sharp: a slow tick does not shift the next ones)."""
        reports: list[TickReport] = []

        async def one() -> float:
            reports.append(await self.tick())
            return self.cfg.tick_s

        await on_grid(one, asyncio.sleep, lambda: ticks is not None and len(reports) >= ticks, self.clock)
        return reports

    async def aclose(self) -> None:
        await self.actuator.aclose()
        if self.scraper is not None:
            await self.scraper.aclose()
        if self.prometheus is not None:
            await self.prometheus.aclose()


def _fmt(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.4g}s"
