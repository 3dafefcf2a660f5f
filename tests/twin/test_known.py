"""governor_twin.known: the benchmark's known-engine policy replays each candidate cap on the engine model and
holds the one that keeps the most requests within both bounds; the cap it decides is the cap the engine
runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from governor.core.law import Observation
from governor_twin.engine import Engine
from governor_twin.known import KnownEnginePolicy, SeenEnginePolicy, candidate_caps
from governor_twin.matrix.goodput import score
from governor_twin.matrix.profiles import derive_targets, get_profile
from governor_twin.matrix.run import scenarios
from governor_twin.policies import StaticPolicy
from governor_twin.scenarios import _shared_root
from governor_twin.sim import run


def test_the_candidate_caps_span_the_range_in_steps() -> None:
    caps = candidate_caps(1, 256, 1.4)
    assert caps[0] == 1 and caps[-1] == 256
    assert all(b > a for a, b in itertools.pairwise(caps))
    assert all(b <= max(a + 1, round(a * 1.4)) for a, b in itertools.pairwise(caps))


def test_the_policy_refuses_settings_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="ratio"):
        KnownEnginePolicy(get_profile("h200_llama8b"), 0.05, 2.5, ratio=1.0)
    with pytest.raises(ValueError, match="horizon"):
        KnownEnginePolicy(get_profile("h200_llama8b"), 0.05, 2.5, horizon_s=0.0)


def test_the_policy_says_it_needs_its_engine() -> None:
    policy = KnownEnginePolicy(get_profile("h200_llama8b"), 0.05, 2.5)
    with pytest.raises(RuntimeError, match="watch"):
        policy.decide(Observation(now_s=30.0))


@pytest.mark.parametrize(("policy", "from_s"), [(KnownEnginePolicy, 30.0), (SeenEnginePolicy, 35.0)])
def test_on_long_prompts_the_replay_holds_a_small_cap_and_the_engine_runs_it(
    policy: type[KnownEnginePolicy], from_s: float
) -> None:
    # The matrix's 8B prefill-heavy load (2,800-token prompts, 8-32 output tokens) at its loose target: one
    # minute of it. Static 8 keeps nearly every request within both bounds there and the ceiling a third
    # fewer: the replay must find a small cap from the first window on, told the engine, or a tick later
    # fitting it on the step counters (a flat step at the mean until the batch has moved) and reading the
    # lengths from the token histograms.
    profile = get_profile("h200_llama8b")
    targets = derive_targets(profile)
    plan = scenarios([(profile, targets)], ["prefill_heavy"], 60.0, str(_shared_root()), ["loose"], 0)[0]
    _, tpot_s, ttft_s = plan.judge[0]
    scenario = plan.judged(tpot_s, ttft_s)
    known = run(scenario, policy(profile, tpot_s, ttft_s), seed=0, profile=profile)
    ticks = list(zip(known.tick_t, known.tick_cap, known.reasons, strict=True))
    measured = [int(c) for t, c, r in ticks if r.startswith("replay") and t >= from_s]
    assert measured and max(measured) <= 16, ticks
    ceiling = run(scenario, StaticPolicy(profile.ceiling), seed=0, profile=profile)
    assert score(known, tpot_s, ttft_s).goodput_rps > score(ceiling, tpot_s, ttft_s).goodput_rps


def test_the_seen_engine_holds_until_it_has_seen_a_step() -> None:
    policy = SeenEnginePolicy(get_profile("h200_llama8b"), 0.05, 2.5)
    profile = get_profile("h200_llama8b")
    engine = Engine(profile, cap=64)
    engine.submit_many(np.linspace(0, 20, 200), np.full(200, 500), np.full(200, 50))
    engine.advance(30.0)
    policy.watch(engine)
    policy.start(256)
    assert (
        policy.decide(Observation(now_s=30.0, waiting=0.0)) == 256
    )  # no step counters read: no engine model
    assert policy.last_reason.startswith("no load or no step measured")
