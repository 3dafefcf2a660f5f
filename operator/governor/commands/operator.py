"""``governor operator``: run the Kopf operator (all handlers in governor.handlers).

Liveness: Kopf's own endpoint (``--liveness``, default http://0.0.0.0:8080/healthz). Metrics: the
prometheus-client registry on ``--metrics-port`` (default 9090). Without ``--peering`` the operator runs
standalone (one replica; no peering CRD needed). With ``--peering`` each replica needs its own
``--priority``: Kopf pauses a replica only for a peer of higher priority (equal ones both act, with a
warning), so the default is a random one per process and exactly one replica acts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

HELP = "run the Kubernetes operator that reconciles InferenceServices"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable; glob patterns allowed); default: all",
    )
    parser.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="Kopf liveness endpoint URL"
    )
    parser.add_argument("--metrics-port", type=int, default=9090, help="port of /metrics (0: off)")
    parser.add_argument(
        "--peering", default=None, help="Kopf peering name for several replicas (default: standalone)"
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="Kopf peering priority (default with --peering: random, one per replica)",
    )
    parser.add_argument(
        "--server",
        default=None,
        help="API server URL without credentials (development); default: in-cluster or kubeconfig",
    )
    parser.add_argument(
        "--status-refresh-ticks",
        type=_positive,
        default=None,
        metavar="N",
        help="refresh an InferenceService's status every N control ticks when nothing users"
        " act on changed (a changed cap, mode, condition or replica wish is written at once);"
        " default 6, 1: every tick",
    )
    parser.add_argument("-v", "--verbose", action="store_true")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of ticks") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} ticks: at least 1 (1 refreshes status every tick)")
    return value


def main(args: argparse.Namespace) -> int:
    import random

    import kopf
    import prometheus_client

    import governor.handlers  # noqa: F401  (registers the handlers)
    from governor.adapters import kube
    from governor.handlers.startup import operator_memo

    kopf.configure(verbose=args.verbose)
    if not args.verbose:  # one INFO line per API and admin request: 400 a second at 1,000 objects
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.metrics_port:
        prometheus_client.start_http_server(args.metrics_port)
    connection = kube.Connection(server=args.server) if args.server else None
    asyncio.run(
        kopf.operator(
            memo=operator_memo(connection, args.status_refresh_ticks),
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
            standalone=args.peering is None,
            peering_name=args.peering,
            priority=args.priority
            if args.priority is not None or args.peering is None
            else random.SystemRandom().randrange(1, 2**31),
        )
    )
    return 0
