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
  all      probe, serving, loop in that order (what the GPU run does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import math
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv",
    "vllm:num_preemptions_total": "preemptions",
    "vllm_governor:max_num_active_seqs": "cap",
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each wanted series over its labels (one engine here)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = METRIC_LINE.match(line)
        if match is None or match[1] not in GAUGES:
            continue
        with contextlib.suppress(ValueError):
            key = GAUGES[match[1]]
            found[key] = found.get(key, 0.0) + float(match[3])
    return found


@dataclass
class Request:
    index: int
    phase: int
    t_sched: float
    in_len: int
    out_len: int
    t_send: float = math.nan
    chunks: list[float] = field(default_factory=list)
    completion_tokens: int | None = None
    t_end: float = math.nan
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and not math.isnan(self.t_end)

    @property
    def ttft(self) -> float:
        return self.chunks[0] - self.t_send if self.chunks else math.nan

    @property
    def tpot(self) -> float:
        tokens = self.completion_tokens or len(self.chunks)
        if len(self.chunks) < 2 or tokens < 2:
            return math.nan
        return (self.chunks[-1] - self.chunks[0]) / (tokens - 1)

    @property
    def e2e(self) -> float:
        return self.t_end - self.t_send


@dataclass(frozen=True)
class Lengths:
    in_min: int = 256
    in_max: int = 1024
    out_min: int = 64
    out_max: int = 256
    id_low: int = 1000
    id_high: int = 120000


def make_trace(phases: Sequence[tuple[float, float]], seed: int, lengths: Lengths) -> list[Request]:
    """Poisson arrivals with a piecewise-constant rate; phases are (duration s, rate req/s)."""
    rng = random.Random(seed)
    trace: list[Request] = []
    start = 0.0
    for phase, (duration, rate) in enumerate(phases):
        t = start
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= start + duration:
                break
            trace.append(
                Request(
                    index=len(trace),
                    phase=phase,
                    t_sched=t,
                    in_len=rng.randint(lengths.in_min, lengths.in_max),
                    out_len=rng.randint(lengths.out_min, lengths.out_max),
                )
            )
        start += duration
    return trace


class Server:
    """One runtime: completions, /metrics and the admin route."""

    def __init__(self, session: aiohttp.ClientSession, base: str, model: str, token: str, lengths: Lengths):
        self.session = session
        self.base = base.rstrip("/")
        self.model = model
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.lengths = lengths

    async def limits(self) -> dict[str, Any]:
        async with self.session.get(f"{self.base}/governor/v1/limits", headers=self.headers) as response:
            body: dict[str, Any] = await response.json()
            if response.status != 200:
                raise RuntimeError(f"GET limits -> {response.status}: {body}")
            return body

    async def set_cap(self, cap: int) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        async with self.session.put(
            f"{self.base}/governor/v1/limits", json={"cap": cap}, headers=self.headers
        ) as response:
            body: dict[str, Any] = await response.json()
            elapsed = time.perf_counter() - started
            if response.status != 200:
                raise RuntimeError(f"PUT cap={cap} -> {response.status}: {body}")
            return body, elapsed

    async def metrics(self) -> dict[str, float]:
        async with self.session.get(f"{self.base}/metrics") as response:
            return parse_metrics(await response.text())

    async def stream(self, request: Request, t0: float) -> None:
        rng = random.Random(request.index * 1_000_003 + request.in_len)
        prompt = [rng.randrange(self.lengths.id_low, self.lengths.id_high) for _ in range(request.in_len)]
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": request.out_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        request.t_send = time.perf_counter() - t0
        try:
            async with self.session.post(f"{self.base}/v1/completions", json=body) as response:
                if response.status != 200:
                    request.error = f"http {response.status}: {(await response.text())[:160]}"
                    return
                async for raw in response.content:
                    if not raw.startswith(b"data: "):
                        continue
                    payload = raw[6:].strip()
                    if payload == b"[DONE]":
                        break
                    now = time.perf_counter() - t0
                    message = json.loads(payload)
                    usage = message.get("usage")
                    if usage:
                        request.completion_tokens = usage.get("completion_tokens")
                    choices = message.get("choices") or []
                    if choices and choices[0].get("text"):
                        request.chunks.append(now)
            request.t_end = time.perf_counter() - t0
            if request.completion_tokens != request.out_len:
                request.error = f"short output {request.completion_tokens}/{request.out_len}"
        except asyncio.CancelledError:
            request.error = "cancelled"
            raise
        except Exception as exc:  # every failure is recorded, none stops the run
            request.error = repr(exc)[:160]

    async def wait_idle(self, limit_s: float = 120.0) -> float:
        started = time.perf_counter()
        while time.perf_counter() - started < limit_s:
            with contextlib.suppress(Exception):
                sample = await self.metrics()
                if sample.get("running", 1) == 0 and sample.get("waiting", 1) == 0:
                    break
            await asyncio.sleep(0.5)
        return time.perf_counter() - started


class Sampler:
    """Samples /metrics every ``interval`` seconds into rows (t relative to ``t0``)."""

    def __init__(self, server: Server, t0: float, interval: float, label: dict[str, Any]):
        self.server, self.t0, self.interval, self.label = server, t0, interval, label
        self.rows: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter() - self.t0
            with contextlib.suppress(Exception):
                self.rows.append({**self.label, "t": round(t, 3), **await self.server.metrics()})
            await asyncio.sleep(self.interval)

    def __enter__(self) -> Sampler:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def drive(
    server: Server,
    trace: list[Request],
    t0: float,
    grace_s: float,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Send the trace on time (until ``stop``), wait ``grace_s`` for the rest, cancel what is still open."""
    tasks: list[asyncio.Task[None]] = []
    sent = 0
    for request in trace:
        if stop is not None and stop.is_set():
            break
        delay = t0 + request.t_sched - time.perf_counter()
        if delay > 0:
            if stop is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
            else:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(server.stream(request, t0)))
        sent += 1
    send_end = time.perf_counter() - t0
    pending = [task for task in tasks if not task.done()]
    if pending:
        await asyncio.wait(pending, timeout=grace_s)
    cancelled = 0
    for task in tasks:
        if not task.done():
            task.cancel()
            cancelled += 1
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"sent": sent, "cancelled": cancelled, "send_end_s": send_end, "stop_s": time.perf_counter() - t0}


def window_summary(
    requests: Sequence[Request], samples: Sequence[dict[str, Any]], start: float, end: float
) -> dict[str, Any]:
    """The calibration's columns over the window [start, end] (latencies: requests sent in the window)."""
    width = end - start
    sent = [r for r in requests if not math.isnan(r.t_send) and start <= r.t_send <= end]
    done = [r for r in sent if r.ok]
    completions = sum(1 for r in requests if r.ok and start <= r.t_end <= end)
    chunks = sum(1 for r in requests for t in r.chunks if start <= t <= end)
    gaps = [b - a for r in done for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
    inside = [s for s in samples if start <= s["t"] <= end]
    running = [float(s["running"]) for s in inside if "running" in s]
    waiting = [float(s["waiting"]) for s in inside if "waiting" in s]
    kv = [float(s["kv"]) for s in inside if "kv" in s]
    pre = [float(s["preemptions"]) for s in samples if "preemptions" in s]
    ttft = [r.ttft for r in done]
    tpot = [r.tpot for r in done if not math.isnan(r.tpot)]
    e2e = [r.e2e for r in done]
    row: dict[str, Any] = {
        "offered_rps": len(sent) / width,
        "achieved_rps": completions / width,
        "output_tok_s": chunks / width,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "tpot_p50_ms": 1e3 * percentile(tpot, 50),
        "tpot_p90_ms": 1e3 * percentile(tpot, 90),
        "tpot_p99_ms": 1e3 * percentile(tpot, 99),
        "itl_p50_ms": 1e3 * percentile(gaps, 50),
        "itl_p99_ms": 1e3 * percentile(gaps, 99),
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p99_s": percentile(e2e, 99),
        "mean_running": mean(running),
        "max_running": max(running) if running else math.nan,
        "mean_waiting": mean(waiting),
        "kv_usage_max": max(kv) if kv else math.nan,
        "preemptions": (pre[-1] - pre[0]) if len(pre) > 1 else math.nan,
        "n_sent_window": len(sent),
        "n_measured": len(done),
        "n_incomplete_window": len(sent) - len(done),
        "errors": sum(1 for r in requests if r.error and r.error != "cancelled"),
    }
    backlog = row["mean_waiting"] > 10 or row["n_incomplete_window"] > 0
    row["saturated"] = int(backlog or row["achieved_rps"] < 0.93 * row["offered_rps"])
    return row


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()})


def request_rows(requests: Sequence[Request], label: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **label,
            "id": r.index,
            "phase": r.phase,
            "t_sched": r.t_sched,
            "t_send": r.t_send,
            "in_len": r.in_len,
            "out_len": r.out_len,
            "completion_tokens": r.completion_tokens if r.completion_tokens is not None else "",
            "n_chunks": len(r.chunks),
            "ttft_s": r.ttft,
            "tpot_s": r.tpot,
            "e2e_s": r.e2e,
            "error": r.error,
        }
        for r in requests
    ]


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


