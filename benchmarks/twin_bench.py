"""Regenerate the twin benchmark report (benchmarks/results/REPORT.md, results.json, plots/).

    python benchmarks/twin_bench.py            # same as: python -m governor_twin.bench
    python benchmarks/twin_bench.py --scenarios mixed --trace my_trace.csv --load 0.7

Every cap policy (the project's law, the seed law, static caps, the per-phase oracle, AIMD, a ±1-rung step
with a pending guard) on the same traffic for each scenario in twin/governor_twin/scenarios/, in virtual time
on the step-level twin calibrated on shared/calibration/ (H200). See benchmarks/results/ANALYSIS.md.
"""

from __future__ import annotations

from governor_twin.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
