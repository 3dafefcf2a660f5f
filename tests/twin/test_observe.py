"""The operator's view of the twin carries the lever model's inputs: windowed means and the TTFT quantile, the
same whether the Observer reads the engine or the direct scrape reads the twin's /metrics."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from governor.adapters.scrape import DirectScraper
from governor.core import promql
from governor.core.law import Observation
from governor.core.signals import REQUEST_BUCKETS, LatencyKind
from governor_twin.engine import Engine
from governor_twin.exposition import metrics_text
from governor_twin.live import TwinEngine
from governor_twin.observe import Observer
from governor_twin.profile import load_profile

H200 = load_profile("h200_llama8b")
N = 600
MEANS = tuple(promql.MEANS)  # every mean the operator queries: the twin must answer each one


def loaded(engine: Engine) -> None:
    """600 requests over 30 s against a cap of 24: a queue forms, so queue time is not zero."""
    rng = np.random.default_rng(1)
    engine.submit_many(np.sort(rng.uniform(0, 30, N)), rng.integers(256, 1024, N), rng.integers(64, 256, N))


def observe_at(observer: Observer, engine: Engine, times: list[float]) -> Observation:
    obs = None
    for t in times:
        engine.advance(t)
        obs = observer.observe(t)
    assert obs is not None
    return obs


def test_observer_gives_the_true_means_of_the_requests_finished_in_the_window() -> None:
    engine = Engine(H200, cap=24)
    loaded(engine)
    obs = observe_at(Observer(engine, LatencyKind.TPOT, window_s=30), engine, [5.0 * k for k in range(1, 7)])
    fin = engine.finish[:N]
    done = (fin > 5) & (fin <= 30)  # the window: from the oldest snapshot (5 s) to now
    first, sent, out = engine.first_token[:N][done], engine.sent[:N][done], engine.max_tokens[:N][done]
    assert obs.tpot_mean_s == pytest.approx(np.mean((fin[done] - first) / (out - 1)))
    assert obs.ttft_mean_s == pytest.approx(np.mean(first - sent))
    queue = engine.first_scheduled[:N][done] - engine.arrival[:N][done]
    assert obs.queue_time_mean_s == pytest.approx(np.mean(queue))
    assert obs.queue_time_mean_s is not None and obs.queue_time_mean_s > 0.01
    assert obs.output_tokens_mean == pytest.approx(np.mean(out))
    held = fin[done] - engine.first_scheduled[:N][done]  # vLLM's request inference time
    assert obs.inference_time_mean_s == pytest.approx(np.mean(held))
    exact = float(np.percentile(first - sent, 99))
    bucket = int(np.searchsorted(np.array(REQUEST_BUCKETS), exact))
    lower = REQUEST_BUCKETS[bucket - 1] if bucket else 0.0
    assert obs.ttft_p99_s is not None and lower <= obs.ttft_p99_s <= REQUEST_BUCKETS[bucket]


def test_observer_means_are_unknown_before_a_window_has_passed() -> None:
    engine = Engine(H200, cap=24)
    loaded(engine)
    obs = observe_at(Observer(engine, LatencyKind.TPOT, window_s=30), engine, [5.0])
    assert [getattr(obs, name) for name in MEANS] == [None] * len(MEANS) and obs.ttft_p99_s is None


async def test_the_twins_metrics_scraped_directly_give_the_observers_means() -> None:
    twin = TwinEngine(H200, initial_cap=24)
    loaded(twin.engine)
    observer = Observer(twin.engine, LatencyKind.TPOT, window_s=30)
    clock = [0.0]
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=metrics_text(twin)))
    scraper = DirectScraper(client=httpx.AsyncClient(transport=transport), clock=lambda: clock[0])
    key = ("twin",)
    for t in (5.0, 30.0):
        twin.engine.advance(t)
        clock[0] = t
        snapshot = await scraper.read({key: ["http://twin"]}, 30, 30, {(LatencyKind.TPOT, 0.99)})
        obs = observer.observe(t)
    await scraper.aclose()
    scraped = snapshot.get(key).observation(30.0, LatencyKind.TPOT, 0.99)
    for name in MEANS:
        assert getattr(scraped, name) is not None
        assert getattr(scraped, name) == pytest.approx(getattr(obs, name)), name
    assert scraped.ttft_p99_s == pytest.approx(obs.ttft_p99_s)
    assert scraped.p99_s == pytest.approx(obs.p99_s)
