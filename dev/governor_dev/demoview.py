"""What the demo shows: the live terminal view (rich), the summary table and the PNG plot."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from governor_dev.demo import (
    DRIFT_BOUND,
    DemoPlan,
    PassResult,
    Score,
    StepReaction,
    Tick,
    meets_check,
    phase_bounds,
)
from governor_dev.scoring import GOAL_OVERSHOOTS, GOAL_TICKS


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.2f} ms"


def live_view(
    plan: DemoPlan, result: PassResult, slo_s: float, elapsed_s: float, done_tokens_s: float
) -> Panel:
    tick = result.ticks[-1] if result.ticks else None
    title = f"{result.label}: {'governed by the law' if result.adaptive else 'static cap, no governor'}"
    status = Table.grid(padding=(0, 2))
    status.add_column(style="bold")
    status.add_column()
    phase = tick.phase if tick else plan.phases[0].name
    status.add_row("phase", f"{phase}  ({elapsed_s:.0f}/{plan.duration_s:.0f} s)")
    if tick is not None:
        over = tick.p99_s is not None and tick.p99_s > slo_s
        p99 = Text(_ms(tick.p99_s), style="red bold" if over else "green bold")
        status.add_row(
            "TPOT P99 (engine)", Text.assemble(p99, f"   SLO {_ms(slo_s)}   smoothed {_ms(tick.smoothed_s)}")
        )
        status.add_row("cap", f"{tick.cap} / ceiling {plan.ceiling}")
        status.add_row("running / waiting", f"{_num(tick.running)} / {_num(tick.waiting)}")
    status.add_row("throughput", f"{done_tokens_s:,.0f} tokens/s (client)")
    decisions = Table(title="decisions", expand=True, show_edge=False)
    for col in ("t", "cap", "reason"):
        decisions.add_column(col)
    for d in result.decisions()[-6:]:
        decisions.add_row(f"{d.t:5.1f}s", f"{d.previous_cap} → {d.cap}", d.reason)
    bar = ProgressBar(total=plan.duration_s, completed=min(elapsed_s, plan.duration_s))
    return Panel(Group(bar, status, decisions), title=title)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def summary_table(plan: DemoPlan, scores: dict[str, dict[str, Score]], slo_s: float) -> Table:
    """Rows: each phase and the whole run; columns: static vs governed attainment and goodput."""
    table = Table(
        title=f"TPOT P99 SLO {_ms(slo_s)}: static default cap {plan.ceiling} (mean of two passes) vs governed"
    )
    for col in (
        "span",
        "SLO windows static",
        "SLO windows governed",
        "goodput static",
        "goodput governed",
        "goodput ratio",
    ):
        table.add_column(col, justify="right")
    spans = [name for name, _, _ in phase_bounds(plan)] + ["all"]
    static, governed = scores["static"], scores["governed"]
    for span in spans:
        s, g = static[span], governed[span]
        ratio = g.goodput_tok_s / s.goodput_tok_s if s.goodput_tok_s > 0 else float("inf")
        table.add_row(
            span,
            f"{s.attainment:.0%}",
            f"{g.attainment:.0%}",
            f"{s.goodput_tok_s:,.0f} tok/s",
            f"{g.goodput_tok_s:,.0f} tok/s",
            f"{ratio:.2f}×",
        )
    return table


def drift_line(
    control: str,
    drift: float | None,
    held: bool = True,
    compared: tuple[str, str] = ("the first static pass", "the governed pass"),
) -> str:
    """What a control span says about the machine between two passes (governor_dev.demo.host_drift);
    `held`: both passes held the ceiling through it (otherwise it is no control)."""
    if not held:
        return f"host check: none, the cap moved in the {control}, so it is no control for the machine"
    if drift is None:
        return f"host check: the {control} finished too little to compare the passes' machine speed"
    earlier, later = compared
    said = (
        f"host check: the {control} (same load, same cap) ran at ×{drift:.2f} {earlier}'s median TPOT in "
        f"{later}"
    )
    if 1 / DRIFT_BOUND <= drift <= DRIFT_BOUND:
        return said
    return (
        f"{said}: the machine's speed moved between the passes by more than ×{DRIFT_BOUND:g}, so this "
        "comparison measures the machine as much as the law; run it again on an idle machine"
    )


def passes_line(before: Score, after: Score) -> str:
    """The two static passes side by side: the spread the static side's mean stands for."""
    return (
        f"static side: the mean of the passes before and after the governed one (SLO windows "
        f"{before.attainment:.0%} and {after.attainment:.0%}, goodput {before.goodput_tok_s:,.0f} and "
        f"{after.goodput_tok_s:,.0f} tok/s)"
    )


