"""benchmarks/gpu/slo_compare.py: the two-SLO comparison table and the goal's verdict, from summary rows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
import slo_compare


def summary_row(source: str, policy: str, phase: Any, attainment: float, goodput: float) -> dict[str, Any]:
    return {
        "source": source,
        "policy": policy,
        "phase": phase,
        "sent": 100,
        "completed": 100,
        "slo_attainment": attainment,
        "goodput_rps": goodput,
        slo_compare.GOODPUT_TTFT: goodput / 2,
        "tpot_p99_ms": 10.0 + attainment,
        "ttft_p99_s": 1.0,
        "cap_min": 64,
        "cap_max": 64 if policy != "governor" else 99,
    }


def summary(gov_attainment: float, gov_goodput: float) -> list[dict[str, Any]]:
    rows = []
    for policy, attainment, goodput in (
        ("static256", 0.4, 9.0),
        ("static64", 0.9, 20.0),
        ("governor", gov_attainment, gov_goodput),
    ):
        rows.append(summary_row("H200", policy, "all", attainment, goodput))
        rows.append(summary_row("H200", policy, 1, attainment - 0.1, goodput))
        rows.append(summary_row("twin", policy, "all", 1.0, 21.0))
    return rows


def test_comparison_has_one_row_per_slo_source_and_policy_with_the_burst_phase() -> None:
    table = slo_compare.comparison([(20.0, summary(0.95, 21.0)), (12.0, summary(0.5, 10.0))], burst_phase=1)
    keys = [(r["slo_ms"], r["source"], r["policy"]) for r in table]
    assert len(keys) == len(set(keys)) == 12
    gov12 = next(
        r for r in table if r["slo_ms"] == 12.0 and r["source"] == "H200" and r["policy"] == "governor"
    )
    assert gov12["slo_attainment"] == 0.5
    assert gov12["burst_slo_attainment"] == pytest.approx(0.4)
    assert gov12[slo_compare.GOODPUT_TTFT] == 5.0
    assert (gov12["cap_min"], gov12["cap_max"]) == (64, 99)


def test_verdict_says_met_only_where_the_governor_reaches_static_64() -> None:
    table = slo_compare.comparison([(20.0, summary(0.95, 21.0)), (12.0, summary(0.95, 19.0))], burst_phase=1)
    lines = slo_compare.verdict(table)
    assert lines[0].startswith("SLO 20 ms, governor:") and "NOT" not in lines[0]
    assert lines[1].startswith("SLO 12 ms, governor:")
    assert "(met), goodput 19.00 vs 20.00 (NOT met)" in lines[1]


def test_slo_folders_are_read_loosest_first_and_need_a_summary(tmp_path: Path) -> None:
    for name in ("slo12", "slo20", "slo7.5", "slo30"):
        (tmp_path / name).mkdir()
    for name in ("slo12", "slo20", "slo7.5"):
        (tmp_path / name / "loop_summary.csv").write_text("policy\n")
    (tmp_path / "other").mkdir()
    assert [slo for slo, _ in slo_compare.slo_folders(tmp_path)] == [20.0, 12.0, 7.5]


def test_markdown_has_a_line_per_row() -> None:
    table = slo_compare.comparison([(12.0, summary(0.5, 10.0))], burst_phase=1)
    text = slo_compare.markdown(table)
    assert text.count("\n") == 2 + len(table)
    assert "| 12 ms | governor | 0.500 / 0.400 | 10.00 | 5.00 |" in text
    assert "| 12 ms | twin: static 64 |" in text


def test_every_governor_variant_of_the_run_gets_its_rows() -> None:
    # GOVERNOR_VARIANTS="ttft=--ttft-bound 2.5s" adds policy governor-ttft: it belongs in the table and the
    # verdict, after the policies the report knows by name.
    rows = [*summary(0.95, 21.0), summary_row("H200", "governor-ttft", "all", 0.6, 13.0)]
    table = slo_compare.comparison([(12.0, rows)], burst_phase=1)
    assert [r["policy"] for r in table if r["source"] == "H200"] == [
        "static256", "static64", "governor", "governor-ttft"
    ]  # fmt: skip
    assert any(line.startswith("SLO 12 ms, governor-ttft:") for line in slo_compare.verdict(table))
