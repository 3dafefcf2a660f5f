"""One loop-only GPU run at several TPOT P99 SLOs (device_run.sh with BENCH_SLOS) -> tables, plots, twin rows.

    python benchmarks/gpu/slo_compare.py RAW_DIR benchmarks/gpu/results/loop-slo-DATE

RAW_DIR is the ``results`` folder that device_poll.sh packs: server.log and run.log at the top, one
``slo<S>/`` folder per SLO (loop_summary.csv, loop_requests.csv, loop_timeline.csv, governor.log). For each
SLO this writes ``slo<S>/`` under the target (loop_summary.csv with the twin's rows, loop_timeline.csv,
loop.png, raw/), then ``slo_comparison.csv`` beside them (one row per SLO and policy, whole trace and burst
phase) and prints the comparison as a Markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from csvrows import Row  # benchmarks/gpu is sys.path[0]
from gpuplots import plot_loop
from gpustats import write_csv
from report import TTFT_BOUND_S, loop_table, print_loop

GOODPUT_TTFT = f"goodput_ttft{TTFT_BOUND_S:g}s_rps"
POLICIES = ("static256", "static64", "governor", "governor-levers")  # a policy not in the run is left out
GOVERNOR_ARGS: dict[str, Any] = {"tick_s": 2.0, "window_s": 10.0, "cooldown_s": 4.0, "gpu_type": "H200"}


def policies(summary: Sequence[Row]) -> list[str]:
    """POLICIES in their order, then any other governor variant the run had (GOVERNOR_VARIANTS)."""
    names = {str(r["policy"]) for r in summary}
    return [p for p in POLICIES if p in names] + sorted(
        n for n in names if n.startswith("governor-") and n not in POLICIES
    )


def slo_folders(raw: Path) -> list[tuple[float, Path]]:
    """The run's ``slo<S>`` folders, loosest SLO first (the SLO is read back from the folder's name)."""
    found = []
    for folder in raw.iterdir():
        match = re.fullmatch(r"slo(\d+(?:\.\d+)?)", folder.name)
        if match and (folder / "loop_summary.csv").exists():
            found.append((float(match.group(1)), folder))
    return sorted(found, key=lambda item: -item[0])


def one_slo(
    folder: Path, slo_ms: float, phases: list[tuple[float, float]], out: Path, device: str = "H200"
) -> list[Row]:
    """Copy one SLO's logs and requests beside its tables; the twin replays the same trace at this SLO."""
    (out / "raw").mkdir(parents=True, exist_ok=True)
    with (
        (folder / "loop_requests.csv").open("rb") as source,
        gzip.open(out / "raw" / "loop_requests.csv.gz", "wb") as target,
    ):
        shutil.copyfileobj(source, target)
    for log in folder.glob("governor*.log"):
        shutil.copy(log, out / "raw" / log.name)
    shutil.copy(folder / "loop_timeline.csv", out / "loop_timeline.csv")
    rows = loop_table(folder, slo_ms, phases, GOVERNOR_ARGS, out, device)
    write_csv(out / "loop_summary.csv", rows)
    plot_loop(folder, slo_ms, phases, out, device)
    return rows


def comparison(
    summaries: Sequence[tuple[float, list[Row]]], burst_phase: int, device: str = "H200"
) -> list[Row]:
    """Per SLO and policy (the card's rows, then the twin's): whole-trace and burst-phase figures."""
    rows: list[Row] = []
    for slo_ms, summary in summaries:
        for source in (device, "twin"):
            for policy in policies(summary):
                mine = {
                    str(r["phase"]): r for r in summary if r["source"] == source and r["policy"] == policy
                }
                whole, burst = mine.get("all"), mine.get(str(burst_phase))
                if whole is None:
                    continue
                rows.append(
                    {
                        "slo_ms": slo_ms,
                        "source": source,
                        "policy": policy,
                        "sent": whole["sent"],
                        "completed": whole["completed"],
                        "slo_attainment": whole["slo_attainment"],
                        "burst_slo_attainment": burst["slo_attainment"] if burst else math.nan,
                        "goodput_rps": whole["goodput_rps"],
                        GOODPUT_TTFT: whole[GOODPUT_TTFT],
                        "tpot_p99_ms": whole["tpot_p99_ms"],
                        "burst_tpot_p99_ms": burst["tpot_p99_ms"] if burst else math.nan,
                        "ttft_p99_s": whole["ttft_p99_s"],
                        "cap_min": whole["cap_min"],
                        "cap_max": whole["cap_max"],
                    }
                )
    return rows


