"""gpubench's budget part: one open-loop load at a fixed cap, replayed at each token budget set live.

The load is mostly short chats plus a few long prompts (issue 12 item 5: the twin's prefill interference).
With chunked prefill a step computes at most ``token_budget`` tokens, decodes included, so a long prompt's
chunk lengthens the step every decoding request is in: a smaller budget shortens those stalls (inter-token
latency) and lengthens the long prompt's own prefill (its TTFT). Every budget gets the same arrivals and
lengths (one seed) but other prompt ids (``Request.salt``), so no point reads another's from the prefix cache.

Per point, over the window [warmup, duration] (requests sent in it): the calibration's columns
(``gpustats.window_summary``: TPOT, TTFT, per-gap ITL P50/P99, throughput, running) plus ITL P99.9, the
P50/P99 of each request's longest gap, TTFT P99 per class (``phase`` 0 = short, 1 = long), and how many
requests had fewer chunks than tokens (a chunk carrying several tokens hides a gap). Standard library and
aiohttp only.

A point of ``--budgets`` may also be a governor policy (``governor`` or ``governor-NAME``, as in the
loop part): it starts from the engine's own budget at the same cap, with ``governor run`` beside the load
moving the budget (and the cap) live, for the levers law's budget lever on an inter-token SLO.
``--itl-slo-ms`` scores every point's windows against that target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpugovernor import governor_command, log, start_governor, stop_governor  # benchmarks/gpu: sys.path[0]
from gpuload import Lengths, Request, Sampler, Server, drive
from gpustats import percentile, request_rows, window_summary, write_csv

SHORT, LONG = 0, 1  # Request.phase holds the class


def budget_points(text: str) -> list[int | str]:
    """``--budgets``: token budgets held for a whole point, or governor policies that move it live."""
    points: list[int | str] = []
    for item in text.split(","):
        if item.startswith("governor"):
            points.append(item)
            continue
        try:
            value = int(item)
        except ValueError:
            message = f"{item!r} is neither a token budget nor a governor policy"
            raise argparse.ArgumentTypeError(message) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"a token budget must be positive, not {value}")
        points.append(value)
    return points


def _at_least(low: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not value >= low:  # NaN too
            raise argparse.ArgumentTypeError(f"must be at least {low:g}, not {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("budget part")
    group.add_argument("--budget-cap", type=int, default=64)
    group.add_argument("--budgets", type=budget_points, default=[8192, 2048, 1024, 512, 8192])
    group.add_argument(
        "--itl-slo-ms", type=_at_least(0.0), default=0.0, help="ITL P99 target to score windows on (0: off)"
    )
    group.add_argument("--itl-window-s", type=_at_least(0.1), default=10.0)
    group.add_argument("--budget-rate", type=float, default=15.0)
    group.add_argument("--budget-dur", type=float, default=80.0)
    group.add_argument("--budget-warmup", type=float, default=10.0)
    group.add_argument("--budget-grace", type=float, default=30.0)
    group.add_argument("--long-share", type=float, default=0.1)
    group.add_argument("--long-min", type=int, default=6000)
    group.add_argument("--long-max", type=int, default=7900)


def make_mixed_trace(
    duration: float, rate: float, seed: int, lengths: Lengths, args: argparse.Namespace, salt: int = 0
) -> list[Request]:
    """Poisson arrivals; a share ``long_share`` of prompts uniform in [long_min, long_max], the rest short."""
    rng = random.Random(seed)
    trace: list[Request] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return trace
        kind = LONG if rng.random() < args.long_share else SHORT
        prompt = (
            rng.randint(args.long_min, args.long_max)
            if kind == LONG
            else rng.randint(lengths.in_min, lengths.in_max)
        )
        output = rng.randint(lengths.out_min, lengths.out_max)
        trace.append(Request(len(trace), kind, t, prompt, output, salt=salt))


def longest_gap(request: Request) -> float:
    gaps = [b - a for a, b in zip(request.chunks, request.chunks[1:], strict=False)]
    return max(gaps) if gaps else math.nan


def gap_summary(requests: Sequence[Request], start: float, end: float) -> dict[str, Any]:
    """Inter-token gaps of the requests sent in [start, end] that completed (client chunk arrival times)."""
    done = [r for r in requests if r.ok and start <= r.t_send <= end]
    gaps = [b - a for r in done for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
    longest = [longest_gap(r) for r in done if len(r.chunks) > 1]
    by_class = {kind: [r.ttft for r in done if r.phase == kind] for kind in (SHORT, LONG)}
    return {
        "itl_p999_ms": 1e3 * percentile(gaps, 99.9),
        "itl_max_ms": 1e3 * max(gaps) if gaps else math.nan,
        "itl_mean_ms": 1e3 * sum(gaps) / len(gaps) if gaps else math.nan,
        "max_gap_p50_ms": 1e3 * percentile(longest, 50),
        "max_gap_p99_ms": 1e3 * percentile(longest, 99),
        "ttft_p99_short_s": percentile(by_class[SHORT], 99),
        "ttft_p99_long_s": percentile(by_class[LONG], 99),
        "n_gaps": len(gaps),
        "n_long": len(by_class[LONG]),
        "n_merged_chunks": sum(1 for r in done if len(r.chunks) < (r.completion_tokens or 0)),
    }


def itl_windows(
    requests: Sequence[Request], start: float, end: float, width: float, target_s: float
) -> float:
    """Share of the ``width``-second windows in [start, end] whose inter-token P99 is within ``target_s``:
    every gap between two chunks of any request, by the time its later chunk arrived (what the engine's
    histogram and the law read). A window without gaps is left out; NaN when none has any."""
    edges = [start + i * width for i in range(max(1, math.floor((end - start) / width)) + 1)]
    gaps: list[list[float]] = [[] for _ in edges[:-1]]
    for request in requests:
        for a, b in zip(request.chunks, request.chunks[1:], strict=False):
            index = math.floor((b - start) / width)
            if start <= b < edges[-1] and 0 <= index < len(gaps):
                gaps[index].append(b - a)
    met = [percentile(window, 99) <= target_s for window in gaps if window]
    return sum(met) / len(met) if met else math.nan


def held_range(samples: Sequence[dict[str, Any]], key: str, start: float, end: float) -> dict[str, Any]:
    """What the engine held over the window: min, max and mean of a sampled gauge (NaN if never sampled)."""
    values = [float(s[key]) for s in samples if start <= s["t"] <= end and key in s]
    if not values:
        return {f"{key}_min": math.nan, f"{key}_max": math.nan, f"{key}_mean": math.nan}
    return {f"{key}_min": min(values), f"{key}_max": max(values), f"{key}_mean": sum(values) / len(values)}


async def put_limits(server: Server, **body: int) -> dict[str, Any]:
    async with server.session.put(
        f"{server.base}/governor/v1/limits", json=body, headers=server.headers
    ) as response:
        answer: dict[str, Any] = await response.json()
        if response.status != 200:
            raise RuntimeError(f"PUT {body} -> {response.status}: {answer}")
        return answer


async def budget(server: Server, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    start = await server.limits()
    own_budget = int(start["token_budget"])
    rows: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    try:
        for point, setting in enumerate(args.budgets):
            policy = setting if isinstance(setting, str) else "static"
            token_budget = own_budget if isinstance(setting, str) else setting
            held = await put_limits(server, cap=args.budget_cap, token_budget=token_budget)
            governor = None
            if isinstance(setting, str):
                command = governor_command(args, setting)
                if command is None:
                    log(f"budget: no governor command for {setting}, skipped")
                    continue
                governor = start_governor(command, setting, out)
                await asyncio.sleep(args.governor_settle_s)
                if governor.poll() is not None:
                    log(f"budget: governor exited early rc={governor.returncode}; see {setting}.log")
                    continue
            trace = make_mixed_trace(
                args.budget_dur, args.budget_rate, args.seed + 500, server.lengths, args, salt=point + 1
            )
            label = {"point": point, "policy": policy, "token_budget": token_budget}
            t0 = time.perf_counter()
            try:
                with Sampler(server, t0, 1.0, label) as sampler:
                    outcome = await drive(server, trace, t0, grace_s=args.budget_grace)
                    rc = stop_governor(governor) if governor is not None else None
                    await server.wait_idle()
            finally:  # a point that fails leaves no governor moving the next point's limits
                if governor is not None:
                    stop_governor(governor)
            window = (args.budget_warmup, args.budget_dur)
            row = {
                **label,
                "cap": args.budget_cap,
                "rate_target_rps": args.budget_rate,
                "held": json.dumps({k: held.get(k) for k in ("cap", "token_budget")}),
                **window_summary(trace, sampler.rows, *window),
                **gap_summary(trace, *window),
                **held_range(sampler.rows, "token_budget", *window),
                **held_range(sampler.rows, "cap", *window),
                "itl_slo_ms": args.itl_slo_ms or math.nan,
                "itl_windows_met": (
                    itl_windows(trace, *window, args.itl_window_s, args.itl_slo_ms / 1e3)
                    if args.itl_slo_ms > 0
                    else math.nan
                ),
                "cancelled_after_grace": outcome["cancelled"],
                "governor_rc": rc if rc is not None else "",
                "duration_s": args.budget_dur,
                "window_start_s": window[0],
                "window_end_s": window[1],
            }
            rows.append(row)
            requests.extend(
                {**row, "max_gap_s": longest_gap(r)}
                for row, r in zip(request_rows(trace, label), trace, strict=True)
            )
            timeline.extend(sampler.rows)
            log(
                f"budget {policy} {token_budget} at cap {args.budget_cap}: {row['achieved_rps']:.2f} req/s, "
                f"ITL p99 {row['itl_p99_ms']:.1f} ms (max gap p99 {row['max_gap_p99_ms']:.1f}, windows met "
                f"{row['itl_windows_met']:.2f}), TPOT p99 {row['tpot_p99_ms']:.1f} ms, TTFT p99 "
                f"{row['ttft_p99_s']:.2f} s, budget {row['token_budget_min']:.0f}.."
                f"{row['token_budget_max']:.0f}, "
                f"cap {row['cap_min']:.0f}..{row['cap_max']:.0f}, running {row['mean_running']:.1f}, "
                f"sat {row['saturated']}"
            )
            # After every point, so that a run cut short keeps what it finished.
            write_csv(out / "budget_summary.csv", rows)
            write_csv(out / "budget_requests.csv", requests)
            write_csv(out / "budget_timeline.csv", timeline)
    finally:
        await put_limits(server, cap=int(start["cap"]), token_budget=own_budget)
    return rows
