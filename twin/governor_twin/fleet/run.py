"""One fleet run in virtual time: every 5 s the fleet is scraped (Prometheus' scrape interval), and each
policy acts on its own period. One asyncio.run drives the whole run (our edges do no real I/O). Policies act
through the scenario's warm-up; what is scored (requests, GPU-hours, replicas, changes) starts after it."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from governor.core.signals import LatencyKind
from numpy.typing import NDArray

from governor_twin.fleet.fleet import Fleet, FleetConfig
from governor_twin.fleet.metrics import FleetMetrics
from governor_twin.fleet.ours import Ours
from governor_twin.fleet.peers import ReplicaPolicy
from governor_twin.fleet.scenarios import PROFILE, FleetScenario
from governor_twin.profile import load_profile

SCRAPE_S = 5.0
TAIL_S = 60.0  # after the last arrival, for the queue to clear


class Named(Protocol):
    name: str
    knob: str


@dataclass
class FleetRun:
    policy: str
    knob: str
    cap_label: str
    scenario: str
    attainment: float
    goodput_tok_s: float
    gpu_hours: float
    replica_changes: int
    mean_replicas: float
    lost: int  # admissible requests routed nowhere or never finished
    refused: int  # prompt + max_tokens above max-model-len: vLLM answers 400 (left out of attainment)
    t: NDArray[np.float64]  # seconds from the warm-up's end (negative in it)
    live: NDArray[np.float64]
    ready: NDArray[np.float64]
    cap: NDArray[np.float64]
    waiting: NDArray[np.float64]
    p99_tpot: NDArray[np.float64]
    ablation: bool = False  # ours with a part switched off that no user can switch off (Ours.ablation)


def run(
    scn: FleetScenario, policy: Ours | ReplicaPolicy, cap_label: str, cfg: FleetConfig | None = None
) -> FleetRun:
    profile = load_profile(PROFILE)
    fleet = Fleet(profile, cfg or FleetConfig(), scn.initial_replicas, policy.cap)
    fleet.load(scn.sent, scn.prompt, scn.output)
    metrics = FleetMetrics(fleet)
    if isinstance(policy, Ours):
        policy.attach(fleet, metrics)
    timeline: list[tuple[float, ...]] = []
    end = scn.duration_s + TAIL_S
    changes_before = 0  # the warm-up's replica changes, left out of the count

    async def drive() -> None:
        nonlocal changes_before
        next_act = policy.tick_s
        k = 0
        while (now := (k := k + 1) * SCRAPE_S) <= end + 1e-9:
            fleet.advance(now)
            if now <= scn.warmup_s + 1e-9:
                changes_before = fleet.changes
            s = metrics.scrape(now)
            if now + 1e-9 >= next_act:
                next_act += policy.tick_s
                if isinstance(policy, Ours):
                    await policy.step(now)
                else:
                    fleet.scale_to(policy.desired(now, fleet, metrics), now)
            p99 = metrics.quantile(LatencyKind.TPOT, 0.99, 30.0)
            timeline.append(
                (now, s.live, s.ready, fleet.cap, s.waiting * s.ready, math.nan if p99 is None else p99)
            )

    asyncio.run(drive())
    first, finish, done = fleet.outcomes()
    ttft = first - fleet.sent
    out = fleet.output
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), 0.0)
    scored = fleet.sent >= scn.warmup_s
    met = done & (ttft <= scn.slo.ttft_s) & (tpot <= scn.slo.target_s) & scored
    refused = ((fleet.prompt + out > profile.max_model_len) | (fleet.prompt < 1)) & scored
    admissible = ~refused & scored
    tl = np.array(timeline)
    tl[:, 0] -= scn.warmup_s  # the scored part starts at 0; the warm-up is negative
    after = tl[:, 0] > 0
    return FleetRun(
        policy=policy.name,
        knob=policy.knob,
        cap_label=cap_label,
        scenario=scn.name,
        attainment=float(met[admissible].mean()) if admissible.any() else math.nan,
        goodput_tok_s=float(out[met].sum()) / scn.scored_s,
        gpu_hours=fleet.gpu_seconds(end, start=scn.warmup_s) / 3600.0,
        replica_changes=fleet.changes - changes_before,
        mean_replicas=float(tl[after, 1].mean()),
        lost=int((~done & admissible).sum()),
        refused=int(refused.sum()),
        t=tl[:, 0],
        live=tl[:, 1],
        ready=tl[:, 2],
        cap=tl[:, 3],
        waiting=tl[:, 4],
        p99_tpot=tl[:, 5],
        ablation=isinstance(policy, Ours) and policy.ablation,
    )
