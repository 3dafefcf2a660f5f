"""Each peer's rule does what its documentation says (sources in governor_twin.fleet.peers)."""

from __future__ import annotations

import numpy as np
from governor.core.signals import LatencyKind
from governor_twin.fleet.fleet import Fleet, FleetConfig
from governor_twin.fleet.metrics import FleetMetrics, Sample
from governor_twin.fleet.peers import AibrixKpa, DynamoPlanner, Hpa, HpaKv, KedaWaiting, LlmdSlo
from governor_twin.fleet.scenarios import SLO
from governor_twin.profile import load_profile


class Metrics(FleetMetrics):
    """FleetMetrics with chosen samples (the peers read only these)."""

    def __init__(self, quantiles: dict[LatencyKind, float] | None = None, rate: float = 0.0) -> None:
        super().__init__(Fleet(load_profile("h200_llama8b"), FleetConfig(), 1, 64))
        self.quantiles = quantiles or {}
        self.rate = rate

    def add(
        self,
        t: float,
        running: float = 0.0,
        waiting: float = 0.0,
        kv: float = 0.0,
        ready: int = 2,
        warming: int = 0,
    ) -> None:
        z = np.zeros(1)
        self.samples.append(Sample(t, z, z, 0.0, running, waiting, kv, ready, warming, ready + warming))

    def quantile(self, kind: LatencyKind, q: float, window_s: float) -> float | None:
        return self.quantiles.get(kind)

    def rate_total(self, window_s: float) -> float | None:
        return self.rate


def test_hpa_tolerance_stabilization_and_rate_limit() -> None:
    hpa = Hpa()
    assert hpa.recommend(0.0, 4, 4.3) == 4  # within 10 %
    assert hpa.recommend(15.0, 4, 40.0) == 8  # at most +100 % (or +4) per period
    assert hpa.recommend(30.0, 8, 2.0) == 8  # the 300 s window still holds the high recommendation
    assert hpa.recommend(400.0, 8, 2.0) == 2


def test_keda_scales_to_waiting_over_threshold() -> None:
    m = Metrics()
    m.add(0.0, waiting=15.0, ready=2)  # 30 waiting in all, threshold 5 -> 6 (rate-limited to 2x2+... = 6)
    assert KedaWaiting(64).desired(0.0, m.fleet, m) == 6


def test_kpa_panics_on_a_burst_and_never_scales_down_in_panic() -> None:
    kpa = AibrixKpa(64, target=10.0)
    m = Metrics()
    for t in range(0, 60, 5):
        m.add(float(t), running=10.0, ready=2)
    assert kpa.desired(55.0, m.fleet, m) == 2  # stable at the target
    m.add(60.0, running=50.0, ready=2)  # 6 s window (55, 60): 60 in flight -> 6 pods >= 2 x 2: panic
    assert kpa.desired(60.0, m.fleet, m) == 6
    m.add(65.0, running=1.0, ready=2)
    assert kpa.desired(65.0, m.fleet, m) >= 2  # in panic: no decrease below the current count
    for t in range(70, 200, 5):
        m.add(float(t), running=1.0, ready=4)
    assert kpa.desired(195.0, m.fleet, m) == 2  # out of panic: at most halves


def test_llmd_band_and_warming_credit() -> None:
    hot = {LatencyKind.TTFT: 0.5 * SLO.ttft_s, LatencyKind.TPOT: 1.0 * SLO.target_s}  # s = 1.0
    m = Metrics(hot)
    m.add(0.0, ready=2)
    assert LlmdSlo(64, SLO).desired(0.0, m.fleet, m) == 5  # ceil(2 x 1.0 / 0.475)
    m.add(15.0, ready=2, warming=3)
    assert LlmdSlo(64, SLO).desired(15.0, m.fleet, m) == 5  # warming supply covers it: no more
    calm = Metrics({LatencyKind.TTFT: 0.1 * SLO.ttft_s, LatencyKind.TPOT: 0.45 * SLO.target_s})  # s = 0.45
    calm.add(0.0, ready=3)
    assert LlmdSlo(64, SLO).desired(0.0, calm.fleet, calm) == 3  # inside the band: hold


def test_dynamo_sizes_replicas_from_the_profiled_rate() -> None:
    m = Metrics(rate=95.0)
    m.add(0.0, ready=2)
    assert DynamoPlanner(64, replica_rps=30.0).desired(0.0, m.fleet, m) == 4
    assert DynamoPlanner(64, replica_rps=30.0, headroom=0.8).desired(0.0, m.fleet, m) == 4  # 95/24 -> 4
    assert DynamoPlanner(64, replica_rps=30.0, headroom=1.2).desired(0.0, m.fleet, m) == 3


def test_hpa_kv_targets_the_average_cache_use() -> None:
    m = Metrics()
    m.add(0.0, kv=0.9, ready=4)
    assert HpaKv(64, target=0.6).desired(0.0, m.fleet, m) == 6
