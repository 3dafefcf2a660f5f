"""The replica-only autoscalers, each written from its documentation (sources cited per class). None moves
the engines' cap: each runs at a static cap (vLLM's default 256, or the best static cap).

Common Kubernetes mechanics (`Hpa`), from the HorizontalPodAutoscaler documentation
(https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/): desired = ceil(current x
metric / target); no change while the ratio is within the 10 % tolerance; a scale-down takes the highest
recommendation of the last 300 s (the default scale-down stabilization window); a scale-up is limited to
max(+100 %, +4 pods) per 15 s period; the controller syncs every 15 s. KEDA drives an HPA
(https://keda.sh/docs/latest/reference/scaledobject-spec: pollingInterval 30 s, cooldownPeriod 300 s only
for scale-to-zero, which is off here: minReplicaCount 1).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from governor.core.signals import LatencyKind

from governor_twin.fleet.fleet import Fleet
from governor_twin.fleet.metrics import FleetMetrics
from governor_twin.scenarios import Slo

HPA_SYNC_S = 15.0


@dataclass
class Hpa:
    tolerance: float = 0.1
    down_window_s: float = 300.0
    history: deque[tuple[float, int]] = field(default_factory=deque)

    def recommend(self, now: float, current: int, desired: float) -> int:
        """`desired` is the raw ceil(current x ratio) (fractional allowed); answers the replicas to hold."""
        ratio = desired / max(current, 1)
        raw = current if abs(ratio - 1.0) <= self.tolerance else math.ceil(desired - 1e-9)
        self.history.append((now, raw))
        while self.history and self.history[0][0] < now - self.down_window_s:
            self.history.popleft()
        if raw < current:
            raw = min(current, max(r for _, r in self.history))
        return min(raw, max(2 * current, current + 4))


class ReplicaPolicy:
    """Base of the peers: `desired(now, fleet, metrics)` every `tick_s`; the cap is static."""

    name = "replica-only"
    tick_s = HPA_SYNC_S
    knob = ""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.hpa = Hpa()

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        raise NotImplementedError


class KedaWaiting(ReplicaPolicy):
    """production-stack: KEDA's Prometheus scaler on `vllm:num_requests_waiting`, threshold per replica
    (https://docs.vllm.ai/projects/production-stack/en/latest/use_cases/autoscaling-keda.html; the
    tutorial's ScaledObject uses a threshold of 5 waiting requests). AverageValue: desired =
    ceil(sum(waiting) / threshold), through the HPA."""

    name = "KEDA waiting (production-stack)"

    def __init__(self, cap: int, threshold: float = 5.0) -> None:
        super().__init__(cap)
        self.threshold = threshold
        self.knob = f"threshold {threshold:g}"

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        s = metrics.samples[-1]
        total_waiting = s.waiting * s.ready
        return self.hpa.recommend(now, s.live, total_waiting / self.threshold)


class AibrixKpa(ReplicaPolicy):
    """AIBrix KPA, Knative's algorithm (https://knative.dev/docs/serving/autoscaling/kpa-specific;
    https://pkg.go.dev/github.com/knative/serving/pkg/autoscaler): the per-pod concurrency (requests in
    flight: running + waiting) averaged over a 60 s stable window and a 6 s panic window (10 %); panic mode
    when the panic window asks for >= 2x the ready pods; in panic the pod count never decreases, and panic
    lasts until a stable window passes without the trigger; scale-down at most halves (max-scale-down-rate
    2). Target: Knative's default concurrency target, 100 per pod. It ticks every 5 s (Knative: 2 s)."""

    name = "AIBrix KPA"
    tick_s = 5.0

    def __init__(self, cap: int, target: float = 100.0) -> None:
        super().__init__(cap)
        self.target = target
        self.knob = f"target {target:g}"
        self.panic_until = -1.0

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        s = metrics.samples[-1]
        stable = (metrics.gauge_avg("running", 60.0) + metrics.gauge_avg("waiting", 60.0)) * s.ready
        panic = (metrics.gauge_avg("running", 6.0) + metrics.gauge_avg("waiting", 6.0)) * s.ready
        want_stable = math.ceil(stable / self.target)
        want_panic = math.ceil(panic / self.target)
        if want_panic >= 2 * max(s.ready, 1):
            self.panic_until = now + 60.0
        if now < self.panic_until:
            return max(s.live, want_panic)
        return max(want_stable, math.ceil(s.live / 2), 1)


