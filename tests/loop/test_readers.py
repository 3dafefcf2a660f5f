"""The metrics readers never raise into the loop: down, slow, erroring, empty or NaN is "unknown"."""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest
from governor.adapters.prometheus import PromReader
from governor.adapters.scrape import DirectScraper, bucket_width, histogram_quantile, resolution_warning
from governor.core import promql
from governor.core.signals import LatencyKind

from tests.support.engine import free_port
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
