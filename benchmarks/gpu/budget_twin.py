"""The budget part's twin replay: the H200 profile at each measured token budget, beside the measurement.

    python benchmarks/gpu/budget_twin.py RESULTS_DIR OUT_DIR [--prefill-scales 0.5,1,1.5,2]

RESULTS_DIR holds gpubench's ``budget_summary.csv`` and ``budget_requests.csv``. For every point the twin's
engine (``governor_twin.engine.Engine``, profile ``h200_llama8b``, ``max_model_len`` raised to fit the long
prompts) replays the very requests the GPU saw (send times, prompt and output lengths) at the point's cap and
token budget, and drains. Its step model charges ``per_prefill_token_s`` x (prompt tokens in a step) to every
decode in that step: that is its prefill interference. Figures over the point's window [warmup, duration]:
TPOT P99 and TTFT P99 of the requests sent in it; ITL as the twin has it, the duration of every step that
ended in the window, weighted by the decodes in it (one gap per decoding request), so ITL P99 is per gap,
like the measured ``itl_p99_ms``. ``--prefill-scales`` repeats the replay with ``per_prefill_token_s`` scaled,
to see what a refit would predict (nothing is written into the profile); ``--prefill-fixed-ms`` adds a fixed
cost to every step that computes prompt tokens (a candidate refit form). Writes ``budget_vs_twin.csv``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from csvrows import Row, q, read_csv  # benchmarks/gpu is sys.path[0]
from governor_twin.profile import StepTimeModel
from gpustats import write_csv
from numpy.typing import NDArray

KEYS = ("itl_p99_ms", "tpot_p99_ms", "ttft_p99_s", "achieved_rps")


@dataclass(frozen=True)
class FixedPrefillStep(StepTimeModel):
    """The profile's step model plus a fixed cost for any step that computes prompt tokens."""

    prefill_fixed_s: float = 0.0

    def step_s(self, n_seqs: int, kv_tokens: float, prefill_tokens: int) -> float:
        extra = self.prefill_fixed_s if prefill_tokens > 0 else 0.0
        return super().step_s(n_seqs, kv_tokens, prefill_tokens) + extra


