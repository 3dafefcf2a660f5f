"""The generalization matrix (issue 12): the goodput scorer, the derived targets, a one-cell run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from governor_dev.scoring import meets_reaction_goal, reaction
from governor_twin.matrix.__main__ import main as matrix_main
from governor_twin.matrix.goodput import START_S, meets_both
from governor_twin.matrix.profiles import PROFILES, derive_targets, get_profile
from governor_twin.matrix.report import spans_markdown, summary_markdown, write
from governor_twin.matrix.run import CURRENT, ORACLE, Cell, evaluate, load_law, static_caps
from governor_twin.matrix.workloads import reference_capacity
from governor_twin.scenarios import _shared_root


def test_goodput_counts_a_request_only_when_both_bounds_hold() -> None:
    tpot = np.array([0.010, 0.030, 0.010, 0.010, 0.020])
    ttft = np.array([1.0, 1.0, 3.0, 1.0, 2.5])
    done = np.array([True, True, True, False, True])
    got = meets_both(tpot, ttft, done, tpot_s=0.020, ttft_s=2.5)
    # both met / TPOT missed / TTFT missed / unfinished / both exactly at the bound
    assert got.tolist() == [True, False, False, False, True]


@pytest.mark.parametrize("name", PROFILES)
def test_derived_targets_are_ordered(name: str) -> None:
    t = derive_targets(get_profile(name))
    assert 0 < t.tight_s < t.medium_s < t.loose_s
    assert t.ttft_s > 0


def test_derived_profile_is_slower_than_the_8b_it_comes_from() -> None:
    small, big = get_profile("h200_llama8b"), get_profile("h200_llama70b_derived")
    assert big.step.step_s(32, 32 * 512, 0) > 5 * small.step.step_s(32, 32 * 512, 0)
    assert "EXTRAPOLATED" in str(big.provenance)


def test_static_caps_are_powers_of_two_up_to_the_ceiling() -> None:
    assert static_caps(32) == [1, 2, 4, 8, 16, 32]
    assert static_caps(256, limit=3) == [64, 128, 256]


def test_reaction_counts_recovery_ticks_and_overshoots() -> None:
    slo = 0.02
    p99 = [0.01, 0.03, 0.04, 0.015, 0.025, 0.01, math.nan, 0.03, 0.01]
    assert reaction(p99, slo) == (True, 2, 2, True)
    assert not meets_reaction_goal(2, 2, settled=True)  # back within 3 ticks, but two overshoots
    assert reaction([0.01, 0.01], slo) == (False, 0, 0, True)
    assert reaction([0.01, 0.03, 0.03], slo) == (True, None, 0, False)
    assert not meets_reaction_goal(None, 0, settled=False)  # never back under
    assert reaction([0.03, 0.03, 0.03, 0.03, 0.01], slo) == (True, 4, 0, True)
    assert not meets_reaction_goal(4, 0, settled=True) and meets_reaction_goal(3, 1, settled=True)
    # Back at once, then above for good: one overshoot by count, but the step was never answered...
    assert reaction([0.03, 0.01, 0.03, 0.03, 0.03, 0.03], slo) == (True, 1, 1, False)
    assert not meets_reaction_goal(1, 1, settled=False)
    # ... while an excursion in the last ticks, no longer than the goal's recovery, had no time to be.
    assert reaction([0.03, 0.01, 0.01, 0.01, 0.03, 0.03, 0.03], slo) == (True, 1, 1, True)


def test_a_negative_seed_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        matrix_main(["--quick", "--seed", "-1"])
    assert stop.value.code == 2 and "--seed must be 0 or more" in capsys.readouterr().err


def test_missing_new_law_is_reported_not_raised() -> None:
    law, note = load_law("governor.core.law:no_such_law_here")
    assert law is None and "skipped" in note


def _steady_cpu_cell(phase_s: float, target: str) -> list[Cell]:
    """The CPU profile's steady cell at one target, with its two largest static caps (no new law)."""
    prof = get_profile("cpu_tiny_llama")
    return evaluate(
        [(prof, derive_targets(prof))],
        ["steady"],
        None,
        phase_s,
        str(_shared_root()),
        jobs=1,
        cap_limit=2,
        targets=(target,),
    )


def test_one_small_cell_produces_the_table(tmp_path: Path) -> None:
    prof = get_profile("cpu_tiny_llama")
    cells = _steady_cpu_cell(30.0, "medium")
    assert len(cells) == 1
    cell = cells[0]
    assert set(cell.scores) == {"static 16", "static 32", ORACLE, CURRENT}
    assert cell.best_static in ("static 16", "static 32")
    assert cell.ratio(cell.best_static) == 1.0
    # The offered load is the generated arrivals (steady: Poisson at 0.85 x the profile's capacity).
    assert abs(cell.offered_rps / (0.85 * reference_capacity(prof)) - 1) < 0.1, cell.offered_rps
    assert 0 < cell.served_share <= 1.0, cell.served_share
    table = summary_markdown(cells)
    assert "| current law |" in table and "| static 16 |" in table
    assert "Served cells: the 1 of 1 " in table
    # Without the reaction benchmark the report says so, instead of an empty table.
    written = write(tmp_path, cells, [derive_targets(prof)], [], float("nan"), [], "header").read_text()
    assert "Not run (`--no-reaction`)." in written and "| policy | violated after the step" not in written
    assert json.loads((tmp_path / "results.json").read_text())["cells"][0]["workload"] == "steady"


def test_goodput_is_split_at_the_start_up_span() -> None:
    """A cell's goodput is also counted over the requests sent in the first START_S and after it: a law
    that starts at a wrong cap and settles shows its start-up apart from its settled behaviour."""
    cells = _steady_cpu_cell(60.0, "loose")
    cell = cells[0]
    for name, s in cell.scores.items():
        # the two spans partition the run: their request counts add up to the whole run's
        whole = s.goodput_rps * 120.0
        parts = s.start_goodput * START_S + s.settled_goodput * (120.0 - START_S)
        assert abs(whole - parts) < 1e-6 * max(whole, 1.0), name
    start, settled = cell.span_ratios(cell.best_static)
    assert start == 1.0 and settled == 1.0
    assert all(math.isnan(x) for x in cell.span_ratios("no such policy"))
    table = spans_markdown(cells)
    assert "| current law | 1 |" in table and "| oracle (per phase) | 1 |" in table
