"""Where the levers law's trust factor comes from (core/law/computed.py, TRUST): fit a line to the H200
calibration's TPOT P99 on the points up to a batch B, and print its error at k x B against the measured P99
(linear between the calibration points). Under-prediction is what costs SLO misses; the plan's margin (aim at
0.9 x the target) absorbs up to 10 %.

    python benchmarks/levers_trust.py [CALIBRATION_CSV]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

DEFAULT = Path(__file__).resolve().parents[2] / "shared/calibration/h200_llama8b_serving.csv"
FACTORS = (1.25, 1.5, 1.75, 2.0, 3.0)


def main(path: Path) -> None:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    x = np.array([float(r["mean_running"]) for r in rows])
    y = np.array([float(r["tpot_p99_ms"]) for r in rows])
    order = np.argsort(x)
    x, y = x[order], y[order]
    print("support B | points | line (ms) | error of the line at k x B")
    for support in sorted(set(np.round(x, 1).tolist())):
        seen = x <= support + 1e-9
        if seen.sum() < 3 or np.ptp(x[seen]) < 2:
            continue
        slope, intercept = np.polyfit(x[seen], y[seen], 1)
        errors = [
            f"{k:g}: {100 * ((intercept + slope * k * support) / np.interp(k * support, x, y) - 1):+.0f} %"
            for k in FACTORS
            if k * support <= x.max()
        ]
        print(f"{support:6.1f} | {seen.sum():2d} | {intercept:.2f} + {slope:.3f} B | " + ", ".join(errors))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
