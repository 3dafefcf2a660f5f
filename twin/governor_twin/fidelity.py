"""Fidelity of the twin: against the H200 calibration rows, and against the real vLLM CPU runtime.

H200: every row of `calibration/h200_llama8b_serving.csv` is replayed in the twin with the same workload
(Poisson at the offered rate, prompts U[256, 1024], outputs U[64, 256], the row's duration, window [10 s,
end], 15 s grace). Unsaturated rows compare throughput and TTFT/TPOT/E2E P50/P99; saturated rows compare the
achieved rate only (the README: their latencies are censored by the run length).
CPU: a closed loop at several concurrencies, measured on the real runtime and run in the twin (virtual time).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from governor_twin.engine import DONE, Engine
from governor_twin.measure import best_of, little
from governor_twin.profile import EngineProfile, load_profile
from governor_twin.scenarios import _shared_root

H200_TOLERANCE = 0.15
CPU_TOLERANCE = 0.20
H200_METRICS = (
    "achieved_rps",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "e2e_p50_s",
    "e2e_p99_s",
)


@dataclass(frozen=True)
class Comparison:
    label: str
    metric: str
    measured: float
    twin: float

    @property
    def error(self) -> float:
        return (self.twin - self.measured) / self.measured if self.measured else float("nan")


def h200_rows(path: Path | None = None) -> list[dict[str, str]]:
    path = path or _shared_root() / "calibration" / "h200_llama8b_serving.csv"
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def twin_serving_point(
    profile: EngineProfile, cap: int, rate: float, duration: float, seed: int = 1
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    n = int(rate * duration * 1.2) + 10
    sent = np.cumsum(rng.exponential(1 / rate, n))
    sent = sent[sent < duration]
    n = sent.size
    engine = Engine(profile, cap=cap)
    engine.submit_many(sent, rng.integers(256, 1025, n), rng.integers(64, 257, n))
    engine.advance(duration + 15.0)
    sl = slice(0, n)
    window = (engine.sent[sl] >= 10.0) & (engine.state[sl] == DONE)
    ttft = (engine.first_token - engine.sent)[sl][window]
    tpot = ((engine.finish - engine.first_token)[sl] / (engine.max_tokens[sl] - 1))[window]
    e2e = (engine.finish - engine.sent)[sl][window]
    finished = engine.finish[sl]
    achieved = float(np.sum((finished >= 10.0) & (finished < duration))) / (duration - 10.0)
    return {
        "achieved_rps": achieved,
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "tpot_p50_ms": 1e3 * float(np.percentile(tpot, 50)),
        "tpot_p99_ms": 1e3 * float(np.percentile(tpot, 99)),
        "e2e_p50_s": float(np.percentile(e2e, 50)),
        "e2e_p99_s": float(np.percentile(e2e, 99)),
    }


def h200_fidelity(profile: EngineProfile | None = None) -> list[Comparison]:
    profile = profile or load_profile("h200_llama8b")
    out: list[Comparison] = []
    for row in h200_rows():
        cap, rate = int(row["max_num_seqs"]), float(row["offered_rps"])
        twin = twin_serving_point(profile, cap, rate, float(row["duration_s"]))
        label = f"mns {cap} @ {float(row['rate_target_rps']):g} rps"
        metrics = ("achieved_rps",) if row["saturated"] == "1" else H200_METRICS
        out.extend(Comparison(label, m, float(row[m]), twin[m]) for m in metrics)
    return out


# ------------------------------------------------------------------------------------------------ CPU
def closed_loop_twin(
    profile: EngineProfile,
    concurrency: int,
    duration_s: float,
    prompt_tokens: int,
    output_tokens: int,
    warmup_s: float = 1.0,
) -> dict[str, float]:
    """The twin under the same closed loop as `measure.closed_loop` (virtual time), read the same way."""
    engine = Engine(profile)
    for _ in range(concurrency):
        engine.submit(0.0, prompt_tokens, output_tokens)
    end = warmup_s + duration_s
    while engine.clock < end:
        engine.advance(end + 5.0, stop_on_finish=True)
        finished, engine.finished = engine.finished, []
        for rid in finished:
            engine.submit(float(engine.finish[rid]), prompt_tokens, output_tokens)
        if not finished:
            break
    n = engine.n
    done = engine.state[:n] == DONE
    in_window = done & (engine.finish[:n] >= warmup_s) & (engine.finish[:n] <= end)
    keep = in_window & (engine.sent[:n] >= warmup_s)
    spans = (engine.finish - engine.sent)[:n]
    e2e = spans[keep]
    tokens = float(engine.max_tokens[:n][in_window].sum())
    return {
        "tokens_per_s": little(concurrency, tokens, float(spans[in_window].sum())),
        "e2e_p50_s": float(np.percentile(e2e, 50)) if e2e.size else float("nan"),
        "e2e_p99_s": float(np.percentile(e2e, 99)) if e2e.size else float("nan"),
    }


CPU_METRICS = ("tokens_per_s", "e2e_p50_s", "e2e_p99_s")
# The twin's side of a comparison is its expectation, not one draw: its stall process would make the P99 of
# a run as short as the real one (a few stalls, or none) as random as the real engine's.
TWIN_SECONDS = 60.0


def cpu_comparisons(
    profile: EngineProfile,
    measured_levels: list[dict[str, float]],
    prompt_tokens: int,
    output_tokens: int,
    duration_s: float,
) -> list[Comparison]:
    out: list[Comparison] = []
    for level in measured_levels:
        c = int(level["concurrency"])
        twin = closed_loop_twin(profile, c, max(duration_s, TWIN_SECONDS), prompt_tokens, output_tokens)
        out.extend(Comparison(f"concurrency {c}", m, float(level[m]), twin[m]) for m in CPU_METRICS)
    return out


def stored_cpu_fidelity() -> dict[str, Any] | None:
    path = resources.files("governor_twin").joinpath("data", "cpu_fidelity.json")
    return json.loads(path.read_text()) if path.is_file() else None


# ------------------------------------------------------------------------------------------- markdown
def _table(comparisons: list[Comparison], tolerance: float) -> list[str]:
    lines = ["| point | metric | measured | twin | error |", "|---|---|---|---|---|"]
    for c in comparisons:
        flag = "" if abs(c.error) <= tolerance else " ⚠"
        lines.append(
            f"| {c.label} | {c.metric} | {c.measured:.4g} | {c.twin:.4g} | {100 * c.error:+.1f} %{flag} |"
        )
    return lines


def fidelity_markdown() -> str:
    h200 = h200_fidelity()
    errors = np.array([abs(c.error) for c in h200])
    within = float(np.mean(errors <= H200_TOLERANCE))
    lines = [
        f"**Twin vs H200 calibration rows** (tolerance ±{H200_TOLERANCE:.0%}): {100 * within:.0f} % of "
        f"{len(h200)} comparisons within, median |error| {100 * float(np.median(errors)):.1f} %, largest "
        f"{100 * float(errors.max()):.1f} % (⚠ = outside). Saturated rows compare the achieved rate only.",
        "",
        *_table(h200, H200_TOLERANCE),
        "",
    ]
    cpu = stored_cpu_fidelity()
    if cpu is None:
        lines.append(
            "**Twin vs real vLLM CPU runtime**: not measured yet (`python -m governor_twin.calibrate`)."
        )
    else:
        comps = [Comparison(**c) for c in cpu["comparisons"]]
        cpu_err = np.array([abs(c.error) for c in comps])
        lines += [
            f"**Twin vs the real vLLM CPU runtime** (tolerance ±{CPU_TOLERANCE:.0%}), {cpu['how']}: "
            f"{100 * float(np.mean(cpu_err <= CPU_TOLERANCE)):.0f} % of {len(comps)} comparisons within, "
            "largest "
            f"|error| {100 * float(cpu_err.max()):.1f} %.",
            "",
            *_table(comps, CPU_TOLERANCE),
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ CLI
FIDELITY_LEVELS = (2, 8, 16)


def measure_cpu_fidelity(
    base_url: str, model: str, ceiling: int, seconds: float = 2.5, repeats: int = 3
) -> dict[str, Any]:
    """The real runtime at three concurrencies (best of `repeats`) against the stored CPU profile."""
    import asyncio

    from governor_twin.calibrate import OUTPUT, PROMPT  # calibrate imports this module
    from governor_twin.profile import with_limits

    profile = with_limits(load_profile("cpu_tiny_llama"), ceiling=ceiling)
    levels = [
        asyncio.run(best_of(base_url, model, c, seconds, PROMPT, OUTPUT, repeats, seed=100 + c)).summary()
        for c in FIDELITY_LEVELS
    ]
    comps = cpu_comparisons(profile, levels, PROMPT, OUTPUT, seconds)
    return {
        "how": (
            f"out of sample: closed loops at concurrency {', '.join(map(str, FIDELITY_LEVELS))} (prompt "
            f"{PROMPT}, output {OUTPUT} tokens, best of {repeats} × {seconds:g} s), measured after the fit"
        ),
        "comparisons": [
            {"label": c.label, "metric": c.metric, "measured": c.measured, "twin": c.twin} for c in comps
        ],
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m governor_twin.fidelity",
        description="Twin vs a real vLLM CPU runtime; writes data/cpu_fidelity.json",
    )
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ceiling", type=int, default=32)
    args = parser.parse_args(argv)
    result = measure_cpu_fidelity(args.base_url, args.model, args.ceiling)
    (Path(__file__).parent / "data" / "cpu_fidelity.json").write_text(json.dumps(result, indent=1) + "\n")
    for c in result["comparisons"]:
        comp = Comparison(**c)
        print(
            f"{comp.label:16s} {comp.metric:14s} {comp.measured:9.4g} {comp.twin:9.4g} "
            f"{100 * comp.error:+6.1f} %"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
