"""The committed benchmark reports that take seconds to make are what the code makes now: a law or twin change
that moves them fails here until the report is regenerated (the fidelity report had gone stale by three
sessions of law changes before this check)."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import prefill_interference
import service_fidelity

MATRIX = Path(__file__).resolve().parents[2] / "benchmarks/results/matrix"


def test_the_committed_service_fidelity_report_is_current(tmp_path: Path) -> None:
    out = tmp_path / "SERVICE_FIDELITY.md"
    assert service_fidelity.main(["--out", str(out)]) == 0
    made, committed = out.read_text().splitlines(), (MATRIX / "SERVICE_FIDELITY.md").read_text().splitlines()
    # the last line says how long the run took
    assert made[-1].endswith(" s.") and committed[-1].endswith(" s.")
    assert made[:-1] == committed[:-1], "regenerate: python benchmarks/service_fidelity.py"


def test_the_committed_prefill_interference_tables_are_current() -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        prefill_interference.main()
    committed = (MATRIX / "PREFILL_INTERFERENCE.md").read_text()
    assert printed.getvalue().count("\n| 2 |") == 4  # a table from the H200 and each of the three profiles
    assert printed.getvalue().strip() in committed, "regenerate: python benchmarks/prefill_interference.py"