def verdict_line(static: Score, governed: Score) -> str:
    """The run's verdict on the check: governed at least static on SLO windows and on goodput."""
    said = (
        f"SLO windows {static.attainment:.0%} static, {governed.attainment:.0%} governed; goodput "
        f"×{governed.goodput_tok_s / static.goodput_tok_s:.2f}"
        if static.goodput_tok_s > 0
        else f"SLO windows {static.attainment:.0%} static, {governed.attainment:.0%} governed"
    )
    verdict = "meets" if meets_check(static, governed) else "does not meet"
    return f"verdict: {said}: this run {verdict} the check (governed ≥ static on both)"


def reaction_lines(reactions: list[StepReaction], slo_s: float, tick_s: float) -> list[str]:
    """The reaction benchmark's report: each pass's P99 tick by tick after the step, and the verdicts."""
    if not reactions:
        return []
    lines = [
        f"reaction to the 2x step (exact TPOT P99 of the requests finishing in each {tick_s:g} s tick; "
        f"goal: back under {_ms(slo_s)} within {GOAL_TICKS} ticks, at most {GOAL_OVERSHOOTS} overshoot):"
    ]
    for r in reactions:
        ticks = " ".join("—" if math.isnan(v) else f"{v * 1000:.1f}" for v in r.tick_p99_s)
        if not r.violated:
            said = "never above the SLO after the step"
        elif r.ticks_to_recover is None:
            said = "above the SLO after the step and never back under it"
        else:
            said = f"back under in {r.ticks_to_recover} tick(s), {r.overshoots} overshoot(s) after"
            said += "" if r.settled else f", the last above for more than {GOAL_TICKS} ticks at the end"
        goal = "meets the goal" if r.meets_goal else "misses the goal"
        share = f"{r.within:.0%} of the ticks within"
        if math.isnan(r.within):
            share = "no request finished after the step"
        lines.append(f"  {r.label}: {said}; {share}; {goal}; ms: {ticks}")
    statics = [r for r in reactions if r.label.startswith("static")]
    if statics and not any(r.violated for r in statics):
        lines.append(
            "the step did not break the SLO at the ceiling in either static pass: this run does not test the "
            "lever (the load is light for this machine)"
        )
    return lines


def plot(plan: DemoPlan, passes: list[PassResult], slo_s: float, path: Path) -> None:
    """P99 vs SLO (top) and the cap (bottom) over time, every pass, phases shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    colors = {False: "tab:gray", True: "tab:blue"}
    statics = 0
    for result in passes:
        ticks: list[Tick] = result.ticks
        t = [x.t for x in ticks]
        style = "-" if result.adaptive or statics == 0 else ":"  # the static pass after: dotted
        statics += not result.adaptive
        top.plot(
            t,
            [x.p99_s * 1000 if x.p99_s is not None else float("nan") for x in ticks],
            color=colors[result.adaptive],
            linestyle=style,
            label=f"{result.label}: TPOT P99",
        )
        bottom.step(
            t,
            [x.cap for x in ticks],
            where="post",
            color=colors[result.adaptive],
            linestyle=style,
            label=result.label,
        )
    top.axhline(slo_s * 1000, color="tab:red", linestyle="--", label="SLO")
    for i, (name, start, end) in enumerate(phase_bounds(plan)):
        for ax in (top, bottom):
            ax.axvspan(start, end, color="0.93" if i % 2 else "white", zorder=0)
        top.text((start + end) / 2, 1.01, name, transform=top.get_xaxis_transform(), ha="center", fontsize=9)
    top.set_ylabel("TPOT P99 (ms)")
    bottom.set_ylabel("cap (max_num_active_seqs)")
    bottom.set_xlabel("seconds")
    bottom.set_ylim(0, plan.ceiling * 1.08)
    top.legend(loc="upper left", fontsize=8)
    bottom.legend(loc="lower left", fontsize=8)
    fig.suptitle("vLLM Governor demo: the cap moved live inside a running vLLM engine", y=0.995)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
