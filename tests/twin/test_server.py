"""The twin in real time speaks the runtime's HTTP surface: completions, /metrics, the admin route."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from governor.core import signals
from governor_twin.profile import load_profile, with_limits
from governor_twin.server import Hosted, hosted
from prometheus_client.parser import text_string_to_metric_families

from tests.support.steps import STEP_SERIES, check_step_accounting

TOKEN = "twin-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMITS = "/governor/v1/limits"


@pytest.fixture(scope="module")
def twins() -> Iterator[Hosted]:
    mp = pytest.MonkeyPatch()
    mp.setenv("GOVERNOR_ADMIN_TOKEN", TOKEN)
    mp.delenv("GOVERNOR_ADMIN_TOKEN_FILE", raising=False)
    profile = with_limits(load_profile("cpu_tiny_llama"), ceiling=32)
    with hosted(profile, engines=3, initial_cap=16) as running:
        yield running
    mp.undo()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def test_completions_non_streaming_and_streaming(twins: Hosted) -> None:
    with httpx.Client(base_url=twins.base_urls[0], timeout=30) as client:
        body = client.post(
            "/v1/completions", json={"model": "twin", "prompt": [5] * 20, "max_tokens": 12}
        ).json()
        assert body["usage"] == {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}
        assert body["choices"][0]["finish_reason"] == "length"
        request = {
            "model": "twin",
            "prompt": [5] * 20,
            "max_tokens": 64,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with client.stream("POST", "/v1/completions", json=request) as response:
            lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert sum(len(t.split()) for t in texts) == 64
    assert chunks[-1]["usage"]["completion_tokens"] == 64
    too_long = httpx.post(
        twins.base_urls[0] + "/v1/completions",
        json={"model": "twin", "prompt": [1] * 2000, "max_tokens": 100},
    )
    assert too_long.status_code == 400


def test_admin_route_speaks_the_contract(twins: Hosted) -> None:
    with httpx.Client(base_url=twins.base_urls[1], timeout=10) as client:
        assert client.get(LIMITS).status_code == 401
        assert (
            client.get(LIMITS, headers={"Authorization": "Bearer wrong"}).json()["error"]["code"]
            == "unauthorized"
        )
        got = client.get(LIMITS, headers=AUTH).json()
        assert got == {
            "cap": 16,
            "ceiling": 32,
            "token_budget": 2048,
            "token_budget_ceiling": 2048,
            "engines": [
                {"engine": 1, "cap": 16, "ceiling": 32, "token_budget": 2048, "token_budget_ceiling": 2048}
            ],
        }
        for bad, code in (
            ({"cap": 33}, "above_ceiling"),
            ({"cap": "8"}, "invalid"),
            ({"cap": 0}, "invalid"),
            ({"replicas": 2}, "invalid"),
            ({}, "invalid"),
            ({"token_budget": 4096}, "above_ceiling"),
        ):
            answer = client.put(LIMITS, json=bad, headers=AUTH)
            assert answer.status_code == 422, bad
            assert answer.json()["error"]["code"] == code, bad
        put = client.put(LIMITS, json={"cap": 8, "token_budget": 1024}, headers=AUTH).json()
        assert (put["cap"], put["token_budget"]) == (8, 1024)
        assert client.get(LIMITS, headers=AUTH).json()["engines"][0]["cap"] == 8
        text = client.get("/metrics").text
    assert samples(text, signals.RUNTIME_CAP) == [({"model_name": "twin", "engine": "1"}, 8.0)]
    assert samples(text, signals.RUNTIME_TOKEN_BUDGET)[0][1] == 1024.0


def test_admin_route_without_a_token_answers_503(twins: Hosted, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOVERNOR_ADMIN_TOKEN")
    assert httpx.get(twins.base_urls[2] + LIMITS).status_code == 503
    monkeypatch.setenv("GOVERNOR_ADMIN_ALLOW_UNAUTHENTICATED", "1")
    assert httpx.get(twins.base_urls[2] + LIMITS).status_code == 200


async def test_cap_set_over_http_binds_running_on_metrics(twins: Hosted) -> None:
    url = twins.base_urls[2]
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        assert (await client.put(LIMITS, json={"cap": 2}, headers=AUTH)).status_code == 200
        body = {"model": "twin", "prompt": [7] * 16, "max_tokens": 400}
        load = [asyncio.create_task(client.post("/v1/completions", json=body)) for _ in range(6)]
        await asyncio.sleep(0.3)
        text = (await client.get("/metrics")).text
        running = samples(text, signals.RUNNING)[0][1]
        waiting = samples(text, signals.WAITING)[0][1]
        assert running == 2
        assert waiting == 4
        await asyncio.gather(*load)
        text = (await client.get("/metrics")).text
        await client.put(LIMITS, json={"cap": 16}, headers=AUTH)
    assert samples(text, signals.REQUEST_SUCCESS)[0][1] >= 6
    assert samples(text, signals.GENERATION_TOKENS)[0][1] >= 2400
    tpot_buckets = [
        float(lab["le"]) for lab, _ in samples(text, signals.TPOT + "_bucket") if lab["le"] != "+Inf"
    ]
    assert tpot_buckets == list(signals.PER_TOKEN_BUCKETS)
    e2e_buckets = [
        float(lab["le"]) for lab, _ in samples(text, signals.E2E_LATENCY + "_bucket") if lab["le"] != "+Inf"
    ]
    assert e2e_buckets == list(signals.REQUEST_BUCKETS)
    names = {f.name for f in text_string_to_metric_families(text)}
    for name in (
        signals.KV_CACHE_USAGE,
        signals.PREEMPTIONS,
        signals.TTFT,
        signals.INTER_TOKEN_LATENCY,
        signals.QUEUE_TIME,
        signals.INFERENCE_TIME,
        signals.RUNTIME_PROMPT_P95,
        signals.RUNTIME_LONG_PROMPTS,
        signals.RUNTIME_CEILING,
    ):
        assert name.removesuffix("_total") in names, name


def test_one_process_hosts_engines_on_several_ports(twins: Hosted) -> None:
    assert len(set(twins.ports)) == 3
    for i, url in enumerate(twins.base_urls):
        assert httpx.get(url + "/health").status_code == 200
        text = httpx.get(url + "/metrics").text
        assert samples(text, signals.RUNTIME_CEILING) == [({"model_name": "twin", "engine": str(i)}, 32.0)]


async def test_step_counters_keep_the_runtimes_contract(twins: Hosted) -> None:
    def totals() -> list[float]:
        text = httpx.get(twins.base_urls[0] + "/metrics").text
        return [sum(value for _, value in samples(text, name)) for name in STEP_SERIES]

    def body(prompt: list[int], max_tokens: int) -> dict[str, Any]:
        return {"model": "twin", "prompt": prompt, "max_tokens": max_tokens}

    await check_step_accounting(twins.base_urls[0], body, totals)
