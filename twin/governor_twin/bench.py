"""The benchmark: every cap policy on the same traffic, per scenario; a markdown report and PNG plots.

    python -m governor_twin.bench                       # all built-in scenarios -> benchmarks/results/
    python -m governor_twin.bench --scenarios mixed,steady --jobs 2
    python -m governor_twin.bench --trace other.csv --load 0.7   # any CSV in the Azure trace format

Policies: the project's law (`governor.core.law.decide`), the seed law verbatim
(`governor_twin.seed.seed_decide`), static caps {16, 32, 64, 128, 256}, the per-phase oracle (the best
static cap of each phase, chosen in hindsight from the static runs, then run as a schedule), and two
anchors: TCP-style AIMD and a Dynamo-style ±1 step with a pending-action guard.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from governor_twin.policies import (
    STATIC_CAPS,
    AimdPolicy,
    Policy,
    SchedulePolicy,
    StaticPolicy,
    StepGuardPolicy,
    project_law,
    seed_law,
)
from governor_twin.profile import load_profile
from governor_twin.scenarios import Scenario, builtin_names, generate, load_scenario, trace_scenario
from governor_twin.score import Scores, score_excluding, score_phases
from governor_twin.sim import RunResult, run

FIT_CONTEXT_LIMIT = 3072  # the H200 decode-step data stop at 3k context (calibration/README.md)
GOALS = {"slo_windows": 0.99, "vs_oracle": 0.95, "vs_best_static_mixed": 1.10}
LAW_VERSION = "unknown"
OURS, SEED, ORACLE = "ours (governor.core.law)", "seed law (verbatim)", "oracle (per phase)"


@dataclass
class PolicyRow:
    policy: str
    scores: Scores
    phases: list[Scores]


@dataclass
class ScenarioReport:
    scenario: Scenario
    requests: int
    rejected: int
    overload: list[bool]
    oracle_caps: list[int]
    rows: list[PolicyRow]
    best_static: str
    runs: dict[str, RunResult]

    def row(self, name: str) -> PolicyRow:
        return next(r for r in self.rows if r.policy == name)

    def ratio(self, name: str, other: str) -> float:
        base = self.row(other).scores.goodput_tok_s
        return self.row(name).scores.goodput_tok_s / base if base > 0 else float("nan")


def _run_task(args: tuple[Scenario, Policy, int]) -> RunResult:
    scenario, policy, seed = args
    return run(scenario, policy, seed=seed)


def _adaptive(scenario: Scenario) -> list[Policy]:
    ceiling = load_profile(scenario.profile).ceiling
    slo = scenario.slo
    return [
        project_law(slo.target_s, ceiling, slo.latency, ttft_bound_s=slo.ttft_s),
        seed_law(slo.target_s, ceiling, slo.latency),
        AimdPolicy(slo.target_s),
        StepGuardPolicy(slo.target_s),
    ]


def evaluate(scenarios: list[Scenario], seed: int = 0, jobs: int = 2) -> list[ScenarioReport]:
    resolved = [generate(s, seed)[1] for s in scenarios]  # trace phases get their durations
    pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    try:

        def map_runs(tasks: list[tuple[Scenario, Policy, int]]) -> list[RunResult]:
            if pool is None:
                return [_run_task(t) for t in tasks]
            return list(pool.map(_run_task, tasks))

        first: list[tuple[Scenario, Policy, int]] = []
        for s in scenarios:
            statics: list[Policy] = [StaticPolicy(c) for c in STATIC_CAPS]
            first.extend((s, p, seed) for p in [*statics, *_adaptive(s)])
        first_runs = map_runs(first)
        per = len(STATIC_CAPS) + 4
        oracle_tasks: list[tuple[Scenario, Policy, int]] = []
        partial = []
        for i, (scenario, res) in enumerate(zip(scenarios, resolved, strict=True)):
            runs = first_runs[i * per : (i + 1) * per]
            phase_scores = [score_phases(r) for r in runs[: len(STATIC_CAPS)]]
            n_phases = len(res.phases)
            overload = [all(ps[j].saturated for ps in phase_scores) for j in range(n_phases)]
            oracle_caps = []
            for j in range(n_phases):
                best = max(
                    range(len(STATIC_CAPS)),
                    key=lambda k: (
                        round(phase_scores[k][j].goodput_tok_s, 3),
                        phase_scores[k][j].slo_windows,
                        -STATIC_CAPS[k],
                    ),
                )
                oracle_caps.append(STATIC_CAPS[best])
            schedule = [(a, c) for (_, a, _), c in zip(res.phase_bounds(), oracle_caps, strict=True)]
            oracle_tasks.append((scenario, SchedulePolicy(schedule), seed))
            partial.append((scenario, res, runs, overload, oracle_caps))
        oracle_runs = map_runs(oracle_tasks)
    finally:
        if pool is not None:
            pool.shutdown()
    reports = []
    for (_, res, runs, overload, oracle_caps), oracle in zip(partial, oracle_runs, strict=True):
        all_runs = [*runs, oracle]
        rows = [PolicyRow(r.policy, score_excluding(r, overload), score_phases(r)) for r in all_runs]
        static_rows = [r for r in rows if r.policy.startswith("static")]
        best_static = max(static_rows, key=lambda r: (r.scores.goodput_tok_s, r.scores.slo_windows)).policy
        reports.append(
            ScenarioReport(
                res,
                int(runs[0].sent.size),
                runs[0].rejected,
                overload,
                oracle_caps,
                rows,
                best_static,
                {r.policy: r for r in all_runs},
            )
        )
    return reports


# ----------------------------------------------------------------------------------------------- report
def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _mark(ok: bool) -> str:
    return "✅" if ok else "❌"


def scenario_markdown(rep: ScenarioReport, plot: str | None) -> str:
    sc = rep.scenario
    out = [f"### {sc.name}", "", sc.description, ""]
    out.append(
        f"SLO: {sc.slo.latency.value} P99 ≤ {sc.slo.target_s * 1e3:.0f} ms per 1-minute window; goodput "
        f"counts requests with {sc.slo.latency.value} ≤ {sc.slo.target_s * 1e3:.0f} ms and TTFT ≤ "
        f"{sc.slo.ttft_s:g} s. {rep.requests} requests, {rep.rejected} rejected (prompt + max_tokens > "
        f"max-model-len)."
    )
    run = next(iter(rep.runs.values()))
    beyond = float(np.mean(run.prompt + run.output > FIT_CONTEXT_LIMIT)) if run.prompt.size else 0.0
    if beyond > 0:
        out.append(
            f"Extrapolated: {100 * beyond:.1f} % of requests reach contexts beyond {FIT_CONTEXT_LIMIT} "
            "tokens, where the calibration's decode fit stops."
        )
    out.append("")
    out.append("| phase | duration | overload (all static caps saturate) | oracle cap |")
    out.append("|---|---|---|---|")
    for (name, a, b), o, c in zip(sc.phase_bounds(), rep.overload, rep.oracle_caps, strict=True):
        out.append(f"| {name} | {b - a:.0f} s | {'yes: reported apart' if o else 'no'} | {c} |")
    out.append("")
    out.append(
        "| policy | SLO windows | TTFT windows | goodput tok/s | × best static | × oracle | mean cap | "
        "changes | SLO-latency P99 |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rep.rows:
        s = r.scores
        name = f"**{r.policy}**" if r.policy == OURS else r.policy
        if r.policy == rep.best_static:
            name += " (best static)"
        out.append(
            f"| {name} | {_pct(s.slo_windows)} | {_pct(s.ttft_windows)} | {s.goodput_tok_s:.0f} | "
            f"{rep.ratio(r.policy, rep.best_static):.2f} | {rep.ratio(r.policy, ORACLE):.2f} | "
            f"{s.mean_cap:.0f} | {s.changes} | {s.p99_slo_s * 1e3:.1f} ms |"
        )
    out.append("")
    if any(rep.overload):
        out.append("Overload phases, reported apart (goodput tok/s / SLO windows):")
        out.append("")
        for j, ((name, _, _), o) in enumerate(zip(sc.phase_bounds(), rep.overload, strict=True)):
            if o:
                cells = ", ".join(
                    f"{r.policy}: {r.phases[j].goodput_tok_s:.0f} / {_pct(r.phases[j].slo_windows)}"
                    for r in rep.rows
                    if r.policy in (OURS, SEED, rep.best_static, ORACLE)
                )
                out.append(f"- {name}: {cells}")
        out.append("")
    if plot:
        out.append(f"![{sc.name}]({plot})")
        out.append("")
    return "\n".join(out)


def summary_markdown(reports: list[ScenarioReport]) -> str:
    out = [
        "| scenario | ours SLO windows | ours / best static | ours / oracle | best static | oracle caps | "
        "best adaptive by goodput | goals |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rep in reports:
        ours = rep.row(OURS).scores
        vs_static = rep.ratio(OURS, rep.best_static)
        vs_oracle = rep.ratio(OURS, ORACLE)
        adaptive = [r for r in rep.rows if not r.policy.startswith("static") and r.policy != ORACLE]
        winner = max(adaptive, key=lambda r: (r.scores.goodput_tok_s, r.scores.slo_windows)).policy
        goals = [
            f"windows {_mark(ours.slo_windows >= GOALS['slo_windows'])}",
            f"×oracle {_mark(vs_oracle >= GOALS['vs_oracle'])}",
        ]
        if rep.scenario.name == "mixed":
            goals.append(f"×static {_mark(vs_static >= GOALS['vs_best_static_mixed'])}")
        out.append(
            f"| {rep.scenario.name} | {_pct(ours.slo_windows)} | {vs_static:.2f} | {vs_oracle:.2f} | "
            f"{rep.best_static} | {', '.join(map(str, rep.oracle_caps))} | {winner} | {' '.join(goals)} |"
        )
    return "\n".join(out)


def plot_scenario(rep: ScenarioReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sc = rep.scenario
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    names = [OURS, SEED, rep.best_static, ORACLE, "AIMD (+4 / x0.5)", "Dynamo-style ±1 rung, pending guard"]
    styles = ["-", "--", ":", "-.", (0, (1, 1)), (0, (3, 1, 1, 1))]
    for name, style in zip(names, styles, strict=True):
        r = rep.runs[name]
        ax1.plot(r.tick_t / 60, r.tick_p99 * 1e3, linestyle=style, label=name, linewidth=1.2)
        ax2.plot(r.tick_t / 60, r.tick_cap, linestyle=style, label=name, linewidth=1.2)
    ax1.axhline(sc.slo.target_s * 1e3, color="red", linewidth=1, label="SLO")
    ax1.set_ylabel(f"{sc.slo.latency.value} P99 seen by the policy (ms)")
    ax1.set_ylim(0, max(3 * sc.slo.target_s * 1e3, 1))
    ax2.set_ylabel("cap (max_num_active_seqs)")
    ax2.set_xlabel("minutes")
    for (_, a, _), o in zip(sc.phase_bounds(), rep.overload, strict=True):
        for ax in (ax1, ax2):
            ax.axvline(a / 60, color="grey", linewidth=0.6)
        if o:
            ax1.axvspan(a / 60, a / 60 + 0.05, color="orange")
    ax1.legend(fontsize=7, ncol=3, loc="upper left")
    ax1.set_title(f"{sc.name}: P99 vs SLO and cap over time (goals: ≥ 99 % SLO windows, ≥ 0.95 × oracle)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def law_version() -> str:
    """Which governor.core.law the report ran: the last commit that touched it, and whether it was edited
    since."""
    import subprocess

    law = Path(__file__).resolve().parents[2] / "operator" / "governor" / "core" / "law"
    try:
        commit = subprocess.run(
            ["git", "log", "-1", "--format=%h %s", "--", str(law)],
            capture_output=True,
            text=True,
            cwd=law.parent,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", str(law)],
            capture_output=True,
            text=True,
            cwd=law.parent,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"`{commit}`" + (" (with uncommitted edits)" if dirty else "") if commit else "unknown"


def write_report(
    reports: list[ScenarioReport], out: Path, fidelity_md: str, elapsed_s: float, command: str
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    parts = [
        "# Twin benchmark: does adapting the cap beat a well-chosen static value?",
        "",
        f"Generated by `{command}` in {elapsed_s:.0f} s on this machine (virtual time, step-level twin of "
        "one "
        "vLLM engine, profile `h200_llama8b` fitted to `shared/calibration/`). Hand-written reading of these "
        "numbers: [ANALYSIS.md](ANALYSIS.md).",
        "",
        f"The project's law as run: {LAW_VERSION}.",
        "",
        "**Goals** (issue 5): ≥ 99 % SLO windows · goodput ≥ 0.95 × oracle · ≥ 1.10 × best static on the "
        "mixed "
        "scenario. Headline scores leave overload phases out (DESIGN.md, Benchmark conventions).",
        "",
        "## Summary",
        "",
        summary_markdown(reports),
        "",
        "## Fidelity of the twin",
        "",
        fidelity_md,
        "",
        "## Scenarios",
        "",
    ]
    for rep in reports:
        name = f"plots/{rep.scenario.name.replace(':', '_')}.png"
        plot_scenario(rep, out / name)
        parts.append(scenario_markdown(rep, name))
    report = out / "REPORT.md"
    report.write_text("\n".join(parts) + "\n")
    data = {
        rep.scenario.name: {
            "overload": rep.overload,
            "oracle_caps": rep.oracle_caps,
            "best_static": rep.best_static,
            "rows": {r.policy: asdict(r.scores) for r in rep.rows},
        }
        for rep in reports
    }
    (out / "results.json").write_text(json.dumps(data, indent=1, default=float) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m governor_twin.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(builtin_names()),
        help="comma-separated built-in names or scenario JSON paths",
    )
    parser.add_argument(
        "--trace", action="append", default=[], help="CSV in the Azure trace format (repeatable)"
    )
    parser.add_argument(
        "--load", type=float, default=0.8, help="trace replay: mean rate as a share of capacity"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--no-fidelity", action="store_true", help="skip the H200 fidelity table")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    global LAW_VERSION
    LAW_VERSION = law_version()
    names = [n for n in args.scenarios.split(",") if n]
    scenarios = [load_scenario(n) for n in names] + [trace_scenario(p, load=args.load) for p in args.trace]
    reports = evaluate(scenarios, seed=args.seed, jobs=args.jobs)
    from governor_twin.fidelity import fidelity_markdown

    fidelity_md = "(skipped)" if args.no_fidelity else fidelity_markdown()
    command = "python -m governor_twin.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    report = write_report(reports, args.out, fidelity_md, time.perf_counter() - started, command.strip())
    print(summary_markdown(reports))
    print(
        "\nGoals: ≥ 99 % SLO windows, goodput ≥ 0.95 × oracle, ≥ 1.10 × best static on mixed. "
        f"Report: {report}"
    )
    return 0


def _json_default(value: Any) -> Any:
    return float(value) if isinstance(value, np.floating) else str(value)


if __name__ == "__main__":
    raise SystemExit(main())
