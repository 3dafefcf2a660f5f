"""The matrix's workloads, built per profile: the built-in scenarios' shapes (steady, 2× step, bursts,
long-tail shift) plus prefill-heavy and the Azure trace, with every rate a share of the profile's own
capacity (`scenarios.capacity_rps` on the twin) and prompt lengths kept inside its max-model-len.

The shares are the built-in H200 scenarios' rates over the H200's capacity for the calibration lengths
(38.5 req/s): steady 33 → 0.85, step 18 → 36 → 0.47 → 0.94, bursts 44/14 → 1.15/0.36, long tail 16 → 0.42.
Durations are shorter than the built-ins' (a phase of `phase_s`, 150 s by default) to fit the matrix in
minutes; a phase still spans 30 ticks of 5 s and several 30 s law windows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from governor_twin.profile import EngineProfile
from governor_twin.scenarios import (
    DEFAULT_PROMPT,
    Phase,
    Scenario,
    Slo,
    capacity_rps,
    read_trace,
)

WORKLOADS: tuple[str, ...] = ("steady", "step2x", "bursts", "longtail", "prefill_heavy", "azure")
TRACE = "traces/azure_llm_2023_conv.csv"
TRACE_LOAD = 0.8


def _uniform(low: int, high: int) -> dict[str, Any]:
    return {"kind": "uniform", "low": low, "high": high}


def long_prompts(profile: EngineProfile) -> dict[str, Any]:
    """Half to 7/8 of max-model-len (2048-3584 on a 4096 engine, the built-in long tail)."""
    return _uniform(profile.max_model_len // 2, profile.max_model_len * 7 // 8)


def _capacity(profile: EngineProfile, prompt: tuple[int, int], output: tuple[int, int]) -> float:
    key = (profile.name, prompt, output)
    if key not in _CAPACITY:
        _CAPACITY[key] = _measure(profile, prompt, output)
    return _CAPACITY[key]


_CAPACITY: dict[tuple[str, tuple[int, int], tuple[int, int]], float] = {}


def _measure(profile: EngineProfile, prompt: tuple[int, int], output: tuple[int, int]) -> float:
    rng = np.random.default_rng(1)
    prompts = rng.integers(prompt[0], prompt[1] + 1, 2000).astype(np.int64)
    outputs = rng.integers(output[0], output[1] + 1, 2000).astype(np.int64)
    return capacity_rps(prompts, outputs, profile, requests=1500)


def reference_capacity(profile: EngineProfile) -> float:
    return _capacity(profile, (DEFAULT_PROMPT["low"], DEFAULT_PROMPT["high"]), (64, 256))


def _poisson(rate: float) -> dict[str, Any]:
    return {"kind": "poisson", "rate_rps": rate}


def _phases(profile: EngineProfile, name: str, phase_s: float, shared: str) -> list[Phase]:
    cap = reference_capacity(profile)
    if name == "steady":
        return [Phase("steady 0.85 C", 2 * phase_s, _poisson(0.85 * cap))]
    if name == "step2x":
        return [
            Phase("0.47 C", phase_s, _poisson(0.47 * cap)),
            Phase("0.94 C (2x)", phase_s, _poisson(0.94 * cap)),
        ]
    if name == "bursts":
        onoff = {
            "kind": "onoff",
            "rate_on_rps": 1.15 * cap,
            "rate_off_rps": 0.36 * cap,
            "on_s": 60,
            "off_s": 60,
        }
        return [Phase("on/off 1.15/0.36 C", 2 * phase_s, onoff)]
    if name == "longtail":
        lp = long_prompts(profile)
        mix = {"kind": "mix", "parts": [{"weight": 0.65, **_uniform(256, 1024)}, {"weight": 0.35, **lp}]}
        rate = 0.42 * cap
        return [
            Phase("short prompts", phase_s, _poisson(rate)),
            Phase("35 % long", phase_s, _poisson(rate), mix),
        ]
    if name == "prefill_heavy":
        lp = long_prompts(profile)
        out = (8, 32)
        rate = 0.8 * _capacity(profile, (lp["low"], lp["high"]), out)
        return [Phase("long prompts, short outputs 0.8 C", 2 * phase_s, _poisson(rate), lp, _uniform(*out))]
    if name == "azure":
        return _trace_phases(profile, phase_s, shared)
    raise ValueError(f"unknown workload {name!r}")


def _trace_phases(profile: EngineProfile, phase_s: float, shared: str) -> list[Phase]:
    """The trace's first minutes, time-scaled so its mean rate is 0.8 × capacity for its lengths; as much
    of the trace as fills two phases."""
    path = f"{shared}/{TRACE}"
    times, prompts, outputs = read_trace(path)
    ok = prompts + outputs <= profile.max_model_len
    target = TRACE_LOAD * capacity_rps(prompts[ok], outputs[ok], profile, requests=1500)
    scale = (times.size / float(times[-1])) / target  # trace seconds -> engine seconds
    span = phase_s / scale
    return [
        Phase(
            f"trace part {i + 1}",
            0.0,
            {"kind": "trace", "path": path, "rate_rps": target, "start_s": i * span, "span_s": span},
        )
        for i in range(2)
    ]


def build(profile: EngineProfile, name: str, slo: Slo, phase_s: float, shared: str) -> Scenario:
    phases = tuple(_phases(profile, name, phase_s, shared))
    return Scenario(f"{profile.name}/{name}", name, profile.name, slo, phases)
