"""The engine's latency and token histograms, with Prometheus semantics (what the twin's /metrics serves and
its observer reads)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def token_buckets(max_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 buckets for prompt/generation token histograms, up to max-model-len."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exp
            if value > max_len:
                return tuple(out)
            out.append(float(value))
        exp += 1


class Histogram:
    """Cumulative histogram with Prometheus semantics (`le` buckets plus +Inf), fed in bulk. The per-request
    histograms of an engine are up to date after `Engine.flush()`."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.edges = np.array(buckets, dtype=np.float64)
        self.counts = np.zeros(len(buckets) + 1, dtype=np.float64)  # per bucket, last is +Inf
        self.total = 0.0

    def observe(self, values: FloatArray, weights: FloatArray | None = None) -> None:
        if values.size == 0:
            return
        index = np.searchsorted(self.edges, values, side="left")
        self.counts += np.bincount(index, weights=weights, minlength=self.counts.size)
        self.total += float(np.sum(values if weights is None else values * weights))

    def cumulative(self) -> FloatArray:
        return np.cumsum(self.counts)