class StepLog:
    """Stands in for the engine's ITL histogram: keeps every (step end, step length, decodes) it is given."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.ends: list[NDArray[np.float64]] = []
        self.lengths: list[NDArray[np.float64]] = []
        self.weights: list[NDArray[np.float64]] = []

    def observe(self, values: NDArray[np.float64], weights: NDArray[np.float64] | None = None) -> None:
        # The engine observes a closed-form run of decode steps before moving its clock, and a single step
        # after it: both cases end at clock (+ the steps' cumulative length when the clock has not moved).
        ends = np.cumsum(values) + self.engine.clock
        if values.size == 1:
            ends = np.array([self.engine.clock])
        self.ends.append(ends)
        self.lengths.append(np.asarray(values, dtype=np.float64))
        self.weights.append(np.ones(values.size) if weights is None else np.asarray(weights, np.float64))

    def weighted_percentile(self, start: float, end: float, pct: float) -> float:
        if not self.ends:
            return math.nan
        ends, lengths = np.concatenate(self.ends), np.concatenate(self.lengths)
        weights = np.concatenate(self.weights)
        keep = (ends >= start) & (ends <= end) & (weights > 0)
        if not keep.any():
            return math.nan
        order = np.argsort(lengths[keep])
        cumulative = np.cumsum(weights[keep][order])
        index = int(np.searchsorted(cumulative, pct / 100.0 * cumulative[-1]))
        return float(lengths[keep][order][min(index, order.size - 1)])


def replay(
    requests: Sequence[Row], cap: int, budget: int, window: tuple[float, float], scale: float, fixed_s: float
) -> Row:
    from governor_twin.engine import DONE, Engine
    from governor_twin.profile import load_profile, with_limits

    start, end = window
    profile = load_profile("h200_llama8b")
    longest = max(int(r["in_len"]) + int(r["out_len"]) for r in requests)
    profile = with_limits(profile, max_model_len=max(profile.max_model_len, longest))
    per_token = profile.step.per_prefill_token_s * scale
    step = FixedPrefillStep(
        **{**vars(profile.step), "per_prefill_token_s": per_token}, prefill_fixed_s=fixed_s
    )
    engine = Engine(replace(profile, step=step), cap=cap, token_budget=budget)
    steps = StepLog(engine)
    engine.itl_hist = steps  # type: ignore[assignment]  # same observe() signature
    sent = np.array([float(r["t_send"]) for r in requests])
    engine.submit_many(
        sent,
        np.array([int(r["in_len"]) for r in requests], dtype=np.int64),
        np.array([int(r["out_len"]) for r in requests], dtype=np.int64),
    )
    engine.advance(float(sent.max()) + 3600.0)  # a finite horizon: the closed-form decode needs one
    n = engine.n
    done = engine.state[:n] == DONE
    sent_t, first, finish = engine.sent[:n], engine.first_token[:n], engine.finish[:n]
    out = engine.max_tokens[:n]
    inside = done & (sent_t >= start) & (sent_t <= end)
    multi = inside & (out > 1)
    tpot = (finish[multi] - first[multi]) / (out[multi] - 1)
    return {
        "itl_p99_ms": 1e3 * steps.weighted_percentile(start, end, 99),
        "itl_p50_ms": 1e3 * steps.weighted_percentile(start, end, 50),
        "tpot_p99_ms": 1e3 * q(tpot, 99),
        "ttft_p99_s": q((first - sent_t)[inside], 99),
        "achieved_rps": float(np.sum(done & (finish >= start) & (finish <= end))) / (end - start),
        "rejected": engine.rejected,
        "preemptions": engine.preemptions,
    }


def compare(results: Path, scales: Sequence[float], fixed_s: float = 0.0) -> list[Row]:
    summary = read_csv(results / "budget_summary.csv")
    requests = read_csv(results / "budget_requests.csv")
    rows: list[Row] = []
    for point in summary:
        if point.get("policy", "static") != "static":  # a governed point has no one budget to replay
            continue
        mine = [r for r in requests if int(r["point"]) == int(point["point"]) and not r["error"]]
        start, end = float(point["window_start_s"]), float(point["window_end_s"])
        row: Row = {"point": point["point"], "token_budget": point["token_budget"], "cap": point["cap"]}
        for key in (*KEYS, "itl_p50_ms", "max_gap_p99_ms", "mean_running", "n_merged_chunks"):
            row[f"gpu_{key}"] = point[key]
        for scale in scales:
            twin = replay(mine, int(point["cap"]), int(point["token_budget"]), (start, end), scale, fixed_s)
            tag = tag_of(scale)
            for key, value in twin.items():
                row[f"{tag}_{key}"] = value
            for key in KEYS:
                measured = float(point[key])
                error = 100.0 * (twin[key] - measured) / measured if measured else math.nan
                row[f"{tag}_{key}_err_pct"] = error
        rows.append(row)
    return rows


def tag_of(scale: float) -> str:
    return "twin" if scale == 1.0 else f"twin_x{scale:g}"


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prefill-scales", default="1", help="per_prefill_token_s multipliers, e.g. 1,1.5,2")
    parser.add_argument(
        "--prefill-fixed-ms", type=float, default=0.0, help="added to steps with prompt tokens"
    )
    parser.add_argument("--name", default="budget_vs_twin.csv")
    args = parser.parse_args()
    scales = [float(x) for x in args.prefill_scales.split(",")]
    rows = compare(args.results, scales, args.prefill_fixed_ms / 1e3)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / args.name, rows)
    for row in rows:
        cells = [f"budget {row['token_budget']:>5}"]
        for key in KEYS:
            twins = " / ".join(f"{row[f'{tag_of(s)}_{key}']:.3g}" for s in scales)
            cells.append(f"{key} gpu {float(row[f'gpu_{key}']):.3g} twin {twins}")
        print(" | ".join(cells))


if __name__ == "__main__":
    main()
