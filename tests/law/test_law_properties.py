"""Property tests of the law: bounds, bounded steps, reaching the floor, no oscillation in the band."""

from __future__ import annotations

import math

from governor.core.law import (
    Decision,
    LawConfig,
    LawState,
    Observation,
    clip,
    decide,
    initial_state,
    mode_cap,
    step_bound,
)
from governor.core.signals import LatencyKind
from hypothesis import given, settings
from hypothesis import strategies as st

TICK = 5.0


@st.composite
def configs(draw: st.DrawFn) -> LawConfig:
    ceiling = draw(st.integers(1, 512))
    return LawConfig(
        slo_target_s=draw(st.floats(0.001, 10.0)),
        latency_kind=draw(st.sampled_from(list(LatencyKind))),
        min_cap=draw(st.integers(1, ceiling)),
        ceiling=ceiling,
        decrease_factor=draw(st.floats(0.3, 0.95)),
        increase_factor=draw(st.floats(1.01, 2.0)),
        alpha=draw(st.floats(0.05, 1.0)),
        max_step=draw(st.none() | st.integers(1, 64)),
        cooldown_s=draw(st.sampled_from([0.0, 5.0, 10.0, 30.0])),
        raise_after_ticks=draw(st.integers(1, 4)),
    )


maybe = st.none() | st.just(math.nan) | st.floats(0, 1e4)
observations = st.lists(
    st.tuples(
        st.none() | st.sampled_from([math.nan, math.inf]) | st.floats(0, 100),  # p99
        maybe,  # running
        maybe,  # waiting
        st.none() | st.floats(0, 1000),  # request rate
        st.none() | st.floats(0, 100),  # long-prompt rate
    ),
    min_size=1,
    max_size=60,
)


def run(cfg: LawConfig, readings: list[tuple[float | None, ...]], state: LawState) -> list[Decision]:
    decisions = []
    for i, (p99, running, waiting, rate, long_rate) in enumerate(readings):
        obs = Observation(
            now_s=i * TICK,
            p99_s=p99,
            running=running,
            waiting=waiting,
            request_rate=rate,
            long_prompt_rate=long_rate,
        )
        d = decide(state, obs, cfg)
        decisions.append(d)
        state = d.state
    return decisions


@settings(max_examples=300, deadline=None)
@given(configs(), observations, st.integers(1, 600))
def test_cap_never_leaves_bounds_and_never_steps_beyond_its_bound(
    cfg: LawConfig, readings: list[tuple[float | None, ...]], start_cap: int
) -> None:
    for d in run(cfg, readings, LawState(cap=start_cap)):
        assert cfg.min_cap <= d.cap <= cfg.ceiling
        assert d.replica_wish in (-1, 0, 1)
        if d.reason == "bounds":  # the config changed under the state: clip at once
            assert d.cap == clip(d.previous_cap, cfg)
        elif d.reason == "long-tail":  # a mode cap is a limit, not a step
            assert d.cap == mode_cap("long-tail", cfg) < d.previous_cap
        else:
            assert abs(d.cap - d.previous_cap) <= step_bound(d.previous_cap, cfg)
        if not cfg.latency_kind.per_token:
            assert d.cap >= d.previous_cap or d.reason == "bounds"  # queue-driven SLOs never lower the cap


@settings(max_examples=200, deadline=None)
@given(configs(), st.floats(1.2, 50.0))
def test_sustained_per_token_violation_reaches_the_floor_in_bounded_ticks(
    cfg: LawConfig, excess: float
) -> None:
    cfg = cfg.model_copy(update={"latency_kind": LatencyKind.TPOT})
    state = LawState(cap=cfg.ceiling)
    # Each step removes at least max(1, a share of the cap); each decrease is followed by the cooldown.
    steps = math.ceil(math.log(cfg.ceiling / cfg.min_cap) / -math.log(cfg.decrease_factor)) + cfg.ceiling
    if cfg.max_step is not None:
        steps = math.ceil(cfg.ceiling / cfg.max_step) + steps
    steps = min(steps, cfg.ceiling - cfg.min_cap)
    ticks_per_step = 1 + math.ceil(max(cfg.cooldown_s, cfg.window_s) / TICK)  # rule 5: fresh window
    warmup = math.ceil(math.log(1 - 1.1 / (excess * 1.0)) / math.log(1 - cfg.alpha)) if cfg.alpha < 1 else 1
    budget = steps * ticks_per_step + warmup + 1
    p99 = excess * cfg.slo_target_s
    for i in range(budget):
        state = decide(
            state, Observation(now_s=i * TICK, p99_s=p99, running=state.cap, waiting=0.0), cfg
        ).state
    assert state.cap == cfg.min_cap


@settings(max_examples=200, deadline=None)
@given(configs(), st.lists(st.floats(0.905, 1.095), min_size=5, max_size=80), st.integers(1, 512))
def test_stationary_noise_inside_the_band_never_moves_the_cap(
    cfg: LawConfig, noise: list[float], start: int
) -> None:
    state = LawState(cap=clip(start, cfg))
    for i, factor in enumerate(noise):
        d = decide(
            state, Observation(now_s=i * TICK, p99_s=factor * cfg.slo_target_s, running=1e4, waiting=5.0), cfg
        )
        assert d.cap == state.cap
        state = d.state


