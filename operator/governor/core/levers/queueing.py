"""What a cap costs in queueing: an engine with cap c as c servers (M/M/c, Erlang C).

The model: a request holds one of the c slots for its prefill plus its output tokens at the mean per-token
time of the running batch, s(n) = prefill_s + out_tokens × tpot_mean(n). With every slot busy the engine
completes μ(c) = c / s(c) requests per second, and the queue is stable while λ < μ(c). On the H200
calibration (mean 160 output tokens, 40 ms prefill, TPOT mean ≈ 4.8 ms + 0.132 ms × running, a line through
the TPOT P50s) this gives 13.9, 21.5, 29.6, 36.4 and 41.1 req/s at caps 16, 32, 64, 128 and 256; measured
capacity was 14.3, 21.7, 30.2, 35–37 and about 40.

Below saturation the batch is smaller than c, so the offered load is the self-consistent occupancy
L = λ·s(L) (Little's law; it predicts mean running 7.8 and 27.5 where 7.9 and 26.2 were measured at caps 16
and 32). The TTFT quantile is then the prefill time plus the waiting-time quantile
    P(Wq > t) = C(c, L) · exp(-(μ(c) - λ) · t / variability),
with C the Erlang C probability of waiting (offered L Erlangs) and the decay rate that of a full batch,
since a request waits only while every slot is busy. Approximations, stated: service is exponential unless
`variability` says otherwise (Allen–Cunneen: waiting scales by (ca² + cs²) / 2, applied here to the tail's
decay rate); prefill time is added, not convolved. Against the calibration's unsaturated points the TTFT P99
it predicts is pessimistic (cap 32 at 19.7 req/s: 2.0 s predicted, 0.74 s measured), the safe side for a
bound.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class TpotLine(NamedTuple):
    """Mean per-token time (seconds) against the running batch; a fitted line, not a quantile."""

    intercept_s: float
    slope_s: float  # per running sequence
    lowest: float = 0.0
    """The smallest batch the line is read at: a smaller one is taken as slow as this one."""

    def at(self, running: float) -> float:
        # A negative fitted slope is noise: per-token time does not fall as the batch grows.
        return max(self.intercept_s + max(self.slope_s, 0.0) * max(running, self.lowest), 0.0)


class Workload(NamedTuple):
    arrival_rps: float  # λ, requests per second reaching this engine
    out_tokens: float  # mean output tokens per request
    prefill_s: float  # mean prefill time per request (TTFT at light load)
    tpot: TpotLine
    variability: float = 1.0
    """(ca² + cs²) / 2: 1 for Poisson arrivals and exponential service; Poisson arrivals with outputs
    uniform over 64–256 tokens (cs² ≈ 0.12) give ≈ 0.56. 1 by default: pessimistic, and the tail is what
    SLOs see."""


def service_time_s(cap: float, work: Workload) -> float:
    """Mean time a request holds a slot when all `cap` slots are busy (or at a running batch of `cap`)."""
    return work.prefill_s + work.out_tokens * work.tpot.at(cap)


def service_rate(cap: int, work: Workload) -> float:
    """μ(c): requests per second the engine completes with every slot busy."""
    hold = service_time_s(cap, work)
    return math.inf if hold <= 0 else cap / hold


def utilisation(cap: int, work: Workload) -> float:
    """ρ = λ / μ(c); the queue is stable below 1."""
    rate = service_rate(cap, work)
    return 0.0 if math.isinf(rate) else work.arrival_rps / rate


def is_stable(cap: int, work: Workload) -> bool:
    return utilisation(cap, work) < 1.0


def occupancy(work: Workload) -> float:
    """Mean running batch with no cap: the L solving L = λ·s(L); inf when no finite batch keeps up."""
    per_token = work.out_tokens * max(work.tpot.slope_s, 0.0)  # seconds each extra sequence adds to s
    load = 1.0 - work.arrival_rps * per_token
    if load <= 0:
        return math.inf
    return work.arrival_rps * service_time_s(0, work) / load


def erlang_b(servers: int, offered: float) -> float:
    """Blocking probability of `servers` servers offered `offered` Erlangs, by the recursion
    B(k) = a·B(k-1) / (k + a·B(k-1)): every term lies in [0, 1], so it is stable for any number of servers."""
    if servers < 0 or offered < 0:
        raise ValueError("servers and offered load must be non-negative")
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    return blocking


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits (M/M/c); 1 when the load is at or above the server count."""
    if servers <= 0:
        raise ValueError("at least one server")
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    blocking = erlang_b(servers, offered)
    rho = offered / servers
    return blocking / (1.0 - rho * (1.0 - blocking))


def wait_quantile_s(
    servers: int, arrival_rps: float, server_rate: float, quantile: float, variability: float = 1.0
) -> float:
    """The `quantile` of the time spent waiting for a server; inf when the queue is unstable."""
    if not 0.0 < quantile < 1.0:
        raise ValueError("quantile must lie in (0, 1)")
    if arrival_rps <= 0:
        return 0.0
    drain = servers * server_rate - arrival_rps  # the rate at which a waiting line empties
    if drain <= 0:
        return math.inf
    waits = erlang_c(servers, arrival_rps / server_rate)
    tail = 1.0 - quantile
    if waits <= tail:
        return 0.0
    return variability * math.log(waits / tail) / drain


def mean_wait_s(servers: int, arrival_rps: float, server_rate: float, variability: float = 1.0) -> float:
    """Mean waiting time, C / (cμ₁ - λ), scaled by `variability`; inf when unstable."""
    if arrival_rps <= 0:
        return 0.0
    drain = servers * server_rate - arrival_rps
    if drain <= 0:
        return math.inf
    return variability * erlang_c(servers, arrival_rps / server_rate) / drain


def ttft_quantile_s(cap: int, work: Workload, quantile: float) -> float:
    """Predicted TTFT quantile at `cap` (see the module's docstring); inf when the queue is unstable."""
    if not 0.0 < quantile < 1.0:
        raise ValueError("quantile must lie in (0, 1)")
    if work.arrival_rps <= 0:
        return work.prefill_s
    drain = service_rate(cap, work) - work.arrival_rps  # the rate at which a waiting line empties
    if drain <= 0:
        return math.inf
    waits = erlang_c(cap, min(occupancy(work), float(cap)))
    tail = 1.0 - quantile
    if waits <= tail:
        return work.prefill_s
    return work.prefill_s + work.variability * math.log(waits / tail) / drain
