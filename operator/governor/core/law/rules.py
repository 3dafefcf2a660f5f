"""The rules as an ordered table: the first row whose guard holds decides the tick (rule numbers as in the
package docstring). Guards read the derived `Signals`; actions answer a `Move`. Read it top to bottom: an
earlier row shadows every later one, so the order is part of the law.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from governor.core.law.model import LawConfig, Mode
from governor.core.law.steps import clip, lower_cap, raise_cap


@dataclass(frozen=True, slots=True)
class Signals:
    """What the rules see: the derived signals of one tick, before any rule has moved the cap."""

    cfg: LawConfig
    cap: int
    upper: int  # the mode's limit (rule 11)
    mode: Mode
    per_token: bool  # rule 8: only per-token SLOs lower the cap
    p99: float | None  # this tick's reading
    smoothed: float | None
    violating: bool
    comfortable: bool
    overloaded: bool  # rule 9
    hedge: bool  # rule 12: a burst outside the comfortable band
    cooling: bool  # rule 5
    stale: bool  # rule 5
    binding: bool  # rule 7
    queued: bool
    memory: float | None  # rule 14, already decayed for this tick
    comfortable_ticks: int  # comfortable ticks in a row before this one

    @property
    def level(self) -> float:
        """The smoothed P99; only rows below "no-data" read it."""
        if self.smoothed is None:
            raise ValueError("no smoothed P99: the no-data row comes first")
        return self.smoothed


@dataclass(frozen=True, slots=True)
class Move:
    """A row's answer: the new cap and what else the tick records."""

    cap: int
    detail: str  # a sentence for Events and status
    pressure: bool = False  # rule 10: the cap cannot answer the SLO; counts toward a replica
    cut: bool = False  # rule 5: a decrease; start the cooldown, remember the P99 it acted on
    remember: bool = False  # rule 14: the SLO was missed at this cap


@dataclass(frozen=True, slots=True)
class Rule:
    reason: str  # the Decision's reason code, a metric label
    when: Callable[[Signals], bool]
    then: Callable[[Signals], Move]


_DRAINING = "waiting for the last decrease to drain"

RULES: tuple[Rule, ...] = (
    Rule(  # rule 6
        "bounds",
        lambda s: clip(s.cap, s.cfg) != s.cap,
        lambda s: Move(clip(s.cap, s.cfg), f"cap brought into [{s.cfg.min_cap}, {s.cfg.ceiling}]"),
    ),
    Rule(  # the law never acts on a guess
        "no-data",
        lambda s: s.p99 is None or s.smoothed is None,
        lambda s: Move(s.cap, "no latency data (no traffic, or metrics unavailable): cap held"),
    ),
    Rule(  # rule 11: the only mode whose limit lies below the ceiling (the ceiling is the "bounds" row)
        "long-tail",
        lambda s: s.per_token and s.mode == "long-tail" and s.cap > s.upper and not s.comfortable,
        lambda s: Move(s.upper, f"{s.mode} mode caps at {s.upper} (a fraction of the ceiling)"),
    ),
    Rule(  # rule 9
        "queue-overload",
        lambda s: s.per_token and s.violating and s.overloaded,
        lambda s: Move(
            s.cap,
            "per-token SLO missed but the queue grows: cap held (lower starves the queue), replica wanted",
            pressure=True,
        ),
    ),
    Rule(  # rule 5
        "cooldown",
        lambda s: s.per_token and (s.violating or s.hedge) and (s.cooling or s.stale),
        lambda s: Move(s.cap, _DRAINING, pressure=s.violating and s.cap <= s.cfg.min_cap),
    ),
    Rule(  # rules 6, 10
        "at-floor",
        lambda s: s.per_token and (s.violating or s.hedge) and s.cap <= s.cfg.min_cap,
        lambda s: Move(
            s.cap, f"cap at its floor {s.cfg.min_cap} and the SLO is still missed", pressure=s.violating
        ),
    ),
    Rule(  # rules 1, 4, 14
        "slo-violation",
        lambda s: s.per_token and s.violating,
        lambda s: Move(
            lower_cap(s.cap, s.cfg, s.level),
            f"P99 {s.level:.4g}s above {s.cfg.band_high:g} x SLO",
            cut=True,
            remember=True,
        ),
    ),
    Rule(  # rule 12
        "burst",
        lambda s: s.per_token and s.hedge,
        lambda s: Move(
            lower_cap(s.cap, s.cfg, s.level), "request rate rising: pre-emptive decrease", cut=True
        ),
    ),
    Rule(  # rule 8: a queue-driven SLO raises a binding cap first
        "queue-pressure",
        lambda s: not s.per_token and s.violating and s.queued and s.binding and s.cap < s.upper,
        lambda s: Move(raise_cap(s.cap, s.upper, s.cfg), "queue-driven latency: cap up first"),
    ),
    Rule(  # rules 8, 10: ... and never lowers it
        "queue-pressure",
        lambda s: not s.per_token and s.violating,
        lambda s: Move(
            s.cap,
            "queue-driven latency past the cap: cap held (never lowered for it), replica wanted",
            pressure=True,
        ),
    ),
    Rule(  # rule 5
        "cooldown",
        lambda s: s.comfortable and s.cooling,
        lambda s: Move(s.cap, _DRAINING),
    ),
    Rule(  # rule 7
        "not-binding",
        lambda s: s.comfortable and not s.binding,
        lambda s: Move(s.cap, "P99 low but the cap is not the bottleneck: no creep"),
    ),
    Rule(  # rules 6, 11
        "at-limit",
        lambda s: s.comfortable and s.cap >= s.upper,
        lambda s: Move(s.cap, f"cap at its {s.mode}-mode limit"),
    ),
    Rule(  # rule 3
        "confirming",
        lambda s: s.comfortable and s.comfortable_ticks + 1 < s.cfg.raise_after_ticks,
        lambda s: Move(s.cap, "P99 low: confirming before a raise"),
    ),
    Rule(  # rules 2, 4, 12, 14
        "headroom",
        lambda s: s.comfortable,
        lambda s: Move(
            raise_cap(s.cap, s.upper, s.cfg, s.memory, hedge=s.mode == "burst"),
            f"P99 {s.level:.4g}s below band, cap binds",
        ),
    ),
    Rule(  # rule 3
        "in-band",
        lambda s: True,
        lambda s: Move(s.cap, "P99 inside the hysteresis band"),
    ),
)


def first_rule(signals: Signals) -> tuple[str, Move]:
    """The reason code and move of the first row whose guard holds (the last row always does)."""
    rule = next(rule for rule in RULES if rule.when(signals))
    return rule.reason, rule.then(signals)
