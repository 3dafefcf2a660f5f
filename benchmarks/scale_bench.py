"""The operator at scale (issue 13, item 4), in one command:

    python benchmarks/scale_bench.py                  # N=1000, 60 s of steady state
    python benchmarks/scale_bench.py --n 100 300 1000 # a sweep, one run per N
    python benchmarks/scale_bench.py --quick          # N=50, 20 s

Each run starts the API emulator, the real `governor operator` process, one twin process serving N engines
(one port each, the pods' URLs) and a real Prometheus scraping them every 5 s, which the operator reads; it
creates N InferenceServices (tickSeconds 5) and measures what tests/support/scale.py describes. Prints a
table and writes benchmarks/results/scale/REPORT.md.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.scale import Figures, measure, median_ticks  # noqa: E402

REPORT = ROOT / "benchmarks" / "results" / "scale" / "REPORT.md"
HEADER = (
    "| N | create → children (s) | Prometheus queries / tick | queries / tick / object"
    " | operator CPU / tick (s)"
    " | operator CPU share | operator RSS (MiB) | ticks / object (median, expected) | objects holding 5 s"
    " | API calls / tick | set-up settled (s) |"
)


def row(f: Figures) -> str:
    calls = sum(f.api_calls.values()) / f.ticks_expected
    return (
        f"| {f.n} | {f.create_to_children_s:.1f} | {f.queries_per_tick:.1f} | {f.queries_per_tick / f.n:.3f}"
        f" | {f.cpu_per_tick_s:.2f} | {100 * f.cpu_share:.0f} % | {f.rss_mib:.0f}"
        f" | {median_ticks(f):.0f} of {f.ticks_expected:.1f} | {100 * f.holding:.0f} % | {calls:.0f}"
        f" | {f.settle_s:.0f} |"
    )


def api_table(runs: list[Figures]) -> list[str]:
    kinds = sorted({k for f in runs for k in f.api_calls})
    lines = ["| API request (verb resource) | " + " | ".join(f"N={f.n}" for f in runs) + " |"]
    lines.append("|---|" + "---|" * len(runs))
    for kind in kinds:
        cells = " | ".join(f"{f.api_per_tick().get(kind, 0.0):.1f}" for f in runs)
        lines.append(f"| {kind} | {cells} |")
    return lines


def cpu_table(runs: list[Figures]) -> list[str]:
    names = list(dict.fromkeys(k for f in runs for k in f.cpu_by_process))
    lines = ["| process | " + " | ".join(f"N={f.n}" for f in runs) + " |", "|---|" + "---|" * len(runs)]
    for name in [*names, "all"]:
        shares = [f.cpu_shares() for f in runs]
        cells = [sum(x.values()) if name == "all" else x.get(name, 0.0) for x in shares]
        lines.append(f"| {name} | " + " | ".join(f"{100 * c:.0f} %" for c in cells) + " |")
    return lines


def report(runs: list[Figures], seconds: float) -> str:
    load = ", ".join(f"{x:.1f}" for x in psutil.getloadavg())
    lines = [
        "# The operator at scale (issue 13, item 4)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}: {psutil.cpu_count()} CPU cores"
        f" shared with other work (load average at the end: {load}). One run per N, {seconds:.0f} s of steady"
        " state after every object had ticked twice (or after the wait, where not every object ticked) and"
        " the reconciles the set-up causes were done (a tick with no child read; last column: seconds from"
        " every object ticking to that). `python benchmarks/scale_bench.py` reproduces it.",
        "",
        "Set-up: the API emulator (tests/support/kube.py) in the benchmark's process; the real"
        " `governor operator --server ...` process with GOVERNOR_PROMETHEUS_URL; one"
        " `python -m governor_twin serve --engines N` process (one port per engine, one pod per"
        " InferenceService pointing at it); a real Prometheus scraping the N engines every 5 s"
        " (static config);"
        " tickSeconds 5. Engines carry no traffic: the loop reads, decides (hold) and actuates every tick,"
        " and writes status when something in it changes and every 6 ticks otherwise (the default"
        " `--status-refresh-ticks`).",
        "",
        HEADER,
        "|" + "---|" * HEADER.count(" | ") + "---|",
        *(row(f) for f in runs),
        "",
        "Prometheus queries are counted by Prometheus itself (`prometheus_http_requests_total` for"
        " /api/v1/query, read on its /metrics). CPU and RSS are psutil's on the operator process. A tick is"
        " 5 s of wall time; an object holds the 5 s tick when its control ticks (one decision each, counted"
        " by the operator's own governor_decisions_total) advanced by >= 90 % of the expected count.",
        "",
        "CPU over the steady window by process, as a share of one core (psutil; the machine has"
        f" {psutil.cpu_count()} cores, shared with whatever else ran). The emulator's figure includes the"
        " harness's own polling, which runs in the same process:",
        "",
        *cpu_table(runs),
        "",
        "API calls per tick, by verb and resource, as the emulator received them:",
        "",
        *api_table(runs),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[1000], help="objects (several: a sweep)")
    parser.add_argument("--seconds", type=float, default=60.0, help="steady state measured per run")
    parser.add_argument("--quick", action="store_true", help="N=50, 20 s (a smoke test)")
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    ns, seconds = ([50], 20.0) if args.quick else (args.n, args.seconds)
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {message}", flush=True)

    runs: list[Figures] = []
    args.report.parent.mkdir(parents=True, exist_ok=True)
    for n in ns:
        runs.append(asyncio.run(measure(n, seconds, say=say)))
        say(row(runs[-1]))  # each run's figures as soon as they are in
        args.report.write_text(report(runs, seconds))  # a sweep cut short still leaves what it measured
    print(report(runs, seconds))
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
