"""benchmarks/gpu/gpubudget.py: the points a budget run takes, and the windows its ITL SLO is scored on."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
import gpubudget
from gpuload import Request


def streamed(chunks: list[float]) -> Request:
    request = Request(index=0, phase=gpubudget.SHORT, t_sched=0.0, in_len=16, out_len=len(chunks))
    request.chunks = chunks
    return request


def test_points_are_budgets_or_governor_policies() -> None:
    assert gpubudget.budget_points("8192,governor-itl,1024") == [8192, "governor-itl", 1024]
    for bad in ("8192,fast", "0", "-512"):
        with pytest.raises(argparse.ArgumentTypeError):
            gpubudget.budget_points(bad)


def test_a_budget_run_parses_governed_points_from_the_command_line() -> None:
    parser = argparse.ArgumentParser()
    gpubudget.add_arguments(parser)
    args = parser.parse_args(["--budgets", "8192,governor", "--itl-slo-ms", "40"])
    assert args.budgets == [8192, "governor"]
    assert args.itl_slo_ms == 40.0


@pytest.mark.parametrize("bad", [["--itl-slo-ms", "-5"], ["--itl-slo-ms", "nan"], ["--itl-window-s", "0"]])
def test_a_negative_target_or_an_empty_window_is_refused(bad: list[str]) -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    gpubudget.add_arguments(parser)
    with pytest.raises(argparse.ArgumentError, match="must be at least"):
        parser.parse_args(bad)


def test_itl_windows_scores_each_window_by_the_gaps_that_ended_in_it() -> None:
    # 200 ms gaps throughout (50 a window), and one 500 ms stall ending at t = 15.5 s: the window [10, 20)
    # misses a 250 ms target (its P99 lies between the stall and the 200 ms gaps); the other two meet it.
    steady = streamed([0.2 * i for i in range(1, 150)])
    stalled = streamed([15.0, 15.5, 15.6])
    assert gpubudget.itl_windows([steady, stalled], 0.0, 30.0, 10.0, 0.25) == pytest.approx(2 / 3)
    assert gpubudget.itl_windows([steady, stalled], 0.0, 30.0, 10.0, 1.0) == 1.0


def test_itl_windows_leaves_out_windows_without_gaps() -> None:
    only_late = streamed([25.0, 25.01, 25.02])
    assert gpubudget.itl_windows([only_late], 0.0, 30.0, 10.0, 0.05) == 1.0
    assert math.isnan(gpubudget.itl_windows([streamed([1.0])], 0.0, 30.0, 10.0, 0.05))


def test_held_range_reads_the_sampled_gauge_within_the_window() -> None:
    samples = [{"t": 1.0, "token_budget": 8192.0}, {"t": 12.0, "token_budget": 1024.0}, {"t": 15.0}]
    assert gpubudget.held_range(samples, "token_budget", 10.0, 20.0) == {
        "token_budget_min": 1024.0,
        "token_budget_max": 1024.0,
        "token_budget_mean": 1024.0,
    }
    assert math.isnan(gpubudget.held_range(samples, "cap", 0.0, 20.0)["cap_min"])
