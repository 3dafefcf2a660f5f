"""SLO-window scoring and the reaction to a load step, shared by the demo (real engine, client-side
records) and the twin's benchmarks.

A window meets the SLO when the P99 of the SLO latency over the requests that finished in it is within the
target; a window in which nothing finished meets it only if nothing was left waiting at its end (an idle
engine meets any SLO, a stalled one none). How the P99 is taken is the caller's (the demo: nearest rank over
its records; the twin: numpy's percentile over its arrays).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import pairwise


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """Exact sample quantile (nearest rank): the client sees every request, no buckets needed."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def window_bounds(start: float, end: float, width: float) -> list[tuple[float, float]]:
    """[start, end) cut into windows of `width` seconds, the last one possibly shorter. The window starts are
    `numpy.arange(start, end - 1e-9, width)` to the bit (numpy fills start + i × (second − first))."""
    count = max(0, math.ceil((end - 1e-9 - start) / width))
    second = start + width
    starts = [start + i * (second - start) if i != 1 else second for i in range(count)]
    return [(w0, min(w0 + width, end)) for w0 in starts]


def slo_window_share(
    bounds: Sequence[tuple[float, float]],
    target_s: float,
    p99_in: Callable[[float, float], float | None],
    waiting_at: Callable[[float], bool],
) -> float:
    """Share of `bounds` windows meeting the SLO. `p99_in(w0, w1)`: the P99 over requests that finished in
    [w0, w1), None if none did; `waiting_at(w1)`: whether a request sent before w1 was still unfinished."""
    met = 0
    for w0, w1 in bounds:
        p99 = p99_in(w0, w1)
        met += (p99 <= target_s) if p99 is not None else not waiting_at(w1)
    return met / max(len(bounds), 1)


# The reaction goal (issue 12): after a 2x load step the per-token P99 is back under the SLO within this many
# ticks of the first tick above it, with at most this many excursions above it afterwards.
GOAL_TICKS, GOAL_OVERSHOOTS = 3, 1


def reaction(p99s: Sequence[float], target_s: float) -> tuple[bool, int | None, int, bool]:
    """Per-tick P99s from a load step on (NaN: nothing finished in that tick, skipped): (whether any tick
    was above the target, the ticks from the first such tick to the first back under it (0 when none was
    above; None when none came back), the excursions above the target after that recovery, and whether the
    run ends settled: an excursion still open at the end and already longer than GOAL_TICKS was never
    answered (a shorter one may just have had no time to be))."""
    above = [v > target_s for v in p99s if math.isfinite(v)]
    if not any(above):
        return False, 0, 0, True
    onset = above.index(True)
    back = next((i for i in range(onset, len(above)) if not above[i]), None)
    if back is None:
        return True, None, 0, False
    overshoots = sum(1 for a, b in pairwise(above[back:]) if b and not a)
    last_under = max(i for i, a in enumerate(above) if not a)
    return True, back - onset, overshoots, len(above) - 1 - last_under <= GOAL_TICKS


def meets_reaction_goal(ticks_to_recover: int | None, overshoots: int, settled: bool) -> bool:
    recovered = ticks_to_recover is not None and ticks_to_recover <= GOAL_TICKS
    return recovered and overshoots <= GOAL_OVERSHOOTS and settled
