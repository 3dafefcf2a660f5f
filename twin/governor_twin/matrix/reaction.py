"""The reaction benchmark: a 2× load step on the twin (H200 8B, medium TPOT target).

The P99 judged here is the exact TPOT P99 of the requests that finished in each 5 s tick (what users got in
that tick, not the policy's lagging 30 s histogram). Counted from the first tick after the step whose P99 is
above the target: the ticks until one is back under it (0 when no tick after the step is above), the
overshoots: excursions above the target after that first recovery, and whether the run ends settled
(governor_dev.scoring.reaction, shared with the real engine's `governor demo --reaction`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from governor_dev.scoring import meets_reaction_goal, reaction
from numpy.typing import NDArray

from governor_twin.matrix.profiles import Targets
from governor_twin.policies import Policy
from governor_twin.profile import EngineProfile
from governor_twin.scenarios import Phase, Scenario, Slo
from governor_twin.sim import RunResult, run


@dataclass(frozen=True)
class Reaction:
    policy: str
    step_s: float
    violated: bool
    ticks_to_recover: int | None  # None: never back under the target after the step
    overshoots: int
    settled: bool  # no excursion longer than the goal's recovery still open at the end
    tick_p99_ms: tuple[float, ...]  # per tick from the step on (NaN: nothing finished)

    @property
    def meets_goal(self) -> bool:
        return meets_reaction_goal(self.ticks_to_recover, self.overshoots, self.settled)


def tick_p99(res: RunResult, tick_s: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(tick end times, exact TPOT P99 of requests finishing in each tick; NaN where none did)."""
    ends = np.arange(tick_s, res.scenario.duration_s + 1e-9, tick_s, dtype=np.float64)
    fin = np.where(res.done, res.finish, np.inf)
    tpot = res.tpot
    out = np.full(ends.size, np.nan, dtype=np.float64)
    for i, end in enumerate(ends):
        sel = (fin > end - tick_s) & (fin <= end)
        if sel.any():
            out[i] = float(np.percentile(tpot[sel], 99))
    return ends, out


def step_scenario(profile: EngineProfile, capacity: float, targets: Targets, phase_s: float) -> Scenario:
    low = {"kind": "poisson", "rate_rps": 0.47 * capacity}
    high = {"kind": "poisson", "rate_rps": 0.94 * capacity}
    return Scenario(
        f"{profile.name}/reaction",
        "2x load step (0.47 -> 0.94 x capacity)",
        profile.name,
        Slo(target_s=targets.medium_s, ttft_s=targets.ttft_s),
        (Phase("before", phase_s, low), Phase("after 2x", phase_s, high)),
    )


def react(scenario: Scenario, profile: EngineProfile, policy: Policy, seed: int = 0) -> Reaction:
    res = run(scenario, policy, seed=seed, profile=profile)
    step = scenario.phases[0].duration_s
    ends, p99 = tick_p99(res, policy.tick_s)
    after = p99[ends > step]
    violated, ticks, over, settled = reaction([float(v) for v in after], scenario.slo.target_s)
    return Reaction(policy.name, step, violated, ticks, over, settled, tuple(float(v) * 1e3 for v in after))


def react_all(
    scenario: Scenario, profile: EngineProfile, policies: list[Policy], seed: int = 0
) -> list[Reaction]:
    return [react(scenario, profile, p, seed) for p in policies]
