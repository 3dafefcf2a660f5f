"""Cap policies for the benchmark. Each sees exactly what the operator sees (an `Observation` per tick
over its window) and answers the cap. The project's law and the seed law plug in through `LawPolicy`, a thin
adapter over `governor.core.law.decide(state, obs, cfg)` and `governor_twin.seed.seed_decide`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from governor.core.law import (
    DEFAULT_LAW,
    LAWS,
    Decision,
    LawConfig,
    LawName,
    LawState,
    Observation,
    decide,
    initial_state,
)
from governor.core.signals import LatencyKind

from governor_twin.seed import seed_decide


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tick_s(self) -> float: ...

    @property
    def window_s(self) -> float: ...

    def start(self, ceiling: int) -> int:
        """Reset; the cap the engine starts with."""
        ...

    def decide(self, obs: Observation) -> int: ...

    @property
    def last_reason(self) -> str: ...

    @property
    def token_budget(self) -> int | None:
        """The token budget the last decision holds; None: the engine keeps its own."""
        ...


@dataclass
class LawPolicy:
    """Adapter: any `(state, obs, cfg) -> Decision` law (the project's `decide`, or the seed's)."""

    name: str
    config: LawConfig
    law: Callable[[LawState, Observation, LawConfig], Decision] = decide
    initial_cap: int | None = None  # overrides initial_state(cfg) (the seed starts at its 256 "normal" mode)
    state: LawState | None = None
    last_reason: str = ""
    token_budget: int | None = None
    decisions: list[Decision] = field(default_factory=list)

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def window_s(self) -> float:
        return self.config.window_s

    def start(self, ceiling: int) -> int:
        self.state = initial_state(self.config)
        if self.initial_cap is not None:
            self.state = self.state.model_copy(update={"cap": min(self.initial_cap, ceiling)})
        self.decisions = []
        self.token_budget = None
        return self.state.cap

    def decide(self, obs: Observation) -> int:
        assert self.state is not None, "start() first"
        d = self.law(self.state, obs, self.config)
        self.state = d.state
        self.last_reason = d.reason
        self.token_budget = d.token_budget
        return d.cap


@dataclass
class StaticPolicy:
    cap: int
    tick_s: float = 5.0
    window_s: float = 60.0
    last_reason: str = "static"
    token_budget: int | None = None

    @property
    def name(self) -> str:
        return f"static {self.cap}"

    def start(self, ceiling: int) -> int:
        return min(self.cap, ceiling)

    def decide(self, obs: Observation) -> int:
        return self.cap


@dataclass
class SchedulePolicy:
    """The per-phase oracle: a static cap per phase, chosen in hindsight."""

    caps: Sequence[tuple[float, int]]  # (phase start s, cap), sorted
    name: str = "oracle (per phase)"
    tick_s: float = 5.0
    window_s: float = 60.0
    last_reason: str = "schedule"
    token_budget: int | None = None

    def start(self, ceiling: int) -> int:
        return self.caps[0][1]

    def decide(self, obs: Observation) -> int:
        cap = self.caps[0][1]
        for start, c in self.caps:
            if obs.now_s + 1e-9 >= start:
                cap = c
        return cap


@dataclass
class AimdPolicy:
    """TCP-style AIMD on the cap: +`increase` per tick while the P99 meets the SLO and the cap binds,
    × `decrease` on a violation, then one window without a further cut (the window still holds old
    samples)."""

    slo_s: float
    ceiling: int = 256
    increase: int = 4
    decrease: float = 0.5
    tick_s: float = 5.0
    window_s: float = 30.0
    name: str = "AIMD (+4 / x0.5)"
    cap: int = 0
    hold_until: float = 0.0
    last_reason: str = ""
    token_budget: int | None = None

    def start(self, ceiling: int) -> int:
        self.ceiling = ceiling
        self.cap = ceiling
        self.hold_until = 0.0
        return self.cap

    def decide(self, obs: Observation) -> int:
        if obs.p99_s is None:
            self.last_reason = "no-data"
        elif obs.p99_s > self.slo_s and obs.now_s >= self.hold_until:
            self.cap = max(1, int(self.cap * self.decrease))
            self.hold_until = obs.now_s + self.window_s
            self.last_reason = "md"
        elif obs.p99_s <= self.slo_s and _binding(obs, self.cap):
            self.cap = min(self.ceiling, self.cap + self.increase)
            self.last_reason = "ai"
        else:
            self.last_reason = "hold"
        return self.cap


LADDER: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class StepGuardPolicy:
    """Dynamo-planner style on the cap: move one rung (±1 on the ladder 1, 2, 4 … ceiling) at a time, and take
    no new action while the last one is pending: until a full window has passed since it (the quantile then
    reflects the new cap) and, after a decrease, until running has drained to the new cap."""

    slo_s: float
    ceiling: int = 256
    raise_below: float = 0.8
    tick_s: float = 5.0
    window_s: float = 30.0
    name: str = "Dynamo-style ±1 rung, pending guard"
    rungs: tuple[int, ...] = ()
    rung: int = 0
    pending_until: float = 0.0
    pending_drain: int | None = None
    last_reason: str = ""
    token_budget: int | None = None

    def start(self, ceiling: int) -> int:
        self.ceiling = ceiling
        self.rungs = tuple(sorted({c for c in LADDER if c < ceiling} | {ceiling}))
        self.rung = len(self.rungs) - 1
        self.pending_until = 0.0
        self.pending_drain = None
        return self.rungs[self.rung]

    def decide(self, obs: Observation) -> int:
        cap = self.rungs[self.rung]
        if self.pending_drain is not None and obs.running is not None and obs.running <= self.pending_drain:
            self.pending_drain = None
        if obs.now_s < self.pending_until or self.pending_drain is not None:
            self.last_reason = "pending"
            return cap
        if obs.p99_s is None:
            self.last_reason = "no-data"
        elif obs.p99_s > self.slo_s and self.rung > 0:
            self.rung -= 1
            self.pending_drain = self.rungs[self.rung]
            self.pending_until = obs.now_s + self.window_s
            self.last_reason = "down"
        elif (
            obs.p99_s < self.raise_below * self.slo_s
            and _binding(obs, cap)
            and self.rung < len(self.rungs) - 1
        ):
            self.rung += 1
            self.pending_until = obs.now_s + self.window_s
            self.last_reason = "up"
        else:
            self.last_reason = "hold"
        return self.rungs[self.rung]


def _binding(obs: Observation, cap: int) -> bool:
    return (obs.waiting or 0.0) >= 1 or (obs.running or 0.0) >= 0.9 * cap


def project_law(
    slo_s: float,
    ceiling: int,
    kind: LatencyKind = LatencyKind.TPOT,
    gpu_type: str | None = "h200",
    law: LawName = DEFAULT_LAW,
    ttft_bound_s: float | None = None,
) -> LawPolicy:
    """The project's law (the operator's default unless named) with its defaults (operator tick 5 s), the
    GPU profile naming the H200 row; `ttft_bound_s` is the SLO's TTFT bound (spec slo.ttftMs), if any."""
    cfg = LawConfig(
        slo_target_s=slo_s, latency_kind=kind, ceiling=ceiling, gpu_type=gpu_type, ttft_bound_s=ttft_bound_s
    )
    return LawPolicy("ours (governor.core.law)", cfg, law=LAWS[law])


def seed_law(slo_s: float, ceiling: int, kind: LatencyKind = LatencyKind.TPOT) -> LawPolicy:
    """The seed law verbatim (001 §3.2): every 5 s over a 60 s window, from the seed's normal-mode 256."""
    cfg = LawConfig(
        slo_target_s=slo_s, latency_kind=kind, ceiling=max(ceiling, 256), tick_s=5.0, window_s=60.0
    )
    return LawPolicy("seed law (verbatim)", cfg, law=seed_decide, initial_cap=256)


STATIC_CAPS: tuple[int, ...] = (16, 32, 64, 128, 256)
