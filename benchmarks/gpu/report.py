"""Turn one GPU run's results folder into benchmarks/gpu/results/: CSVs, plots and the twin's predictions.

    python benchmarks/gpu/report.py RAW_DIR [--calibration ../shared/calibration/h200_llama8b_serving.csv]
    python benchmarks/gpu/report.py RAW_DIR --loop-only results/loop-DATE   # a loop-only re-run

RAW_DIR is the ``results`` folder that device_poll.sh packs (results.tgz). Writes, under
benchmarks/gpu/results/: serving_vs_calibration.csv, loop_summary.csv (measured + twin rows), probe.json,
probe_timeline.csv, probe_changes.csv, loop_timeline.csv, raw/*.csv.gz + logs, and probe.png, serving.png,
loop.png. The twin (governor_twin) replays the very requests the GPU saw (same send times and lengths) on its
H200 profile. With --loop-only (a run with BENCH_PART=loop), only the loop's table, plot and logs are written,
into the folder given.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from csvrows import Row, q, read_csv  # benchmarks/gpu is sys.path[0]
from gpuplots import phase_bounds, plot_loop, plot_probe, plot_serving
from gpustats import write_csv  # the run's own CSV writer

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
TTFT_BOUND_S = 2.5  # second goodput: TPOT within the SLO and TTFT within this (the twin's default TTFT bound)


def pct_diff(ours: float, theirs: float) -> float:
    return 100.0 * (ours - theirs) / theirs if theirs else math.nan


# ---------------------------------------------------------------- twin


def twin_replay(
    requests: Sequence[Row],
    phases: Sequence[tuple[str, float]],
    policy: Any,
    slo_s: float,
    tail_s: float = 120.0,
) -> Any:
    """Run the twin on the measured requests (send time, prompt and output lengths), then let it drain."""
    from governor.core.signals import LatencyKind
    from governor_twin import sim
    from governor_twin.scenarios import Phase, Scenario, Slo, Workload

    sent = np.array([float(r["t_send"]) for r in requests])
    order = np.argsort(sent, kind="stable")
    work = Workload(
        sent_s=sent[order],
        prompt=np.array([int(r["in_len"]) for r in requests], dtype=np.int64)[order],
        output=np.array([int(r["out_len"]) for r in requests], dtype=np.int64)[order],
        phase=np.array([int(r["phase"]) for r in requests], dtype=np.int64)[order],
    )
    scenario = Scenario(
        "gpu-proof",
        "replay of the H200 run",
        "h200_llama8b",
        Slo(LatencyKind.TPOT, slo_s),
        (
            *(Phase(name, duration, {"kind": "replay"}) for name, duration in phases),
            Phase("drain", tail_s, {}),
        ),
    )
    return sim.run(scenario, policy, workload=(work, scenario))


def twin_window(result: Any, start: float, end: float) -> Row:
    sent, first, finish = result.sent, result.first_token, result.finish
    width = end - start
    in_window = (sent >= start) & (sent <= end) & result.done
    tpot = result.tpot[in_window & (result.output > 1)]
    return {
        "achieved_rps": float(np.sum(result.done & (finish >= start) & (finish <= end))) / width,
        "tpot_p50_ms": 1e3 * q(tpot, 50),
        "tpot_p99_ms": 1e3 * q(tpot, 99),
        "ttft_p50_s": q((first - sent)[in_window], 50),
        "ttft_p99_s": q((first - sent)[in_window], 99),
    }


# ---------------------------------------------------------------- parts


def serving_table(raw: Path, calibration: Path) -> list[Row]:
    from governor_twin.policies import StaticPolicy

    ours = read_csv(raw / "serving.csv")
    theirs = {(int(r["max_num_seqs"]), float(r["rate_target_rps"])): r for r in read_csv(calibration)}
    requests = read_csv(raw / "serving_requests.csv")
    rows: list[Row] = []
    keys = (
        "achieved_rps",
        "output_tok_s",
        "tpot_p50_ms",
        "tpot_p99_ms",
        "ttft_p50_s",
        "ttft_p99_s",
        "itl_p99_ms",
    )
    for point in ours:
        cap, rate = int(point["cap"]), float(point["rate_target_rps"])
        cal = theirs.get((cap, rate), {})
        row: Row = {
            "cap": cap,
            "rate_rps": rate,
            "saturated": point["saturated"],
            "cal_saturated": cal.get("saturated"),
        }
        for key in keys:
            row[f"live_{key}"] = point[key]
            row[f"restart_{key}"] = cal.get(key, math.nan)
            row[f"diff_{key}_pct"] = pct_diff(float(point[key]), float(cal.get(key, math.nan) or math.nan))
        row["live_mean_running"] = point["mean_running"]
        row["restart_mean_running"] = cal.get("mean_running", math.nan)
        row["live_window_s"] = float(point["window_end_s"]) - float(point["window_start_s"])
        row["restart_window_s"] = float(cal.get("window_end_s", math.nan)) - float(
            cal.get("window_start_s", math.nan)
        )
        mine = [r for r in requests if int(r["cap"]) == cap and float(r["rate"]) == rate]
        result = twin_replay(mine, [("point", float(point["duration_s"]))], StaticPolicy(cap), 0.02)
        for key, value in twin_window(
            result, float(point["window_start_s"]), float(point["window_end_s"])
        ).items():
            row[f"twin_{key}"] = value
        rows.append(row)
    return rows


def loop_table(
    raw: Path,
    slo_ms: float,
    phases: list[tuple[float, float]],
    governor_args: dict[str, Any],
    out: Path = OUT,
    device: str = "H200",
) -> list[Row]:
    """The measured rows (source: the card) with goodput within the TTFT bound too, then the twin's replay of
    the same trace; the twin's engine is the H200's, so a run on another card gets no twin rows."""
    from governor.core.law import DEFAULT_LAW, LAWS, LawConfig
    from governor.core.signals import LatencyKind
    from governor_twin.policies import LawPolicy, StaticPolicy

    measured = read_csv(raw / "loop_summary.csv")
    requests = read_csv(raw / "loop_requests.csv")
    rows = [{"source": device, **r} for r in measured]
    for row in rows:
        mine = [
            r
            for r in requests
            if r["policy"] == row["policy"]
            and (row["phase"] == "all" or int(r["phase"]) == int(row["phase"]))
        ]
        good = [
            r
            for r in mine
            if not r["error"] and float(r["tpot_s"]) <= slo_ms / 1e3 and float(r["ttft_s"]) <= TTFT_BOUND_S
        ]
        row[f"goodput_ttft{TTFT_BOUND_S:g}s_rps"] = len(good) / float(row["phase_s"])
    if device != "H200":
        return rows
    trace = [r for r in requests if r["policy"] == requests[0]["policy"]]  # every policy got the same trace
    names = [(f"phase {i}", d) for i, (d, _) in enumerate(phases)]
    cfg = LawConfig(slo_target_s=slo_ms / 1e3, latency_kind=LatencyKind.TPOT, ceiling=256, **governor_args)
    policies: list[tuple[str, Any]] = [
        ("static256", StaticPolicy(256, tick_s=2.0, window_s=10.0)),
        ("static64", StaticPolicy(64, tick_s=2.0, window_s=10.0)),
        ("governor", LawPolicy("governor", cfg, law=LAWS[DEFAULT_LAW])),  # the operator's default law
    ]
    for name in LAWS:  # a law named with GOVERNOR_VARIANTS="NAME=--law NAME", run beside the default
        if any(r["policy"] == f"governor-{name}" for r in measured):
            policies.append((f"governor-{name}", LawPolicy(f"governor-{name}", cfg, law=LAWS[name])))
    for name, policy in policies:
        result = twin_replay(trace, names, policy, slo_ms / 1e3)
        start = 0.0
        bounds = [(i, start_end) for i, start_end in enumerate(phase_bounds(phases))]
        for index, (start, end) in [*bounds, (-1, (0.0, sum(d for d, _ in phases)))]:
            sel = (result.phase == index) if index >= 0 else np.ones_like(result.done)
            done = sel & result.done
            tpot = result.tpot
            good = done & (tpot <= slo_ms / 1e3)
            ttft = result.first_token - result.sent
            caps = result.tick_cap[(result.tick_t > start) & (result.tick_t <= end)]
            rows.append(
                {
                    "source": "twin",
                    "policy": name,
                    "phase": index if index >= 0 else "all",
                    "rate_target_rps": phases[index][1] if index >= 0 else math.nan,
                    "phase_s": end - start,
                    "sent": int(np.sum(sel)),
                    "completed": int(np.sum(done)),
                    "slo_ms": slo_ms,
                    "slo_attainment": float(np.sum(good)) / max(int(np.sum(sel)), 1),
                    "goodput_rps": float(np.sum(good)) / (end - start),
                    f"goodput_ttft{TTFT_BOUND_S:g}s_rps": float(np.sum(good & (ttft <= TTFT_BOUND_S)))
                    / (end - start),
                    "throughput_rps": float(np.sum(done)) / (end - start),
                    "tpot_p99_ms": 1e3 * q(tpot[done], 99),
                    "ttft_p99_s": q((result.first_token - result.sent)[done], 99),
                    "cap_mean": float(np.mean(caps)) if caps.size else math.nan,
                    "cap_min": int(caps.min()) if caps.size else math.nan,
                    "cap_max": int(caps.max()) if caps.size else math.nan,
                }
            )
        if name.startswith("governor"):
            write_csv(
                out / f"loop_twin_{name.replace('-', '_')}_ticks.csv",
                [
                    {"t": t, "cap": c, "p99_s": p, "running": r, "waiting": w, "reason": why}
                    for t, c, p, r, w, why in zip(
                        result.tick_t,
                        result.tick_cap,
                        result.tick_p99,
                        result.tick_running,
                        result.tick_waiting,
                        result.reasons,
                        strict=True,
                    )
                ],
            )
    return rows


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("raw", type=Path)
    parser.add_argument(
        "--calibration", type=Path, default=HERE.parents[2] / "shared/calibration/h200_llama8b_serving.csv"
    )
    parser.add_argument("--slo-ms", type=float, default=20.0)
    parser.add_argument("--phases", default="30:8,45:40,30:8")
    parser.add_argument("--loop-only", type=Path, help="folder for a loop-only run's table, plot and logs")
    args = parser.parse_args()
    phases = [(float(d), float(r)) for d, r in (p.split(":") for p in args.phases.split(","))]
    governor_args = {"tick_s": 2.0, "window_s": 10.0, "cooldown_s": 4.0, "gpu_type": "H200"}
    if args.loop_only:
        loop_only(args.raw, args.loop_only, args.slo_ms, phases, governor_args)
        return
    OUT.mkdir(exist_ok=True)
    (OUT / "raw").mkdir(exist_ok=True)
    for name in ("serving_requests.csv", "loop_requests.csv", "probe_requests.csv", "metrics_end.txt"):
        with (args.raw / name).open("rb") as source, gzip.open(OUT / "raw" / f"{name}.gz", "wb") as target:
            shutil.copyfileobj(source, target)
    for name in ("server.log", "governor.log", "run.log", "serving.csv", "serving_timeline.csv"):
        shutil.copy(args.raw / name, OUT / "raw" / name)
    for name in ("probe.json", "probe_timeline.csv", "probe_changes.csv", "loop_timeline.csv"):
        shutil.copy(args.raw / name, OUT / name)
    serving = serving_table(args.raw, args.calibration)
    write_csv(OUT / "serving_vs_calibration.csv", serving)
    loop = loop_table(args.raw, args.slo_ms, phases, governor_args)
    write_csv(OUT / "loop_summary.csv", loop)
    plot_probe(args.raw)
    plot_serving(serving)
    plot_loop(args.raw, args.slo_ms, phases)
    print(json.dumps(json.loads((args.raw / "probe.json").read_text()), indent=1))
    for row in serving:
        print(
            f"cap {row['cap']:>3} @ {row['rate_rps']:>4g}: thr {row['live_achieved_rps']:.2f} vs "
            f"{row['restart_achieved_rps']} ({row['diff_achieved_rps_pct']:+.1f}%), TPOT p99 "
            f"{row['live_tpot_p99_ms']:.1f} vs {row['restart_tpot_p99_ms']} "
            f"({row['diff_tpot_p99_ms_pct']:+.1f}%), "
            f"twin thr {row['twin_achieved_rps']:.2f} TPOT p99 {row['twin_tpot_p99_ms']:.1f}"
        )
    print_loop(loop)


def loop_only(
    raw: Path, out: Path, slo_ms: float, phases: list[tuple[float, float]], governor_args: dict[str, Any]
) -> None:
    (out / "raw").mkdir(parents=True, exist_ok=True)
    with (
        (raw / "loop_requests.csv").open("rb") as source,
        gzip.open(out / "raw" / "loop_requests.csv.gz", "wb") as target,
    ):
        shutil.copyfileobj(source, target)
    for log in [raw / "server.log", raw / "run.log", *sorted(raw.glob("governor*.log"))]:
        shutil.copy(log, out / "raw" / log.name)  # governor-NAME.log for a --governor-variants policy
    shutil.copy(raw / "loop_timeline.csv", out / "loop_timeline.csv")
    loop = loop_table(raw, slo_ms, phases, governor_args, out)
    write_csv(out / "loop_summary.csv", loop)
    plot_loop(raw, slo_ms, phases, out)
    print_loop(loop)


def print_loop(loop: list[Row]) -> None:
    for row in loop:
        if row["phase"] == "all" or row["source"] == "twin":
            print(
                f"{row['source']:5} {row['policy']:9} phase {row['phase']}: "
                f"attainment {row['slo_attainment']:.3f} goodput {row['goodput_rps']:.2f} "
                f"(+TTFT {row[f'goodput_ttft{TTFT_BOUND_S:g}s_rps']:.2f}) TPOT p99 {row['tpot_p99_ms']:.1f} "
                f"TTFT p99 {row['ttft_p99_s']:.2f}"
                f" cap {row['cap_min']}..{row['cap_max']}"
            )


if __name__ == "__main__":
    main()
