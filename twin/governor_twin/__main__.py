"""`python -m governor_twin serve|bench|calibrate ...`"""

from __future__ import annotations

import argparse
import asyncio
import sys

from governor_twin.profile import load_profile, with_limits


def serve_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m governor_twin serve",
        description="Serve twin engines in real time behind the runtime's HTTP surface.",
    )
    parser.add_argument("--profile", default="cpu_tiny_llama", help="h200_llama8b or cpu_tiny_llama")
    parser.add_argument("--engines", type=int, default=1, help="engines in this process, one port each")
    parser.add_argument("--port", type=int, default=8000, help="first port; engine i listens on port + i")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name", default="twin")
    parser.add_argument("--initial-cap", type=int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None, help="ceiling (default: the profile's)")
    args = parser.parse_args(argv)
    from governor_twin.server import TwinEngine, serve

    profile = load_profile(args.profile)
    if args.max_num_seqs:
        profile = with_limits(profile, ceiling=args.max_num_seqs)
    twins = [
        TwinEngine(profile, args.served_model_name, i, args.initial_cap, seed=i) for i in range(args.engines)
    ]
    ports = [args.port + i for i in range(args.engines)]
    print(
        f"governor-twin: {args.engines} engine(s) of profile {profile.name} on "
        + ", ".join(f"http://{args.host}:{p}" for p in ports),
        flush=True,
    )
    asyncio.run(serve(twins, ports, host=args.host))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv else "help"
    if command == "serve":
        return serve_main(argv)
    if command == "bench":
        from governor_twin.bench import main as bench_main

        return bench_main(argv)
    if command == "calibrate":
        from governor_twin.calibrate import main as calibrate_main

        return calibrate_main(argv)
    print("usage: python -m governor_twin serve|bench|calibrate [--help]")
    return 0 if command in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    raise SystemExit(main())
