"""Scores of a run (DESIGN.md "Benchmark conventions").

- SLO windows: 1-minute windows; a window meets the SLO when the exact P99 of the SLO latency over the
  requests that finished in it is within the target (TPOT by default). A window in which nothing finished
  meets it only if nothing was waiting either. The TTFT window share is reported beside it.
- Goodput: output tokens per second of requests that finished within the run and met the SLO per request
  (TPOT ≤ target and TTFT ≤ the scenario's TTFT bound: DistServe's goodput).
- Mean cap (over ticks) and the number of cap changes.
- Phases are scored apart too; an *overload* phase (arrivals outrun completions at every static cap) is left
  out of the headline scores: it is the replica planner's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from governor.core.signals import LatencyKind
from governor_dev.scoring import slo_window_share, window_bounds
from numpy.typing import NDArray

from governor_twin.sim import RunResult

WINDOW_S = 60.0


@dataclass(frozen=True)
class Scores:
    slo_windows: float  # share of 1-minute windows meeting the SLO
    ttft_windows: float
    goodput_tok_s: float
    throughput_tok_s: float
    mean_cap: float
    changes: int
    p99_slo_s: float  # P99 of the SLO latency over all requests finished in the span
    windows: int
    saturated: bool  # arrivals outran completions in the span


def slo_latency(run: RunResult) -> NDArray[np.float64]:
    kind = run.scenario.slo.latency
    if kind is LatencyKind.TTFT:
        return run.ttft
    if kind is LatencyKind.E2E:
        return run.finish - run.sent
    return run.tpot  # TPOT, and inter-token approximated by the per-request mean gap


def score_span(run: RunResult, start: float, end: float) -> Scores:
    slo = run.scenario.slo
    lat = slo_latency(run)
    ttft = run.ttft
    done = run.done
    fin = np.where(done, run.finish, np.inf)
    met_req = done & (lat <= slo.target_s) & (ttft <= slo.ttft_s)
    arrived = (run.sent >= start) & (run.sent < end)
    good_tokens = float(run.output[arrived & met_req & (fin <= run.scenario.duration_s)].sum())
    span = max(end - start, 1e-9)
    in_span_done = (fin >= start) & (fin < end)
    throughput = float(run.output[in_span_done].sum()) / span
    bounds = window_bounds(start, end, WINDOW_S)

    def p99_in(values: NDArray[np.float64]) -> Callable[[float, float], float | None]:
        def p99(w0: float, w1: float) -> float | None:
            sel = (fin >= w0) & (fin < w1)
            return float(np.percentile(values[sel], 99)) if sel.any() else None

        return p99

    def waiting_at(w1: float) -> bool:
        return bool(np.any((run.sent < w1) & (fin >= w1)))

    tick = (run.tick_t > start) & (run.tick_t <= end)
    caps = run.tick_cap[tick]
    moved = np.zeros(run.tick_cap.size, dtype=bool)
    moved[1:] = run.tick_cap[1:] != run.tick_cap[:-1]
    changes = int(np.sum(moved & tick))
    admissible = arrived & ~run.refused  # rejected requests are counted, not queued
    arrivals = int(admissible.sum())
    completed = int((admissible & (fin <= end + 30.0)).sum())
    finished_lat = lat[in_span_done]
    return Scores(
        slo_windows=slo_window_share(bounds, slo.target_s, p99_in(lat), waiting_at),
        ttft_windows=slo_window_share(bounds, slo.ttft_s, p99_in(ttft), waiting_at),
        goodput_tok_s=good_tokens / span,
        throughput_tok_s=throughput,
        mean_cap=float(caps.mean()) if caps.size else float("nan"),
        changes=changes,
        p99_slo_s=float(np.percentile(finished_lat, 99)) if finished_lat.size else float("nan"),
        windows=len(bounds),
        saturated=arrivals > 0 and completed < 0.93 * arrivals,
    )


def score_phases(run: RunResult) -> list[Scores]:
    return [score_span(run, a, b) for _, a, b in run.scenario.phase_bounds()]


def score_excluding(run: RunResult, overload: list[bool]) -> Scores:
    """Headline scores over the phases that are not overload phases (all of them if all are)."""
    bounds = run.scenario.phase_bounds()
    keep = [b for b, o in zip(bounds, overload, strict=True) if not o] or bounds
    parts = [score_span(run, a, b) for _, a, b in keep]
    total = sum(b - a for _, a, b in keep)
    weight = [(b - a) / total for _, a, b in keep]
    windows = sum(p.windows for p in parts)
    return Scores(
        slo_windows=sum(p.slo_windows * p.windows for p in parts) / max(windows, 1),
        ttft_windows=sum(p.ttft_windows * p.windows for p in parts) / max(windows, 1),
        goodput_tok_s=sum(p.goodput_tok_s * w for p, w in zip(parts, weight, strict=True)),
        throughput_tok_s=sum(p.throughput_tok_s * w for p, w in zip(parts, weight, strict=True)),
        mean_cap=sum(p.mean_cap * w for p, w in zip(parts, weight, strict=True)),
        changes=sum(p.changes for p in parts),
        p99_slo_s=max(p.p99_slo_s for p in parts),
        windows=windows,
        saturated=any(p.saturated for p in parts),
    )
