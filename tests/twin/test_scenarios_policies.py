"""Scenarios as data, the operator's view of the twin, and the cap policies the benchmark compares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from governor.core.law import Observation
from governor.core.signals import PER_TOKEN_BUCKETS, LatencyKind
from governor_twin.engine import Engine
from governor_twin.observe import Observer, histogram_quantile
from governor_twin.policies import SchedulePolicy, StaticPolicy, StepGuardPolicy, project_law, seed_law
from governor_twin.profile import load_profile
from governor_twin.scenarios import builtin_names, generate, load_scenario, read_trace, trace_scenario
from governor_twin.sim import run

H200 = load_profile("h200_llama8b")


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    edges = np.array([0.1, 0.2, 0.5])
    assert histogram_quantile(0.5, edges, np.array([0.0, 10.0, 0.0, 0.0])) == pytest.approx(0.15)
    assert histogram_quantile(0.99, edges, np.array([0.0, 0.0, 0.0, 5.0])) == 0.5  # +Inf: highest bound
    assert histogram_quantile(0.99, edges, np.zeros(4)) is None


def test_every_builtin_scenario_generates_its_phases() -> None:
    assert {"steady", "bursts", "longtail", "diurnal", "step2x", "azure", "mixed"} <= set(builtin_names())
    steady, _ = generate(load_scenario("steady"), seed=1)
    assert steady.sent_s.size / 600 == pytest.approx(33, rel=0.05)
    work, _resolved = generate(load_scenario("longtail"))
    second = work.phase == 1
    assert np.mean(work.prompt[second] > 2000) == pytest.approx(0.35, abs=0.05)
    assert work.prompt[~second].max() <= 1024
    work, _ = generate(load_scenario("step2x"))
    assert np.sum(work.phase == 1) / np.sum(work.phase == 0) == pytest.approx(2.0, rel=0.1)


def test_any_trace_csv_in_the_azure_format_replays(tmp_path: Path) -> None:
    csv = tmp_path / "mine.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [
        f"2024-01-01 00:{m:02d}:{s:02d}.{k}00000,{200 + 13 * k},{20 + k}"
        for m in range(4)
        for s in range(0, 60, 2)
        for k in range(2)
    ]
    csv.write_text("\n".join(rows) + "\n")
    times, prompts, _ = read_trace(str(csv))
    assert times[-1] == pytest.approx(238.1, abs=1e-3)
    scenario = trace_scenario(str(csv), load=0.5, phase_minutes=2)
    work, resolved = generate(scenario)
    assert len(resolved.phases) == 2
    assert work.sent_s.size == prompts.size
    # time-scaled so that the mean rate is half of the twin's capacity for these lengths
    assert resolved.duration_s < times[-1]


def test_observer_reads_a_windowed_p99_from_buckets() -> None:
    engine = Engine(H200, cap=64)
    rng = np.random.default_rng(0)
    n = 600
    engine.submit_many(np.sort(rng.uniform(0, 30, n)), rng.integers(256, 1024, n), rng.integers(64, 256, n))
    observer = Observer(engine, LatencyKind.TPOT, window_s=30)
    obs = None
    for k in range(1, 7):
        engine.advance(5.0 * k)
        obs = observer.observe(5.0 * k)
    assert obs is not None and obs.p99_s is not None
    fin = engine.finish[:n]
    window = (fin > 0) & (fin <= 30)
    exact = np.percentile(((fin - engine.first_token[:n]) / (engine.max_tokens[:n] - 1))[window], 99)
    bucket = np.searchsorted(np.array(PER_TOKEN_BUCKETS), exact)
    lower = PER_TOKEN_BUCKETS[bucket - 1] if bucket else 0.0
    assert lower <= obs.p99_s <= PER_TOKEN_BUCKETS[bucket]  # same bucket as the exact P99
    assert obs.request_rate == pytest.approx(np.sum((fin > 5) & (fin <= 30)) / 25, rel=0.01)


def test_seed_law_verbatim_never_grows_a_small_cap() -> None:
    seed = seed_law(0.025, 256)
    assert seed.start(256) == 256
    seed.state = seed.state.model_copy(update={"cap": 6}) if seed.state else None
    low = Observation(now_s=5.0, p99_s=0.001, running=6, waiting=50)
    assert seed.decide(low) == 6  # int(6 x 1.15) = 6: the seed's defect, kept verbatim
    high = Observation(now_s=10.0, p99_s=0.1, running=6, waiting=50)
    assert seed.decide(high) == 4


def test_project_law_plugs_in_and_lowers_the_cap_on_a_violation() -> None:
    ours = project_law(0.025, 256)
    start = ours.start(256)
    caps = [
        ours.decide(Observation(now_s=5.0 * k, p99_s=0.05, running=start, waiting=0)) for k in range(1, 6)
    ]
    assert caps[-1] < start
    assert all(1 <= c <= 256 for c in caps)


def test_step_guard_waits_for_its_pending_action() -> None:
    guard = StepGuardPolicy(0.025, window_s=30)
    assert guard.start(256) == 256
    violation = Observation(now_s=5.0, p99_s=0.05, running=256, waiting=0)
    assert guard.decide(violation) == 128
    # still pending: running has not drained to 128 and the window has not passed
    assert guard.decide(Observation(now_s=10.0, p99_s=0.05, running=200, waiting=0)) == 128
    assert guard.decide(Observation(now_s=40.0, p99_s=0.05, running=120, waiting=0)) == 64


def test_static_and_schedule_policies_hold_the_engine_cap() -> None:
    scenario = load_scenario("step2x")
    short = scenario.__class__(
        scenario.name,
        "",
        scenario.profile,
        scenario.slo,
        tuple(p.__class__(p.name, 60.0, p.arrivals) for p in scenario.phases),
    )
    result = run(short, StaticPolicy(16))
    assert set(result.tick_cap.tolist()) == {16}
    assert result.tick_running.max() <= 16
    schedule = run(short, SchedulePolicy([(0.0, 32), (60.0, 8)]))
    assert schedule.tick_cap[schedule.tick_t < 60].max() == 32
    assert schedule.tick_cap[-1] == 8
