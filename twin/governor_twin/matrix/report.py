"""The matrix report: the summary table, per-policy worst and median cells, the reaction benchmark, a
heatmap, REPORT.md and results.json (the style of `governor_twin.bench`)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Any

from governor_dev.scoring import GOAL_OVERSHOOTS, GOAL_TICKS

from governor_twin.matrix.goodput import START_S
from governor_twin.matrix.profiles import DERIVED, Targets
from governor_twin.matrix.reaction import Reaction
from governor_twin.matrix.run import CURRENT, NEW, ORACLE, Cell

GOAL_WORST, GOAL_MEDIAN = 0.95, 1.0
# A cell where the best static cap serves less than this share of the offered requests within both bounds
# is one no cap serves: its ratios compare a few requests (static 16's 0.25 req/s of 3.4 against 0.00), and
# only replicas would help. The summary shows every cell, then the cells some cap serves.
SERVED = 0.10
SPAN_KEYS = ("start_vs_best_static", "settled_vs_best_static")


def _mark(ok: bool) -> str:
    return "✅" if ok else "❌"


def _f(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def policies(cells: Sequence[Cell]) -> list[str]:
    """Adaptive rows first, then the statics present in every cell's profile, small to large."""
    names = [p for p in (NEW, CURRENT, ORACLE) if any(p in c.scores for c in cells)]
    statics = sorted(
        {k for c in cells for k in c.scores if k.startswith("static")}, key=lambda k: int(k.split()[1])
    )
    return names + statics


def worst_median(cells: Sequence[Cell], policy: str) -> tuple[float, float, str]:
    """(worst ratio to the best static, median ratio, the worst cell), over the cells where it ran; a static
    cap above a profile's ceiling is not run there."""
    pairs = _ratios(cells, policy)
    if not pairs:
        return float("nan"), float("nan"), ""
    r, c = min(pairs, key=lambda x: x[0])
    return r, median(x for x, _ in pairs), f"{c.profile}/{c.target}/{c.workload}"


def targets_markdown(targets: Sequence[Targets]) -> str:
    out = ["| profile | tight TPOT P99 | medium | loose | TTFT bound |", "|---|---|---|---|---|"]
    for t in targets:
        name = f"{t.profile} (derived/extrapolated)" if t.profile == DERIVED else t.profile
        out.append(
            f"| {name} | {t.tight_s * 1e3:.2f} ms | {t.medium_s * 1e3:.2f} ms | {t.loose_s * 1e3:.2f} ms | "
            f"{t.ttft_s:.2f} s |"
        )
    return "\n".join(out)


def _ratios(cells: Sequence[Cell], policy: str) -> list[tuple[float, Cell]]:
    """(ratio to the best static, cell) where the policy ran and the ratio is defined."""
    pairs = [(c.ratio(policy), c) for c in cells if policy in c.scores]
    return [(r, c) for r, c in pairs if not math.isnan(r)]


def mean_ratio(cells: Sequence[Cell], policy: str) -> float:
    ratios = [r for r, _ in _ratios(cells, policy)]
    return sum(ratios) / len(ratios) if ratios else float("nan")


def served(cells: Sequence[Cell]) -> list[Cell]:
    """The cells where some static cap serves at least SERVED of the offered requests within both bounds."""
    return [c for c in cells if c.served_share >= SERVED]


