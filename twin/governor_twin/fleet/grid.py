"""Who runs in the benchmark: every peer with its documented defaults at vLLM's default cap (256) and at the
best static cap, plus its main knob's two alternatives at the best static cap; our policy with the same
number of variants (three). The best static cap is the law's own rule 13 (the largest measured H200 cap whose
TPOT P99 meets the SLO), the same for everyone."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from governor.core.law import DEFAULT_LAW, LAW_NAMES, LawConfig, initial_state
from governor.core.planner import Cooldowns, ReplicaBounds

from governor_twin.fleet.ours import Ours
from governor_twin.fleet.peers import AibrixKpa, DynamoPlanner, HpaKv, KedaWaiting, LlmdSlo, ReplicaPolicy
from governor_twin.fleet.scenarios import FleetScenario

VLLM_DEFAULT_CAP = 256
BOUNDS = ReplicaBounds(min_replicas=1, max_replicas=12)


def law_config(scn: FleetScenario) -> LawConfig:
    return LawConfig(
        slo_target_s=scn.slo.target_s, ceiling=VLLM_DEFAULT_CAP, gpu_type="h200", ttft_bound_s=scn.slo.ttft_s
    )


def best_static_cap(scn: FleetScenario) -> int:
    return initial_state(law_config(scn)).cap


Factory = Callable[[], Ours | ReplicaPolicy]


def entries(scn: FleetScenario) -> list[tuple[str, Factory]]:
    """(cap label, policy factory) for every run of one scenario."""
    best = best_static_cap(scn)
    slo = scn.slo
    peers: list[tuple[Callable[[int, float | None], ReplicaPolicy], tuple[float, float]]] = [
        (lambda c, k: KedaWaiting(c) if k is None else KedaWaiting(c, threshold=k), (2.0, 10.0)),
        (lambda c, k: AibrixKpa(c) if k is None else AibrixKpa(c, target=k), (32.0, 64.0)),
        (
            lambda c, k: LlmdSlo(c, slo) if k is None else LlmdSlo(c, slo, band=(0.4 * k, 0.55 * k)),
            (0.7, 1.4),
        ),
        (
            lambda c, k: (
                DynamoPlanner(c, scn.replica_rps)
                if k is None
                else DynamoPlanner(c, scn.replica_rps, headroom=k)
            ),
            (0.8, 1.2),
        ),
        (lambda c, k: HpaKv(c) if k is None else HpaKv(c, target=k), (0.5, 0.9)),
    ]
    out: list[tuple[str, Factory]] = []
    for make, alternatives in peers:
        out.append((f"{VLLM_DEFAULT_CAP}", partial(make, VLLM_DEFAULT_CAP, None)))
        out.append((f"{best} (best static)", partial(make, best, None)))
        for k in alternatives:
            out.append((f"{best} (best static)", partial(make, best, k)))
    cfg = law_config(scn)
    out.append(("law", lambda: Ours(cfg, BOUNDS, Cooldowns())))
    out.append(("law", lambda: Ours(cfg, BOUNDS, Cooldowns(down_s=120.0), knob="down 120 s")))
    # The ablations: replicas on the law's wish only (no demand rule), and the same law with the planner
    # asked one step at a time (the planner before issue 14).
    out.append(("law", lambda: Ours(cfg, BOUNDS, Cooldowns(), knob="law's wish only", demand_on=False)))
    out.append(("law", lambda: Ours(cfg, BOUNDS, Cooldowns(), knob="unsized steps", sized=False)))
    # and without the Alertmanager path (every other row of ours has it)
    out.append(("law", lambda: Ours(cfg, BOUNDS, Cooldowns(), knob="no Alertmanager path", alert_path=False)))
    # and the other law in the same control step (DEFAULT_LAW runs in every row above)
    for other in (name for name in LAW_NAMES if name != DEFAULT_LAW):
        out.append(("law", partial(Ours, cfg, BOUNDS, Cooldowns(), knob=f"{other} law", law=other)))
    return out
