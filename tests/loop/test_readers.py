"""The metrics readers never raise into the loop: down, slow, erroring, empty or NaN is "unknown"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from governor.adapters.prometheus import PromReader
from governor.adapters.scrape import DirectScraper, bucket_width, histogram_quantile, resolution_warning
from governor.core import promql, signals
from governor.core.signals import LatencyKind
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from tests.support.engine import free_port
from tests.support.fixtures_prometheus import ConfigureTargets
from tests.support.prometheus import PrometheusServer

WANT = {(LatencyKind.TPOT, 0.99)}
KEY = ("ns", "svc")


def answering(handler: httpx.MockTransport) -> PromReader:
    return PromReader("http://prometheus", timeout_s=0.5, client=httpx.AsyncClient(transport=handler))


def vector(value: str) -> httpx.Response:
    result = [{"metric": {"namespace": "ns", "inferenceservice": "svc"}, "value": [0, value]}]
    return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})


async def test_prometheus_down_is_unavailable_not_an_exception() -> None:
    reader = PromReader(f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
    snapshot = await reader.read(promql.OPERATOR, 10, 2, WANT)
    assert not snapshot.available and snapshot.error and snapshot.get(KEY).p99(LatencyKind.TPOT, 0.99) is None


async def test_slow_prometheus_times_out_within_the_tick() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return vector("1")

    loop = asyncio.get_running_loop()
    started = loop.time()
    snapshot = await answering(httpx.MockTransport(slow)).read(promql.OPERATOR, 10, 2, WANT)
    assert not snapshot.available and loop.time() - started < 2


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
async def test_nan_and_infinite_values_are_unknown(value: str) -> None:
    snapshot = await answering(httpx.MockTransport(lambda r: vector(value))).read(
        promql.OPERATOR, 10, 2, WANT
    )
    assert snapshot.available
    reading = snapshot.get(KEY)
    assert reading.p99(LatencyKind.TPOT, 0.99) is None and reading.running is None


async def test_stale_series_are_unknown_and_error_answers_are_reported() -> None:
    def stale(request: httpx.Request) -> httpx.Response:
        return vector("3600" if request.url.params["query"].startswith("time() -") else "0.5")

    assert (
        KEY not in (await answering(httpx.MockTransport(stale)).read(promql.OPERATOR, 10, 2, WANT)).services
    )
    broken = httpx.MockTransport(
        lambda r: httpx.Response(400, json={"status": "error", "error": "bad query"})
    )
    snapshot = await answering(broken).read(promql.OPERATOR, 10, 2, WANT)
    assert not snapshot.available and "bad query" in (snapshot.error or "")
    garbage = httpx.MockTransport(lambda r: httpx.Response(200, content=b"<html>proxy</html>"))
    assert not (await answering(garbage).read(promql.OPERATOR, 10, 2, WANT)).available


@pytest.mark.prometheus
async def test_real_prometheus_without_the_service_answers_empty(prometheus: PrometheusServer) -> None:
    snapshot = await PromReader(prometheus.url).read(promql.OPERATOR, 10, 2, WANT)
    assert (
        snapshot.available and ("nobody", "nothing") not in snapshot.services
    )  # other tests' series may stay
    for expr in promql.queries(promql.OPERATOR, 10, 2, WANT | {(LatencyKind.E2E, 0.95)}).values():
        prometheus.query(expr)  # every query the loop sends is valid PromQL for a real Prometheus


async def test_unreachable_pod_scrape_is_reported_not_raised() -> None:
    snapshot = await DirectScraper(timeout_s=0.5).read(
        {KEY: [f"http://127.0.0.1:{free_port()}"]}, 10, 2, WANT
    )
    assert not snapshot.available and KEY not in snapshot.services


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    buckets = [(0.01, 50.0), (0.02, 90.0), (0.05, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.01)
    assert histogram_quantile(0.7, buckets) == pytest.approx(0.015)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.02 + 0.03 * 0.9)
    assert histogram_quantile(0.99, [(0.01, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.99, [(0.01, 1.0), (math.inf, 10.0)]) == 0.01  # in +Inf: the largest bound


def test_the_law_is_told_when_buckets_are_too_coarse_for_the_target() -> None:
    assert bucket_width((0.3, 0.5, 0.8, 1.0, 1.5), 1.2) == pytest.approx(0.5)
    assert resolution_warning(LatencyKind.E2E, 1.0, 0.1) is not None  # 0.8-1.0 s: 0.2 s > 0.1 s band
    assert resolution_warning(LatencyKind.TPOT, 0.05, 0.2) is None


def test_queries_group_by_service_and_read_the_configured_quantile() -> None:
    exprs = promql.queries(promql.standalone("job"), 30, 10, {(LatencyKind.E2E, 0.95)})
    assert exprs["latency:e2e:0.95"].startswith("histogram_quantile(0.95, sum by (job, le)")
    assert "vllm:e2e_request_latency_seconds_bucket" in exprs["latency:e2e:0.95"]
    assert json.dumps(exprs).count("[30000ms]") >= 4


class FakeEngine:
    """vLLM's per-request histograms (the runtime's buckets) in a real prometheus_client registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]

        def hist(name: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, name, labels, registry=self.registry, buckets=buckets)

        self.tpot = hist(signals.TPOT, signals.PER_TOKEN_BUCKETS)
        self.ttft = hist(signals.TTFT, signals.REQUEST_BUCKETS)
        self.queue = hist(signals.QUEUE_TIME, signals.REQUEST_BUCKETS)
        self.held = hist(signals.INFERENCE_TIME, signals.REQUEST_BUCKETS)
        self.tokens = hist(signals.REQUEST_GENERATION_TOKENS, (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0))
        Gauge(signals.RUNNING, "running", labels, registry=self.registry).labels("m", "0").set(3)
        self.lock = threading.Lock()  # held while finishing a batch: a scrape sees all of it or none

    def finish(self, tpot: float, ttft: float, queue: float, tokens: float, held: float = 1.0) -> None:
        self.tpot.labels("m", "0").observe(tpot)
        self.ttft.labels("m", "0").observe(ttft)
        self.queue.labels("m", "0").observe(queue)
        self.held.labels("m", "0").observe(held)
        self.tokens.labels("m", "0").observe(tokens)

    def metrics(self) -> str:
        with self.lock:
            return generate_latest(self.registry).decode()

    @contextlib.contextmanager
    def serving(self) -> Iterator[int]:
        """/metrics on a loopback port, always in the text format as vLLM serves it (prometheus_client's
        own server would answer Prometheus in OpenMetrics, which escapes the colons of vLLM's names)."""
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = engine.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


