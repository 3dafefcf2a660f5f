"""The second signal source: scrape the engines' /metrics directly (no Prometheus), for standalone use and
for clusters without Prometheus. Same result type as governor.adapters.prometheus, same "never raise" promise.

Each read scrapes every pod once and keeps a short history per pod. Windowed values come from the newest
scrape minus the oldest one still inside the window, per pod (a counter that went down means the pod
restarted: its new value is the whole increase, as rate() treats a reset), pooled over the service's pods.

Quantiles and vLLM's buckets. A histogram only says how many observations fell in each bucket, so the quantile
is interpolated linearly inside the bucket that holds the rank, as Prometheus' histogram_quantile does
(`governor.core.histogram` gives the same answers). The true quantile lies somewhere in that bucket, so the
absolute error is at most the bucket's width (`bucket_width`). vLLM's defaults are coarse for the targets the
law holds: e2e 0.3, 0.5, 0.8, 1.0, 1.5 s (a 1 s target sits in a 0.2-0.5 s wide bucket, 20-50 %), per-token
0.01, 0.025, 0.05 s (a 20 ms target in a 15 ms wide bucket, 75 %); the calibration saw Prometheus read 0.49 s
for a client's 0.36 s. The runtime therefore starts vLLM with the finer buckets of governor.core.signals
(PER_TOKEN_BUCKETS, REQUEST_BUCKETS): 2.5-5 ms wide around 20 ms, 0.2-0.25 s around 1 s. Two properties keep
the law correct despite the remaining error: the interpolated value is monotone in the mass above each bound,
so it moves in the right direction as latency shifts (the law acts on direction, through EWMA and the band);
and `resolution_warning` says when the bucket at the SLO target is wider than the band, so the user can add
buckets where the target is.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from governor.core import promql, signals
from governor.core.histogram import bucket_width, histogram_quantile
from governor.core.reading import Key, Reading, Snapshot
from governor.core.signals import LatencyKind


def resolution_warning(kind: LatencyKind, slo_s: float, band: float) -> str | None:
    """A sentence when the runtime's buckets cannot resolve the SLO to within the hysteresis band."""
    bounds = signals.PER_TOKEN_BUCKETS if kind.per_token else signals.REQUEST_BUCKETS
    width = bucket_width(bounds, slo_s)
    if width <= band * slo_s:
        return None
    return (
        f"{kind.histogram}: the bucket holding the SLO {slo_s:g}s is {width:g}s wide, more than the band"
        f" ({band:g} x SLO); quantiles near the target may be off by up to one bucket"
    )


@dataclass
class _Scrape:
    at: float
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)  # histogram -> le -> count (summed)
    values: dict[str, list[float]] = field(default_factory=dict)  # gauge or counter -> one value per series


def parse(text: str) -> _Scrape:
    out = _Scrape(at=0.0)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_bucket") and "le" in s.labels:
                hist = out.buckets.setdefault(s.name.removesuffix("_bucket"), {})
                le = float(s.labels["le"])
                hist[le] = hist.get(le, 0.0) + s.value
            else:
                out.values.setdefault(s.name, []).append(s.value)
    return out


def _increase(new: float, old: float) -> float:
    return new if new < old else new - old  # a reset: the process restarted and counts from zero


def _mean(pairs: Sequence[tuple[_Scrape, _Scrape]], histogram: str) -> float | None:
    """The pooled mean of a histogram's observations between each pod's two scrapes, like PromQL's
    rate(_sum) / rate(_count); None when nothing was observed."""

    def increase(old: _Scrape, new: _Scrape, name: str) -> float:
        return _increase(sum(new.values.get(name, [])), sum(old.values.get(name, [])))

    live = [(old, new) for old, new in pairs if new.at > old.at and f"{histogram}_count" in new.values]
    total = sum(increase(old, new, f"{histogram}_sum") for old, new in live)
    count = sum(increase(old, new, f"{histogram}_count") for old, new in live)
    return total / count if count > 0 else None


