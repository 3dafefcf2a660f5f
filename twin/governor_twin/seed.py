"""The seed law (001 §3.2), verbatim, for the benchmark's comparison. Do not use it to govern anything:
`governor.core.law` states each of its defects and the rule that fixes it."""

from __future__ import annotations

from governor.core.law import Decision, LawConfig, LawState, Observation
from governor.core.law.derive import known


def seed_step(cap: int, p99_s: float, slo_s: float) -> int:
    if p99_s > slo_s * 1.1:
        return max(1, int(cap * 0.8))
    if p99_s < slo_s * 0.9:
        return min(256, int(cap * 1.15))
    return cap


def seed_decide(state: LawState, obs: Observation, cfg: LawConfig) -> Decision:
    """The seed law behind `decide`'s signature: raw P99, no band memory, no bounds but [1, 256]."""
    p99 = known(obs.p99_s)
    new = state.cap if p99 is None else seed_step(state.cap, p99, cfg.slo_target_s)
    reason = "no-data" if p99 is None else "seed"
    return Decision(
        cap=new,
        reason=reason,
        detail="seed law (001 §3.2)",
        mode="normal",
        replica_wish=0,
        state=state.model_copy(update={"cap": new, "p99_smoothed": p99, "ticks": state.ticks + 1}),
        previous_cap=state.cap,
    )
