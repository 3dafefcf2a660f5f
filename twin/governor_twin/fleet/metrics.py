"""What Prometheus would answer about the fleet at a tick: pool-wide histogram quantiles over a window
(`histogram_quantile(q, sum by (le) (increase(...[w])))`), per-pod averages of the gauges (the operator's
queries average over pods: governor.core.promql), and rates. Counters of deleted pods are kept in the sums,
a simplification: Prometheus' increase() over a vanished series would drop them."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from governor.core.signals import LatencyKind
from numpy.typing import NDArray

from governor_twin.fleet.fleet import Fleet
from governor_twin.observe import histogram_quantile, mean_histograms

HISTORY_S = 400.0  # the longest window any policy asks for, plus slack


@dataclass
class Sample:
    t: float
    tpot: NDArray[np.float64]
    ttft: NDArray[np.float64]
    success: float
    running: float  # per ready pod
    waiting: float
    kv: float
    ready: int
    warming: int
    live: int
    # pooled (sum, count) of the histograms behind the lever means
    sums: dict[str, tuple[float, float]] = field(default_factory=dict)


class FleetMetrics:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.samples: deque[Sample] = deque()

    def scrape(self, now: float) -> Sample:
        f = self.fleet
        tpot = ttft = None
        success = 0.0
        sums: dict[str, tuple[float, float]] = {}
        for r in f.replicas:
            e = r.engine
            e.flush()
            tpot = e.tpot_hist.counts.copy() if tpot is None else tpot + e.tpot_hist.counts
            ttft = e.ttft_hist.counts.copy() if ttft is None else ttft + e.ttft_hist.counts
            success += e.success_total
            for name, h in mean_histograms(e).items():
                total, count = sums.get(name, (0.0, 0.0))
                sums[name] = (total + h.total, count + float(h.counts.sum()))
        ready = f.ready(now)
        n = max(len(ready), 1)
        assert tpot is not None and ttft is not None
        s = Sample(
            t=now,
            tpot=tpot,
            ttft=ttft,
            success=success,
            running=sum(r.engine.num_running for r in ready) / n,
            waiting=sum(r.engine.num_waiting for r in ready) / n,
            kv=sum(r.engine.kv_usage for r in ready) / n,
            ready=len(ready),
            warming=len(f.warming(now)),
            live=len(f.live()),
            sums=sums,
        )
        self.samples.append(s)
        while self.samples and self.samples[0].t < now - HISTORY_S:
            self.samples.popleft()
        return s

    def _base(self, window_s: float) -> Sample | None:
        last = self.samples[-1]
        for s in self.samples:
            if s.t >= last.t - window_s - 1e-9:
                return s if s is not last else None
        return None

    def quantile(self, kind: LatencyKind, q: float, window_s: float) -> float | None:
        base = self._base(window_s)
        if base is None:
            return None
        last = self.samples[-1]
        edges = self.fleet.replicas[0].engine.tpot_hist.edges
        if kind is LatencyKind.TTFT:
            edges = self.fleet.replicas[0].engine.ttft_hist.edges
            counts = last.ttft - base.ttft
        else:
            counts = last.tpot - base.tpot
        if counts.sum() <= 0:
            return None
        value = histogram_quantile(q, edges, counts)
        return value if value is not None and math.isfinite(value) else None

    def mean(self, name: str, window_s: float) -> float | None:
        """A pooled windowed mean (sum by () (increase(_sum)) / sum by () (increase(_count))), as
        governor.core.promql.MEANS asks; None without finished requests in the window."""
        base = self._base(window_s)
        if base is None:
            return None
        last, first = self.samples[-1].sums.get(name), base.sums.get(name)
        if last is None or first is None:
            return None
        (total, count), (total0, count0) = last, first
        return (total - total0) / (count - count0) if count > count0 else None

    def rate_per_pod(self, window_s: float) -> float | None:
        base = self._base(window_s)
        if base is None:
            return None
        last = self.samples[-1]
        return (last.success - base.success) / (last.t - base.t) / max(last.ready, 1)

    def rate_total(self, window_s: float) -> float | None:
        per_pod = self.rate_per_pod(window_s)
        return None if per_pod is None else per_pod * max(self.samples[-1].ready, 1)

    def gauge_avg(self, name: str, window_s: float) -> float:
        """avg_over_time of a per-pod gauge average ('running', 'waiting', 'kv')."""
        last = self.samples[-1]
        values = [getattr(s, name) for s in self.samples if s.t > last.t - window_s - 1e-9]
        return float(np.mean(values))