class DirectScraper:
    def __init__(
        self,
        *,
        timeout_s: float = 2.0,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._clock = clock
        self._headers = dict(headers or {})
        self._history: dict[str, deque[_Scrape]] = {}

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _scrape(self, url: str) -> _Scrape:
        resp = await self._client.get(
            f"{url.rstrip('/')}/metrics", timeout=self.timeout_s, headers=self._headers
        )
        resp.raise_for_status()
        scrape = parse(resp.text)
        scrape.at = self._clock()
        return scrape

    async def read(
        self,
        services: Mapping[Key, Sequence[str]],
        window_s: float,
        gauge_window_s: float,
        latencies: set[tuple[LatencyKind, float]],
    ) -> Snapshot:
        urls = sorted({u for pods in services.values() for u in pods})
        results = await asyncio.gather(*(self._scrape(u) for u in urls), return_exceptions=True)
        errors: list[str] = []
        failed: set[str] = set()
        now = self._clock()
        for url, result in zip(urls, results, strict=True):
            history = self._history.setdefault(url, deque())
            if isinstance(result, BaseException):
                errors.append(f"{url}: {type(result).__name__}: {result}")
                failed.add(url)
            else:
                history.append(result)
            while history and history[0].at < now - window_s - gauge_window_s:
                history.popleft()
        for gone in set(self._history) - set(urls):
            del self._history[gone]
        readings = {
            key: self._reading([u for u in pods if u not in failed], now, window_s, gauge_window_s, latencies)
            for key, pods in services.items()
        }
        return Snapshot(
            available=len(failed) < len(urls) or not urls,
            error="; ".join(errors) or None,
            services={k: r for k, r in readings.items() if r is not None},
        )

    def _reading(
        self,
        urls: Sequence[str],
        now: float,
        window_s: float,
        gauge_window_s: float,
        latencies: set[tuple[LatencyKind, float]],
    ) -> Reading | None:
        pairs = []  # per pod: (oldest scrape inside the window, newest)
        for url in urls:
            history = [s for s in self._history.get(url, ()) if s.at >= now - window_s - 1e-9]
            if history and now - history[-1].at <= gauge_window_s + 1e-9:
                pairs.append((history[0], history[-1]))
        if not pairs:
            return None

        recent = []  # per pod: (oldest scrape inside the gauge window, newest): the step fit's intervals
        for url in urls:
            history = [s for s in self._history.get(url, ()) if s.at >= now - gauge_window_s - 1e-9]
            if len(history) > 1:
                recent.append((history[0], history[-1]))

        def rate(name: str, over: Sequence[tuple[_Scrape, _Scrape]] = pairs) -> float | None:
            rates = [
                _increase(sum(new.values.get(name, [])), sum(old.values.get(name, []))) / (new.at - old.at)
                for old, new in over
                if new.at > old.at and name in new.values
            ]
            return sum(rates) / len(rates) if rates else None

        def gauge(
            name: str, pick: Callable[[list[float]], float] = lambda v: sum(v) / len(v)
        ) -> float | None:
            per_pod = [sum(new.values[name]) for _, new in pairs if name in new.values]
            return pick(per_pod) if per_pod else None

        def quantile(kind: LatencyKind, q: float) -> float | None:
            pooled: dict[float, float] = {}
            for old, new in pairs:
                if new.at <= old.at:
                    continue
                before = old.buckets.get(kind.histogram, {})
                for le, count in new.buckets.get(kind.histogram, {}).items():
                    pooled[le] = pooled.get(le, 0.0) + _increase(count, before.get(le, 0.0))
            return histogram_quantile(q, list(pooled.items()))

        growth = [
            (sum(new.values[signals.WAITING]) - sum(old.values[signals.WAITING])) / (new.at - old.at)
            for old, new in pairs
            if new.at > old.at and signals.WAITING in new.values and signals.WAITING in old.values
        ]
        return Reading(
            latency={promql.latency_signal(k, q): quantile(k, q) for k, q in promql.with_ttft(latencies)},
            running=gauge(signals.RUNNING),
            waiting=gauge(signals.WAITING),
            queue_growth=sum(growth) / len(growth) if growth else None,
            kv_usage=gauge(signals.KV_CACHE_USAGE, max),
            preemption_rate=rate(signals.PREEMPTIONS),
            request_rate=rate(signals.REQUEST_SUCCESS),
            prompt_p95=gauge(signals.RUNTIME_PROMPT_P95, max),
            long_prompt_rate=rate(signals.RUNTIME_LONG_PROMPTS),
            cap=gauge(signals.RUNTIME_CAP, min),
            token_budget=gauge(signals.RUNTIME_TOKEN_BUDGET, min),
            **{name: _mean(pairs, histogram) for name, histogram in promql.MEANS.items()},
            **{name: rate(counter, recent) for name, counter in promql.STEP_RATES.items()},
        )
