"""Scores of one run against one (TPOT target, TTFT bound) pair.

Goodput is DistServe's: requests per second that meet BOTH bounds, the request's own TPOT ≤ the target and
its TTFT ≤ the bound, counted over requests that arrived in the span and finished within the run.
SLO-window attainment reuses the twin's scorer (`score.score_span`: 1-minute windows, exact P99).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from governor_twin.scenarios import Slo
from governor_twin.score import score_span
from governor_twin.sim import RunResult

# The start-up span a cell's goodput is also split at: three of the law's 30-s windows, in which it reads
# its first P99 and makes its first moves, each seen through a window (rule 5), from the cap it starts at
# (the profile table's, else the ceiling). A static cap is where it stays from the first request; the split
# shows how much of a law's gap to the best static is that start and how much its settled behaviour.
START_S = 90.0


def meets_both(
    tpot: NDArray[np.float64],
    ttft: NDArray[np.float64],
    done: NDArray[np.bool_],
    tpot_s: float,
    ttft_s: float,
) -> NDArray[np.bool_]:
    """Per request: finished, TPOT ≤ target and TTFT ≤ bound."""
    with np.errstate(invalid="ignore"):
        return np.asarray(done & (tpot <= tpot_s) & (ttft <= ttft_s), dtype=np.bool_)


def goodput_rps(run: RunResult, tpot_s: float, ttft_s: float, start: float, end: float) -> float:
    finished_in_run = run.done & (run.finish <= run.scenario.duration_s)
    good = meets_both(run.tpot, run.ttft, finished_in_run, tpot_s, ttft_s)
    arrived = (run.sent >= start) & (run.sent < end)
    return float(np.sum(good & arrived)) / max(end - start, 1e-9)


@dataclass(frozen=True)
class CellScore:
    goodput_rps: float
    slo_windows: float  # TPOT P99 windows meeting the target
    ttft_windows: float
    phase_goodput: tuple[float, ...]
    mean_cap: float
    start_goodput: float = float("nan")  # over requests sent in the first START_S
    settled_goodput: float = float("nan")  # over the requests sent after it


def score(run: RunResult, tpot_s: float, ttft_s: float) -> CellScore:
    scenario = replace(run.scenario, slo=Slo(run.scenario.slo.latency, tpot_s, ttft_s))
    judged = replace(run, scenario=scenario)
    whole = score_span(judged, 0.0, scenario.duration_s)
    phases = tuple(goodput_rps(judged, tpot_s, ttft_s, a, b) for _, a, b in scenario.phase_bounds())
    return CellScore(
        goodput_rps(judged, tpot_s, ttft_s, 0.0, scenario.duration_s),
        whole.slo_windows,
        whole.ttft_windows,
        phases,
        float(run.tick_cap.mean()) if run.tick_cap.size else float("nan"),
        goodput_rps(judged, tpot_s, ttft_s, 0.0, min(START_S, scenario.duration_s)),
        goodput_rps(judged, tpot_s, ttft_s, START_S, scenario.duration_s)
        if scenario.duration_s > START_S
        else float("nan"),
    )
