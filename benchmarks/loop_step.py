"""Control-loop benchmark (issue 4, item 7) on the real vLLM CPU runtime (tiny dummy Llama, 2 shared cores).

1. Step response. Closed-loop clients at concurrency C; the TPOT SLO is set between the TPOT P99 measured
   at C and at 2C with the cap at its ceiling (at most --slo-factor x the first), so it is met at C. The
   load then doubles (2C clients). Reported: ticks from the step until the windowed TPOT P99 is back
   under the SLO (goal <= 3, counted once the window holds only post-step traffic) and overshoot cycles
   (goal <= 1): reversals down -> up -> down of the cap after the step.
2. Adaptive vs static. The same phased workload (steady C, burst 3C, long outputs at C, ramp 3C) runs once
   with the cap static at the ceiling (vLLM's default behaviour) and once governed. Per request the client
   measures TPOT (streaming). SLO attainment = share of requests whose TPOT meets the SLO; goodput = tokens/s
   of those requests. Printed as adaptive / static ratios.

The governor here is governor.services.standalone reading the engine's /metrics directly (the Prometheus
reader is exercised by the tests); tick --tick-s, window --window-s.

    python benchmarks/loop_step.py                 # about 5 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
from governor.adapters.engine import Actuator
from governor.adapters.scrape import DirectScraper
from governor.core.law import LawConfig
from governor.core.signals import LatencyKind
from governor.services.standalone import Standalone, TickReport
from governor_dev import loadgen
from governor_dev.localengine import Engine, start_runtime
from governor_dev.measure import StreamError, stream_completion

TPOT = (LatencyKind.TPOT, 0.99)
KEY = ("bench",)


@dataclass
class Requests:
    # (last token's time.perf_counter(), tpot s, tokens)
    records: list[tuple[float, float, int]] = field(default_factory=list)


async def _stream(
    client: httpx.AsyncClient, engine: Engine, rng: random.Random, max_tokens: int, out: Requests
) -> None:
    tokens = rng.randint(max(2, max_tokens // 2), max_tokens)
    body = engine.completion_body([rng.randrange(3, 1000) for _ in range(rng.randint(16, 48))], tokens)
    try:
        timed = await stream_completion(client, "/v1/completions", body)
    except (httpx.HTTPError, StreamError):
        return
    if timed.tpot_s is not None:
        out.records.append((timed.chunks[-1], timed.tpot_s, timed.output_tokens))


@contextlib.asynccontextmanager
async def clients(
    engine: Engine,
    concurrency: list[int],
    max_tokens: list[int],
    out: Requests,
) -> AsyncIterator[None]:
    """Closed-loop workers; concurrency[0] and max_tokens[0] may be changed while running."""
    rngs = [random.Random(i) for i in range(128)]

    async def send(i: int, _round: int) -> None:
        if i >= concurrency[0]:
            await asyncio.sleep(0.05)
        else:
            await _stream(client, engine, rngs[i], max_tokens[0], out)

    async with (
        httpx.AsyncClient(
            base_url=engine.base_url, timeout=300, limits=httpx.Limits(max_connections=256)
        ) as client,
        loadgen.closed_loop_running(len(rngs), send),
    ):
        yield


async def measure_tpot(engine: Engine, seconds: float) -> float | None:
    scraper = DirectScraper()
    await scraper.read({KEY: [engine.base_url]}, seconds + 1, seconds + 1, {TPOT})
    await asyncio.sleep(seconds)
    snapshot = await scraper.read({KEY: [engine.base_url]}, seconds + 1, seconds + 1, {TPOT})
    await scraper.aclose()
    return snapshot.get(KEY).p99(*TPOT)


async def median_tpot(engine: Engine, window_s: float) -> float:
    values = [v for v in [await measure_tpot(engine, window_s) for _ in range(3)] if v is not None]
    assert values, "no TPOT data: is the load running?"
    return sorted(values)[len(values) // 2]


def governor(engine: Engine, slo_s: float, args: argparse.Namespace) -> Standalone:
    cfg = LawConfig(
        slo_target_s=slo_s,
        latency_kind=LatencyKind.TPOT,
        ceiling=engine.ceiling,
        initial_cap=engine.ceiling,
        tick_s=args.tick_s,
        window_s=args.window_s,
        cooldown_s=args.tick_s,
        alpha=0.6,
    )
    return Standalone(
        name="bench",
        endpoints=[engine.base_url],
        token=engine.admin_token,
        cfg=cfg,
        group_value="bench",
        actuator=Actuator(),
    )


async def run_ticks(
    gov: Standalone | None,
    seconds: float,
    tick_s: float,
    engine: Engine,
    trace: list[tuple[float, int, float | None]],
) -> list[TickReport]:
    """Tick the governor (or only observe, when None) for `seconds`; trace (time, cap, window P99)."""
    reports: list[TickReport] = []
    scraper = DirectScraper() if gov is None else None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        if gov is not None:
            report = await gov.tick()
            reports.append(report)
            trace.append((started, report.decision.cap, report.reading.p99(*TPOT)))
        else:
            assert scraper is not None
            window = 4 * tick_s
            reading = (await scraper.read({KEY: [engine.base_url]}, window, window, {TPOT})).get(KEY)
            trace.append((started, engine.ceiling, reading.p99(*TPOT)))
        await asyncio.sleep(max(0.0, tick_s - (time.monotonic() - started)))
    if scraper is not None:
        await scraper.aclose()
    return reports


async def step_response(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    engine.set_limits(cap=engine.ceiling)
    concurrency, max_tokens, out = [args.concurrency], [args.max_tokens], Requests()
    async with clients(engine, concurrency, max_tokens, out):
        # Calibrate on this (shared, noisy) machine: TPOT P99 at C and at 2C, medians of three windows. The
        # SLO sits between them, so it is met at C and missed after the step.
        base = await median_tpot(engine, args.window_s)
        concurrency[0] = 2 * args.concurrency
        doubled = await median_tpot(engine, args.window_s)
        concurrency[0] = args.concurrency
        slo = (
            min(base * args.slo_factor, (base + doubled) / 2)
            if doubled > base * 1.1
            else base * args.slo_factor
        )
        gov = governor(engine, slo, args)
        trace: list[tuple[float, int, float | None]] = []
        await run_ticks(gov, args.window_s * 2, args.tick_s, engine, trace)  # settle at the base load
        step_at = time.monotonic()
        concurrency[0] = 2 * args.concurrency
        reports = await run_ticks(gov, args.step_s, args.tick_s, engine, trace)
        await gov.aclose()
    after = [(t, cap, p99) for t, cap, p99 in trace if t >= step_at]
    # Ticks until recovered: from the first tick whose window is all post-step traffic.
    full = [i for i, (t, _, _) in enumerate(after) if t - step_at >= args.window_s]
    start = full[0] if full else 0
    violated_first = any(p is not None and p > slo for _, _, p in after[start : start + 1])
    recovered = (  # no violation, nothing to recover from: None, not 0
        next(
            (i - start for i in range(start, len(after)) if after[i][2] is not None and after[i][2] <= slo),
            None,
        )
        if violated_first
        else None
    )
    caps = [cap for _, cap, _ in after]
    moves = [b - a for a, b in itertools.pairwise(caps) if b != a]
    signs = [1 if m > 0 else -1 for m in moves]
    reversals = sum(1 for a, b in itertools.pairwise(signs) if a != b)
    return {
        "base_concurrency": args.concurrency,
        "tpot_p99_base_s": base,
        "tpot_p99_doubled_at_ceiling_s": doubled,
        "slo_s": slo,
        "violated_after_step": violated_first,
        "ticks_to_recover": recovered,
        "overshoot_cycles": reversals // 2,
        "cap_trajectory": caps,
        "p99_trajectory": [None if p is None else round(p, 5) for _, _, p in after],
        "reasons": [r.decision.reason for r in reports],
    }


PHASES = (("steady", 1, 1.0), ("burst", 3, 1.0), ("long-outputs", 1, 3.0), ("ramp", 3, 1.0))


async def phased(engine: Engine, slo: float, adaptive: bool, args: argparse.Namespace) -> dict[str, float]:
    engine.set_limits(cap=engine.ceiling)
    concurrency, max_tokens, out = [args.concurrency], [args.max_tokens], Requests()
    gov = governor(engine, slo, args) if adaptive else None
    trace: list[tuple[float, int, float | None]] = []
    started = time.perf_counter()  # the clock of the records (governor_dev.measure)
    async with clients(engine, concurrency, max_tokens, out):
        for name, load, length in PHASES:
            max_tokens[0] = int(args.max_tokens * length)
            if name == "ramp":
                for level in range(1, 4):
                    concurrency[0] = args.concurrency * level
                    await run_ticks(gov, args.phase_s / 3, args.tick_s, engine, trace)
            else:
                concurrency[0] = args.concurrency * load
                await run_ticks(gov, args.phase_s, args.tick_s, engine, trace)
    if gov is not None:
        await gov.aclose()
    elapsed = time.perf_counter() - started
    done = [r for r in out.records if r[0] >= started + args.window_s]
    good = [r for r in done if r[1] <= slo]
    return {
        "requests": len(done),
        "slo_attainment": len(good) / max(1, len(done)),
        "goodput_tok_s": sum(r[2] for r in good) / elapsed,
        "throughput_tok_s": sum(r[2] for r in done) / elapsed,
        "mean_cap": sum(c for _, c, _ in trace) / max(1, len(trace)),
    }


async def main(args: argparse.Namespace) -> None:
    with start_runtime(ceiling=args.ceiling, initial_cap=args.ceiling) as engine:
        engine.complete([1, 2, 3], max_tokens=8)
        step = await step_response(engine, args)
        print(json.dumps({"step_response": step}, indent=1), flush=True)
        slo = float(step["slo_s"])  # type: ignore[arg-type]
        static = await phased(engine, slo, adaptive=False, args=args)
        adaptive = await phased(engine, slo, adaptive=True, args=args)
    result = {
        "static_ceiling_cap": static,
        "adaptive": adaptive,
        "slo_attainment_ratio": adaptive["slo_attainment"] / max(1e-9, static["slo_attainment"]),
        "goodput_ratio": adaptive["goodput_tok_s"] / max(1e-9, static["goodput_tok_s"]),
        "throughput_ratio": adaptive["throughput_tok_s"] / max(1e-9, static["throughput_tok_s"]),
    }
    print(json.dumps(result, indent=1))
    recovery = (
        f"ticks to recover {step['ticks_to_recover']} (goal <= 3)"
        if step["violated_after_step"]
        else "the step did not violate the SLO (try a higher --concurrency): no recovery measured"
    )
    print(
        f"step: {recovery}, overshoot cycles "
        f"{step['overshoot_cycles']} (goal <= 1); adaptive/static: SLO attainment x"
        f"{result['slo_attainment_ratio']:.2f}, goodput x{result['goodput_ratio']:.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ceiling", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--slo-factor", type=float, default=1.3)
    parser.add_argument("--tick-s", type=float, default=2.0)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--step-s", type=float, default=40.0)
    parser.add_argument("--phase-s", type=float, default=30.0)
    asyncio.run(main(parser.parse_args()))
