"""The levers law's knobs one at a time (issue 12: "each remaining knob has a measured reason"): the matrix
with every default, then with each knob set below and above its default and the rest kept. Only the new
law runs again per value; the static caps, so each cell's best static and the served cells, are the
default run's. `python -m governor_twin.matrix.knobs [--jobs N] [--seed N]` writes KNOBS.md and
knobs.json under benchmarks/results/matrix (seed_N for N > 0); `--only a,b --out DIR` some knobs, elsewhere.

A knob is a `LawConfig` field, or a module constant of the law (set in the worker for that run only). The
matrix judges TPOT SLOs, so the token budget's knobs (inter-token SLOs) are not here; nor are the
replica planner's (the fleet benchmark's). Two of the rule table's guesses, which the levers law runs
without, are in as controls: they must move nothing."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean, median

from governor.core.law import Law, LawConfig

from governor_twin.matrix import report
from governor_twin.matrix.__main__ import DEFAULT_OUT
from governor_twin.matrix.profiles import PROFILES, derive_targets, get_profile
from governor_twin.matrix.run import (
    DEFAULT_NEW_LAW,
    NEW,
    Cell,
    Plan,
    Task,
    _gpu,
    _mapper,
    evaluate,
    load_law,
    new_law_policy,
    scenarios,
)
from governor_twin.matrix.workloads import WORKLOADS
from governor_twin.scenarios import _shared_root

Value = float | int
MOVED = 0.05  # a cell whose ratio to its best static moves more than this counts as moved


@dataclass(frozen=True)
class Knob:
    name: str  # a LawConfig field, or the constant's name
    values: tuple[Value, ...]  # below and above the default
    modules: tuple[str, ...] = ()  # a constant: the modules whose global it is (empty: a LawConfig field)
    control: bool = False  # the levers law does not read it: every value must score as the default

    def default(self) -> Value | None:
        if self.modules:
            value: Value = getattr(importlib.import_module(self.modules[0]), self.name)
            return value
        default: Value | None = LawConfig.model_fields[self.name].default
        return default

    def task_args(self, value: Value) -> tuple[dict[str, Value], tuple[tuple[str, str, float], ...]]:
        """(LawConfig overrides, module constants) for one value."""
        if self.modules:
            return {}, tuple((m, self.name, float(value)) for m in self.modules)
        return {self.name: value}, ()


_COMPUTED = "governor.core.law.computed"
KNOBS: tuple[Knob, ...] = (
    Knob("decrease_factor", (0.7, 0.9)),
    Knob("strongest_decrease", (0.35, 0.65)),
    Knob("increase_factor", (1.08, 1.3)),
    Knob("band_low", (0.8, 0.95)),
    Knob("band_high", (1.05, 1.2)),
    Knob("alpha", (0.25, 1.0)),
    Knob("max_step", (4, 16)),
    Knob("cooldown_s", (5.0, 20.0)),
    Knob("raise_after_ticks", (1, 4)),
    Knob("tick_s", (2.5, 10.0)),
    Knob("window_s", (15.0, 60.0)),
    Knob("binding_fraction", (0.8, 0.97)),
    Knob("queue_binding_fraction", (0.7, 0.95)),
    Knob("queue_min", (0.5, 4.0)),
    Knob("queue_growth_fraction", (0.05, 0.2)),
    Knob("queue_growth_min", (0.1, 0.5)),
    Knob("queue_growth_ticks", (1, 4)),
    Knob("replica_after_ticks", (1, 6)),
    Knob("idle_after_ticks", (6, 24)),
    Knob("idle_fraction", (0.3, 0.7)),
    Knob("burst_slope", (0.08, 0.3)),
    Knob("burst_ticks", (2, 5)),
    Knob("burst_min_rate", (0.25, 1.0)),
    Knob("burst_hold_s", (15.0, 60.0)),
    Knob("burst_baseline_ticks", (3, 14)),
    Knob("plan_margin", (0.8, 1.0)),
    Knob("MAX_RAISE", (1.5, 4.0), modules=(_COMPUTED,)),
    Knob("RELIEF_HEADROOM", (1.05, 1.2), modules=(_COMPUTED,)),
    Knob("TRUST", (1.1, 1.5), modules=("governor.core.levers.fit", _COMPUTED)),
    Knob("long_tail_fraction", (0.005, 0.02), control=True),
    Knob("cautious_fraction", (0.7, 0.95), control=True),
)


@dataclass(frozen=True)
class Row:
    knob: str
    default: str
    value: str
    control: bool
    worst: float
    median: float
    mean: float
    down: int  # served cells whose ratio fell by more than MOVED
    up: int
    largest: str  # the served cell that moved most, and by how much


def _ratio(cell: Cell, goodput: float) -> float:
    base = cell.scores[cell.best_static].goodput_rps
    return goodput / base if base > 0 else math.nan


def variant_tasks(plans: Sequence[Plan], law: Law, knob: Knob, value: Value, seed: int) -> list[Task]:
    """The new law over every cell, in `evaluate`'s cell order, with one knob at `value`."""
    overrides, constants = knob.task_args(value)
    tasks = []
    for p in plans:
        for name, tpot, ttft in p.judge:
            policy = new_law_policy(law, tpot, ttft, p.profile.ceiling, _gpu(p.profile), overrides)
            judge = ((name, tpot, ttft),)
            tasks.append(Task(p.judged(tpot, ttft), p.profile, policy, judge, seed, constants))
    return tasks