async def test_scrape_reads_the_lever_models_means_over_the_window_pooled_over_pods() -> None:
    pods = {"http://a": FakeEngine(), "http://b": FakeEngine()}
    clock = [0.0]
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, text=pods[f"http://{r.url.host}"].metrics())
    )
    scraper = DirectScraper(client=httpx.AsyncClient(transport=transport), clock=lambda: clock[0])
    pods["http://a"].finish(tpot=0.5, ttft=9.0, queue=9.0, tokens=500)  # before the window: not counted
    await scraper.read({KEY: list(pods)}, 30, 10, WANT)
    for _ in range(3):
        pods["http://a"].finish(tpot=0.010, ttft=0.20, queue=0.05, tokens=100, held=1.2)
    pods["http://b"].finish(tpot=0.030, ttft=0.40, queue=0.25, tokens=20, held=0.8)
    clock[0] = 10.0
    reading = (await scraper.read({KEY: list(pods)}, 30, 10, WANT)).get(KEY)
    await scraper.aclose()
    obs = reading.observation(10.0, LatencyKind.TPOT, 0.99)
    assert obs.tpot_mean_s == pytest.approx((3 * 0.010 + 0.030) / 4)
    assert obs.ttft_mean_s == pytest.approx((3 * 0.20 + 0.40) / 4)
    assert obs.queue_time_mean_s == pytest.approx((3 * 0.05 + 0.25) / 4)
    assert obs.output_tokens_mean == pytest.approx((3 * 100 + 20) / 4)
    assert obs.inference_time_mean_s == pytest.approx((3 * 1.2 + 0.8) / 4)
    # TTFT at the SLO's quantile, though only TPOT was asked for: the rank falls in the (0.3, 0.4] bucket
    assert obs.ttft_p99_s is not None and 0.3 < obs.ttft_p99_s <= 0.4
    assert obs.p99_s is not None and 0.025 < obs.p99_s <= 0.03


