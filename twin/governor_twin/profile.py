"""Engine profiles: the step-time model and the engine's limits, stored as data in `governor_twin/data/`.

A step of vLLM's V1 engine runs every scheduled sequence once: each decoding sequence produces one token and
each prefilling sequence consumes a chunk of its prompt. Its duration is modelled as

    t = base + per_seq × (sequences in the step) + per_kv_token × (context tokens read by decodes)
          + per_prefill_token × (prompt tokens computed in the step)

which is the joint least-squares form the H200 calibration fits (`calibration/h200_llama8b_step_fits.json`:
4.709 ms + 0.01738 ms × B + 2.813e-5 ms × Σctx for decodes; 0.02393 ms per prompt token for prefills).
`request_overhead_s` is what a request spends outside engine steps (HTTP, tokenizer-free input processing,
IPC, output streaming): it adds to TTFT and end-to-end latency but does not occupy the engine.
On a shared CPU the engine also stalls at random (`stall_rate_per_s`, `stall_mean_s`), which every running
request feels at once: that is where the real CPU runtime's latency tail comes from.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class StepTimeModel:
    base_s: float
    per_seq_s: float
    per_kv_token_s: float
    per_prefill_token_s: float
    # CPU contention: the engine process loses the core now and then (Poisson in time, exponential length).
    # Zero on a GPU profile; fitted on the shared 2-core machine, where it makes the P99 what it is.
    stall_rate_per_s: float = 0.0
    stall_mean_s: float = 0.0

    def step_s(self, n_seqs: int, kv_tokens: float, prefill_tokens: int) -> float:
        return (
            self.base_s
            + self.per_seq_s * n_seqs
            + self.per_kv_token_s * kv_tokens
            + self.per_prefill_token_s * prefill_tokens
        )

    def full_rate_rps(self, cap: int, prompts: Sequence[float], outputs: Sequence[float]) -> float:
        """Requests per second with all `cap` slots always busy, by work conservation: the engine's time
        is the sum of its steps' costs, so a request costs its prompt's prefill tokens, its share (1 /
        cap) of each decode step's fixed cost, its own per-sequence cost, and its decodes' context
        reads; the stalls take their share of the time. No queueing model and no measured latency: only
        the step costs, so it says what a law that knew them could know of a cap's service."""
        if cap < 1 or not len(prompts) or len(prompts) != len(outputs):
            raise ValueError("need cap >= 1 and as many outputs as prompts, at least one")
        per_token = self.base_s / cap + self.per_seq_s
        cost = sum(
            self.per_prefill_token_s * p + o * (per_token + self.per_kv_token_s * (p + o / 2))
            for p, o in zip(prompts, outputs, strict=True)
        )
        return (1.0 - self.stall_rate_per_s * self.stall_mean_s) * len(prompts) / cost


@dataclass(frozen=True)
class EngineProfile:
    """Everything the twin needs to behave like one engine: limits, KV size, step times, provenance."""

    name: str
    step: StepTimeModel
    ceiling: int  # --max-num-seqs at startup
    token_budget: int  # --max-num-batched-tokens (per-step token budget, chunked prefill)
    max_model_len: int
    block_size: int
    num_blocks: int
    request_overhead_s: float
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def kv_tokens(self) -> int:
        return self.block_size * self.num_blocks

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineProfile:
        values = dict(data)
        values["step"] = StepTimeModel(**values["step"])
        return cls(**values)


def load_profile(name: str) -> EngineProfile:
    """A profile stored in the package: `h200_llama8b` (calibration/) or `cpu_tiny_llama` (measured here)."""
    text = resources.files("governor_twin").joinpath("data", f"{name}.json").read_text()
    return EngineProfile.from_json(json.loads(text))


def with_limits(profile: EngineProfile, **changes: Any) -> EngineProfile:
    values = asdict(profile)
    values.update({k: asdict(v) if isinstance(v, StepTimeModel) else v for k, v in changes.items()})
    return EngineProfile.from_json(values)
