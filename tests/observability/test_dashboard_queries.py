"""Every PromQL expression of the dashboard (panels, annotations, variables) parses and returns data from a
real Prometheus scraping a real vLLM CPU runtime and the operator's metrics endpoint, with the shipped rules
loaded (the burn-rate panel reads their recording rules)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import prometheus_client
import pytest
from governor.adapters import opmetrics
from governor.observability import alerts, dashboards, queries, scrape

from tests.observability.stack import RulesPrometheus
from tests.support.engine import Engine, free_port, prompt_ids

NAMESPACE, ISVC = "ai", "chat"
VARIABLES = {"$namespace": NAMESPACE, "$inferenceservice": ISVC, "$__rate_interval": "1m"}

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]


@pytest.fixture(scope="module")
def operator_endpoint() -> Iterator[str]:
    """The operator's real metrics registry (governor.adapters.opmetrics) served as `governor operator`
    serves it."""
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1")
    yield f"127.0.0.1:{port}"
    server.shutdown()
    thread.join(10)


def _load(engine: Engine, stop: threading.Event) -> None:
    with httpx.Client(base_url=engine.base_url, timeout=60) as client:
        i = 0
        while not stop.is_set():
            client.post("/v1/completions", json=engine.completion_body(prompt_ids(24 + i % 16, seed=i), 16))
            i += 1


@pytest.fixture(scope="module")
def populated(
    engine: Engine, operator_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RulesPrometheus]:
    workdir = tmp_path_factory.mktemp("dashboard-prometheus")
    rules = workdir / "rules.yaml"
    rules.write_text(alerts.rules_file())
    server = RulesPrometheus(workdir, [rules])
    server.scrape_configs = scrape.static_scrape_configs(
        engine_targets=[engine.base_url.removeprefix("http://")],
        operator_targets=[operator_endpoint],
        namespace=NAMESPACE,
        inferenceservice=ISVC,
    )
    server._write()
    # What the operator exports while it governs ai/chat.
    labels = {"namespace": NAMESPACE, "name": ISVC}
    opmetrics.CEILING.labels(**labels).set(engine.ceiling)
    opmetrics.CAP_FLOOR.labels(**labels).set(1)
    opmetrics.CAP.labels(**labels).set(engine.initial_cap)
    opmetrics.SLO_TARGET.labels(**labels).set(0.05)
    opmetrics.P99.labels(**labels).set(0.004)
    opmetrics.P99_SMOOTHED.labels(**labels).set(0.0045)
    opmetrics.DESIRED_REPLICAS.labels(**labels).set(1)
    opmetrics.MODEL_PER_TOKEN_CAP.labels(**labels).set(engine.initial_cap - 2)
    opmetrics.MODEL_QUEUE_FLOOR.labels(**labels).set(4)
    opmetrics.MODEL_ARRIVALS.labels(**labels).set(3.0)
    opmetrics.MODEL_SERVICE.labels(**labels).set(5.0)
    opmetrics.MODEL_STEP_COST.labels(**labels, part="base").set(0.0012)
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(engine, stop), daemon=True)
    try:
        server.start()
        loader.start()
        server.wait_for_targets(2, timeout_s=60)
        opmetrics.CAP.labels(**labels).set(engine.initial_cap - 2)  # a decision: the annotation has a point
        time.sleep(3)
        yield server
    finally:
        stop.set()
        loader.join(60)
        server.stop()
        for gauge in (
            opmetrics.CEILING,
            opmetrics.CAP_FLOOR,
            opmetrics.CAP,
            opmetrics.SLO_TARGET,
            opmetrics.P99,
            opmetrics.P99_SMOOTHED,
            opmetrics.DESIRED_REPLICAS,
            opmetrics.MODEL_PER_TOKEN_CAP,
            opmetrics.MODEL_QUEUE_FLOOR,
            opmetrics.MODEL_ARRIVALS,
            opmetrics.MODEL_SERVICE,
        ):
            gauge.remove(NAMESPACE, ISVC)
        opmetrics.MODEL_STEP_COST.remove(NAMESPACE, ISVC, "base")


def _concrete(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    # Grafana's label_values(metric, label) variable query, as the PromQL Grafana sends for it.
    match = re.fullmatch(r"label_values\((.+), (\w+)\)", expr)
    return f"group by ({match.group(2)}) ({match.group(1)})" if match else expr


def _data(server: RulesPrometheus, expr: str, timeout_s: float = 30.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    while True:
        result = server.query(expr)  # raises on a parse error: Prometheus answers status=error
        if result or time.monotonic() > deadline:
            return result
        time.sleep(1)


def test_every_dashboard_expression_returns_data(populated: RulesPrometheus) -> None:
    empty = []
    expressions = list(dashboards.expressions())
    assert len(expressions) > 30
    for where, expr in expressions:
        concrete = _concrete(expr)
        assert "$" not in concrete, f"{where}: unresolved variable in {concrete}"
        if not _data(populated, concrete):
            empty.append(f"{where}: {concrete}")
    assert empty == [], "no data:\n" + "\n".join(empty)


def test_series_carry_the_label_convention(populated: RulesPrometheus) -> None:
    for metric in ("vllm:num_requests_running", "vllm_governor:max_num_active_seqs", "governor_cap"):
        (series,) = populated.query(
            f"{metric}{{{queries.DASHBOARD_SELECTOR}}}".replace("$namespace", NAMESPACE).replace(
                "$inferenceservice", ISVC
            )
        )[:1]
        assert series["metric"]["namespace"] == NAMESPACE
        assert series["metric"]["inferenceservice"] == ISVC


def test_the_dashboard_file_is_what_the_expressions_describe() -> None:
    text = (Path(__file__).resolve().parents[2] / "dashboards" / "vllm-governor.json").read_text()
    for _, expr in dashboards.expressions():
        assert expr.replace('"', '\\"') in text
