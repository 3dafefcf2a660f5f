"""Scenarios as data: phases of (arrival process, prompt/output length distributions), plus an SLO.

A scenario is a JSON document (the built-in ones live in `governor_twin/scenarios/*.json`):

    {"name": "steady", "profile": "h200_llama8b",
     "slo": {"latency": "tpot", "target_s": 0.025, "ttft_s": 2.5},
     "phases": [{"name": "steady", "duration_s": 600,
                 "arrivals": {"kind": "poisson", "rate_rps": 33},
                 "prompt": {"kind": "uniform", "low": 256, "high": 1024},
                 "output": {"kind": "uniform", "low": 64, "high": 256}}]}

Arrival kinds: `poisson` (rate_rps), `onoff` (rate_on_rps, rate_off_rps, on_s, off_s), `ramp` (from_rps,
to_rps, linear), `diurnal` (low_rps, high_rps, period_s: a raised cosine starting at the low), `trace`
(path of a CSV in the Azure LLM trace format `TIMESTAMP, ContextTokens, GeneratedTokens`; `load` = mean
rate as a fraction of the engine's measured capacity for the trace's lengths, or `rate_rps`; optional
`start_s`, `span_s` of the trace). A trace phase takes its lengths from the trace. Length kinds: `uniform`
(low, high), `mix` (parts: [{weight, low, high}]). The `slo` is per-token by default (TPOT P99), with a
TTFT bound that a request must also meet to count towards goodput (DistServe's definition); `ttft_s` is
also reported as a window SLO beside it.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from governor.core.signals import LatencyKind
from numpy.typing import NDArray

if TYPE_CHECKING:
    from governor_twin.profile import EngineProfile

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Slo:
    latency: LatencyKind = LatencyKind.TPOT
    target_s: float = 0.025
    ttft_s: float = 2.5


DEFAULT_PROMPT: dict[str, Any] = {"kind": "uniform", "low": 256, "high": 1024}  # the calibration's workload
DEFAULT_OUTPUT: dict[str, Any] = {"kind": "uniform", "low": 64, "high": 256}


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    arrivals: dict[str, Any]
    prompt: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_PROMPT))
    output: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_OUTPUT))


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    profile: str
    slo: Slo
    phases: tuple[Phase, ...]

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    def phase_bounds(self) -> list[tuple[str, float, float]]:
        out, t = [], 0.0
        for p in self.phases:
            out.append((p.name, t, t + p.duration_s))
            t += p.duration_s
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], base: Path | None = None) -> Scenario:
        slo = data.get("slo", {})
        phases = []
        for p in data["phases"]:
            arrivals = dict(p["arrivals"])
            if (
                arrivals.get("kind") == "trace"
                and base is not None
                and not Path(arrivals["path"]).is_absolute()
            ):
                arrivals["path"] = str((base / arrivals["path"]).resolve())
            phases.append(
                Phase(
                    name=p["name"],
                    duration_s=float(p.get("duration_s", 0.0)),
                    arrivals=arrivals,
                    prompt=dict(p.get("prompt", DEFAULT_PROMPT)),
                    output=dict(p.get("output", DEFAULT_OUTPUT)),
                )
            )
        return cls(
            name=data["name"],
            description=data.get("description", ""),
            profile=data.get("profile", "h200_llama8b"),
            slo=Slo(
                LatencyKind(slo.get("latency", "tpot")),
                float(slo.get("target_s", 0.025)),
                float(slo.get("ttft_s", 2.5)),
            ),
            phases=tuple(phases),
        )


def builtin_names() -> list[str]:
    folder = resources.files("governor_twin").joinpath("scenarios")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if path.suffix == ".json" and path.exists():
        return Scenario.from_json(json.loads(path.read_text()), path.parent)
    text = resources.files("governor_twin").joinpath("scenarios", f"{name_or_path}.json").read_text()
    return Scenario.from_json(json.loads(text), _shared_root())


def _shared_root() -> Path:
    """Built-in trace paths are relative to the shared data folder: $GOVERNOR_SHARED, else the `shared/`
    folder beside the checkout (or inside it), found upwards from this file."""
    import os

    env = os.environ.get("GOVERNOR_SHARED")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        for candidate in (parent.parent / "shared", parent / "shared"):
            if (candidate / "traces").is_dir():
                return candidate
    raise FileNotFoundError(
        f"no shared data folder (with traces/) beside or above {here.parent}: set GOVERNOR_SHARED"
    )


def trace_scenario(
    path: str,
    load: float = 0.8,
    phase_minutes: float = 10.0,
    slo: Slo | None = None,
    profile: str = "h200_llama8b",
    span_s: float | None = None,
) -> Scenario:
    """Any CSV in the Azure trace format, replayed time-scaled to `load` × capacity, cut into phases."""
    times, _, _ = read_trace(path)
    total = float(times[-1]) if span_s is None else min(span_s, float(times[-1]))
    step = phase_minutes * 60.0
    phases = []
    start = 0.0
    while start < total - 1e-9:
        span = min(step, total - start)
        phases.append(
            Phase(
                f"trace {start / 60:.0f}-{(start + span) / 60:.0f} min",
                0.0,
                {"kind": "trace", "path": path, "load": load, "start_s": start, "span_s": span},
            )
        )
        start += span
    return Scenario(
        f"trace:{Path(path).stem}",
        f"replay of {path} at {load:g} x capacity",
        profile,
        slo or Slo(),
        tuple(phases),
    )


@cache
def read_trace(path: str) -> tuple[FloatArray, IntArray, IntArray]:
    """(seconds since the first request, prompt tokens, output tokens), sorted by time."""
    stamps, prompts, outputs = [], [], []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            keys = {k.strip(): v for k, v in row.items()}
            stamps.append(datetime.fromisoformat(keys["TIMESTAMP"].strip()[:26]).timestamp())
            prompts.append(int(keys["ContextTokens"]))
            outputs.append(int(keys["GeneratedTokens"]))
    t = np.array(stamps)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return t, np.array(prompts, dtype=np.int64)[order], np.array(outputs, dtype=np.int64)[order]


# ------------------------------------------------------------------------------------------ generation
def _lengths(spec: dict[str, Any], n: int, rng: np.random.Generator) -> IntArray:
    kind = spec.get("kind", "uniform")
    if kind == "uniform":
        return rng.integers(int(spec["low"]), int(spec["high"]) + 1, n).astype(np.int64)
    if kind == "mix":
        parts = spec["parts"]
        weights = np.array([float(p["weight"]) for p in parts])
        choice = rng.choice(len(parts), size=n, p=weights / weights.sum())
        out = np.zeros(n, dtype=np.int64)
        for i, p in enumerate(parts):
            mask = choice == i
            out[mask] = rng.integers(int(p["low"]), int(p["high"]) + 1, int(mask.sum()))
        return out
    raise ValueError(f"unknown length distribution {kind!r}")


def _rate_fn(spec: dict[str, Any], duration: float) -> tuple[Any, float]:
    kind = spec["kind"]
    if kind == "poisson":
        r = float(spec["rate_rps"])
        return (lambda t: np.full_like(t, r)), r
    if kind == "onoff":
        on, off = float(spec["on_s"]), float(spec["off_s"])
        hi, lo = float(spec["rate_on_rps"]), float(spec["rate_off_rps"])
        return (lambda t: np.where(np.mod(t, on + off) < on, hi, lo)), max(hi, lo)
    if kind == "ramp":
        a, b = float(spec["from_rps"]), float(spec["to_rps"])
        return (lambda t: a + (b - a) * t / duration), max(a, b)
    if kind == "diurnal":
        lo, hi, period = float(spec["low_rps"]), float(spec["high_rps"]), float(spec["period_s"])
        return (lambda t: lo + (hi - lo) * 0.5 * (1 - np.cos(2 * np.pi * t / period))), hi
    raise ValueError(f"unknown arrival process {kind!r}")


def capacity_rps(
    prompts: IntArray, outputs: IntArray, profile_name: str | EngineProfile, requests: int = 4000
) -> float:
    """Completions per second of a saturated engine at its ceiling for these lengths (a twin measurement,
    `kept_full`). The profile by name, or a profile object (a derived one, not stored in the package)."""
    from governor_twin.profile import load_profile

    profile = load_profile(profile_name) if isinstance(profile_name, str) else profile_name
    ok = prompts + outputs <= profile.max_model_len
    return kept_full(profile, prompts[ok], outputs[ok], requests=requests).rate_rps


class FullEngine(NamedTuple):
    rate_rps: float  # completions per second
    tpot_p99_s: float  # TPOT P99 of the requests finishing in the measured span
    mean_running: float  # the running batch, averaged over that span


def kept_full(
    profile: EngineProfile, prompts: IntArray, outputs: IntArray, cap: int | None = None, requests: int = 4000
) -> FullEngine:
    """A twin engine kept full at `cap` (its ceiling by default) on these lengths: `requests` drawn from
    them all arrive at once, and the span between the 25th and 75th percentile completions is measured
    (the queue must outlast it: `requests` well above the cap). The running batch is each request's time
    from its first scheduling to its finish within the span, over the span's length."""
    from governor_twin.engine import Engine

    pick = np.random.default_rng(0).integers(0, prompts.size, requests)
    out = outputs[pick]
    engine = Engine(profile, cap=cap)
    engine.submit_many(np.zeros(requests), prompts[pick], out)
    engine.advance(1e9)
    finish = engine.finish[:requests]
    order = np.sort(finish)
    start, end = order[requests // 4], order[3 * requests // 4]
    span = max(end - start, 1e-9)
    steady = (finish >= start) & (finish <= end) & (out > 1)
    tpot = (finish[steady] - engine.first_token[:requests][steady]) / (out[steady] - 1)
    held = np.clip(finish, start, end) - np.clip(engine.first_scheduled[:requests], start, end)
    return FullEngine(
        float((requests // 2) / span),
        float(np.percentile(tpot, 99)) if tpot.size else float("nan"),
        float(np.sum(held) / span),
    )


@dataclass(frozen=True)
class Workload:
    sent_s: FloatArray
    prompt: IntArray
    output: IntArray
    phase: IntArray  # index of the phase each request arrived in


def generate(scenario: Scenario, seed: int = 0) -> tuple[Workload, Scenario]:
    """Draw the requests. Trace phases get their duration from the trace (set in the scenario returned)."""
    rng = np.random.default_rng(seed)
    sent, prompt, output, phase_ix = [], [], [], []
    phases: list[Phase] = []
    t0 = 0.0
    for i, ph in enumerate(scenario.phases):
        spec = ph.arrivals
        if spec["kind"] == "trace":
            times, tp, to = read_trace(str(spec["path"]))
            start = float(spec.get("start_s", 0.0))
            span = float(spec.get("span_s", times[-1] - start))
            sel = (times >= start) & ((times < start + span) | (start + span >= times[-1]))  # keep the last
            if "rate_rps" in spec:
                target = float(spec["rate_rps"])
            else:
                target = float(spec.get("load", 0.8)) * capacity_rps(tp, to, scenario.profile)
            mean_rate = times.size / max(float(times[-1]), 1e-9)
            scale = mean_rate / target  # trace seconds -> engine seconds
            t = (times[sel] - start) * scale
            duration = span * scale
            sent.append(t0 + t)
            prompt.append(tp[sel])
            output.append(to[sel])
            ph = Phase(ph.name, duration, ph.arrivals, ph.prompt, ph.output)
        else:
            duration = ph.duration_s
            rate, peak = _rate_fn(spec, duration)
            n = rng.poisson(peak * duration)
            cand = np.sort(rng.uniform(0.0, duration, n))
            keep = rng.uniform(0.0, peak, n) < rate(cand)
            t = cand[keep]
            sent.append(t0 + t)
            prompt.append(_lengths(ph.prompt, t.size, rng))
            output.append(_lengths(ph.output, t.size, rng))
        phase_ix.append(np.full(t.size, i, dtype=np.int64))
        phases.append(ph)
        t0 += duration
    workload = Workload(
        np.concatenate(sent), np.concatenate(prompt), np.concatenate(output), np.concatenate(phase_ix)
    )
    resolved = Scenario(scenario.name, scenario.description, scenario.profile, scenario.slo, tuple(phases))
    return workload, resolved
