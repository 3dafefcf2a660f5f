"""Histogram arithmetic as Prometheus does it, in plain Python (the operator's image has no numpy).

A histogram says only how many observations fell in each bucket, so a quantile is interpolated linearly inside
the bucket that holds its rank (Prometheus' `histogram_quantile`); the error is at most that bucket's width.
The direct scraper and the twin's observer both read quantiles through `histogram_quantile` below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' interpolation over cumulative (upper bound, count) pairs, +Inf last. None when empty."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0 or not math.isinf(ordered[-1][0]):
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if math.isinf(upper):  # above every finite bound: the largest finite bound is all we know
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def bucket_width(bounds: Sequence[float], value: float) -> float:
    """Width of the bucket that holds `value`: the worst-case error of a quantile that lands there."""
    lower = 0.0
    for upper in sorted(bounds):
        if value <= upper:
            return upper - lower
        lower = upper
    return math.inf
