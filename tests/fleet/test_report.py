"""The fleet report's goal lines read the runs as the issue states its goals."""

from __future__ import annotations

import numpy as np
from governor_twin.fleet.report import frontier_line, goal_lines
from governor_twin.fleet.run import FleetRun

OURS = "ours (control step: law + planner)"


def _run(policy: str, knob: str, attainment: float, gpu_hours: float) -> FleetRun:
    series = [np.zeros(1)] * 6  # t, live, ready, cap, waiting, TPOT P99: not read by the goal lines
    return FleetRun(policy, knob, "64", "s", attainment, 0.0, gpu_hours, 0, 1.0, 0, 0, *series)


def test_ours_is_dominated_when_a_peer_matches_it_on_fewer_gpu_hours() -> None:
    runs = [_run(OURS, "defaults", 0.90, 1.0), _run("llm-d", "band", 0.92, 0.9), _run("KEDA", "t", 0.99, 2.0)]
    (line,) = frontier_line(runs)
    assert "llm-d" in line and "92.0% at 0.90" in line and "a peer matches it" in line


def test_ours_holds_the_frontier_when_every_cheaper_peer_scores_less() -> None:
    runs = [_run(OURS, "defaults", 0.90, 1.0), _run("Dynamo", "x1", 0.70, 0.7), _run("llm-d", "b", 0.95, 2.1)]
    (line,) = frontier_line(runs)
    assert "Dynamo" in line and "no peer matches it on as few" in line


def test_the_99_percent_goal_needs_a_fifth_fewer_gpu_hours_than_the_cheapest_peer_there() -> None:
    ours = _run(OURS, "defaults", 0.995, 1.0)
    (met,) = goal_lines([ours, _run("llm-d", "b", 0.996, 1.3)])
    (missed,) = goal_lines([ours, _run("llm-d", "b", 0.996, 1.1)])
    assert "goal (>= 20 %) reached" in met and "not reached" in missed
    (alone,) = goal_lines([ours, _run("llm-d", "b", 0.98, 0.5)])
    assert "no replica-only run reaches it" in alone
