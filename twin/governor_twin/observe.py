"""What the operator sees of an engine at a tick, computed the way Prometheus would compute it.

The latency quantile is `histogram_quantile(q, increase(<histogram>_bucket[window]))` over the engine's
cumulative bucket counts (the same buckets the runtime starts vLLM with), so the law gets the bucket
interpolation error the real loop gets, not the exact P99. Rates are increases over the window divided by it;
running/waiting/KV are the gauges at the tick. The prompt P95 and long-prompt counter follow the runtime's
definitions (60 s window of prompt lengths; prompts above 1.3 × P95 counted).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from governor.core import histogram as core_histogram
from governor.core.law import Observation
from governor.core.levers.steps import StepRates
from governor.core.signals import LatencyKind
from numpy.typing import NDArray

from governor_twin.engine import Engine
from governor_twin.histogram import Histogram

PROMPT_WINDOW_S = 60.0
LONG_PROMPT_FACTOR = 1.3


def histogram_quantile(q: float, edges: NDArray[np.float64], counts: NDArray[np.float64]) -> float | None:
    """The operator's histogram_quantile on per-bucket counts (finite `edges`, `counts` ending with +Inf)."""
    bounds = [*edges.tolist(), math.inf]
    return core_histogram.histogram_quantile(q, list(zip(bounds, np.cumsum(counts).tolist(), strict=True)))


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def mean_histograms(e: Engine) -> dict[str, Histogram]:
    """Observation field -> the histogram whose windowed mean it is (as governor.core.promql.MEANS)."""
    return {
        "tpot_mean_s": e.tpot_hist,
        "ttft_mean_s": e.ttft_hist,
        "queue_time_mean_s": e.queue_hist,
        "output_tokens_mean": e.generation_hist,
        "inference_time_mean_s": e.inference_hist,
    }


@dataclass
class _Snapshot:
    t: float
    counts: NDArray[np.float64]
    ttft_counts: NDArray[np.float64]
    sums: dict[str, tuple[float, float]]  # mean field -> (sum, count) of its histogram
    success: float
    preemptions: float
    long_prompts: float
    steps: tuple[float, float, float, float, float]  # the runtime's step counters (StepRates' order)


class Observer:
    """Keeps tick snapshots of one engine and answers the law's Observation for the last `window_s`."""

    def __init__(self, engine: Engine, kind: LatencyKind, window_s: float, quantile: float = 0.99) -> None:
        self.engine = engine
        self.kind = kind
        self.window_s = window_s
        self.quantile = quantile
        self.snapshots: deque[_Snapshot] = deque()
        self.long_prompts = 0.0
        self._counted_upto = 0  # requests already judged long/short
        self.prompt_p95: float | None = None

    def _histogram(self) -> Histogram:
        e = self.engine
        return {
            LatencyKind.TPOT: e.tpot_hist,
            LatencyKind.INTER_TOKEN: e.itl_hist,
            LatencyKind.TTFT: e.ttft_hist,
            LatencyKind.E2E: e.e2e_hist,
        }[self.kind]

    def _prompt_signals(self, now: float) -> None:
        """The runtime's windowed prompt P95 and long-prompt counter, over requests sent by `now`."""
        e = self.engine
        sent = e.sent[: e.n]
        upto = int(np.searchsorted(sent, now, side="right"))
        lo = int(np.searchsorted(sent, now - PROMPT_WINDOW_S, side="right"))
        if upto > lo:
            window = e.prompt[lo:upto]
            p95 = float(np.percentile(window, 95))
            fresh = e.prompt[self._counted_upto : upto]
            if self.prompt_p95 is not None:
                self.long_prompts += float(np.sum(fresh > LONG_PROMPT_FACTOR * self.prompt_p95))
            self.prompt_p95 = p95
        self._counted_upto = max(self._counted_upto, upto)

    def observe(self, now: float) -> Observation:
        e = self.engine
        self._prompt_signals(now)
        e.flush()
        hist = self._histogram()
        sums = {name: (h.total, float(h.counts.sum())) for name, h in mean_histograms(e).items()}
        snap = _Snapshot(
            now,
            hist.counts.copy(),
            e.ttft_hist.counts.copy(),
            sums,
            e.success_total,
            float(e.preemptions),
            self.long_prompts,
            (
                e.stats.busy_s,
                e.stats.steps,
                e.stats.sequences,
                e.stats.context_tokens,
                e.stats.prefill_tokens,
            ),
        )
        previous = self.snapshots[-1] if self.snapshots else None
        self.snapshots.append(snap)
        while len(self.snapshots) > 1 and self.snapshots[1].t <= now - self.window_s + 1e-9:
            self.snapshots.popleft()
        old = self.snapshots[0]
        span = now - old.t
        means: dict[str, float | None] = dict.fromkeys(sums)
        if old is snap or span <= 0:
            p99 = ttft_p99 = None
            rate = preempt = long_rate = None
        else:
            p99 = histogram_quantile(self.quantile, hist.edges, snap.counts - old.counts)
            ttft_p99 = histogram_quantile(
                self.quantile, e.ttft_hist.edges, snap.ttft_counts - old.ttft_counts
            )
            for name, (total, count) in sums.items():
                seen = count - old.sums[name][1]
                means[name] = (total - old.sums[name][0]) / seen if seen > 0 else None
            rate = (snap.success - old.success) / span
            preempt = (snap.preemptions - old.preemptions) / span
            long_rate = (snap.long_prompts - old.long_prompts) / span
        return Observation(
            now_s=now,
            p99_s=_finite(p99),
            running=float(e.num_running),
            waiting=float(e.num_waiting),
            kv_usage=e.kv_usage,
            preemption_rate=preempt,
            request_rate=rate,
            prompt_p95=self.prompt_p95,
            long_prompt_rate=long_rate,
            ttft_p99_s=_finite(ttft_p99),
            token_budget=float(e.token_budget),
            step_rates=_step_rates(previous, snap),
            **means,
        )


def _step_rates(old: _Snapshot | None, new: _Snapshot) -> StepRates | None:
    """The step counters' rates over the last tick (the operator reads them over its gauge window)."""
    if old is None or new.t <= old.t:
        return None
    span = new.t - old.t
    return StepRates(*((b - a) / span for a, b in zip(old.steps, new.steps, strict=True)))