def summary_markdown(cells: Sequence[Cell]) -> str:
    kept = served(cells)
    out = [
        "| policy | worst cell / best static | median | mean | worst cell | goal | worst, served cells | "
        "median, served | mean, served |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in policies(cells):
        w, m, where = worst_median(cells, p)
        sw, sm, _ = worst_median(kept, p)
        goal = ""
        if p == NEW:
            goal = (
                f"worst ≥ {GOAL_WORST} {_mark(w >= GOAL_WORST)}, "
                f"median ≥ {GOAL_MEDIAN} {_mark(m >= GOAL_MEDIAN)}"
            )
        out.append(
            f"| {p} | {_f(w)} | {_f(m)} | {_f(mean_ratio(cells, p))} | {where} | {goal} | {_f(sw)} | "
            f"{_f(sm)} | {_f(mean_ratio(kept, p))} |"
        )
    out += [
        "",
        f"Served cells: the {len(kept)} of {len(cells)} where the best static cap serves at least "
        f"{SERVED:.0%} of the offered requests within both bounds; in the others no cap serves the load "
        "(the best static's share is in the cells table) and only replicas help.",
    ]
    return "\n".join(out)


def spans_markdown(cells: Sequence[Cell]) -> str:
    """Each adaptive policy's ratio to the cell's best static over the start-up span and after it, over the
    served cells where the best static serves requests in both spans."""
    kept = served(cells)
    out = [
        f"| policy | cells | start-up (first {START_S:.0f} s): mean | median | worst | settled (after "
        "it): mean | median | worst | settled ≥ best static |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in (NEW, CURRENT, ORACLE):
        pairs = [(c.span_ratios(p), c) for c in kept if p in c.scores]
        pairs = [(r, c) for r, c in pairs if not any(math.isnan(x) for x in r)]
        if not pairs:
            continue
        start = [r[0] for r, _ in pairs]
        settled = [r[1] for r, _ in pairs]
        (_, low), worst = min(pairs, key=lambda x: x[0][1])
        out.append(
            f"| {p} | {len(pairs)} | {_f(sum(start) / len(start))} | {_f(median(start))} | "
            f"{_f(min(start))} | "
            f"{_f(sum(settled) / len(settled))} | {_f(median(settled))} | {_f(low)} "
            f"({worst.profile}/{worst.target}/{worst.workload}) | {sum(x >= 1.0 for x in settled)} |"
        )
    out += [
        "",
        "The best static is the whole cell's (the same cap in both spans). A law starts from the profile "
        "table's cap or the ceiling and needs a window before its first move; a static cap is where it stays "
        "from the first request.",
    ]
    return "\n".join(out)


def cells_markdown(cells: Sequence[Cell]) -> str:
    adaptive = [p for p in (NEW, CURRENT, ORACLE) if any(p in c.scores for c in cells)]
    head = " | ".join(f"{p} / best" for p in adaptive)
    shown = NEW if NEW in adaptive else CURRENT
    out = [
        f"| profile | target | workload | best static | goodput req/s | served share | {head} | "
        f"{shown}: start-up / settled | SLO windows (law) | oracle caps |",
        "|---|---|---|---|---|---|" + "---|" * len(adaptive) + "---|---|---|",
    ]
    for c in cells:
        best = c.scores[c.best_static]
        ratios = " | ".join(_f(c.ratio(p)) for p in adaptive)
        law = c.scores.get(NEW, c.scores[CURRENT])
        start, settled = c.span_ratios(shown)
        out.append(
            f"| {c.profile} | {c.target} ({c.tpot_s * 1e3:.1f} ms) | {c.workload} | {c.best_static} | "
            f"{best.goodput_rps:.2f} | {100 * c.served_share:.0f} % | {ratios} | "
            f"{_f(start)} / {_f(settled)} | "
            f"{100 * law.slo_windows:.0f} % | "
            f"{', '.join(map(str, c.oracle_caps))} |"
        )
    return "\n".join(out)


def reaction_markdown(reactions: Sequence[Reaction], slo_s: float) -> str:
    out = [
        f"Goal: back under the SLO ({slo_s * 1e3:.1f} ms) within {GOAL_TICKS} ticks, at most "
        f"{GOAL_OVERSHOOTS} overshoot. The step: 0.47 to 0.94 x the ceiling's capacity, more than any cap "
        'meeting the target carries. The laws govern the per-token SLO alone; a row marked "TTFT bound '
        "too\" governs the matrix's TTFT bound as well, where no cap meets both bounds after the step (the "
        "law gives up the per-token one once the queue shows no end; the 2x step cells score that trade).",
        "",
        "| policy | violated after the step | ticks to recover | overshoots | goal | "
        "P99 per tick after the step (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for r in reactions:
        ticks = "never" if r.ticks_to_recover is None else str(r.ticks_to_recover)
        trace = " ".join("–" if math.isnan(v) else f"{v:.0f}" for v in r.tick_p99_ms[:16])
        out.append(
            f"| {r.policy} | {'yes' if r.violated else 'no'} | {ticks} | {r.overshoots} | "
            f"{_mark(r.meets_goal)} | {trace} … |"
        )
    return "\n".join(out)


def plot_heatmap(cells: Sequence[Cell], policy: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted(
        {(c.profile, c.target) for c in cells}, key=lambda x: (x[0], ["tight", "medium", "loose"].index(x[1]))
    )
    cols = list(dict.fromkeys(c.workload for c in cells))
    grid = np.full((len(rows), len(cols)), np.nan)
    for c in cells:
        grid[rows.index((c.profile, c.target)), cols.index(c.workload)] = c.ratio(policy)
    fig, ax = plt.subplots(figsize=(1.6 * len(cols) + 3, 0.55 * len(rows) + 1.8))
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(cols)), cols, rotation=20)
    ax.set_yticks(range(len(rows)), [f"{p} / {t}" for p, t in rows], fontsize=8)
    ax.set_title(f"goodput of {policy} / best static in hindsight, per cell")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(
    out: Path,
    cells: Sequence[Cell],
    targets: Sequence[Targets],
    reactions: Sequence[Reaction],
    reaction_slo_s: float,
    notes: Sequence[str],
    header: str,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    shown = NEW if any(NEW in c.scores for c in cells) else CURRENT
    plot_heatmap(cells, shown, out / "heatmap.png")
    parts = [
        "# Generalization matrix on the twin (issue 12)",
        "",
        header,
        "",
        *[f"- {n}" for n in notes],
        "",
        "Goodput = requests per second meeting BOTH the request's TPOT ≤ target and TTFT ≤ bound "
        "(DistServe); "
        "ratios are to the best static cap of the cell, chosen in hindsight. SLO windows: share of 1-minute "
        "windows whose exact TPOT P99 meets the target.",
        "",
        f"**Goal** (new law): worst cell ≥ {GOAL_WORST} × best static, median ≥ {GOAL_MEDIAN}; "
        "no single static "
        "comes close on its worst cell.",
        "",
        "## Derived SLO targets",
        "",
        targets_markdown(targets),
        "",
        "## Summary",
        "",
        summary_markdown(cells),
        "",
        f"![heatmap: {shown} / best static](heatmap.png)",
        "",
        "### Start-up and settled",
        "",
        spans_markdown(cells),
        "",
        "## Reaction to a 2× load step (H200 8B, medium target)",
        "",
        reaction_markdown(reactions, reaction_slo_s) if reactions else "Not run (`--no-reaction`).",
        "",
        "## Cells",
        "",
        cells_markdown(cells),
        "",
    ]
    report = out / "REPORT.md"
    report.write_text("\n".join(parts))
    data: dict[str, Any] = {
        "targets": [asdict(t) for t in targets],
        "cells": [
            {
                **{k: v for k, v in asdict(c).items() if k != "scores"},
                "best_static": c.best_static,
                "scores": {
                    p: {
                        **asdict(s),
                        "vs_best_static": c.ratio(p),
                        **dict(zip(SPAN_KEYS, c.span_ratios(p), strict=True)),
                    }
                    for p, s in c.scores.items()
                },
            }
            for c in cells
        ],
        "summary": {
            p: {
                **dict(zip(("worst", "median", "worst_cell"), worst_median(cells, p), strict=True)),
                "mean": mean_ratio(cells, p),
                "served_cells": dict(
                    zip(("worst", "median", "worst_cell"), worst_median(served(cells), p), strict=True)
                ),
            }
            for p in policies(cells)
        },
        "reaction": [{**asdict(r), "meets_goal": r.meets_goal} for r in reactions],
        "notes": list(notes),
    }
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str, allow_nan=True) + "\n")
    return report
