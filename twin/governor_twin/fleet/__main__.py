"""`python -m governor_twin.fleet [--scenarios a,b | --held-out] [--seed N] [--workers N] [--out DIR]`: the
fleet benchmark; `--held-out` runs the scenarios no knob was chosen on (scenarios.HELD_OUT) into
benchmarks/results/fleet/held_out, `--seed N` (N > 0) the same scenarios drawn again into
benchmarks/results/fleet/seed_N, unless `--out` says otherwise."""

from __future__ import annotations

import argparse
import os
import time
from multiprocessing import Pool
from pathlib import Path

from governor_twin.fleet import bound, report
from governor_twin.fleet.grid import entries
from governor_twin.fleet.run import FleetRun, run
from governor_twin.fleet.scenarios import ALL, BUILDERS, HELD_OUT, WARMUP_S

DEFAULT_OUT = Path("benchmarks/results/fleet")
HELD_OUT_DIR = DEFAULT_OUT / "held_out"


def _job(args: tuple[str, int, int, int]) -> FleetRun:
    name, index, cap, seed = args
    scn = ALL[name](cap, seed)
    label, factory = entries(scn)[index]
    return run(scn, factory(), label)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="governor_twin.fleet")
    parser.add_argument("--scenarios", default=None, help=f"comma-separated, of: {', '.join(ALL)}")
    parser.add_argument("--held-out", action="store_true", help="the held-out scenarios")
    parser.add_argument("--seed", type=int, default=0, help="draw the scenarios again (0: the reported run)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.held_out and args.scenarios:
        parser.error("--held-out names its own scenarios: give it or --scenarios, not both")
    names = list(HELD_OUT) if args.held_out else (args.scenarios or ",".join(BUILDERS)).split(",")
    unknown = [n for n in names if n not in ALL]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    if args.seed < 0:
        parser.error("--seed must be 0 or more")
    if args.workers < 1:
        parser.error("--workers must be 1 or more")
    out = args.out or (HELD_OUT_DIR if args.held_out else DEFAULT_OUT)
    if args.seed and args.out is None:
        out = out / f"seed_{args.seed}"
    from governor_twin.fleet.grid import best_static_cap

    jobs, described = [], []
    references: dict[str, str] = {}
    for name in names:
        probe = ALL[name](64, args.seed)
        described.append(f"{name}: {probe.description}")
        cap = best_static_cap(probe)
        jobs += [(name, i, cap, args.seed) for i in range(len(entries(probe)))]
        references[name] = bound.line(ALL[name](cap, args.seed), cap)
    started = time.time()
    with Pool(args.workers) as pool:
        runs = pool.map(_job, jobs, chunksize=1)
    took = time.time() - started
    header = [
        f"One run{f' (seed {args.seed})' if args.seed else ''}: {len(runs)} fleet simulations, "
        f"{took / 60:.1f} min on {args.workers} worker(s). "
        "Virtual time; "
        f"each scenario opens with a {WARMUP_S:.0f} s warm-up at its starting rate, which the policies act "
        "through and which is not scored (requests sent in it, and the GPU-hours, replicas and replica "
        "changes before its end, are left out); "
        "replicas ready 86-100 s after scheduling; GPU-hours from scheduling to deletion; Kubernetes-Service "
        "random routing. SLO attainment = share of all requests meeting TTFT <= 2.5 s and TPOT <= 25 ms "
        "(unfinished requests count as misses; requests vLLM refuses with a 400, prompt + max_tokens above "
        "max-model-len, are left out and counted apart). Goodput = output tokens/s of those requests.",
        "Rows: each peer at vLLM's default cap 256 with its documented defaults, and at the best static cap "
        "with its default and two alternative values of its main knob; ours: the operator's control step "
        "(law with its TTFT hand-off + the sized planner + the demand rule + the Alertmanager path: the "
        "shipped scale alerts evaluated by promtool, the receiver's steps) as shipped, with a 120 s "
        "scale-in cooldown, and three ablations: replicas on the law's wish only (no demand rule), the "
        "planner asked one step at a time, and no Alertmanager path; and the same control step with the "
        "other law.",
    ]
    if args.held_out:
        header.append(
            "Held-out scenarios (governor_twin.fleet.scenarios.HELD_OUT), written down before any of them "
            "ran; no knob of any policy was chosen on them, and no goal is set: the lines under each heading "
            "ask the four main scenarios' questions again. " + "; ".join(described) + "."
        )
    path = report.write(runs, out, header, references)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
