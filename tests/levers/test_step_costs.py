"""The step-cost fit: what one engine step costs, learned from the runtime's step counters."""

from __future__ import annotations

import random

import pytest
from governor.core.law import LawState, computed_decide
from governor.core.levers.steps import StepCostFit, StepRates
from governor_twin.matrix.profiles import derive_targets, get_profile, saturated_tpot_p99
from governor_twin.matrix.run import _gpu, new_law_policy, scenarios
from governor_twin.scenarios import _shared_root
from governor_twin.sim import run

TRUE = (0.006, 0.00015, 2e-7, 3e-5)  # base, per sequence, per context token, per prefill token (seconds)


def interval(
    rng: random.Random, costs: tuple[float, ...] = TRUE, batch: float | None = None, prefill: bool = True
) -> StepRates:
    """A few seconds of an engine: a batch, its context and some prefill per step, busy for part of it."""
    running = batch if batch is not None else rng.uniform(2, 96)
    context = running * rng.uniform(100, 3000)
    prefill_tokens = rng.choice((0, 0, 64, 512, 2048)) if prefill else 0
    step = costs[0] + costs[1] * running + costs[2] * context + costs[3] * prefill_tokens
    steps = rng.uniform(0.2, 1.0) / step
    return StepRates(steps * step, steps, steps * running, steps * context, steps * prefill_tokens)


def fitted(samples: list[StepRates], fit: StepCostFit | None = None) -> StepCostFit:
    fit = fit or StepCostFit()
    for sample in samples:
        fit = fit.update(sample)
    return fit


def test_recovers_the_costs_from_varied_load() -> None:
    rng = random.Random(0)
    costs = fitted([interval(rng) for _ in range(40)]).costs()
    got = (costs.base_s, costs.per_sequence_s, costs.per_context_token_s, costs.per_prefill_token_s)
    assert got == pytest.approx(TRUE, rel=1e-6)
    assert costs.relative_error is not None and costs.relative_error < 1e-6
    assert costs.step_s(32, 32 * 1000, 0) == pytest.approx(0.006 + 32 * 0.00015 + 32000 * 2e-7)
    assert (
        costs.describe()
        == "a step 29.2 ms on average: 6 ms + 0.15 ms/seq + 0.2 ms/1k context + 30 ms/1k prefill"
    )


def test_noise_stays_within_the_standard_errors() -> None:
    rng = random.Random(1)
    noisy = [
        s._replace(seconds=s.seconds * (1 + rng.gauss(0, 0.03))) for s in (interval(rng) for _ in range(120))
    ]
    costs = fitted(noisy).costs()
    got = (costs.base_s, costs.per_sequence_s, costs.per_context_token_s, costs.per_prefill_token_s)
    for value, true, err in zip(got, TRUE, costs.stderr_s, strict=True):
        assert value is not None and err is not None
        assert abs(value - true) < 4 * err, (value, true, err)
    assert costs.relative_error is not None and 0.01 < costs.relative_error < 0.06


def test_a_part_the_load_never_showed_is_unknown_not_zero() -> None:
    rng = random.Random(2)
    costs = fitted([interval(rng, prefill=False) for _ in range(30)]).costs()
    assert costs.per_prefill_token_s is None
    assert costs.base_s == pytest.approx(TRUE[0], rel=1e-6)
    assert costs.step_s(8, 8000, 0) is not None
    assert costs.step_s(8, 8000, 256) is None  # needs the part nobody has seen
    assert "prefill" not in costs.describe()


def test_one_batch_alone_cannot_tell_the_fixed_part_from_the_per_sequence_part() -> None:
    """Steps and sequences in one ratio: neither part is told apart, and the fit claims neither (a step at
    another batch is not predicted); the context and prefill parts, which varied, are found, and the mean
    step is known."""
    rng = random.Random(3)
    samples = [interval(rng, batch=16) for _ in range(30)]
    costs = fitted(samples).costs()
    assert (costs.base_s, costs.per_sequence_s) == (None, None)
    assert (costs.per_context_token_s, costs.per_prefill_token_s) == pytest.approx(TRUE[2:], rel=1e-6)
    assert costs.step_s(16, 16 * 1500, 512) is None
    mean = sum(s.seconds for s in samples) / sum(s.steps for s in samples)
    assert costs.mean_step_s == pytest.approx(mean, rel=0.02)  # the newest weigh a little more
    assert costs.describe().startswith(f"a step {costs.mean_step_s * 1e3:.3g} ms on average: ")


