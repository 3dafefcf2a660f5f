"""The fleet benchmark in one command: `python benchmarks/fleet_bench.py [--workers N]` writes
benchmarks/results/fleet/REPORT.md with its plots (issue 14)."""

from __future__ import annotations

import sys

from governor_twin.fleet.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