def start_governor(args: argparse.Namespace, out: Path) -> subprocess.Popen[bytes]:
    command = shlex.split(args.governor_cmd)
    handle = (out / "governor.log").open("ab")
    log("governor: " + " ".join(command))
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop_governor(process: subprocess.Popen[bytes]) -> int | None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
    return process.returncode


def phase_rows(
    policy: str,
    requests: Sequence[Request],
    samples: Sequence[dict[str, Any]],
    phases: Sequence[tuple[float, float]],
    slo_s: float,
) -> list[dict[str, Any]]:
    rows = []
    start = 0.0
    bounds = [*[(i, d, r) for i, (d, r) in enumerate(phases)], (-1, sum(d for d, _ in phases), math.nan)]
    for index, duration, rate in bounds:
        begin, end = (start, start + duration) if index >= 0 else (0.0, duration)
        sent = [r for r in requests if (r.phase == index or index < 0) and not math.isnan(r.t_send)]
        done = [r for r in sent if r.ok]
        good = [r for r in done if r.tpot <= slo_s]
        tpot = [r.tpot for r in done if not math.isnan(r.tpot)]
        inside = [s for s in samples if begin <= s["t"] <= end]
        caps = [float(s["cap"]) for s in inside if "cap" in s]
        rows.append(
            {
                "policy": policy,
                "phase": index if index >= 0 else "all",
                "rate_target_rps": rate,
                "phase_start_s": begin,
                "phase_s": end - begin,
                "sent": len(sent),
                "completed": len(done),
                "slo_ms": 1e3 * slo_s,
                "slo_attainment": len(good) / len(sent) if sent else math.nan,
                "goodput_rps": len(good) / (end - begin),
                "throughput_rps": len(done) / (end - begin),
                "tpot_p50_ms": 1e3 * percentile(tpot, 50),
                "tpot_p99_ms": 1e3 * percentile(tpot, 99),
                "ttft_p50_s": percentile([r.ttft for r in done], 50),
                "ttft_p99_s": percentile([r.ttft for r in done], 99),
                "e2e_p99_s": percentile([r.e2e for r in done], 99),
                "mean_running": mean([float(s["running"]) for s in inside if "running" in s]),
                "mean_waiting": mean([float(s["waiting"]) for s in inside if "waiting" in s]),
                "cap_mean": mean(caps),
                "cap_min": min(caps) if caps else math.nan,
                "cap_max": max(caps) if caps else math.nan,
            }
        )
        if index >= 0:
            start += duration
    return rows


async def loop(server: Server, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    phases = [(float(d), float(r)) for d, r in (p.split(":") for p in args.phases.split(","))]
    summary: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    ceiling = int((await server.limits())["ceiling"])
    for policy in args.policies.split(","):
        governor: subprocess.Popen[bytes] | None = None
        if policy == "governor":
            if not args.governor_cmd:
                log("loop: no --governor-cmd, the governor policy is skipped")
                continue
            await server.set_cap(args.governor_start_cap or ceiling)
            governor = start_governor(args, out)
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
        parts = ["probe", "serving", "loop"] if args.command == "all" else [args.command]
        for part in parts:
            log(f"--- {part}")
            try:
                if part == "probe":
                    await probe(server, args, out)
                elif part == "serving":
                    await serving(server, args, out)
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
    p.add_argument("command", choices=["probe", "serving", "loop", "all"])
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
    p.add_argument("--governor-start-cap", type=int, default=0)
    p.add_argument("--governor-settle-s", type=float, default=3.0)
    p.add_argument("--loop-grace-s", type=float, default=30.0)
    return p.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    directory = Path(arguments.out)
    directory.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(arguments, directory))
    sys.exit(0)
