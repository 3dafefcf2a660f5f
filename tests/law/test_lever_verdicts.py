"""The levers law's two verdicts on the cap, and how status and Events carry them (issue 12, item 3): when the
fitted line says the cap does not move the per-token signal it stops cutting and asks for replicas ("no engine
lever reaches the SLO"); when one sequence alone is above the target it keeps the throughput and asks nothing
("infeasible on this hardware"). Synthetic readings: the batch varies as load does, the P99 follows a known
line, so what the law must conclude is known."""

from __future__ import annotations

import itertools
import random

from governor.core import status as status_builders
from governor.core.law import LAWS, Decision, LawConfig, LawState, Observation

from tests.support.status import loop_patch

TICK = 5.0


def drive(cfg: LawConfig, p99_of: object, ticks: int, start_cap: int = 64) -> list[Decision]:
    """The batch wanders up and down over 1..60 (load, not the cap, moves it here), the P99 is
    p99_of(batch) ± 3 %."""
    rng = random.Random(5)
    state, out = LawState(cap=start_cap), []
    for i in range(ticks):
        batch = float(min(state.cap, 1 + abs((i * 4) % 118 - 59)))
        p99 = p99_of(batch) * rng.uniform(0.97, 1.03)  # type: ignore[operator]
        obs = Observation(
            now_s=i * TICK,
            p99_s=p99,
            running=batch,
            waiting=3.0,
            request_rate=10.0,
            tpot_mean_s=0.7 * p99,
            ttft_p99_s=0.5,
        )
        d = LAWS["levers"](state, obs, cfg)
        out.append(d)
        state = d.state
    return out


def test_a_cap_that_does_not_move_the_signal_is_not_walked_down() -> None:
    cfg = LawConfig(slo_target_s=0.020, ceiling=64, ttft_bound_s=2.0, tick_s=TICK, window_s=15.0)
    decisions = drive(cfg, lambda batch: 0.040, ticks=120)  # 40 ms whatever the batch: prefill stalls
    reasons = [d.reason for d in decisions]
    assert "lever-inert" in reasons, reasons
    first = reasons.index("lever-inert")
    after = decisions[first:]
    assert all(b.cap >= a.cap for a, b in itertools.pairwise(after)), [d.cap for d in after]
    assert min(d.cap for d in decisions) > cfg.min_cap, [d.cap for d in decisions]  # not walked to the floor
    inert = [d for d in after if d.reason == "lever-inert"]
    assert all("no engine lever reaches the SLO: replicas needed" in d.detail for d in inert)
    assert any(d.replica_wish == 1 for d in after)


def test_a_target_below_one_sequence_alone_keeps_the_throughput_and_asks_no_replica() -> None:
    cfg = LawConfig(slo_target_s=0.002, ceiling=64, ttft_bound_s=2.0, tick_s=TICK, window_s=15.0)
    decisions = drive(cfg, lambda batch: 0.005 + 0.0002 * batch, ticks=120)  # 5.2 ms at one sequence
    reasons = [d.reason for d in decisions]
    assert "infeasible" in reasons, reasons
    verdicts = [d for d in decisions if d.reason == "infeasible"]
    assert all("infeasible on this hardware" in d.detail and d.replica_wish == 0 for d in verdicts)
    assert decisions[-1].cap == cfg.ceiling, [d.cap for d in decisions]


def test_status_and_events_carry_the_verdict_and_its_end() -> None:
    cfg = LawConfig(slo_target_s=0.020, ceiling=64, ttft_bound_s=2.0, tick_s=TICK, window_s=15.0)
    decisions = drive(cfg, lambda batch: 0.040, ticks=120)
    inert = next(d for d in decisions if d.reason == "lever-inert")
    other = next(d for d in decisions if d.reason not in status_builders.LEVER_VERDICTS)

    def step(live: dict[str, object], d: Decision) -> dict[str, object]:
        return loop_patch(d, cfg, ceiling=64, observed_p99_s=0.04, live=live)

    before: dict[str, object] = {"metadata": {"generation": 1}, "status": {}}
    assert status_builders.condition_flip({}, step(before, other), "CapEffective") is None  # no verdict yet
    verdict = step(before, inert)
    flip = status_builders.condition_flip({}, verdict, "CapEffective")
    assert flip is not None and flip["status"] == "False" and flip["reason"] == "NoEngineLever"
    assert "replicas needed" in flip["message"]
    live = {"metadata": {"generation": 1}, "status": verdict}
    assert status_builders.condition_flip(verdict, step(live, inert), "CapEffective") is None  # no repeat
    back = step(live, other)
    flip = status_builders.condition_flip(verdict, back, "CapEffective")
    assert flip is not None and flip["status"] == "True" and flip["reason"] == "CapGoverns"


def test_a_verdict_stands_while_the_fits_relearn() -> None:
    """After "infeasible" the cap goes back up; the batch it reaches is a new regime and the fits are
    unconfident for a while. The table would cut again (the P99 is far above the target): the verdict
    stands, in the decision and in status (real CPU engine: tests/loop/test_levers_e2e.py)."""
    cfg = LawConfig(slo_target_s=0.002, ceiling=64, ttft_bound_s=2.0, tick_s=TICK, window_s=15.0)
    decisions = drive(cfg, lambda batch: 0.005 + 0.0002 * batch, ticks=120)
    last = next(d for d in reversed(decisions) if d.reason == "infeasible")
    relearning = last.state.model_copy(update={"quantile_fit": None, "mean_fit": None})
    assert relearning.verdict == "infeasible"
    cut = LAWS["rules"](relearning, Observation(now_s=1e4, p99_s=0.02, running=64.0, waiting=3.0), cfg)
    assert cut.cap < relearning.cap  # what the table alone would do
    d = LAWS["levers"](relearning, Observation(now_s=1e4, p99_s=0.02, running=64.0, waiting=3.0), cfg)
    assert (d.cap, d.reason, d.replica_wish) == (relearning.cap, "infeasible", 0), d.detail

    live = {
        "metadata": {"generation": 1},
        "status": {
            "conditions": [
                {"type": "CapEffective", "status": "False", "reason": "SLOInfeasible", "message": last.detail}
            ]
        },
    }
    quiet = Decision(
        cap=d.cap,
        reason="cooldown",
        detail="cooling down",
        mode="normal",
        replica_wish=0,
        state=d.state,
        previous_cap=d.cap,
    )
    after = loop_patch(quiet, cfg, ceiling=64, observed_p99_s=0.02, live=live)
    assert status_builders.condition_flip(live["status"], after, "CapEffective") is None  # no flap
    kept = next(c for c in after["conditions"] if c["type"] == "CapEffective")
    assert (kept["status"], kept["message"]) == ("False", last.detail)
