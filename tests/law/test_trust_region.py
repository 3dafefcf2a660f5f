"""The levers law's trust region (issue 12): a raise planned from the fitted line goes at most to TRUST x the
largest batch the line was measured at; past it the law takes the rule table's bounded step, and the cap
still climbs to a high cap over several ticks when the line holds there. Synthetic readings with a known
line."""

from __future__ import annotations

import math
import random
from itertools import pairwise

from governor.core.law import LAWS, Decision, LawConfig, LawState, Observation
from governor.core.law.computed import TRUST
from governor.core.law.steps import raise_cap


def _within_evidence(decisions: list[Decision], cfg: LawConfig) -> None:
    """Every raise is inside the trust region of the fit it was planned from, or the table's own step."""
    for before, after in pairwise(decisions):
        if after.cap <= before.cap:
            continue
        fit = after.state.quantile_fit
        trusted = math.floor(TRUST * fit.support) if fit is not None else 0
        assert after.cap <= max(trusted, raise_cap(before.cap, cfg.ceiling, cfg)), (before.cap, after)


def test_a_line_fitted_on_small_batches_is_not_extrapolated_into_a_big_raise() -> None:
    """The H200 20 ms run's shape: at 8 req/s the batch wandered 3..21 with the P99 on one histogram bucket
    (7.94 ms: a flat line), then the 40 req/s burst filled the cap. A raise on that line's word went
    64 -> 128 ("holds up to cap 256") and missed; within the evidence it is the table's step."""
    cfg = LawConfig(slo_target_s=0.020, ceiling=256, tick_s=2.0, window_s=10.0, cooldown_s=4.0)
    rng = random.Random(3)
    state, decisions = LawState(cap=64), []
    quiet = [10, 10, 5, 3, 4, 8, 4, 10, 6, 7, 21, 4, 8, 6, 11]
    burst = [(39.0, 0.0, 0.01133), (63.0, 5.0, 0.01493), (63.0, 16.0, 0.0165), (64.0, 20.0, 0.0170)]
    readings = [(float(b), 0.0, 0.00794 + rng.uniform(-3e-5, 3e-5), 8.0) for b in quiet]
    readings += [(b, w, p, 40.0) for b, w, p in burst]
    for i, (batch, waiting, p99, rate) in enumerate(readings):
        obs = Observation(
            now_s=2.0 * (i + 1),
            p99_s=p99,
            running=min(batch, state.cap),
            waiting=waiting,
            request_rate=rate,
            tpot_mean_s=0.73 * p99,
        )
        decisions.append(LAWS["levers"](state, obs, cfg))
        state = decisions[-1].state
    fit = decisions[len(quiet) - 1].state.quantile_fit
    assert fit is not None and fit.support == 21.0  # the line was measured at batches up to 21
    burst_caps = [d.cap for d in decisions[len(quiet) :]]
    assert max(burst_caps) < 96, [(d.cap, d.reason, d.detail) for d in decisions[len(quiet) :]]
    assert any(d.cap > 64 for d in decisions), "the table's exploratory raise still happens"
    _within_evidence(decisions, cfg)


def test_the_cap_still_climbs_to_a_high_cap_when_the_line_holds_there() -> None:
    """P99 = 6 ms + 0.05 ms x batch (18.8 ms at 256) against a 25 ms target: the ceiling is right. The model
    moves the cap in raises of TRUST x what it measured, faster than the table's x1.15 steps."""
    cfg = LawConfig(slo_target_s=0.025, ceiling=256, tick_s=5.0, window_s=15.0)

    def climb(law: str) -> list[Decision]:
        rng = random.Random(7)
        state, out = LawState(cap=32), []
        for i in range(30):
            batch = float(state.cap if i % 4 else max(1, state.cap - 12))  # the load dips below the cap
            p99 = (0.006 + 0.00005 * batch) * rng.uniform(0.98, 1.02)
            obs = Observation(
                now_s=5.0 * (i + 1),
                p99_s=p99,
                running=batch,
                waiting=40.0,
                request_rate=30.0,
                tpot_mean_s=0.7 * p99,
            )
            out.append(LAWS[law](state, obs, cfg))
            state = out[-1].state
        return out

    levers, rules = climb("levers"), climb("rules")
    assert levers[-1].cap == cfg.ceiling, [d.cap for d in levers]
    assert any(d.reason.startswith("model-") and d.cap > d.previous_cap for d in levers)
    _within_evidence(levers, cfg)

    def ticks_to(decisions: list[Decision]) -> int:
        return next(i for i, d in enumerate(decisions) if d.cap >= 200)

    assert ticks_to(levers) < ticks_to(rules), ([d.cap for d in levers], [d.cap for d in rules])