def row(cells: Sequence[Cell], knob: Knob, value: Value | None, goodputs: Sequence[float]) -> Row:
    """One value's figures over the served cells, against the default's."""
    kept = report.served(cells)
    pairs = [
        (c, _ratio(c, c.scores[NEW].goodput_rps), _ratio(c, g))
        for c, g in zip(cells, goodputs, strict=True)
        if c in kept
    ]
    ratios = [r for _, _, r in pairs]
    moves = [(r - r0, c) for c, r0, r in pairs]
    delta, cell = max(moves, key=lambda m: abs(m[0]))
    largest = f"{cell.profile}/{cell.target}/{cell.workload} {delta:+.2f}" if abs(delta) > 1e-9 else "none"
    return Row(
        knob.name,
        _show(knob.default()),
        _show(value),
        knob.control,
        min(ratios),
        median(ratios),
        fmean(ratios),
        sum(d < -MOVED for d, _ in moves),
        sum(d > MOVED for d, _ in moves),
        largest,
    )


def default_row(cells: Sequence[Cell]) -> Row:
    ratios = [_ratio(c, c.scores[NEW].goodput_rps) for c in report.served(cells)]
    return Row("(every default)", "", "", False, min(ratios), median(ratios), fmean(ratios), 0, 0, "")


def _show(value: Value | None) -> str:
    return "none" if value is None else f"{value:g}"


def markdown(rows: Sequence[Row], header: str) -> str:
    out = [
        "# The levers law's knobs, one at a time, on the matrix",
        "",
        header,
        "",
        "Each knob set below and above its default, every other at its default; served cells only (the "
        "default run's). Ratios: the law's goodput over the cell's best static cap (the default run's "
        f"statics). down / up: served cells whose ratio moved by more than {MOVED:g}. Controls are rule "
        "table guesses the levers law runs without: any move there is a defect.",
        "",
        "| knob | default | value | worst | median | mean | down | up | largest move |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        name = f"{r.knob} (control)" if r.control else r.knob
        out.append(
            f"| {name} | {r.default} | {r.value} | {r.worst:.3f} | {r.median:.3f} | {r.mean:.3f} | "
            f"{r.down} | {r.up} | {r.largest} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m governor_twin.matrix.knobs", description=__doc__)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phase-s", type=float, default=150.0)
    parser.add_argument("--only", default="", help="comma-separated knob names (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.seed < 0 or args.jobs < 1 or args.phase_s <= 0:
        parser.error("--seed must be 0 or more, --jobs 1 or more and --phase-s above 0")
    names = {k.name for k in KNOBS}
    only = [n for n in args.only.split(",") if n]
    if unknown := sorted(set(only) - names):
        parser.error(f"unknown knob(s) in --only: {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    if only and args.out is None:
        parser.error("--only measures part of the study: name its folder with --out (the default holds all)")
    knobs = [k for k in KNOBS if not only or k.name in only]
    out = args.out or (DEFAULT_OUT / f"seed_{args.seed}" if args.seed else DEFAULT_OUT)
    started = time.perf_counter()
    law, note = load_law(DEFAULT_NEW_LAW)
    if law is None:
        parser.error(note)
    pairs = [(p, derive_targets(p)) for p in map(get_profile, PROFILES)]
    shared, targets = str(_shared_root()), ("tight", "medium", "loose")
    plans = scenarios(pairs, WORKLOADS, args.phase_s, shared, targets, args.seed)
    cells = evaluate(pairs, WORKLOADS, law, args.phase_s, shared, jobs=args.jobs, seed=args.seed, plans=plans)
    wanted = [(k, v) for k in knobs for v in k.values]
    tasks = [t for k, v in wanted for t in variant_tasks(plans, law, k, v, args.seed)]
    mapper, pool = _mapper(args.jobs)
    try:
        scores = mapper(tasks)
    finally:
        if pool is not None:
            pool.shutdown()
    rows = [default_row(cells)]
    n = len(cells)
    for i, (knob, value) in enumerate(wanted):
        per_cell = scores[i * n : (i + 1) * n]
        goodputs = [s[c.target].goodput_rps for s, c in zip(per_cell, cells, strict=True)]
        rows.append(row(cells, knob, value, goodputs))
    elapsed = time.perf_counter() - started
    command = "python -m governor_twin.matrix.knobs " + " ".join(sys.argv[1:] if argv is None else argv)
    header = (
        f"Generated by `{command.strip()}` in {elapsed:.0f} s ({args.phase_s:g} s phases, seed {args.seed}, "
        f"{args.jobs} jobs; {len(wanted)} values of {len(knobs)} knobs, {len(report.served(cells))} served "
        "cells)."
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "KNOBS.md").write_text(markdown(rows, header))
    (out / "knobs.json").write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    print(markdown(rows, header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