class LlmdSlo(ReplicaPolicy):
    """llm-d's SLO-aware autoscaling (https://llm-d.ai/docs/dev/architecture/advanced/autoscaling/slo-aware-keda
    and .../operations/autoscaling/slo-aware): s_raw = max(P90 TTFT / S_ttft, P90 TPOT / S_tpot) over 1-minute
    bucket rates, no traffic -> 0, clamped at 2.0, averaged over 45 s; above the band's top (0.55) the pool
    grows to bring s back into the band, below its bottom (0.40) it shrinks by one; inside it holds.
    Warming credit: replicas already asked for (not ready) count as supply, so a pressure they will absorb
    asks for no more. Then the HPA's mechanics. (Our reading of the documented law; the band is theirs.)"""

    name = "llm-d SLO-aware"

    def __init__(self, cap: int, slo: Slo, band: tuple[float, float] = (0.40, 0.55)) -> None:
        super().__init__(cap)
        self.slo = slo
        self.low, self.high = band
        self.knob = f"band {self.low:.2f}-{self.high:.2f}"
        self.raw: deque[tuple[float, float]] = deque()

    def signal(self, now: float, metrics: FleetMetrics) -> float:
        ttft = metrics.quantile(LatencyKind.TTFT, 0.9, 60.0)
        tpot = metrics.quantile(LatencyKind.TPOT, 0.9, 60.0)
        parts = [v / t for v, t in ((ttft, self.slo.ttft_s), (tpot, self.slo.target_s)) if v is not None]
        self.raw.append((now, min(max(parts, default=0.0), 2.0)))
        while self.raw and self.raw[0][0] <= now - 45.0:
            self.raw.popleft()
        return sum(v for _, v in self.raw) / len(self.raw)

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        s = metrics.samples[-1]
        sig = self.signal(now, metrics)
        mid = 0.5 * (self.low + self.high)
        if sig > self.high:
            need = math.ceil(s.ready * sig / mid)
            want = max(need, s.live) if need > s.ready + s.warming else s.live  # warming credit
        elif sig < self.low:
            want = s.live - 1
        else:
            want = s.live
        return self.hpa.recommend(now, s.live, float(want))


class DynamoPlanner(ReplicaPolicy):
    """Dynamo's SLA planner, throughput-based scaling (source: Dynamo's planner design page,
    https://docs.nvidia.com/dynamo/v1.1.0/design-docs/component-design/planner-design.md): every
    `adjustment_interval` it reads the request rate of the last interval, predicts the next with the constant
    predictor, and sizes replicas = ceil(predicted rate / the per-replica rate that meets the SLA in
    pre-deployment profiling). The profiling here is the twin's: the saturated rate of one engine at the
    static cap meeting the TPOT SLO. Aggregated serving: one pool, no prefill/decode split. The interval,
    180 s, is the value we read as the default: an assumption to confirm."""

    name = "Dynamo-style planner"

    def __init__(
        self, cap: int, replica_rps: float, headroom: float = 1.0, interval_s: float = 180.0
    ) -> None:
        super().__init__(cap)
        self.replica_rps = replica_rps
        self.headroom = headroom
        self.tick_s = interval_s
        self.knob = f"profiled rate x{headroom:g}"

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        rate = metrics.rate_total(self.tick_s) or 0.0
        waiting = metrics.samples[-1].waiting * metrics.samples[-1].ready
        predicted = rate + waiting / self.tick_s  # constant predictor on the offered load (served + queued)
        return max(1, math.ceil(predicted / (self.replica_rps * self.headroom)))


class HpaKv(ReplicaPolicy):
    """HPA on the KV-cache use (`vllm:kv_cache_usage_perc`, a pods metric through an adapter), as KServe's
    and most vLLM guides show it: desired = ceil(current x avg KV use / target). There is no documented
    default target; 0.7 is our choice, the grid covers 0.5 and 0.9."""

    name = "HPA KV-cache"

    def __init__(self, cap: int, target: float = 0.7) -> None:
        super().__init__(cap)
        self.target = target
        self.knob = f"target {target:g}"

    def desired(self, now: float, fleet: Fleet, metrics: FleetMetrics) -> int:
        s = metrics.samples[-1]
        return self.hpa.recommend(now, s.live, s.live * s.kv / self.target)