async def test_scrape_means_are_unknown_when_nothing_finished_in_the_window() -> None:
    engine = FakeEngine()
    engine.finish(tpot=0.02, ttft=0.3, queue=0.1, tokens=50)
    clock = [0.0]
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text=engine.metrics()))
    scraper = DirectScraper(client=httpx.AsyncClient(transport=transport), clock=lambda: clock[0])
    await scraper.read({KEY: ["http://a"]}, 30, 10, WANT)
    clock[0] = 10.0
    obs = (
        (await scraper.read({KEY: ["http://a"]}, 30, 10, WANT))
        .get(KEY)
        .observation(10.0, LatencyKind.TPOT, 0.99)
    )
    await scraper.aclose()
    assert obs.running == 3
    means = (obs.tpot_mean_s, obs.ttft_mean_s, obs.queue_time_mean_s, obs.output_tokens_mean)
    assert (*means, obs.inference_time_mean_s) == (None,) * 5
    assert obs.ttft_p99_s is None


@pytest.mark.prometheus
async def test_real_prometheus_reads_the_lever_models_means(prometheus_for: ConfigureTargets) -> None:
    engine = FakeEngine()
    with engine.serving() as port:
        prom = prometheus_for({KEY: [f"127.0.0.1:{port}"]})
        # Pairs finish together, so every scrape sees whole pairs: the windowed mean is the pair's mean
        # however the window cuts them.
        for _ in range(8):
            with engine.lock:
                engine.finish(tpot=0.010, ttft=0.20, queue=0.05, tokens=100, held=1.2)
                engine.finish(tpot=0.030, ttft=0.40, queue=0.15, tokens=20, held=0.8)
            await asyncio.sleep(0.5)
        # Until a scrape after the last pair has landed (a fixed sleep lost that race on a loaded machine).
        seen = f'{signals.TPOT}_count{{instance="127.0.0.1:{port}"}}'
        for _ in range(60):
            if [r for r in prom.query(seen) if float(r["value"][1]) >= 16]:
                break
            await asyncio.sleep(0.5)
        else:
            pytest.fail(f"Prometheus never scraped all 16 requests: {prom.query(seen)}")
        reader = PromReader(prom.url)
        snapshot = await reader.read(promql.OPERATOR, 10, 2, WANT)
        await reader.aclose()
    assert snapshot.available, snapshot.error
    obs = snapshot.get(KEY).observation(0.0, LatencyKind.TPOT, 0.99)
    assert obs.tpot_mean_s == pytest.approx(0.020)
    assert obs.ttft_mean_s == pytest.approx(0.30)
    assert obs.queue_time_mean_s == pytest.approx(0.10)
    assert obs.output_tokens_mean == pytest.approx(60)
    assert obs.inference_time_mean_s == pytest.approx(1.0)
    assert obs.ttft_p99_s is not None and 0.3 < obs.ttft_p99_s <= 0.4


def test_one_query_per_signal_whatever_the_number_of_services() -> None:
    exprs = promql.queries(promql.OPERATOR, 30, 10, {(LatencyKind.TPOT, 0.99), (LatencyKind.TTFT, 0.99)})
    # TPOT and TTFT at the one quantile asked for, the scalar signals, the means, the step counters' rates
    # (over the gauge window) and the scrape time
    assert sorted(exprs) == sorted(
        ["latency:tpot:0.99", "latency:ttft:0.99", "running", "waiting", "queue_growth", "kv_usage",
         "preemption_rate", "request_rate", "prompt_p95", "long_prompt_rate", "cap", "token_budget",
         *promql.MEANS, *promql.STEP_RATES, "last_scrape"]
    )  # fmt: skip
    assert f"rate({signals.TPOT}_sum" in exprs["tpot_mean_s"] and "_count" in exprs["tpot_mean_s"]
    step = exprs["step_seconds_rate"]  # over the gauge window (10 s), not the latency window
    assert f"rate({signals.RUNTIME_STEP_SECONDS}" in step and "[10000ms]" in step