def test_never_negative_where_a_part_costs_nothing() -> None:
    rng = random.Random(4)
    free_context = (0.006, 0.00015, 0.0, 3e-5)
    noisy = [
        s._replace(seconds=s.seconds * (1 + rng.gauss(0, 0.05)))
        for s in (interval(rng, free_context) for _ in range(80))
    ]
    costs = fitted(noisy).costs()
    parts = (costs.base_s, costs.per_sequence_s, costs.per_context_token_s, costs.per_prefill_token_s)
    assert all(p is not None and p >= 0 for p in parts)


def test_forgets_an_old_regime() -> None:
    """The engine slows by half (another tenant on the node): the fit follows within a few hundred ticks."""
    rng = random.Random(5)
    fit = fitted([interval(rng) for _ in range(200)])
    slower = tuple(1.5 * c for c in TRUE)
    costs = fitted([interval(rng, slower) for _ in range(600)], fit).costs()
    assert costs.base_s == pytest.approx(slower[0], rel=0.05)
    assert costs.per_prefill_token_s == pytest.approx(slower[3], rel=0.05)


def test_idle_unknown_and_broken_ticks_change_nothing() -> None:
    fit = fitted([interval(random.Random(6)) for _ in range(10)])
    for sample in (
        None,
        StepRates(0.0, 0.0, 0.0, 0.0, 0.0),
        StepRates(float("nan"), 1, 1, 1, 1),
        StepRates(-1, 1, 1, 1, 1),
    ):
        assert fit.update(sample) == fit
    assert StepCostFit().costs().describe() == ""


def test_kept_in_the_laws_state_through_json() -> None:
    fit = fitted([interval(random.Random(7)) for _ in range(10)])
    state = LawState(cap=8, step_fit=fit)
    back = LawState.model_validate_json(state.model_dump_json())
    assert back.step_fit == fit and back.step_fit.costs() == fit.costs()


@pytest.mark.parametrize("name", ["h200_llama8b", "h200_llama70b_derived", "cpu_tiny_llama"])
def test_the_levers_law_learns_the_twins_step_costs(name: str) -> None:
    """The twin keeps the runtime's counters; through its observer the law's fit finds the profile's own
    step costs: exactly on the GPU profiles, within a few percent where the CPU profile's stalls add noise."""
    profile = get_profile(name)
    targets = derive_targets(profile, saturated_tpot_p99(get_profile("h200_llama8b"), 1))
    plan = scenarios([(profile, targets)], ["azure"], 150.0, str(_shared_root()), ["medium"], 0)[0]
    _, tpot, ttft = plan.judge[0]
    policy = new_law_policy(computed_decide, tpot, ttft, profile.ceiling, _gpu(profile))
    run(plan.judged(tpot, ttft), policy, seed=0, profile=profile)
    assert policy.state is not None and policy.state.step_fit is not None
    costs = policy.state.step_fit.costs()
    step = profile.step
    expected = (step.base_s, step.per_seq_s, step.per_kv_token_s, step.per_prefill_token_s)
    got = (costs.base_s, costs.per_sequence_s, costs.per_context_token_s, costs.per_prefill_token_s)
    if step.stall_rate_per_s == 0:
        assert got == pytest.approx(expected, rel=1e-6)
    else:
        assert costs.base_s == pytest.approx(step.base_s, rel=0.05)
        assert costs.per_sequence_s == pytest.approx(step.per_seq_s, rel=0.15)
        assert costs.per_prefill_token_s == pytest.approx(step.per_prefill_token_s, rel=0.1)
