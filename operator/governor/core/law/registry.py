"""The laws a user can choose (spec.adaptive.law, `governor run --law`, `governor demo --law`), by name.

- "levers", the default: the computed law (governor.core.law.computed): the rule table decides whether to
  move; online fits of what the cap does decide how far and veto a cut the cap cannot answer; a queue model
  keeps cuts above the cap that carries the arrivals and raises for a backlog past the TTFT bound, within
  the per-token cap where one is known; for an inter-token SLO the token budget goes first
  (governor.core.law.budget) (benchmarks/results/matrix/REPORT.md has both laws side by side).
- "rules": the rule table alone (governor.core.law.decide): 14 rules, each with the defect it fixes; kept as a
  benchmark policy and for users who want it.
The default by the figures (README, "The law"): the matrix's mean 0.90 against 0.70, at least static
64's attainment and goodput on the H200 at 12 and 20 ms, the inter-token SLO answered with the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, get_args

from governor.core.law.computed import computed_decide
from governor.core.law.decide import decide
from governor.core.law.model import Decision, LawConfig, LawState, Observation

Law = Callable[[LawState, Observation, LawConfig], Decision]
LawName = Literal["rules", "levers"]
DEFAULT_LAW: LawName = "levers"
LAWS: Mapping[LawName, Law] = {"rules": decide, "levers": computed_decide}
LAW_NAMES: tuple[LawName, ...] = get_args(LawName)
