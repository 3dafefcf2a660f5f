"""A cap policy that knows the engine exactly, for the benchmark: what a law that had learned the engine's
step costs could do with the load it measures (issue 12: "the cap can be computed, not searched for").

Every tick it takes the window's arrival rate and the lengths of the requests finished in it, draws the
next `horizon_s` of Poisson arrivals with those lengths (today's backlog queued first), replays them on the
twin's own engine model at each candidate cap, and holds the cap whose replay keeps the most requests within
both bounds (the largest within 1 % of the best: above the batch the load runs at, a cap binds nothing).
It is an oracle twice over: the engine model is the one the benchmark runs (no law is told the step costs,
and vLLM does not report them), and the lengths are the requests' own, where a law reads histograms. What
it measures is the distance between the law and a law with perfect knowledge of the engine, measured load
and a window's lag; the per-phase oracle, which knows the future load, bounds both.

`SeenEnginePolicy` runs the same replay on what an operator sees instead: the step costs it fits on the
runtime's step counters, the completions and queue, and the token histograms. Its distance to the known
engine is what the operator's view costs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from governor.core.law import Observation
from governor.core.levers.steps import StepCostFit

from governor_twin.engine import Engine
from governor_twin.histogram import FloatArray
from governor_twin.profile import EngineProfile, StepTimeModel
from governor_twin.table import IntArray

DRAIN_S = 30.0  # past the horizon, the time the replay lets its last requests finish


def candidate_caps(low: int, high: int, ratio: float) -> list[int]:
    """`low`, then caps `ratio` apart (at least one apart), up to and including `high`."""
    caps, cap = [], low
    while cap < high:
        caps.append(cap)
        cap = max(cap + 1, round(cap * ratio))
    return [*caps, high]


def within_both(
    profile: EngineProfile,
    cap: int,
    sent: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    backlog: int,
    horizon_s: float,
    tpot_s: float,
    ttft_s: float | None,
) -> float:
    """Requests per second of the replay's arrivals (the backlog, the first `backlog`, is load only) that
    finish within both bounds at `cap`."""
    engine = Engine(profile, cap=cap)
    engine.submit_many(sent, prompts, outputs)
    engine.advance(horizon_s + (ttft_s or 0.0) + DRAIN_S)
    n = engine.n
    first, finish, out = engine.first_token[:n], engine.finish[:n], engine.max_tokens[:n]
    done = np.isfinite(finish)
    with np.errstate(invalid="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), 0.0)
        good = done & (tpot <= tpot_s)
        if ttft_s is not None:
            good &= first - engine.sent[:n] <= ttft_s
    return float(good[backlog:].sum()) / horizon_s


@dataclass
class KnownEnginePolicy:
    profile: EngineProfile
    tpot_s: float
    ttft_s: float | None
    tick_s: float = 5.0
    window_s: float = 30.0
    horizon_s: float = 60.0
    ratio: float = 1.4
    name: str = "engine known (replay)"
    engine: Engine | None = None
    cap: int = 0
    last_reason: str = ""
    token_budget: int | None = None  # the engine keeps its own

    def __post_init__(self) -> None:
        if min(self.tick_s, self.window_s, self.horizon_s, self.tpot_s) <= 0 or self.ratio <= 1:
            raise ValueError("tick, window, horizon and TPOT bound must be positive, and the ratio above 1")

    def watch(self, engine: Engine) -> None:
        """The engine whose finished requests and arrivals the policy reads (sim.run hands it over)."""
        self.engine = engine

    def start(self, ceiling: int) -> int:
        self.cap = ceiling
        return ceiling

    def decide(self, obs: Observation) -> int:
        engine, now = self._engine(), obs.now_s
        n = engine.n
        finish, sent = engine.finish[:n], engine.sent[:n]
        recent = np.nonzero((finish > now - self.window_s) & (finish <= now))[0]
        span = min(self.window_s, now)  # the first window is not yet full
        rate = float(((sent > now - span) & (sent <= now)).sum()) / span if span > 0 else 0.0
        if recent.size < 10 or rate <= 0:
            self.last_reason = "no load measured: held"
            return self.cap

        def lengths(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
            pick = rng.choice(recent, count)
            return engine.prompt[pick], engine.max_tokens[pick]

        return self._replay(self.profile, obs, rate, lengths)

    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError(
                f"{type(self).__name__} reads its engine: sim.run hands it over through watch()"
            )
        return self.engine

    def _replay(
        self,
        profile: EngineProfile,
        obs: Observation,
        rate: float,
        lengths: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]],
    ) -> int:
        """Draw the next `horizon_s` of arrivals at `rate` with `lengths`, today's backlog first; replay them
        at each candidate cap on `profile`; hold the largest cap within 1 % of the best."""
        rng = np.random.default_rng(round(obs.now_s * 1000))
        count = int(rng.poisson(rate * self.horizon_s))
        backlog = round(obs.waiting or 0.0)
        prompts, outputs = lengths(rng, count + backlog)
        arrivals = np.concatenate([np.zeros(backlog), np.sort(rng.uniform(0, self.horizon_s, count))])
        caps = candidate_caps(1, self.profile.ceiling, self.ratio)
        kept = [
            within_both(
                profile, c, arrivals, prompts, outputs, backlog, self.horizon_s, self.tpot_s, self.ttft_s
            )
            for c in caps
        ]
        best = max(kept)
        if best > 0:
            self.cap = max(c for c, k in zip(caps, kept, strict=True) if k >= 0.99 * best)
        self.last_reason = f"replay: cap {self.cap} keeps {best:.3g} req/s within both ({rate:.3g} arriving)"
        return self.cap


@dataclass
class SeenEnginePolicy(KnownEnginePolicy):
    """The same replay fed only what an operator sees, a prototype of the law the lead asks for: the engine
    from the step costs fitted on the step counters (governor.core.levers.steps; a flat step at the mean
    while the fixed and per-sequence parts are not told apart), the arrivals as the window's completions plus
    the growth of its queue, and the lengths drawn, independently, from the window's prompt and generation
    token histograms (vLLM's 1-2-5 buckets, uniform within a bucket)."""

    name: str = "engine seen (replay)"
    fit: StepCostFit = field(default_factory=StepCostFit)
    seen: deque[tuple[float, FloatArray, FloatArray, float, float]] = field(default_factory=deque)

    def decide(self, obs: Observation) -> int:
        engine, now = self._engine(), obs.now_s
        engine.flush()
        self.fit = self.fit.update(obs.step_rates)
        prompts, outputs = engine.prompt_hist, engine.generation_hist
        self.seen.append(
            (now, prompts.counts.copy(), outputs.counts.copy(), engine.success_total, obs.waiting or 0)
        )
        while len(self.seen) > 1 and self.seen[1][0] <= now - self.window_s + 1e-9:
            self.seen.popleft()
        (t0, p0, g0, done0, waiting0), (t1, p1, g1, done1, waiting1) = self.seen[0], self.seen[-1]
        finished = done1 - done0
        rate = max(0.0, (finished + waiting1 - waiting0) / (t1 - t0)) if t1 > t0 else 0.0
        model = self._model()
        if finished < 10 or rate <= 0 or model is None:
            self.last_reason = "no load or no step measured: held"
            return self.cap
        top = float(self.profile.max_model_len)

        def lengths(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
            return (
                _from_histogram(rng, prompts.edges, p1 - p0, count, top),
                _from_histogram(rng, outputs.edges, g1 - g0, count, top),
            )

        return self._replay(replace(self.profile, step=model), obs, rate, lengths)

    def _model(self) -> StepTimeModel | None:
        costs = self.fit.costs()
        if costs.mean_step_s is None:
            return None
        if costs.base_s is None or costs.per_sequence_s is None:
            return StepTimeModel(costs.mean_step_s, 0.0, 0.0, 0.0)
        return StepTimeModel(
            costs.base_s,
            costs.per_sequence_s,
            costs.per_context_token_s or 0.0,
            costs.per_prefill_token_s or 0.0,
        )


def _from_histogram(
    rng: np.random.Generator, edges: FloatArray, counts: FloatArray, count: int, top: float
) -> IntArray:
    """`count` token lengths drawn from a window's bucket counts (the last bucket ends at `top`)."""
    bucket = rng.choice(counts.size, count, p=counts / counts.sum())
    low, high = np.concatenate([[0.0], edges])[bucket], np.concatenate([edges, [top]])[bucket]
    lengths: IntArray = np.maximum(1, np.floor(rng.uniform(low, high)) + 1).astype(np.int64)
    return lengths
