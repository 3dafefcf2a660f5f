"""The runtime on a real vLLM CPU engine, observed from outside: the admin route, /metrics, completions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from governor.core import signals
from governor_dev import loadgen

from tests.support.engine import LIMITS_PATH, Engine, prompt_ids
from tests.support.steps import STEP_SERIES, check_step_accounting

pytestmark = pytest.mark.vllm

CONTRACT_KEYS = {"cap", "ceiling", "token_budget", "token_budget_ceiling", "engines"}
ENGINE_KEYS = {"engine", "cap", "ceiling", "token_budget", "token_budget_ceiling"}


def gauge(text: str, name: str, model: str) -> float:
    """A gauge's value, read cheaply (the sampler runs every 0.15 s on a busy 2-core machine).

    vLLM's gauges are ``mostrecent`` in Prometheus multiprocess mode: one series per engine, no ``pid``
    label. A missing series is an error, never a silent 0.
    """
    prefix, label = name + "{", f'model_name="{model}"'
    lines = [line for line in text.splitlines() if line.startswith(prefix) and label in line]
    values = [float(line.rsplit(" ", 1)[1]) for line in lines]
    assert len(values) == 1, f"{name} for {model}: {len(values)} series in /metrics"
    return values[0]


@dataclass
class Sample:
    at: float
    running: float
    waiting: float
    phase: str


@dataclass
class Sampler:
    """Reads vllm:num_requests_running/waiting from /metrics while the test moves through phases."""

    engine: Engine
    phase: str = "start"
    samples: list[Sample] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def run(self, interval_s: float = 0.15) -> None:
        # Its own connection: a scrape must not queue behind the load's requests in a shared pool.
        async with httpx.AsyncClient(base_url=self.engine.base_url, timeout=60) as client:
            while True:
                text = (await client.get("/metrics")).text
                running = gauge(text, signals.RUNNING, self.engine.model)
                waiting = gauge(text, signals.WAITING, self.engine.model)
                self.samples.append(Sample(time.monotonic(), running, waiting, self.phase))
                await asyncio.sleep(interval_s)

    async def until(self, predicate: Any, timeout_s: float, what: str, *watched: asyncio.Task[Any]) -> Sample:
        """The first new sample that satisfies ``predicate``; a failed sampler or ``watched`` task (the
        load) raises at once instead of leaving the wait to time out on samples of an idle engine."""
        deadline = time.monotonic() + timeout_s
        seen = len(self.samples)
        while time.monotonic() < deadline:
            for sample in self.samples[seen:]:
                if predicate(sample):
                    return sample
            seen = len(self.samples)
            for task in (self.task, *watched):
                if task is not None and task.done() and not task.cancelled() and task.exception():
                    raise AssertionError(f"failed while waiting for {what}") from task.exception()
            await asyncio.sleep(0.05)
        raise AssertionError(f"not within {timeout_s}s: {what}; last samples {self.samples[-20:]}")

    def of(self, phase: str) -> list[Sample]:
        return [sample for sample in self.samples if sample.phase == phase]


async def put_limits(client: httpx.AsyncClient, engine: Engine, **change: int) -> dict[str, Any]:
    response = await client.put(LIMITS_PATH, json=change, headers=engine.admin_headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def closed_loop(
    client: httpx.AsyncClient, engine: Engine, workers: int, max_tokens: int, stop: asyncio.Event
) -> list[httpx.Response]:
    """``workers`` clients that each post their next request as soon as the last one is answered, until
    ``stop``: the load stays queued for as long as the test needs to observe it, however fast the engine."""
    responses: list[httpx.Response] = []

    async def send(index: int, round_: int) -> None:
        body = engine.completion_body(prompt_ids(16, 1000 + index * 100 + round_), max_tokens)
        responses.append(await client.post("/v1/completions", json=body))

    await loadgen.closed_loop(workers, send, stop=stop)
    return responses


def assert_all_complete(responses: list[httpx.Response], max_tokens: int) -> None:
    failed = [(r.status_code, r.text[:200]) for r in responses if r.status_code != 200]
    assert not failed, failed
    assert {r.json()["usage"]["completion_tokens"] for r in responses} == {max_tokens}
    assert {r.json()["choices"][0]["finish_reason"] for r in responses} == {"length"}


def test_limits_route_answers_the_contract(engine: Engine) -> None:
    body = engine.limits()
    assert set(body) == CONTRACT_KEYS
    assert [set(e) for e in body["engines"]] == [ENGINE_KEYS]
    assert body["cap"] == engine.initial_cap  # the launcher's --initial-cap reached the scheduler
    assert body["ceiling"] == engine.ceiling
    assert body["token_budget"] == body["token_budget_ceiling"] >= engine.ceiling
    assert body["engines"][0] == {key: body[key] for key in ENGINE_KEYS - {"engine"}} | {"engine": 0}


def test_latency_histograms_have_the_finer_buckets(engine: Engine) -> None:
    engine.complete(prompt_ids(8), max_tokens=4)
    text = engine.metrics_text()
    for histogram, buckets in (
        (signals.TPOT, signals.PER_TOKEN_BUCKETS),
        (signals.INTER_TOKEN_LATENCY, signals.PER_TOKEN_BUCKETS),
        (signals.TTFT, signals.REQUEST_BUCKETS),
        (signals.E2E_LATENCY, signals.REQUEST_BUCKETS),
        (signals.QUEUE_TIME, signals.REQUEST_BUCKETS),
        (signals.INFERENCE_TIME, signals.REQUEST_BUCKETS),  # the queue model's measured hold per request
    ):
        bounds = {
            float(line.split('le="', 1)[1].split('"', 1)[0])
            for line in text.splitlines()
            if line.startswith(histogram + "_bucket{") and f'model_name="{engine.model}"' in line
        }
        assert bounds == {*buckets, float("inf")}, histogram


def test_gauges_follow_the_cap(engine_limits: Engine) -> None:
    engine = engine_limits
    for cap in (3, 11, 7):
        held = engine.set_limits(cap=cap)
        assert held["cap"] == cap
        text = engine.metrics_text()
        assert engine.metric(signals.RUNTIME_CAP, text, engine="0") == cap
        assert engine.metric(signals.RUNTIME_CEILING, text, engine="0") == engine.ceiling
        assert engine.metric(signals.RUNTIME_TOKEN_BUDGET, text, engine="0") == held["token_budget"]
    budget = engine.set_limits(token_budget=256)["token_budget"]
    assert budget == 256
    assert engine.metric(signals.RUNTIME_TOKEN_BUDGET, engine="0") == 256
    time.sleep(1.2)  # the background refresh from the engines agrees with what the PUT published
    assert engine.metric(signals.RUNTIME_CAP, engine="0") == 7
    assert engine.metric(signals.RUNTIME_TOKEN_BUDGET, engine="0") == 256


def test_a_lower_token_budget_is_held_and_requests_complete(engine_limits: Engine) -> None:
    engine = engine_limits
    assert engine.set_limits(cap=4, token_budget=32)["token_budget"] == 32
    done = engine.complete(prompt_ids(100), max_tokens=8)  # a 100-token prompt prefills in 32-token chunks
    assert done["usage"] == {**done["usage"], "prompt_tokens": 100, "completion_tokens": 8}


def _bad_requests(engine: Engine) -> list[tuple[str, str, dict[str, str], Any, int, str]]:
    good = engine.admin_headers
    wrong = {"Authorization": "Bearer not-the-token"}
    ceiling = engine.ceiling
    return [
        ("no token", "GET", {}, None, 401, "unauthorized"),
        ("no token", "PUT", {}, {"cap": 4}, 401, "unauthorized"),
        ("wrong token", "PUT", wrong, {"cap": 4}, 401, "unauthorized"),
        (
            "wrong scheme",
            "PUT",
            {"Authorization": f"Basic {engine.admin_token}"},
            {"cap": 4},
            401,
            "unauthorized",
        ),
        ("string", "PUT", good, {"cap": "4"}, 422, "invalid"),
        ("float", "PUT", good, {"cap": 4.5}, 422, "invalid"),
        ("integral float", "PUT", good, {"cap": 4.0}, 422, "invalid"),
        ("boolean", "PUT", good, {"cap": True}, 422, "invalid"),
        ("null", "PUT", good, {"cap": None}, 422, "invalid"),
        ("zero", "PUT", good, {"cap": 0}, 422, "invalid"),
        ("negative", "PUT", good, {"cap": -2}, 422, "invalid"),
        ("above ceiling", "PUT", good, {"cap": ceiling + 1}, 422, "above_ceiling"),
        ("huge", "PUT", good, {"cap": 10**30}, 422, "above_ceiling"),
        ("budget above startup", "PUT", good, {"token_budget": 10**6}, 422, "above_ceiling"),
        ("budget below cap", "PUT", good, {"cap": 8, "token_budget": 4}, 422, "invalid"),
        ("unknown field", "PUT", good, {"cap": 4, "max_num_seqs": 64}, 422, "invalid"),
        ("empty object", "PUT", good, {}, 422, "invalid"),
        ("not an object", "PUT", good, [4], 422, "invalid"),
        ("not JSON", "PUT", good, "cap=4", 422, "invalid"),
    ]


def test_bad_requests_change_nothing(engine: Engine) -> None:
    before = engine.limits()
    with engine.client() as client:
        for what, method, headers, body, status, code in _bad_requests(engine):
            content = body.encode() if isinstance(body, str) else None
            json_body = None if isinstance(body, str) or body is None else body
            response = client.request(method, LIMITS_PATH, headers=headers, json=json_body, content=content)
            assert response.status_code == status, (what, response.text)
            error = response.json()["error"]
            assert error["code"] == code, what
            assert error["message"], what
            assert engine.limits() == before, what
    assert engine.metric(signals.RUNTIME_CAP, engine="0") == before["cap"]


async def test_cap_drains_holds_and_rises_under_16_long_requests(engine_limits: Engine) -> None:
    """Cap 8 → 2 under 16 long requests: running drains to 2 and stays there while requests wait (no
    preemption); then, with 16 more clients' requests waiting at cap 2, raising it to 8 lets more run.

    Every decision waits on /metrics, never on time: on a busy 2-core machine the API server's gauges can
    lag the engine by seconds, while the tiny model decodes over a thousand steps a second (a fixed load of
    16 × 950 tokens at cap 2 is over in seconds, and once went unseen). So each load is a closed loop of 16
    clients that keeps requests waiting until its phase has been observed.
    """
    engine = engine_limits
    max_tokens = 1900  # long: a wave of 8 lasts seconds even on a fast, idle machine
    async with (
        # No keep-alive for the load: a worker that finished early idles past uvicorn's 5 s keep-alive
        # timeout, and reusing its connection then races the server's close (ReadError).
        httpx.AsyncClient(
            base_url=engine.base_url, timeout=300, limits=httpx.Limits(max_keepalive_connections=0)
        ) as client,
        httpx.AsyncClient(base_url=engine.base_url, timeout=60) as admin,
    ):
        await put_limits(admin, engine, cap=8)
        preemptions = engine.metric(signals.PREEMPTIONS) or 0.0
        sampler = Sampler(engine)
        sampling = sampler.task = asyncio.create_task(sampler.run())
        first_stop, stop = asyncio.Event(), asyncio.Event()
        try:
            load = asyncio.create_task(closed_loop(client, engine, 16, max_tokens, first_stop))
            await sampler.until(lambda s: s.running == 8 and s.waiting > 0, 60, "8 running at cap 8", load)
            sampler.phase = "lowered"
            assert (await put_limits(admin, engine, cap=2))["cap"] == 2
            drained = await sampler.until(lambda s: s.running <= 2, 120, "the drain to cap 2", load)
            await sampler.until(lambda s: s.running == 2 and s.waiting > 0, 60, "held at cap 2", load)
            first_stop.set()
            first = await load  # cap 2 holds until every request of the first load is done

            sampler.phase = "waiting at 2"
            looping = asyncio.create_task(closed_loop(client, engine, 16, max_tokens // 2, stop))
            await sampler.until(
                lambda s: s.running == 2 and s.waiting >= 8, 120, "requests waiting at cap 2", looping
            )
            sampler.phase = "raised"
            assert (await put_limits(admin, engine, cap=8))["cap"] == 8
            await sampler.until(lambda s: s.running > 2, 60, "more than 2 running after raising", looping)
            stop.set()
            second = await looping
        finally:
            first_stop.set()
            stop.set()
            sampling.cancel()

    held = [s for s in sampler.of("lowered") if s.at >= drained.at] + sampler.of("waiting at 2")
    assert max(s.running for s in held) <= 2, held
    assert [s for s in held if s.running == 2 and s.waiting > 0], f"requests waited while 2 ran: {held}"
    assert max(s.running for s in sampler.samples) <= 8
    assert max(s.running for s in sampler.of("raised")) > 2
    assert_all_complete(first, max_tokens)  # lowering drained: nothing was preempted or aborted
    assert_all_complete(second, max_tokens // 2)
    assert (engine.metric(signals.PREEMPTIONS) or 0.0) == preemptions


async def test_100_cap_changes_under_load_fail_no_request(engine_limits: Engine) -> None:
    engine = engine_limits
    caps = [(1, 4, 16, 2, engine.ceiling, 8, 3)[i % 7] for i in range(100)]
    latencies: list[float] = []
    responses: list[httpx.Response] = []
    stop = asyncio.Event()

    async def send(worker: int, round_: int) -> None:
        body = engine.completion_body(prompt_ids(16, worker * 1000 + round_), 24)
        responses.append(await client.post("/v1/completions", json=body))

    async with (
        httpx.AsyncClient(base_url=engine.base_url, timeout=300) as client,
        httpx.AsyncClient(base_url=engine.base_url, timeout=60) as admin,
    ):
        load = asyncio.create_task(loadgen.closed_loop(16, send, stop=stop))
        try:
            await asyncio.sleep(0.5)
            for cap in caps:
                started = time.perf_counter()
                held = await put_limits(admin, engine, cap=cap)
                latencies.append(time.perf_counter() - started)
                assert held["cap"] == cap and held["engines"][0]["cap"] == cap
                await asyncio.sleep(0.02)
        finally:
            stop.set()
            await load

    assert len(latencies) == 100
    assert len(responses) >= 16
    assert_all_complete(responses, 24)
    assert engine.limits()["cap"] == caps[-1]
    p50, worst = sorted(latencies)[49] * 1e3, max(latencies) * 1e3
    print(f"cap change latency under load: p50 {p50:.1f} ms, max {worst:.1f} ms")


def test_long_prompts_are_counted_against_the_windowed_p95(engine: Engine) -> None:
    before = engine.metric(signals.RUNTIME_LONG_PROMPTS, engine="0") or 0.0
    with httpx.Client(base_url=engine.base_url, timeout=120) as client:
        for seed in range(25):
            response = client.post("/v1/completions", json=engine.completion_body(prompt_ids(20, seed), 1))
            assert response.status_code == 200
        time.sleep(1.2)  # the engines' window reaches /metrics on the next refresh
        p95 = engine.metric(signals.RUNTIME_PROMPT_P95, engine="0")
        assert p95 is not None and p95 > 0
        long_len = int(min(1.3 * p95 + 50, 1900))
        response = client.post("/v1/completions", json=engine.completion_body(prompt_ids(long_len), 1))
        assert response.status_code == 200
    deadline = time.monotonic() + 10
    while (engine.metric(signals.RUNTIME_LONG_PROMPTS, engine="0") or 0.0) < before + 1:
        assert time.monotonic() < deadline, "the long prompt was not counted"
        time.sleep(0.25)


async def test_step_counters_account_for_every_token(engine: Engine) -> None:
    def totals() -> list[float]:
        text = engine.metrics_text()
        return [engine.metric(name, text, engine="0") or 0.0 for name in STEP_SERIES]

    await check_step_accounting(engine.base_url, engine.completion_body, totals)
