"""The reaction benchmark on the real engine (`governor demo --reaction`): a 2x load step, judged on the
exact per-token P99 of the requests finishing in each tick after it, for every pass side by side."""

from __future__ import annotations

import math

import pytest
from governor_dev.demo import PassResult, reaction_plan, step_reaction
from governor_dev.demoview import reaction_lines
from governor_dev.loadgen import RequestRecord

from tests.support.engine import Engine
from tests.support.fixtures_engine import RunDemo


def finishing(at: float, tpot_s: float, phase: str = "after 2x") -> RequestRecord:
    """A request that finishes at `at` (seconds into the pass) with `tpot_s` per token."""
    return RequestRecord(phase, at - 1.0, 32, 64, ttft_s=0.05, tpot_s=tpot_s, e2e_s=1.0)


def test_each_tick_after_the_step_is_judged_on_the_requests_that_finished_in_it() -> None:
    plan = reaction_plan(short=True)  # 10 s before the step, 20 s after it, 1 s ticks
    step = plan.phases[0].duration_s
    slo = 0.010
    # Ticks after the step: fine, two above the SLO, back under, nothing finished, above once more, fine...
    per_tick = [0.008, 0.012, 0.015, 0.009, None, 0.011, 0.008] + [0.008] * 13
    records = [finishing(step - 0.5, 0.050, "before")]  # before the step: not judged
    for i, tpot in enumerate(per_tick):
        if tpot is not None:
            records += [finishing(step + i + 0.2, 0.001), finishing(step + i + 0.7, tpot)]
    result = PassResult("governed", adaptive=True, records=records)

    r = step_reaction(result, plan, slo)

    assert len(r.tick_p99_s) == 20
    assert r.tick_p99_s[:4] == (0.008, 0.012, 0.015, 0.009) and math.isnan(r.tick_p99_s[4])
    assert r.violated and r.ticks_to_recover == 2 and r.overshoots == 1 and r.settled
    assert r.meets_goal
    assert r.within == pytest.approx(16 / 19)
    late = step_reaction(PassResult("static before", False, records=[finishing(step + 0.5, 0.02)]), plan, slo)
    assert late.violated and late.ticks_to_recover is None and not late.meets_goal
    lines = reaction_lines([late, r], slo, plan.tick_s)
    assert "never back under" in lines[1] and "back under in 2 tick(s)" in lines[2]
    # Back at once, then above to the end for longer than the goal's recovery: one excursion by count, but
    # never answered.
    open_ended = [finishing(step + 0.5 + i, 0.005 if i == 1 else 0.02) for i in range(6)]
    unanswered = step_reaction(PassResult("static before", False, records=open_ended), plan, slo)
    assert (unanswered.ticks_to_recover, unanswered.overshoots, unanswered.settled) == (1, 1, False)
    assert not unanswered.meets_goal
    told = reaction_lines([unanswered], slo, plan.tick_s)[1]
    assert "the last above for more than 3 ticks at the end" in told, told
    silent = step_reaction(PassResult("governed", True, records=[]), plan, slo)
    assert "no request finished after the step" in reaction_lines([silent], slo, plan.tick_s)[1]
    calm = step_reaction(PassResult("static after", False, records=[finishing(step + 0.5, 0.005)]), plan, slo)
    assert "does not test the lever" in reaction_lines([calm], slo, plan.tick_s)[-1]


@pytest.mark.vllm
def test_the_reaction_benchmark_runs_on_the_real_engine_and_judges_every_pass(
    engine_limits: Engine, run_demo: RunDemo
) -> None:
    engine = engine_limits
    # The SLO (0.5 ms) is below what this engine gives at any batch: the static passes miss it after the
    # step, and the law must move the cap inside the engine.
    summary = run_demo("--reaction")
    plan = reaction_plan(short=True)
    reaction = summary["reaction"]
    assert reaction["step_s"] == plan.phases[0].duration_s and reaction["tick_s"] == plan.tick_s
    passes = {p["label"]: p for p in reaction["passes"]}
    assert set(passes) == {"static before", "governed", "static after"}
    ticks = round(plan.phases[1].duration_s / plan.tick_s)
    for label, p in passes.items():
        assert len(p["tick_p99_s"]) == ticks, label
        assert any(math.isfinite(v) for v in p["tick_p99_s"]), f"requests finished after the step ({label})"
        assert p["violated"], f"0.5 ms is missed after the step ({label})"
        assert p["meets_goal"] == (p["ticks_to_recover"] is not None and p["ticks_to_recover"] <= 3
                                   and p["overshoots"] <= 1 and p["settled"])  # fmt: skip
        assert summary["scores"][label]["all"]["failed"] == 0, "no request may fail while the cap moves"
    assert set(summary["caps"]["static before"]) == {engine.ceiling}
    assert min(summary["caps"]["governed"]) < engine.ceiling, "the law moved the cap inside the engine"