@settings(max_examples=200, deadline=None)
@given(configs(), st.lists(st.floats(1.5, 3.0), min_size=5, max_size=80))
def test_noisy_stationary_violation_only_ever_lowers(cfg: LawConfig, noise: list[float]) -> None:
    state = initial_state(cfg)
    for i, factor in enumerate(noise):
        d = decide(
            state, Observation(now_s=i * TICK, p99_s=factor * cfg.slo_target_s, running=1e4, waiting=0), cfg
        )
        assert d.direction in ("down", "hold") if cfg.latency_kind.per_token else d.direction != "down"
        state = d.state


@settings(max_examples=200, deadline=None)
@given(configs(), st.lists(st.floats(0.0, 0.899), min_size=8, max_size=60), st.integers(1, 512))
def test_burst_mode_never_lowers_while_the_smoothed_p99_is_below_the_band(
    cfg: LawConfig, levels: list[float], start: int
) -> None:
    """Rule 12: a burst pre-emption is a hedge. A fast-rising rate with a comfortable P99 lowers nothing."""
    cfg = cfg.model_copy(update={"latency_kind": LatencyKind.TPOT})
    state = LawState(cap=clip(start, cfg))
    for i, level in enumerate(levels):
        rate = 1.0 * 1.5**i  # established after a few ticks, then rising 50 % a tick: a burst
        obs = Observation(
            now_s=i * TICK, p99_s=level * cfg.slo_target_s, running=1e4, waiting=3, request_rate=rate
        )
        d = decide(state, obs, cfg)
        assert d.state.p99_smoothed is not None and d.state.p99_smoothed < cfg.band_low * cfg.slo_target_s
        assert d.direction != "down"
        if d.mode == "burst" and d.direction == "up":
            assert d.cap - d.previous_cap <= cfg.cautious_step
        state = d.state


def _enters_long_tail(seed: int, shape: float, rps: float) -> bool:
    """Ten minutes of Pareto prompts at `rps` through the runtime's signals (a 60 s P95; prompts above
    1.3 x the last P95 counted over a 30 s window): does rule 11 enter long-tail mode?"""
    import random

    rng = random.Random(seed)
    cfg = LawConfig(slo_target_s=0.025, ceiling=256)
    state = LawState(cap=128)
    per_tick = max(1, round(rps * TICK))
    history: list[list[float]] = []
    longs: list[int] = []
    p95: float | None = None
    for i in range(120):
        fresh = [200 * rng.paretovariate(shape) for _ in range(per_tick)]
        longs.append(0 if p95 is None else sum(p > 1.3 * p95 for p in fresh))
        history = [*history[-11:], fresh]
        window = sorted(p for tick in history for p in tick)
        p95 = window[min(len(window) - 1, int(0.95 * len(window)))]
        long_rate = sum(longs[-6:]) / (6 * TICK)
        obs = Observation(
            now_s=i * TICK,
            p99_s=0.02,
            running=128,
            waiting=2,
            request_rate=per_tick / TICK,
            prompt_p95=p95,
            long_prompt_rate=long_rate,
        )
        d = decide(state, obs, cfg)
        if d.mode == "long-tail":
            return True
        state = d.state
    return False


def test_long_tail_false_alarms_on_a_stationary_heavy_tailed_prompt_stream_are_rare() -> None:
    """Rule 11 on a stationary stream: exceedances of the P95 are routine and must (almost) never enter
    long-tail mode. A rate, not a never: at the hardest corner (Pareto shape 1.2, infinite variance, at
    5 req/s, so 300 prompts per P95 window) a threshold rule on a sampled P95 alarms by chance; measured
    12 of 1,000 ten-minute runs; at shape 1.5 and 5 req/s, 1 of 300; at shape 2 and above, or at 20 req/s
    and above (four times the prompts per window), none of 300 at each corner tried."""
    hardest = sum(_enters_long_tail(seed, 1.2, 5.0) for seed in range(200))
    assert hardest <= 6, f"{hardest} of 200 ten-minute runs entered long-tail mode"
    for shape, rps in ((1.5, 20.0), (2.0, 5.0), (3.0, 40.0)):
        alarms = [seed for seed in range(40) if _enters_long_tail(seed, shape, rps)]
        assert not alarms, (shape, rps, alarms)


@settings(max_examples=300, deadline=None)
@given(configs(), observations, st.integers(1, 600), st.floats(1.0, 600.0))
def test_raises_near_the_remembered_violation_cap_are_additive(
    cfg: LawConfig, readings: list[tuple[float | None, ...]], start_cap: int, memory: float
) -> None:
    """Rule 14: at or above cautious_fraction x the last violation cap, a raise is at most cautious_step."""
    for d in run(cfg, readings, LawState(cap=clip(start_cap, cfg), violation_cap=memory)):
        m = d.state.violation_cap
        if d.reason == "headroom" and m is not None and d.previous_cap >= cfg.cautious_fraction * m:
            assert d.cap - d.previous_cap <= cfg.cautious_step
