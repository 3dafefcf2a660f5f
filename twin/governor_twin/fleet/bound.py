"""A clairvoyant reference for the fleet tables: what a scenario costs a fleet that knows its arrivals.

Not a policy. Each `BUCKET_S` of the scored span gets exactly the replicas that serve that bucket's arrivals
at one saturated replica's completions/s, ready the moment they are needed (no start-up, no cooldown, no
headroom). No policy holding the SLO spends much less: one that does queues a bucket's excess into the next,
which the TTFT bound allows for a few seconds only. Computed at two caps, so that the table shows what the
cap itself is worth: the best static cap (the peers' cap), and the largest cap whose saturated TPOT P99 meets
the SLO on the scenario's own lengths (the most a cap can carry within the per-token bound)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from governor_twin.fleet.scenarios import FleetScenario, Saturated, saturated

BUCKET_S = 30.0
CEILING = 256  # vLLM's default cap: the search's upper end


@dataclass(frozen=True)
class Bound:
    saturated: Saturated
    gpu_hours: float


def per_token_cap(scn: FleetScenario, low: int, high: int = CEILING) -> Saturated:
    """The largest cap in [low, high] whose saturated TPOT P99 on the scenario's lengths meets its target
    (bisection: the P99 grows with the cap); `low` when none does."""
    best = saturated(scn.prompt, scn.output, low)
    while low < high:
        mid = (low + high + 1) // 2
        point = saturated(scn.prompt, scn.output, mid)
        if point.tpot_p99_s <= scn.slo.target_s:
            low, best = mid, point
        else:
            high = mid - 1
    return best


def clairvoyant_gpu_hours(scn: FleetScenario, replica_rps: float, bucket_s: float = BUCKET_S) -> float:
    """GPU-hours over the scored span of replicas sized to each bucket's arrivals at `replica_rps` each."""
    if replica_rps <= 0 or bucket_s <= 0:
        raise ValueError("a replica's rate and the bucket must be positive")
    sent = scn.sent[scn.sent >= scn.warmup_s] - scn.warmup_s
    buckets = math.ceil(scn.scored_s / bucket_s)
    counts = np.bincount((sent // bucket_s).astype(np.int64), minlength=buckets)[:buckets]
    replicas = np.ceil(counts / (replica_rps * bucket_s) - 1e-9)
    return float(replicas.sum() * bucket_s / 3600.0)


def bounds(scn: FleetScenario, best_static: int) -> tuple[Bound, Bound]:
    """The reference at the best static cap and at the per-token cap."""
    static = saturated(scn.prompt, scn.output, best_static)
    capped = per_token_cap(scn, best_static)
    return (
        Bound(static, clairvoyant_gpu_hours(scn, static.rps)),
        Bound(capped, clairvoyant_gpu_hours(scn, capped.rps)),
    )


def line(scn: FleetScenario, best_static: int) -> str:
    static, capped = bounds(scn, best_static)
    return (
        f"- clairvoyant reference (not a policy): replicas sized to each {BUCKET_S:.0f} s of the scored "
        f"arrivals, ready when needed, every one saturated: {static.gpu_hours:.2f} GPU-h at cap "
        f"{static.saturated.cap} (the best static cap, {static.saturated.rps:.1f} req/s a replica), "
        f"{capped.gpu_hours:.2f} at cap {capped.saturated.cap} (the largest whose saturated TPOT P99, "
        f"{capped.saturated.tpot_p99_s * 1e3:.1f} ms, meets the SLO; {capped.saturated.rps:.1f} req/s)."
    )
