"""The control step: observe → decide → actuate → plan replicas → export, once per tick, for one service.

This is the one place the loop is written. Its I/O edges are passed in (`Edges`), so the same step drives:
- the Kopf daemon (governor.handlers.loop: Prometheus or pod scrapes, pods from a Kopf index, the replica
  writer through the scale subresource, status and Events after the step);
- `governor run` and the demo (governor.services.standalone: plain endpoints, the planner in memory);
- the benchmarks that drive real code (the fleet twin: simulated engines in virtual time).
The decision itself is the law's (governor.core.law), pure; this module only sequences the edges around it
and never raises for a metrics or engine failure: those become `errors` in the report, and the law holds
the cap on unknown data.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from governor.core.law import Decision, Law, LawConfig, LawState, decide
from governor.core.reading import Reading


@dataclass(frozen=True, slots=True)
class Observed:
    """What the metrics edge answered for this service this tick."""

    reading: Reading
    available: bool  # the metrics source answered at all
    fresh: bool  # and it had a fresh series for this service
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Applied:
    """What the engines hold after actuation: the lowest cap over those that answered (None: none did)."""

    held_cap: int | None
    errors: tuple[str, ...] = ()
    held_budget: int | None = None  # likewise the token budget, where the engines report it


class Edges(Protocol):
    """The step's I/O. Each method must not raise for an unreachable source: it answers unknowns instead."""

    async def observe(self) -> Observed: ...

    async def actuate(self, cap: int, token_budget: int | None = None) -> Applied:
        """Make the engines hold `cap`, and `token_budget` when given (None: each keeps its own)."""
        ...

    async def plan_replicas(self, wish: Literal[-1, 0, 1], decision: Decision, now_s: float) -> int | None:
        """Hand the law's replica wish to the replica planner; answer the replicas it now wants, if any.
        Called every tick: with no wish (0), edges that measure the demand may still ask the planner for
        the replicas it needs (governor.core.demand); the others answer None."""
        ...

    def export(self, report: StepReport) -> None:
        """Publish the step (operator metrics, logs, a benchmark's timeline)."""
        ...


@dataclass(frozen=True, slots=True)
class StepReport:
    decision: Decision
    observed: Observed
    observed_p99: float | None  # this tick's raw quantile of the governed latency (seconds)
    applied: Applied
    desired_replicas: int | None  # the planner's answer to a wish or a demand; None when there was none

    @property
    def errors(self) -> tuple[str, ...]:
        metrics = (f"metrics: {self.observed.error}",) if self.observed.error else ()
        return metrics + self.applied.errors


def hold(state: LawState, cap: int) -> Decision:
    """Static mode: hold the configured cap; the law only watches."""
    return Decision(
        cap=cap,
        reason="static",
        detail="adaptive control is off",
        mode="normal",
        replica_wish=0,
        state=state.model_copy(update={"cap": cap, "ticks": state.ticks + 1}),
        previous_cap=state.cap,
    )


async def control_step(
    state: LawState,
    cfg: LawConfig,
    edges: Edges,
    now_s: float,
    *,
    law: Law = decide,
    static_cap: int | None = None,
) -> StepReport:
    """One tick. `static_cap` set: hold it (adaptive control off); otherwise `law` decides."""
    observed = await edges.observe()
    reading = observed.reading
    if static_cap is None:
        decision = law(state, reading.observation(now_s, cfg.latency_kind, cfg.quantile), cfg)
    else:
        decision = hold(state, static_cap)
    applied = await edges.actuate(decision.cap, decision.token_budget)
    desired = await edges.plan_replicas(decision.replica_wish, decision, now_s)
    report = StepReport(
        decision=decision,
        observed=observed,
        observed_p99=reading.p99(cfg.latency_kind, cfg.quantile),
        applied=applied,
        desired_replicas=desired,
    )
    edges.export(report)
    return report


async def on_grid(
    tick: Callable[[], Awaitable[float]],
    wait: Callable[[float], Awaitable[object]],
    done: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Call `tick` on a fixed grid until `done()`; `tick` answers the period to keep (it may change with the
    spec). Sharp: a slow tick does not shift the next ones, and missed slots are skipped, not bunched."""
    start, slot = clock(), 0
    while not done():
        period = await tick()
        if done():
            return
        slot += 1
        behind = clock() - (start + slot * period)
        if behind > 0:
            slot += int(behind // period) + 1
        await wait(max(0.0, start + slot * period - clock()))
