"""The generalization matrix and the reaction benchmark in one command (issue 12):
`python benchmarks/matrix_bench.py [--quick] [--jobs N] [--new-law module:function]` writes
benchmarks/results/matrix/REPORT.md, results.json and heatmap.png."""

from __future__ import annotations

import sys

from governor_twin.matrix.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
