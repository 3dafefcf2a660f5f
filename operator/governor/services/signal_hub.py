"""One round of metric queries per tick for every governed InferenceService at once.

Prometheus answers each query for all services together (one query per signal, not one per object); the
direct scrape reads every ready pod. Loops that tick within half a tick of each other share the round.
"""

from __future__ import annotations

import asyncio
import os
import time

from governor.adapters.prometheus import PromReader
from governor.adapters.scrape import DirectScraper
from governor.core import promql
from governor.core.law import LawConfig
from governor.core.reading import Key, Reading, Snapshot
from governor.core.signals import LatencyKind

PROMETHEUS_ENV = "GOVERNOR_PROMETHEUS_URL"


class SignalHub:
    """Shares one round of queries among the loops that tick within half a tick of each other.

    The source follows GOVERNOR_PROMETHEUS_URL (read at every refresh, so tests and operators can point the
    running operator at a Prometheus): set -> Prometheus, unset -> the pods' /metrics scraped directly.
    """

    def __init__(self) -> None:
        self.prometheus_url: str | None = None
        self.prometheus: PromReader | None = None
        self.scraper = DirectScraper()
        self._wanted: dict[Key, tuple[LatencyKind, float, float, tuple[str, ...]]] = {}
        # window -> (when, snapshot, the services it was asked for)
        self._cache: dict[float, tuple[float, Snapshot, frozenset[Key]]] = {}
        self._lock = asyncio.Lock()

    def forget(self, key: Key) -> None:
        self._wanted.pop(key, None)

    async def read(self, key: Key, cfg: LawConfig, pod_urls: tuple[str, ...]) -> tuple[Snapshot, Reading]:
        self._wanted[key] = (cfg.latency_kind, cfg.quantile, cfg.window_s, pod_urls)
        async with self._lock:
            now = time.monotonic()
            cached = self._cache.get(cfg.window_s)
            # A service the last round was not asked for (a new object) gets a round at once. One it was asked
            # for and that had no fresh series waits for the next round like the others: refreshing for each
            # such service, one after the other under this lock, stalled every loop at 1,000 objects (while
            # Prometheus had not scraped them all yet, or when its answers timed out).
            if cached is None or now - cached[0] > cfg.tick_s / 2 or key not in cached[2]:
                asked = frozenset(k for k, w in self._wanted.items() if w[2] == cfg.window_s)
                snapshot = await self._refresh(cfg.window_s, min(cfg.window_s, 2 * cfg.tick_s))
                cached = (now, snapshot, asked)
                self._cache[cfg.window_s] = cached
        return cached[1], cached[1].get(key)

    async def _refresh(self, window_s: float, gauge_window_s: float) -> Snapshot:
        same_window = {k: w for k, w in self._wanted.items() if w[2] == window_s}
        latencies = {(kind, q) for kind, q, _, _ in same_window.values()}
        url = os.environ.get(PROMETHEUS_ENV) or None
        if url != self.prometheus_url:
            if self.prometheus is not None:
                await self.prometheus.aclose()
            self.prometheus_url, self.prometheus = url, PromReader(url) if url else None
        if self.prometheus is not None:
            return await self.prometheus.read(promql.OPERATOR, window_s, gauge_window_s, latencies)
        return await self.scraper.read(
            {k: list(w[3]) for k, w in same_window.items()}, window_s, gauge_window_s, latencies
        )

    async def aclose(self) -> None:
        for source in (self.prometheus, self.scraper):
            if source is not None:
                await source.aclose()
