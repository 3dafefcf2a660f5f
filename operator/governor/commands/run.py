"""``governor run``: govern plain vLLM endpoints without Kubernetes (governor.services.standalone).

    governor run --endpoint http://10.0.0.5:8000 --endpoint http://10.0.0.6:8000 --slo-p99 25ms
    governor run --endpoint http://127.0.0.1:8000 --slo-p99 1.5s --latency e2e --prometheus http://prom:9090

Signals come from Prometheus when ``--prometheus`` is given (grouped by ``--group-label``, default ``job``,
whose value ``--group-value`` names this service), else from scraping the endpoints' /metrics. The admin
token comes from ``--admin-token-file``, else GOVERNOR_ADMIN_TOKEN. The ceiling and the starting cap are
read from the engines unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
from pathlib import Path

HELP = "govern plain vLLM endpoints (no Kubernetes): hold a latency SLO by moving their cap"
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """'1.5s', '20ms', '2m' or a plain number of seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s|m|h)?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 1.5s, 20ms, 2m)")
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if value <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from governor.core.law import DEFAULT_LAW, LAW_NAMES
    from governor.core.signals import LatencyKind

    parser.add_argument(
        "--endpoint",
        action="append",
        required=True,
        metavar="URL",
        help="a vLLM server running the governor runtime (repeatable: replicas of one service)",
    )
    parser.add_argument(
        "--slo-p99",
        type=duration,
        required=True,
        metavar="DURATION",
        help="latency target of the quantile, e.g. 25ms or 1.5s",
    )
    parser.add_argument(
        "--latency",
        choices=[k.value for k in LatencyKind],
        default=LatencyKind.TPOT.value,
        help="which latency the SLO is about (default: tpot, the per-token signal the cap governs)",
    )
    parser.add_argument("--quantile", type=float, default=0.99)
    parser.add_argument(
        "--law",
        choices=LAW_NAMES,
        default=DEFAULT_LAW,
        help=f"levers: the computed law; rules: the rule table (default: {DEFAULT_LAW})",
    )
    parser.add_argument(
        "--ttft-bound",
        type=duration,
        metavar="DURATION",
        help="the SLO's TTFT bound, as an InferenceService's slo.ttftMs: goodput counts requests meeting "
        "both bounds, and where no cap meets both the levers law gives up the per-token one (default: none)",
    )
    parser.add_argument("--prometheus", metavar="URL", help="read signals from this Prometheus (else scrape)")
    parser.add_argument("--group-label", default="job", help="Prometheus label that names the service")
    parser.add_argument("--group-value", help="its value for these endpoints (default: --name)")
    parser.add_argument("--name", default="vllm", help="service name in logs and metrics")
    parser.add_argument("--admin-token-file", type=Path)
    parser.add_argument("--tick", type=duration, default=5.0, help="decision interval (default 5s)")
    parser.add_argument("--window", type=duration, default=30.0, help="quantile window (default 30s)")
    parser.add_argument("--cooldown", type=duration, default=10.0, help="hold after a decrease (default 10s)")
    parser.add_argument("--min-cap", type=int, default=1)
    parser.add_argument("--max-cap", type=int, help="default: the engines' ceiling (startup max_num_seqs)")
    parser.add_argument("--initial-cap", type=int, help="default: GPU profile + SLO, else the cap held now")
    parser.add_argument("--gpu-type", help="GPU profile row for the initial cap, e.g. H200")
    parser.add_argument("--model-class", default="small", help="model size class: small, medium, large")
    parser.add_argument("--max-replicas", type=int, help="bound of the exported replica wish")
    parser.add_argument(
        "--ticks", type=int, default=0, help="stop after this many ticks (0: run until stopped)"
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="serve governor_* metrics here (0: off)")
    parser.add_argument("-v", "--verbose", action="store_true")


async def _run(args: argparse.Namespace) -> int:
    from governor.adapters.engine import Actuator, PodTarget
    from governor.adapters.prometheus import PromReader
    from governor.core import promql
    from governor.core.law import LAWS, LawConfig
    from governor.core.planner import ReplicaBounds
    from governor.core.signals import LatencyKind
    from governor.services.standalone import Standalone, discover_limits

    token = (
        args.admin_token_file.read_text().strip()
        if args.admin_token_file
        else os.environ.get("GOVERNOR_ADMIN_TOKEN")
    )
    actuator = Actuator()
    limits = await discover_limits(actuator, [PodTarget(u, u, token) for u in args.endpoint])
    if limits is None and args.max_cap is None:
        logging.error("no endpoint answered GET /governor/v1/limits; pass --max-cap or check the token")
        await actuator.aclose()
        return 2
    ceiling = min(x for x in (args.max_cap, limits.ceiling if limits else None) if x is not None)
    # Without a GPU profile, start from what the engines hold now rather than jumping to the ceiling.
    initial = args.initial_cap or (None if args.gpu_type else (limits.cap if limits else None))
    cfg = LawConfig(
        slo_target_s=args.slo_p99,
        latency_kind=LatencyKind(args.latency),
        quantile=args.quantile,
        min_cap=min(args.min_cap, ceiling),
        ceiling=ceiling,
        initial_cap=initial,
        gpu_type=args.gpu_type,
        model_class=args.model_class,
        tick_s=args.tick,
        window_s=args.window,
        cooldown_s=args.cooldown,
        ttft_bound_s=args.ttft_bound,
    )
    n = len(args.endpoint)
    governor = Standalone(
        name=args.name,
        endpoints=args.endpoint,
        token=token,
        cfg=cfg,
        actuator=actuator,
        prometheus=PromReader(args.prometheus) if args.prometheus else None,
        grouping=promql.standalone(args.group_label),
        group_value=args.group_value or args.name,
        replica_bounds=ReplicaBounds(min_replicas=1, max_replicas=max(args.max_replicas or 4 * n, n)),
        law=LAWS[args.law],
    )
    stopping = _stop_on_signals()
    try:
        await governor.run(args.ticks or None)
    except asyncio.CancelledError:
        if not stopping:
            raise
        logging.info("stopped by %s; the cap stays where it was last set", stopping[0])
    finally:
        await governor.aclose()
    return 0


def _stop_on_signals() -> list[str]:
    """SIGINT and SIGTERM stop the loop between requests and close its clients. Handled explicitly: a process
    started in the background inherits SIGINT ignored (Python then raises no KeyboardInterrupt; an H200 run
    saw `governor run` outlive its SIGINT), and SIGTERM is what systemd and Kubernetes send. Answers the list
    that names the signal once one came."""
    loop, task, seen = asyncio.get_running_loop(), asyncio.current_task(), []
    assert task is not None

    def stop(name: str) -> None:
        seen.append(name)
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig.name)
    return seen


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.metrics_port:
        import prometheus_client

        prometheus_client.start_http_server(args.metrics_port)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 130
