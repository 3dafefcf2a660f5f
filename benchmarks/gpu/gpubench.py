"""The GPU proof's driver: live-cap probe, live-cap serving points and the control loop live.

It talks to one running ``governor-runtime serve`` (vLLM OpenAI server + the governor plugins) over HTTP:
``/v1/completions`` (streamed, token-id prompts, ``ignore_eos`` so every output has its requested length),
``/metrics`` and the admin route ``/governor/v1/limits``. Only the standard library and aiohttp (+ uvloop when
present) are needed, so it runs under the GPU image's python3 as well as in the project's venv.

Workload (the calibration's, ../../../shared/calibration/README.md): open-loop Poisson arrivals, prompt
lengths uniform in [256, 1024] tokens of random ids, output lengths uniform in [64, 256], streamed. Per
request it keeps the send time, every chunk's arrival time and the usage block; TPOT is
(last chunk - first chunk) / (completion_tokens - 1), ITL every gap between chunks, TTFT send -> first chunk,
E2E send -> end of stream.

Sub-commands (all write under --out):
  probe    heavy load; cap 16 (drain time, max running after drain), cap 128 (fill), 100 random changes under
           load (PUT latency), then no request may fail.
  serving  caps x rates, one Poisson point each, window [warmup, duration]; rows beside the calibration's.
  loop     a phased load (e.g. 8 -> 40 -> 8 req/s) under static caps and under ``governor run``.
  budget   one cap; short chats plus a few long prompts, replayed at each token budget set live (gpubudget).
  all      probe, serving, loop in that order (what the GPU run does).
A comma list (e.g. ``loop,budget``) runs those parts in that order on the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from gpubudget import add_arguments, budget  # benchmarks/gpu is sys.path[0]
from gpugovernor import governor_command, log, start_governor, stop_governor
from gpuload import Lengths, Sampler, Server, drive, make_trace  # benchmarks/gpu is sys.path[0]
from gpustats import percentile, phase_rows, request_rows, window_summary, write_csv

# ---------------------------------------------------------------- probe


async def probe(server: Server, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    ceiling = int((await server.limits())["ceiling"])
    await server.set_cap(ceiling)
    rng = random.Random(args.seed + 7)
    trace = make_trace([(3600.0, args.probe_rate)], args.seed + 1, server.lengths)
    stop = asyncio.Event()
    t0 = time.perf_counter()
    samples: list[dict[str, Any]] = []
    puts: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "probe_rate": args.probe_rate,
        "ceiling": ceiling,
        "low": args.probe_low,
        "high": args.probe_high,
    }

    async def watch(until: float) -> None:
        while time.perf_counter() - t0 < until:
            with contextlib.suppress(Exception):
                samples.append({"t": time.perf_counter() - t0, **await server.metrics()})
            await asyncio.sleep(0.1)

    async def put(cap: int, kind: str) -> float:
        t_put = time.perf_counter() - t0
        body, latency = await server.set_cap(cap)
        held = body.get("cap")
        puts.append({"t": t_put, "cap": cap, "held": held, "latency_ms": 1e3 * latency, "kind": kind})
        return t_put

    def latest() -> dict[str, Any]:
        return samples[-1] if samples else {}

    async def steps() -> None:
        try:
            await watch(args.probe_ramp_s)
            result["running_before_lowering"] = latest().get("running")
            low, high = args.probe_low, args.probe_high
            log(f"probe: running {latest().get('running')} at cap {ceiling}; lowering to {low}")
            t_low = await put(low, "lower")
            drained_at = math.nan
            while time.perf_counter() - t0 < t_low + 60:
                await watch(time.perf_counter() - t0 + 0.1)
                if latest().get("running", 1e9) <= low:
                    drained_at = latest()["t"]
                    break
            result["drain_s_to_low"] = drained_at - t_low
            hold_end = time.perf_counter() - t0 + args.probe_hold_s
            await watch(hold_end)
            after = [s["running"] for s in samples if s["t"] >= drained_at and "running" in s]
            result["max_running_after_drain_low"] = max(after) if after else math.nan
            result["waiting_at_low"] = latest().get("waiting")
            log(
                f"probe: drained in {result['drain_s_to_low']:.2f} s, max running after "
                f"{result['max_running_after_drain_low']}; raising to {high}"
            )
            t_high = await put(high, "raise")
            filled_at = math.nan
            while time.perf_counter() - t0 < t_high + 30:
                await watch(time.perf_counter() - t0 + 0.1)
                if latest().get("running", 0) >= 0.9 * high:
                    filled_at = latest()["t"]
                    break
            result["fill_s_to_90pct_high"] = filled_at - t_high
            await watch(time.perf_counter() - t0 + args.probe_hold_s)
            at_high = [s["running"] for s in samples if s["t"] >= t_high and "running" in s]
            result["max_running_high"] = max(at_high) if at_high else math.nan
            log(f"probe: max running at {high}: {result['max_running_high']}; {args.probe_changes} changes")
            for _ in range(args.probe_changes):
                await put(rng.randint(8, ceiling), "random")
                await watch(time.perf_counter() - t0 + args.probe_change_gap_s)
            await put(ceiling, "restore")
        finally:
            stop.set()

    step_task = asyncio.ensure_future(steps())
    outcome = await drive(server, trace, t0, grace_s=args.probe_grace_s, stop=stop)
    await step_task
    used = trace[: outcome["sent"]]
    result.update(outcome)
    result["completed"] = sum(1 for r in used if r.ok)
    result["failed"] = sum(1 for r in used if r.error)
    result["failure_examples"] = sorted({r.error for r in used if r.error})[:5]
    latencies = [p["latency_ms"] for p in puts]
    random_latencies = [p["latency_ms"] for p in puts if p["kind"] == "random"]
    result["changes"] = len(puts)
    result["random_changes"] = len(random_latencies)
    result["put_latency_p50_ms"] = percentile(latencies, 50)
    result["put_latency_p99_ms"] = percentile(latencies, 99)
    result["put_latency_max_ms"] = max(latencies) if latencies else math.nan
    result["put_held_mismatches"] = sum(1 for p in puts if p["held"] != p["cap"])
    # Once running has come down to a change's cap, it must stay at or under it until the next change.
    over = 0
    for index, change in enumerate(puts):
        end = puts[index + 1]["t"] if index + 1 < len(puts) else math.inf
        drained = False
        for s in samples:
            if not change["t"] < s["t"] < end or "running" not in s:
                continue
            drained = drained or s["running"] <= change["cap"]
            if drained and s["running"] > change["cap"]:
                over += 1
    result["samples_over_cap_after_drain"] = over
    write_csv(out / "probe_timeline.csv", [{k: v for k, v in s.items()} for s in samples])
    write_csv(out / "probe_changes.csv", puts)
    write_csv(out / "probe_requests.csv", request_rows(used, {}))
    (out / "probe.json").write_text(json.dumps(result, indent=1, default=str))
    log("probe: " + json.dumps({k: v for k, v in result.items() if k != "failure_examples"}, default=str))
    await server.wait_idle()
    return result


# ---------------------------------------------------------------- serving


async def serving(server: Server, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    all_requests: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    for cap in args.caps:
        await server.set_cap(cap)
        for rate in args.rates:
            duration = args.dur_high if rate >= 40 else args.dur
            trace = make_trace([(duration, rate)], args.seed + cap * 1000 + int(rate), server.lengths)
            t0 = time.perf_counter()
            label = {"cap": cap, "rate": rate}
            with Sampler(server, t0, 1.0, label) as sampler:
                outcome = await drive(server, trace, t0, grace_s=args.grace)
                await server.wait_idle()
            row = {
                "cap": cap,
                "rate_target_rps": rate,
                **window_summary(trace, sampler.rows, args.warmup, duration),
                "cancelled_after_grace": outcome["cancelled"],
                "duration_s": duration,
                "window_start_s": args.warmup,
                "window_end_s": duration,
            }
            held = (await server.limits())["cap"]
            row["cap_held"] = held
            rows.append(row)
            all_requests.extend(request_rows(trace, label))
            timeline.extend(sampler.rows)
            log(
                f"serving cap={cap} rate={rate}: achieved {row['achieved_rps']:.2f} req/s, "
                f"TPOT p99 {row['tpot_p99_ms']:.1f} ms, TTFT p99 {row['ttft_p99_s']:.3f} s, "
                f"running {row['mean_running']:.1f}/{row['max_running']}, sat {row['saturated']}"
            )
            write_csv(out / "serving.csv", rows)
    write_csv(out / "serving_requests.csv", all_requests)
    write_csv(out / "serving_timeline.csv", timeline)
    await server.set_cap(int((await server.limits())["ceiling"]))
    return rows


# ---------------------------------------------------------------- loop


async def loop(server: Server, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    phases = [(float(d), float(r)) for d, r in (p.split(":") for p in args.phases.split(","))]
    summary: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    ceiling = int((await server.limits())["ceiling"])
    for policy in args.policies.split(","):
        governor: subprocess.Popen[bytes] | None = None
        if policy.startswith("governor"):
            command = governor_command(args, policy)
            if command is None:
                log(f"loop: no governor command for {policy}, skipped")
                continue
            await server.set_cap(args.governor_start_cap or ceiling)
            governor = start_governor(command, policy, out)
            await asyncio.sleep(args.governor_settle_s)
            if governor.poll() is not None:
                log(f"loop: governor exited early rc={governor.returncode}; see governor.log")
                continue
        else:
            await server.set_cap(int(policy.removeprefix("static")))
        trace = make_trace(phases, args.seed + 99, server.lengths)
        t0 = time.perf_counter()
        with Sampler(server, t0, 1.0, {"policy": policy}) as sampler:
            outcome = await drive(server, trace, t0, grace_s=args.loop_grace_s)
            rc = stop_governor(governor) if governor is not None else None
            await server.wait_idle()
        rows = phase_rows(policy, trace, sampler.rows, phases, args.slo_ms / 1e3)
        for row in rows:
            row["cancelled_after_grace"] = outcome["cancelled"]
            row["governor_rc"] = rc if rc is not None else ""
        summary.extend(rows)
        requests.extend(request_rows(trace, {"policy": policy}))
        timeline.extend(sampler.rows)
        total = rows[-1]
        log(
            f"loop {policy}: attainment {total['slo_attainment']:.3f}, "
            f"goodput {total['goodput_rps']:.2f} req/s, "
            f"TPOT p99 {total['tpot_p99_ms']:.1f} ms, cap {total['cap_min']}..{total['cap_max']}"
        )
        # After every policy, so that a run cut short keeps what it finished.
        write_csv(out / "loop_summary.csv", summary)
        write_csv(out / "loop_requests.csv", requests)
        write_csv(out / "loop_timeline.csv", timeline)
    await server.set_cap(ceiling)
    return summary


# ---------------------------------------------------------------- main


async def main(args: argparse.Namespace, out: Path) -> None:
    lengths = Lengths(args.in_min, args.in_max, args.out_min, args.out_max)
    token = args.token or os.environ.get("GOVERNOR_ADMIN_TOKEN", "")
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        server = Server(session, args.url, args.model, token, lengths)
        log(f"limits at start: {await server.limits()}")
        if args.warm_s > 0:
            warm = make_trace([(args.warm_s, 4.0)], 12345, lengths)
            await drive(server, warm, time.perf_counter(), grace_s=30)
            await server.wait_idle()
        parts = ["probe", "serving", "loop"] if args.command == "all" else args.command.split(",")
        for part in parts:
            log(f"--- {part}")
            try:
                if part == "probe":
                    await probe(server, args, out)
                elif part == "serving":
                    await serving(server, args, out)
                elif part == "budget":
                    await budget(server, args, out)
                else:
                    await loop(server, args, out)
            except Exception as exc:  # record it and go on with the next part
                log(f"{part} FAILED: {exc!r}")
                (out / f"{part}_FAILED.txt").write_text(repr(exc))
                with contextlib.suppress(Exception):
                    await server.wait_idle()
        log("--- done")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", help="probe, serving, loop, budget, all, or a comma list of parts")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="llama8b")
    p.add_argument("--token", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--warm-s", type=float, default=6.0)
    p.add_argument("--in-min", type=int, default=256)
    p.add_argument("--in-max", type=int, default=1024)
    p.add_argument("--out-min", type=int, default=64)
    p.add_argument("--out-max", type=int, default=256)
    p.add_argument("--probe-rate", type=float, default=36.0)
    p.add_argument("--probe-ramp-s", type=float, default=12.0)
    p.add_argument("--probe-low", type=int, default=16)
    p.add_argument("--probe-high", type=int, default=128)
    p.add_argument("--probe-hold-s", type=float, default=5.0)
    p.add_argument("--probe-changes", type=int, default=100)
    p.add_argument("--probe-change-gap-s", type=float, default=0.12)
    p.add_argument("--probe-grace-s", type=float, default=240.0)
    p.add_argument("--caps", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256])
    p.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=[8.0, 20.0, 40.0])
    p.add_argument("--dur", type=float, default=35.0, help="point length at rates below 40 req/s")
    p.add_argument("--dur-high", type=float, default=30.0, help="point length at 40 req/s and above")
    p.add_argument("--warmup", type=float, default=10.0, help="window start within each point")
    p.add_argument("--grace", type=float, default=15.0)
    p.add_argument("--phases", default="40:8,50:40,40:8", help="duration_s:rate,... for the loop")
    p.add_argument("--policies", default="static256,static64,governor")
    p.add_argument("--slo-ms", type=float, default=20.0)
    p.add_argument("--governor-cmd", default="")
    p.add_argument(
        "--governor-variants",
        default="",
        help="NAME=ARGS;...: policy governor-NAME runs --governor-cmd plus ARGS (e.g. levers=--law levers)",
    )
    p.add_argument("--governor-start-cap", type=int, default=0)
    p.add_argument("--governor-settle-s", type=float, default=3.0)
    p.add_argument("--loop-grace-s", type=float, default=30.0)
    add_arguments(p)
    args = p.parse_args(argv)
    unknown = set(args.command.split(",")) - {"probe", "serving", "loop", "budget", "all"}
    if unknown:
        p.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    return args


if __name__ == "__main__":
    arguments = parse()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    directory = Path(arguments.out)
    directory.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(arguments, directory))
    sys.exit(0)