def verdict(rows: Sequence[Row], device: str = "H200") -> list[str]:
    """Per SLO and law: does it reach static 64's attainment and goodput on the card (the issue's goal)?"""
    lines = []
    for slo_ms in dict.fromkeys(r["slo_ms"] for r in rows):
        live = {r["policy"]: r for r in rows if r["slo_ms"] == slo_ms and r["source"] == device}
        s64 = live.get("static64")
        for name, gov in live.items():
            if not name.startswith("governor"):
                continue
            if s64 is None:
                lines.append(f"SLO {slo_ms:g} ms, {name}: static 64 missing")
                continue
            att = gov["slo_attainment"] >= s64["slo_attainment"]
            good = gov["goodput_rps"] >= s64["goodput_rps"]
            both = gov[GOODPUT_TTFT] >= s64[GOODPUT_TTFT]
            lines.append(
                f"SLO {slo_ms:g} ms, {name}: attainment {gov['slo_attainment']:.3f} vs "
                f"{s64['slo_attainment']:.3f} ({'met' if att else 'NOT met'}), goodput "
                f"{gov['goodput_rps']:.2f} vs {s64['goodput_rps']:.2f} ({'met' if good else 'NOT met'}); "
                f"within TTFT {TTFT_BOUND_S:g} s too (a governor given that bound trades the per-token one "
                f"for it) {gov[GOODPUT_TTFT]:.2f} vs {s64[GOODPUT_TTFT]:.2f} ({'met' if both else 'NOT met'})"
            )
    return lines


def markdown(rows: Sequence[Row]) -> str:
    head = (
        "| SLO | policy | SLO attainment (all / burst) | goodput req/s | goodput, TTFT ≤ "
        f"{TTFT_BOUND_S:g} s too | TPOT P99 ms (all / burst) | TTFT P99 s | cap held |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        name = r["policy"].replace("static", "static ")
        name = f"twin: {name}" if r["source"] == "twin" else name
        caps = f"{r['cap_min']:g}" if r["cap_min"] == r["cap_max"] else f"{r['cap_min']:g} … {r['cap_max']:g}"
        lines.append(
            f"| {r['slo_ms']:g} ms | {name} | {r['slo_attainment']:.3f} / {r['burst_slo_attainment']:.3f} | "
            f"{r['goodput_rps']:.2f} | {r[GOODPUT_TTFT]:.2f} | {r['tpot_p99_ms']:.1f} / "
            f"{r['burst_tpot_p99_ms']:.1f} | {r['ttft_p99_s']:.1f} | {caps} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("raw", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--phases", default="30:8,45:40,30:8")
    parser.add_argument(
        "--device", default="H200", help="the run's card; twin rows (an H200 engine) only for the H200"
    )
    args = parser.parse_args()
    phases = [(float(d), float(r)) for d, r in (p.split(":") for p in args.phases.split(","))]
    burst_phase = max(range(len(phases)), key=lambda i: phases[i][1])
    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    for name in ("server.log", "run.log"):
        if (args.raw / name).exists():
            shutil.copy(args.raw / name, args.out / "raw" / name)
    summaries = []
    for slo_ms, folder in slo_folders(args.raw):
        rows = one_slo(folder, slo_ms, phases, args.out / folder.name, args.device)
        print(f"--- SLO {slo_ms:g} ms")
        print_loop(rows)
        summaries.append((slo_ms, rows))
    table = comparison(summaries, burst_phase, args.device)
    write_csv(args.out / "slo_comparison.csv", table)
    print(markdown(table))
    print("\n".join(verdict(table, args.device)))


if __name__ == "__main__":
    main()
