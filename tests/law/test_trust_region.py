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


def _climb(law: str, cfg: LawConfig, ticks: int) -> list[Decision]:
    """P99 = 6 ms + 0.05 ms x batch (18.8 ms at 256) against a 25 ms target, 40 requests waiting: the
    ceiling is right."""
    rng = random.Random(7)
    state, out = LawState(cap=32), []
    for i in range(ticks):
        batch = float(state.cap if i % 4 else max(1, state.cap - 12))  # the load dips below the cap
        p99 = (0.006 + 0.00005 * batch) * rng.uniform(0.98, 1.02)
        obs = Observation(
            now_s=cfg.tick_s * (i + 1),
            p99_s=p99,
            running=batch,
            waiting=40.0,
            request_rate=30.0,
            tpot_mean_s=0.7 * p99,
        )
        out.append(LAWS[law](state, obs, cfg))
        state = out[-1].state
    return out


def _paced(decisions: list[Decision], cfg: LawConfig) -> list[tuple[float, int, int]]:
    """Every raise for headroom past TRUST x the batch held through a whole window comes a window or more
    after the raise before it (the queue's raises are not paced). Returns those raises: (time, from, to)."""
    last, past = None, []
    for i, d in enumerate(decisions):
        if d.cap <= d.previous_cap:
            continue
        now = cfg.tick_s * (i + 1)
        if d.reason != "queue-relief" and d.cap > math.floor(TRUST * d.state.held_support):
            assert last is None or now - last >= cfg.window_s, [(x.cap, x.reason) for x in decisions]
            past.append((now, d.previous_cap, d.cap))
        last = now
    return past


def test_the_cap_still_climbs_to_a_high_cap_when_the_line_holds_there() -> None:
    """With a per-token SLO alone, a raise past the batches the line was measured at over a whole window
    waits a window; the cap still reaches the ceiling. With a TTFT bound nothing is paced (a raise buys
    the queue's goodput there), and the raises go as fast as the table's."""
    cfg = LawConfig(slo_target_s=0.025, ceiling=256, tick_s=5.0, window_s=15.0)
    levers = _climb("levers", cfg, 45)
    assert levers[-1].cap == cfg.ceiling, [d.cap for d in levers]
    assert any(d.reason.startswith("model-") and d.cap > d.previous_cap for d in levers)
    _within_evidence(levers, cfg)
    assert _paced(levers, cfg)

    def ticks_to(decisions: list[Decision]) -> int:
        return next(i for i, d in enumerate(decisions) if d.cap >= 200)

    late = cfg.model_copy(update={"ttft_bound_s": 1.0})
    rules = _climb("rules", late, 30)
    assert ticks_to(_climb("levers", late, 30)) <= ticks_to(rules) < ticks_to(levers)


def test_a_raise_past_the_evidence_waits_for_the_window_to_see_the_last_one() -> None:
    """The H200 20 ms run b's shape: a falling line fitted in the light phase (the lever reads inert), then a
    load that fills the cap while the 10-s window's P99 still reads the light phase. Unpaced, the table's
    x1.15 raises compounded 64 -> 73 -> 83 -> 95 in four seconds; past TRUST x the batch held through a
    whole window a raise now waits a window for the last one to show in the P99."""
    cfg = LawConfig(slo_target_s=0.020, ceiling=256, tick_s=2.0, window_s=10.0, cooldown_s=4.0)
    rng = random.Random(5)
    state, decisions = LawState(cap=64), []
    quiet = [9.0, 12.0, 7.0, 15.0, 10.0, 18.0, 8.0, 13.0, 11.0, 16.0, 9.0, 14.0]
    for i in range(len(quiet) + 12):
        full = i >= len(quiet)
        obs = Observation(
            now_s=2.0 * (i + 1),
            # light: a line falling with the batch (the lever reads inert); full: the window lags the raises
            p99_s=(0.0088 if full else 0.0095 - 0.00003 * quiet[i]) + rng.uniform(-5e-5, 5e-5),
            running=float(state.cap) if full else quiet[i],
            waiting=30.0 if full else 0.0,
            request_rate=20.0,
            tpot_mean_s=0.0065,
        )
        decisions.append(LAWS["levers"](state, obs, cfg))
        state = decisions[-1].state
    assert decisions[len(quiet)].state.verdict == "lever-inert"  # run b's verdict as the load came
    assert _paced(decisions, cfg)[0][1:] == (64, 73)
    assert max(d.cap for d in decisions[: len(quiet) + 4]) == 73  # a window at 73 before what it held vouches
    assert decisions[-1].cap > 95, [(d.cap, d.reason) for d in decisions]  # it climbs on what it measured
    assert any(d.reason == "raise-paced" for d in decisions)
