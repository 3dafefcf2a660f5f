"""The demo's passes run one after the other: the first phase, same load and same cap in both, says whether
the machine kept its speed between them, and the demo says so when it did not."""

from __future__ import annotations

import pytest
from governor_dev.demo import DRIFT_BOUND, host_drift, score
from governor_dev.demoview import drift_line
from governor_dev.loadgen import RequestRecord


def light_phase(tpot_s: float, requests: int = 9) -> list[RequestRecord]:
    """Requests of the first phase, one a second, each with `tpot_s` per token (one slow outlier)."""
    per_token = [10 * tpot_s] + [tpot_s] * (requests - 1)  # one tail the median must not follow
    return [
        RequestRecord("light", float(i), 32, 64, ttft_s=0.05, tpot_s=t, e2e_s=0.05 + 63 * t)
        for i, t in enumerate(per_token)
    ]


def test_the_median_of_the_control_phase_gives_the_machines_drift() -> None:
    static = score(light_phase(0.004), 0.01, 0.0, 20.0, 2.5)
    same = score(light_phase(0.004), 0.01, 0.0, 20.0, 2.5)
    slower = score(light_phase(0.0072), 0.01, 0.0, 20.0, 2.5)
    assert static.median_s == pytest.approx(0.004)
    assert host_drift(static, same) == pytest.approx(1.0)
    assert host_drift(static, slower) == pytest.approx(1.8)
    assert host_drift(static, score([], 0.01, 0.0, 20.0, 2.5)) is None


def test_a_drift_past_the_bound_is_named_and_one_within_it_is_not() -> None:
    within = drift_line("light", DRIFT_BOUND * 0.99)
    beyond = drift_line("light", DRIFT_BOUND * 1.5)
    faster = drift_line("light", 1 / (DRIFT_BOUND * 1.5))
    assert "measures the machine" not in within and "×1.19" in within
    assert "measures the machine as much as the law" in beyond and "×1.80" in beyond
    assert "measures the machine as much as the law" in faster
    assert "too little" in drift_line("light", None)
