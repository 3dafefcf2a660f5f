"""The twin's engine model: the cap binds, the budget chunks prefills, KV exhaustion preempts, and taking
many steps at once is exact."""

from __future__ import annotations

import itertools

import numpy as np
from governor_twin.engine import DONE, REJECTED, Engine
from governor_twin.profile import EngineProfile, load_profile, with_limits

H200 = load_profile("h200_llama8b")


def test_cap_binds_running_and_raising_it_admits_more() -> None:
    engine = Engine(H200, cap=4)
    for _ in range(20):
        engine.submit(0.0, 512, 200)
    engine.advance(0.5)
    assert engine.num_running == 4
    assert engine.num_waiting == 16
    engine.set_cap(12)
    engine.advance(0.7)  # the next step admits 8 prompts of 512 tokens: about 0.1 s of prefill
    assert engine.num_running == 12
    assert engine.num_waiting == 8


def test_lowering_the_cap_drains_without_preemption() -> None:
    engine = Engine(H200, cap=16)
    for i in range(16):
        engine.submit(0.0, 256, 50 + 10 * i)  # different lengths: they finish one by one
    for _ in range(16):
        engine.submit(0.0, 256, 100)
    engine.advance(0.3)
    assert engine.num_running == 16
    engine.set_cap(4)
    seen = []
    for k in range(1, 200):
        engine.advance(0.3 + 0.02 * k)
        seen.append(engine.num_running)
    assert engine.preemptions == 0
    assert seen[0] > 4  # nobody is evicted: the cap only stops admissions
    assert all(b <= a or b <= 4 for a, b in itertools.pairwise(seen))  # never refills above the cap
    assert seen[-1] <= 4


def test_token_budget_chunks_long_prompts() -> None:
    engine = Engine(with_limits(H200, token_budget=256))
    rid = engine.submit(0.0, 1000, 4)
    engine.advance(10.0)
    assert engine.state[rid] == DONE
    # 1000 prompt tokens at 256 per step: 4 prefill steps before the first token, then 3 decode steps
    assert engine.stats.steps == 4 + 3


def test_kv_exhaustion_preempts_and_everyone_still_finishes() -> None:
    small = with_limits(H200, num_blocks=40)  # 640 tokens of KV for the whole engine
    engine = Engine(small)
    rids = [engine.submit(0.0, 64, 200) for _ in range(4)]  # each grows to 264 tokens: 4 x 17 blocks > 40
    peak = 0.0
    for k in range(1, 400):
        engine.advance(0.02 * k)
        peak = max(peak, engine.kv_usage)
    assert engine.preemptions > 0
    assert all(engine.state[r] == DONE for r in rids)
    assert peak <= 1.0
    assert engine.free_blocks == small.num_blocks  # every block came back


def test_prompts_over_max_model_len_are_rejected() -> None:
    engine = Engine(H200)
    rid = engine.submit(0.0, 4000, 200)
    ok = engine.submit(0.0, 100, 10)
    engine.advance(5.0)
    assert engine.state[rid] == REJECTED
    assert engine.rejected == 1
    assert engine.state[ok] == DONE


def test_multi_step_jumps_match_step_by_step() -> None:
    """Taking many decode steps in closed form gives the same times as advancing a millisecond at a time."""
    rng = np.random.default_rng(3)
    n = 300
    sent = np.sort(rng.uniform(0, 10, n))
    prompt = rng.integers(64, 1024, n)
    output = rng.integers(16, 300, n)
    coarse, fine = Engine(H200, cap=32), Engine(H200, cap=32)
    for e in (coarse, fine):
        e.submit_many(sent, prompt, output)
    coarse.advance(60.0)
    for k in range(1, 60_001):
        fine.advance(k * 0.001)
    assert coarse.stats.steps == fine.stats.steps
    np.testing.assert_allclose(coarse.finish[:n], fine.finish[:n], rtol=1e-9)
    np.testing.assert_allclose(coarse.first_token[:n], fine.first_token[:n], rtol=1e-9)


def test_step_time_fit_reproduces_calibration_step_rows(calibration_steps: list[dict[str, str]]) -> None:
    step = H200.step
    for row in calibration_steps:
        batch, ctx, measured = int(row["batch"]), int(row["ctx_tokens"]), float(row["ms_mean"]) / 1e3
        if row["kind"] == "decode":
            # the window's context is ctx plus about 1..50 generated tokens (README): mean + 24
            model = step.step_s(batch, batch * (ctx + 24), 0)
            assert abs(model - measured) / measured < 0.06, row
        elif int(row["tokens_in_step"]) >= 1024:
            model = step.step_s(batch, 0, int(row["tokens_in_step"]))
            assert abs(model - measured) / measured < 0.06, row


def test_profiles_round_trip() -> None:
    for name in ("h200_llama8b", "cpu_tiny_llama"):
        profile = load_profile(name)
        assert EngineProfile.from_json(profile.to_json()) == profile
        assert profile.provenance
