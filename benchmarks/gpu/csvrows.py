"""The GPU run's CSV files read back as rows of numbers (report.py and its plots)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

Row = dict[str, Any]


def read_csv(path: Path) -> list[Row]:
    with path.open() as handle:
        return [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def _num(text: str | None) -> Any:
    if text is None or text == "":
        return text
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def q(values: Any, p: float) -> float:
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.percentile(values, p)) if values.size else math.nan
