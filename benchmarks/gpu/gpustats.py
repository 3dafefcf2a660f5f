"""The GPU proof's summaries: percentiles, the calibration's window columns, per-phase loop rows, CSV rows.
Standard library only (it runs under the GPU image's python3)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuload import Request  # benchmarks/gpu is sys.path[0]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def window_summary(
    requests: Sequence[Request], samples: Sequence[dict[str, Any]], start: float, end: float
) -> dict[str, Any]:
    """The calibration's columns over the window [start, end] (latencies: requests sent in the window)."""
    width = end - start
    sent = [r for r in requests if not math.isnan(r.t_send) and start <= r.t_send <= end]
    done = [r for r in sent if r.ok]
    completions = sum(1 for r in requests if r.ok and start <= r.t_end <= end)
    chunks = sum(1 for r in requests for t in r.chunks if start <= t <= end)
    gaps = [b - a for r in done for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
    inside = [s for s in samples if start <= s["t"] <= end]
    running = [float(s["running"]) for s in inside if "running" in s]
    waiting = [float(s["waiting"]) for s in inside if "waiting" in s]
    kv = [float(s["kv"]) for s in inside if "kv" in s]
    pre = [float(s["preemptions"]) for s in samples if "preemptions" in s]
    ttft = [r.ttft for r in done]
    tpot = [r.tpot for r in done if not math.isnan(r.tpot)]
    e2e = [r.e2e for r in done]
    row: dict[str, Any] = {
        "offered_rps": len(sent) / width,
        "achieved_rps": completions / width,
        "output_tok_s": chunks / width,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "tpot_p50_ms": 1e3 * percentile(tpot, 50),
        "tpot_p90_ms": 1e3 * percentile(tpot, 90),
        "tpot_p99_ms": 1e3 * percentile(tpot, 99),
        "itl_p50_ms": 1e3 * percentile(gaps, 50),
        "itl_p99_ms": 1e3 * percentile(gaps, 99),
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p99_s": percentile(e2e, 99),
        "mean_running": mean(running),
        "max_running": max(running) if running else math.nan,
        "mean_waiting": mean(waiting),
        "kv_usage_max": max(kv) if kv else math.nan,
        "preemptions": (pre[-1] - pre[0]) if len(pre) > 1 else math.nan,
        "n_sent_window": len(sent),
        "n_measured": len(done),
        "n_incomplete_window": len(sent) - len(done),
        "errors": sum(1 for r in requests if r.error and r.error != "cancelled"),
    }
    backlog = row["mean_waiting"] > 10 or row["n_incomplete_window"] > 0
    row["saturated"] = int(backlog or row["achieved_rps"] < 0.93 * row["offered_rps"])
    return row


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()})


def request_rows(requests: Sequence[Request], label: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **label,
            "id": r.index,
            "phase": r.phase,
            "t_sched": r.t_sched,
            "t_send": r.t_send,
            "in_len": r.in_len,
            "out_len": r.out_len,
            "completion_tokens": r.completion_tokens if r.completion_tokens is not None else "",
            "n_chunks": len(r.chunks),
            "ttft_s": r.ttft,
            "tpot_s": r.tpot,
            "e2e_s": r.e2e,
            "error": r.error,
        }
        for r in requests
    ]


def phase_rows(
    policy: str,
    requests: Sequence[Request],
    samples: Sequence[dict[str, Any]],
    phases: Sequence[tuple[float, float]],
    slo_s: float,
) -> list[dict[str, Any]]:
    rows = []
    start = 0.0
    bounds = [*[(i, d, r) for i, (d, r) in enumerate(phases)], (-1, sum(d for d, _ in phases), math.nan)]
    for index, duration, rate in bounds:
        begin, end = (start, start + duration) if index >= 0 else (0.0, duration)
        sent = [r for r in requests if (r.phase == index or index < 0) and not math.isnan(r.t_send)]
        done = [r for r in sent if r.ok]
        good = [r for r in done if r.tpot <= slo_s]
        tpot = [r.tpot for r in done if not math.isnan(r.tpot)]
        inside = [s for s in samples if begin <= s["t"] <= end]
        caps = [float(s["cap"]) for s in inside if "cap" in s]
        rows.append(
            {
                "policy": policy,
                "phase": index if index >= 0 else "all",
                "rate_target_rps": rate,
                "phase_start_s": begin,
                "phase_s": end - begin,
                "sent": len(sent),
                "completed": len(done),
                "slo_ms": 1e3 * slo_s,
                "slo_attainment": len(good) / len(sent) if sent else math.nan,
                "goodput_rps": len(good) / (end - begin),
                "throughput_rps": len(done) / (end - begin),
                "tpot_p50_ms": 1e3 * percentile(tpot, 50),
                "tpot_p99_ms": 1e3 * percentile(tpot, 99),
                "ttft_p50_s": percentile([r.ttft for r in done], 50),
                "ttft_p99_s": percentile([r.ttft for r in done], 99),
                "e2e_p99_s": percentile([r.e2e for r in done], 99),
                "mean_running": mean([float(s["running"]) for s in inside if "running" in s]),
                "mean_waiting": mean([float(s["waiting"]) for s in inside if "waiting" in s]),
                "cap_mean": mean(caps),
                "cap_min": min(caps) if caps else math.nan,
                "cap_max": max(caps) if caps else math.nan,
            }
        )
        if index >= 0:
            start += duration
    return rows
