"""Fixtures of the twin's tests: the shared calibration data (read-only, beside the repository)."""

from __future__ import annotations

import csv

import pytest
from governor_twin.scenarios import _shared_root


@pytest.fixture(scope="session")
def calibration_steps() -> list[dict[str, str]]:
    with open(_shared_root() / "calibration" / "h200_llama8b_steps.csv", newline="") as handle:
        return list(csv.DictReader(handle))
