"""The matrix's engine profiles and the SLO targets derived from each.

Two profiles are fitted (`h200_llama8b`, `cpu_tiny_llama`); the third, `h200_llama70b_derived`, is
*extrapolated* from the H200 8B step fits (`shared/calibration/h200_llama8b_step_fits.json`):

- base, per-sequence and per-prompt-token costs × the parameter ratio 70.6 B / 8.03 B (Llama-3.1-70B vs
  8B): a decode step reads every weight once and a prompt token costs ~2 FLOPs per parameter, so both
  scale with the parameter count at the same precision and the same accelerator speed;
- the per-KV-token cost × the KV-bytes-per-token ratio 2.5 (80 layers vs 32, both 8 KV heads × 128);
- the KV cache shrunk by that same 2.5 (the same bytes hold fewer tokens); ceiling, token budget,
  max-model-len and request overhead kept. It is a shape, not a measurement: no 70B run backs it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from governor_twin.engine import Engine
from governor_twin.profile import EngineProfile, StepTimeModel, load_profile

PARAMS_70B_OVER_8B = 70.6 / 8.03
KV_BYTES_70B_OVER_8B = 80 / 32
DERIVED = "h200_llama70b_derived"
PROFILES: tuple[str, ...] = ("h200_llama8b", "cpu_tiny_llama", DERIVED)
H200_TTFT_BOUND_S = 2.5  # the project's GPU report
REFERENCE_PROMPT, REFERENCE_OUTPUT = (256, 1024), (64, 256)  # the calibration's lengths


def derived_70b() -> EngineProfile:
    base = load_profile("h200_llama8b")
    s, k = base.step, PARAMS_70B_OVER_8B
    step = StepTimeModel(
        base_s=s.base_s * k,
        per_seq_s=s.per_seq_s * k,
        per_kv_token_s=s.per_kv_token_s * KV_BYTES_70B_OVER_8B,
        per_prefill_token_s=s.per_prefill_token_s * k,
    )
    return replace(
        base,
        name=DERIVED,
        step=step,
        num_blocks=int(base.num_blocks / KV_BYTES_70B_OVER_8B),
        provenance={
            "derived": "EXTRAPOLATED from h200_llama8b_step_fits.json, not measured",
            "step": f"base, per_seq, per_prefill_token x {k:.3f} (params 70.6B/8.03B); "
            f"per_kv_token x {KV_BYTES_70B_OVER_8B} (KV bytes per token)",
            "kv": f"num_blocks / {KV_BYTES_70B_OVER_8B}",
        },
    )


def get_profile(name: str) -> EngineProfile:
    return derived_70b() if name == DERIVED else load_profile(name)


def saturated_tpot_p99(profile: EngineProfile, cap: int, seed: int = 0) -> float:
    """TPOT P99 of a saturated engine at `cap` on the calibration's lengths (a twin measurement): enough
    requests arrive at once to keep `cap` sequences running, prefills of newcomers included."""
    rng = np.random.default_rng(seed)
    n = 16 * cap + 64
    prompts = rng.integers(REFERENCE_PROMPT[0], REFERENCE_PROMPT[1] + 1, n).astype(np.int64)
    outputs = rng.integers(REFERENCE_OUTPUT[0], REFERENCE_OUTPUT[1] + 1, n).astype(np.int64)
    engine = Engine(profile)
    engine.set_cap(cap)
    engine.submit_many(np.zeros(n), prompts, outputs)
    engine.advance(1e9)
    tpot = (engine.finish[:n] - engine.first_token[:n]) / np.maximum(outputs - 1, 1)
    return float(np.percentile(tpot[cap:], 99))  # the first `cap` start together: not in steady state


@dataclass(frozen=True)
class Targets:
    """TPOT P99 targets (tight < medium < loose) and the TTFT bound of one profile."""

    profile: str
    tight_s: float
    medium_s: float
    loose_s: float
    ttft_s: float

    def items(self) -> list[tuple[str, float]]:
        return [("tight", self.tight_s), ("medium", self.medium_s), ("loose", self.loose_s)]


def derive_targets(profile: EngineProfile, h200_batch1_s: float | None = None) -> Targets:
    """tight = 1.5 × TPOT P99 at cap 1; medium = TPOT P99 at half the ceiling; loose = 1.1 × TPOT P99 at
    the ceiling (each on a saturated twin). TTFT bound = 2.5 s on the H200 8B, scaled by the profile's
    cap-1 TPOT relative to the H200 8B's (a slower engine serves each request slower)."""
    one = saturated_tpot_p99(profile, 1)
    half = saturated_tpot_p99(profile, max(profile.ceiling // 2, 1))
    full = saturated_tpot_p99(profile, profile.ceiling)
    ref = h200_batch1_s if h200_batch1_s is not None else saturated_tpot_p99(load_profile("h200_llama8b"), 1)
    tight = 1.5 * one
    medium = max(half, 1.2 * tight)  # keep the order where the batch barely moves TPOT
    loose = max(1.1 * full, 1.2 * medium)
    return Targets(profile.name, tight, medium, loose, H200_TTFT_BOUND_S * one / ref)
