"""Requests meeting both bounds, predicted at a cap: the trade the law weighs when the queue, not the
per-token bound, is what loses requests.

Goodput (DistServe) counts a request only if its per-token latency meets the target and its TTFT meets the
bound. At a binding cap c the two shares are predicted separately and multiplied:
- per-token: a request's TPOT is an average over its tokens, so across requests it is close to normal; with
  the fitted mean line m(c) and quantile line q(c), the share under the target is Φ((target - m) / σ) with
  σ = (q - m) / z_quantile. (On the twin's H200 8B, a 2x step to 0.94 of capacity at 24.9 ms, the law's
  fits at its first trade predicted 98 %, 50 % and 3 % at caps 128, 144 and 160, where static caps measured
  99.8 %, 92 % and 32 %: pessimistic past the per-token cap, the safe side for a trade that gives it up.)
- TTFT: the queue as a fluid over a horizon: the backlog grows (or drains) at arrivals - service(c), and a
  request arriving while the backlog exceeds service(c) x its wait bound misses.
The two shares are independent approximations; the product ranks caps, it does not forecast to the per cent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from statistics import NormalDist
from typing import NamedTuple


def per_token_share(mean_s: float, quantile_s: float, quantile: float, target_s: float) -> float:
    """Share of requests whose per-token latency meets `target_s`, per-request latencies normal through the
    mean and the quantile (a quantile at or below the mean: every request at the mean)."""
    spread = (quantile_s - mean_s) / NormalDist().inv_cdf(quantile)
    if spread <= 0:
        return 1.0 if mean_s <= target_s else 0.0
    return NormalDist(mean_s, spread).cdf(target_s)


def in_time_share(
    arrivals_rps: float, service_rps: float, backlog: float, wait_bound_s: float, horizon_s: float
) -> float:
    """Share of the requests arriving over the horizon that wait within `wait_bound_s`: the backlog moves
    at arrivals - service, and a newcomer waits backlog / service."""
    if service_rps <= 0 or horizon_s <= 0:
        return 0.0
    limit = service_rps * wait_bound_s  # the deepest backlog a newcomer can wait behind in time
    growth = arrivals_rps - service_rps
    if growth == 0:
        return 1.0 if backlog <= limit else 0.0
    crossing = min(max((limit - backlog) / growth, 0.0), horizon_s)  # when the backlog crosses the limit
    in_time = crossing if growth > 0 else horizon_s - crossing
    return in_time / horizon_s


class Trade(NamedTuple):
    cap: int
    per_token: float  # share meeting the per-token target
    in_time: float  # share meeting the TTFT bound

    @property
    def both(self) -> float:
        return self.per_token * self.in_time


def best_trade(caps: Iterable[int], trade: Callable[[int], Trade], tolerance: float = 0.01) -> Trade | None:
    """The smallest cap whose share meeting both is within `tolerance` of the best: among caps that serve
    as many requests, the smallest keeps the most per-token margin (None: no caps)."""
    trades = [trade(c) for c in caps]
    if not trades:
        return None
    best = max(t.both for t in trades)
    return min((t for t in trades if t.both >= best - tolerance), key=lambda t: t.cap)
