"""Runtime overhead (issue 3, item 6): vLLM with the governor plugins loaded vs not loaded, and the latency of
a cap change.

Both servers run side by side with the same engine arguments (tiny dummy Llama, CPU); rounds alternate
between them (on, off, off, on, ...) so drift in the shared machine's load hits both alike. Each round is a
closed-loop workload: ``--concurrency`` clients each send completions of ``--max-tokens`` tokens for
``--round-s`` seconds. Throughput is generated tokens per second; the ratio is governed / plain (goal
≥ 0.99). On a machine shared with other work, wall-clock throughput mostly measures the neighbours, so each
round also reads the CPU seconds the server's processes (API server, EngineCore, worker) spent, and the
script reports tokens per CPU-second too: the plugins' cost is CPU work, which this ratio isolates. Then,
with the governed server under the same load, ``--cap-changes`` PUTs move the cap and their
round-trip latency is reported (goal: p99 < 50 ms).

    python benchmarks/runtime_overhead.py            # a few minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
from governor_dev import loadgen
from governor_dev.localengine import LIMITS_PATH, Engine, prompt_ids, start_runtime
from governor_dev.scoring import nearest_rank
from governor_runtime.launcher import with_buckets


async def closed_loop(
    engine: Engine, concurrency: int, max_tokens: int, duration_s: float
) -> tuple[int, int]:
    """Generated tokens and failed requests over ``duration_s`` of ``concurrency`` clients."""
    tokens = failed = 0

    async def send(worker: int, round_: int) -> None:
        nonlocal tokens, failed
        body = engine.completion_body(prompt_ids(32, worker * 10_000 + round_), max_tokens)
        response = await client.post("/v1/completions", json=body)
        if response.status_code == 200:
            tokens += response.json()["usage"]["completion_tokens"]
        else:
            failed += 1

    async with httpx.AsyncClient(base_url=engine.base_url, timeout=300) as client:
        await loadgen.closed_loop(concurrency, send, deadline=time.monotonic() + duration_s)
    return tokens, failed


async def cap_change_latencies(
    engine: Engine, changes: int, concurrency: int, max_tokens: int
) -> tuple[list[float], int]:
    """Round-trip seconds of ``changes`` cap PUTs while the engine serves a closed-loop load."""
    caps = [max(1, engine.ceiling // 4), engine.ceiling, max(1, engine.ceiling // 2), 2]
    latencies: list[float] = []
    load = asyncio.create_task(closed_loop(engine, concurrency, max_tokens, duration_s=3600))
    try:
        await asyncio.sleep(1.0)
        async with httpx.AsyncClient(base_url=engine.base_url, timeout=30) as client:
            for index in range(changes):
                started = time.perf_counter()
                response = await client.put(
                    LIMITS_PATH, json={"cap": caps[index % len(caps)]}, headers=engine.admin_headers
                )
                latencies.append(time.perf_counter() - started)
                response.raise_for_status()
                await asyncio.sleep(0.05)
            await client.put(LIMITS_PATH, json={"cap": engine.ceiling}, headers=engine.admin_headers)
    finally:
        load.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await load
    return latencies, 0


def server_cpu_s(engine: Engine) -> float:
    """CPU seconds (user + system) used so far by the server's process group (it runs in its own session)."""
    assert engine.process is not None
    group, total = engine.process.pid, 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if (
            int(fields[2]) == group
        ):  # fields after the command: state, ppid, pgrp, ..., utime (11), stime (12)
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds per server (interleaved)")
    parser.add_argument("--round-s", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ceiling", type=int, default=32, help="--max-num-seqs of both servers")
    parser.add_argument("--cap-changes", type=int, default=100)
    args = parser.parse_args()

    with contextlib.ExitStack() as servers:
        print("starting both servers (plain vLLM and governed) ...", flush=True)
        # Same engine arguments: the plain server gets the launcher's finer buckets too; the governed one
        # refreshes its metrics at the production interval.
        plain = servers.enter_context(
            start_runtime(ceiling=args.ceiling, governed=False, extra_args=with_buckets([]))
        )
        governed = servers.enter_context(
            start_runtime(
                ceiling=args.ceiling, initial_cap=args.ceiling, env={"GOVERNOR_METRICS_INTERVAL_S": "1.0"}
            )
        )
        for engine in (plain, governed):  # compile the step shapes before measuring
            asyncio.run(closed_loop(engine, args.concurrency, args.max_tokens, 3.0))

        throughput: dict[str, list[float]] = {"plain": [], "governed": []}
        per_cpu_s: dict[str, list[float]] = {"plain": [], "governed": []}
        order = [("governed", governed), ("plain", plain)]
        for round_ in range(args.rounds):
            for name, engine in order if round_ % 2 == 0 else order[::-1]:
                cpu_before = server_cpu_s(engine)
                load = closed_loop(engine, args.concurrency, args.max_tokens, args.round_s)
                tokens, failed = asyncio.run(load)
                cpu_s = server_cpu_s(engine) - cpu_before
                if failed:
                    raise SystemExit(f"{name}: {failed} failed requests in round {round_}")
                throughput[name].append(tokens / args.round_s)
                per_cpu_s[name].append(tokens / cpu_s)
                print(
                    f"round {round_} {name:8s} {tokens / args.round_s:8.1f} tokens/s "
                    f"{tokens / cpu_s:8.1f} tokens per CPU-second",
                    flush=True,
                )

        latencies, _ = asyncio.run(
            cap_change_latencies(governed, args.cap_changes, args.concurrency, args.max_tokens)
        )

    ratios = [g / p for g, p in zip(throughput["governed"], throughput["plain"], strict=True)]
    cpu_ratios = [g / p for g, p in zip(per_cpu_s["governed"], per_cpu_s["plain"], strict=True)]
    mean_plain = statistics.mean(throughput["plain"])
    mean_governed = statistics.mean(throughput["governed"])
    print()
    print(f"throughput plain    mean {mean_plain:8.1f} tokens/s")
    print(f"throughput governed mean {mean_governed:8.1f} tokens/s")
    print(
        f"throughput ratio governed/plain: {mean_governed / mean_plain:.3f} "
        f"(median of per-round ratios {statistics.median(ratios):.3f}; goal >= 0.99)"
    )
    print(
        "tokens per CPU-second ratio governed/plain: "
        f"{statistics.mean(per_cpu_s['governed']) / statistics.mean(per_cpu_s['plain']):.3f} "
        f"(median of per-round ratios {statistics.median(cpu_ratios):.3f})"
    )
    p50, p99 = (1e3 * (nearest_rank(latencies, q) or math.nan) for q in (0.50, 0.99))
    print(
        f"cap change latency under load ({len(latencies)} PUTs): p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
        f"max {max(latencies) * 1e3:.1f} ms (goal p99 < 50 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
