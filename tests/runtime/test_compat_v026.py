"""vLLM 0.26–0.31 support: the cap rides on the scheduler's running limit (governor_runtime.vllm_compat).

Pure checks of the rule and its plumbing, a step-by-step simulation of a scheduler that asserts what vLLM
0.26 asserts, and one real vLLM CPU engine (0.32, which keeps the same running limit and assert) run with the
branch forced on and async scheduling, lowered, raised and moved under load.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from governor_runtime import vllm_compat

from tests.support.engine import LIMITS_PATH, prompt_ids, start_runtime
from tests.support.steps import STEP_SERIES, check_step_accounting


@pytest.fixture
def running_limit_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(vllm_compat.COMPAT_MODE_ENV, "running-limit")
    monkeypatch.delenv(vllm_compat.INITIAL_CAP_ENV, raising=False)


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.26.0", True), ("0.31.2", True), ("0.32.0", False), ("0.32.0+cpu", False), ("1.0.0", False)],
)
def test_branch_is_chosen_by_version(version: str, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vllm_compat.COMPAT_MODE_ENV, raising=False)
    assert vllm_compat.uses_running_limit(version) is expected
    assert vllm_compat.require_supported(version) == vllm_compat.version_tuple(version)


def test_older_than_026_is_refused() -> None:
    with pytest.raises(vllm_compat.UnsupportedVLLMVersion, match=r"0\.25\.1"):
        vllm_compat.require_supported("0.25.1")


def test_env_forces_the_branch(running_limit_mode: None) -> None:
    assert vllm_compat.uses_running_limit("0.32.0")


@pytest.mark.parametrize("running", range(0, 40, 3))
@pytest.mark.parametrize("cap", [1, 4, 16, 32])
def test_running_limit_never_below_running_and_equal_to_cap_once_drained(cap: int, running: int) -> None:
    limit = vllm_compat.running_limit(cap, running)
    assert limit >= running  # vLLM asserts len(running) <= limit after every schedule()
    assert limit >= cap
    assert (limit == cap) == (running <= cap)


def test_launch_options_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vllm_compat.COMPAT_MODE_ENV, raising=False)
    buckets = json.dumps({"inter_token_latency": [0.01, 0.02]})
    args, env = vllm_compat.launch_options(8, buckets, "0.26.0")
    assert args == []
    assert env == {vllm_compat.INITIAL_CAP_ENV: "8", vllm_compat.BUCKETS_ENV: buckets}
    args, env = vllm_compat.launch_options(8, buckets, "0.32.0")
    assert args == ["--max-num-active-seqs", "8", "--custom-histogram-buckets", buckets]
    assert env == {}
    assert vllm_compat.launch_options(None, None, "0.26.0") == ([], {})


# ---- a scheduler that behaves, for admission, like vLLM 0.26's ----


@dataclass
class FakeScheduler:
    """Admission and the assert of vLLM 0.26's ``Scheduler.schedule`` (nothing else)."""

    max_num_seqs: int
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    max_num_scheduled_tokens: int = 8192
    num_waiting_for_streaming_input: int = 0

    def __post_init__(self) -> None:
        self.scheduler_config = SimpleNamespace(
            max_num_seqs=self.max_num_seqs,
            max_num_scheduled_tokens=None,
            max_num_batched_tokens=8192,
            enable_chunked_prefill=True,
        )
        self.max_num_running_reqs = self.max_num_seqs

    def schedule(self) -> None:
        while self.waiting:
            if len(self.running) + self.num_waiting_for_streaming_input >= self.max_num_running_reqs:
                break
            self.running.append(self.waiting.pop(0))
        assert len(self.running) <= self.max_num_running_reqs


def fake_core(scheduler: FakeScheduler) -> Any:
    config = SimpleNamespace(scheduler_config=scheduler.scheduler_config, model_config=SimpleNamespace())
    return SimpleNamespace(scheduler=scheduler, vllm_config=config, engine_index=0)


def step(scheduler: FakeScheduler, rng: random.Random, finish_p: float) -> None:
    """One engine step: the hook, schedule(), then some running requests finish."""
    vllm_compat._apply_running_limit(scheduler)
    scheduler.schedule()
    scheduler.running = [r for r in scheduler.running if rng.random() > finish_p]


def test_lowering_drains_without_breaking_the_assert_and_then_holds(running_limit_mode: None) -> None:
    rng = random.Random(1)
    scheduler = FakeScheduler(max_num_seqs=64, waiting=list(range(10_000)))
    core = fake_core(scheduler)
    assert vllm_compat.get_limits(core).cap == 64  # startup: the ceiling
    for _ in range(5):
        step(scheduler, rng, finish_p=0.0)
    assert len(scheduler.running) == 64
    held = vllm_compat.set_limits(core, 8, 8192)  # between steps, as the utility call runs
    assert held.cap == 8
    assert scheduler.max_num_running_reqs == 64  # never below what runs now
    previous = len(scheduler.running)
    drained = False
    for _ in range(200):
        step(scheduler, rng, finish_p=0.05)
        now = len(scheduler.running)
        if not drained:
            assert now <= previous  # nothing admitted while above the cap
            drained = now <= 8
        else:
            assert now <= 8  # once drained, the cap holds
        previous = now
    assert drained
    assert scheduler.max_num_running_reqs == 8
    vllm_compat.set_limits(core, 32, 8192)  # raising applies at the next step
    step(scheduler, rng, finish_p=0.0)
    assert len(scheduler.running) == 32


def test_random_changes_keep_the_invariants(running_limit_mode: None) -> None:
    rng = random.Random(7)
    scheduler = FakeScheduler(max_num_seqs=256, waiting=list(range(100_000)))
    core = fake_core(scheduler)
    cap = 256
    for index in range(3000):
        if index % 7 == 0:
            cap = rng.randint(1, 256)
            assert vllm_compat.set_limits(core, cap, 8192).cap == cap
        before = len(scheduler.running)
        step(scheduler, rng, finish_p=0.03)
        assert len(scheduler.running) <= max(cap, before)


def test_initial_cap_from_env(running_limit_mode: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(vllm_compat.INITIAL_CAP_ENV, "12")
    scheduler = FakeScheduler(max_num_seqs=64, waiting=list(range(100)))
    step(scheduler, random.Random(0), finish_p=0.0)
    assert len(scheduler.running) == 12
    assert vllm_compat.get_limits(fake_core(scheduler)).cap == 12


async def test_utility_caller_falls_back_to_every_engine() -> None:
    calls: list[tuple[str, tuple[Any, ...], bytes]] = []

    class Client026:
        def __init__(self) -> None:
            self.core_engines = [b"\x00\x00", b"\x01\x00"]

        async def _call_utility_async(self, method: str, *args: Any, engine: bytes) -> dict[str, Any]:
            calls.append((method, args, engine))
            return {"engine": engine[0]}

    call_all = vllm_compat.utility_caller(SimpleNamespace(engine_core=Client026()))
    assert await call_all("governor_set_limits", 8, None) == [{"engine": 0}, {"engine": 1}]
    assert calls == [("governor_set_limits", (8, None), e) for e in (b"\x00\x00", b"\x01\x00")]


# ---- the branch on a real engine (vLLM 0.32 CPU keeps the running limit and its assert) ----


@pytest.mark.vllm
async def test_real_engine_with_the_running_limit_branch_and_async_scheduling() -> None:
    with start_runtime(
        ceiling=32,
        initial_cap=None,
        extra_args=["--async-scheduling"],
        env={vllm_compat.COMPAT_MODE_ENV: "running-limit"},
    ) as engine:
        headers = engine.admin_headers
        # The load has its own client: the 100 workers' long requests hold every pooled connection, and a
        # /metrics read or a PUT must not queue behind them. No keep-alive for the load: a connection left
        # idle near uvicorn's 5 s keep-alive timeout and then reused fails with ReadError.
        async with (
            httpx.AsyncClient(base_url=engine.base_url, timeout=300.0) as client,
            httpx.AsyncClient(
                base_url=engine.base_url,
                timeout=300.0,
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=0),
            ) as load_client,
        ):

            async def gauge(name: str) -> float:
                # vLLM's gauges are "mostrecent" in Prometheus multiprocess mode: one series per engine
                # (labels engine, model_name; no pid), written only once set (a series never set has
                # timestamp 0 and is left out). After the warm-up below, a missing series is an error.
                text = (await client.get("/metrics")).text
                prefix, label = name + "{", f'model_name="{engine.model}"'
                lines = [line for line in text.splitlines() if line.startswith(prefix) and label in line]
                assert len(lines) == 1, f"{name}: {len(lines)} series in /metrics"
                return float(lines[0].rsplit(" ", 1)[1])

            async def running() -> float:
                return await gauge("vllm:num_requests_running")

            async def put(cap: int) -> dict[str, Any]:
                response = await client.put(LIMITS_PATH, json={"cap": cap}, headers=headers)
                assert response.status_code == 200, response.text
                body: dict[str, Any] = response.json()
                assert body["cap"] == cap
                return body

            results: list[dict[str, Any]] = []
            stop = asyncio.Event()

            async def worker(index: int) -> None:
                # A closed loop: the next request as soon as the last is answered, until stop. The tiny
                # model decodes a fixed load of 100 × 800 tokens in seconds, faster than /metrics is read on
                # a busy machine; this keeps requests running and waiting until each phase is observed.
                round_ = 0
                while not stop.is_set():
                    body = engine.completion_body(prompt_ids(24, seed=index * 1000 + round_), max_tokens=800)
                    response = await load_client.post("/v1/completions", json=body)
                    assert response.status_code == 200, response.text
                    results.append(response.json())
                    round_ += 1

            async def until(predicate: Any, attempts: int, interval_s: float) -> list[float]:
                seen: list[float] = []
                for _ in range(attempts):
                    if load.done():
                        load.result()  # a failed request fails the test now, not as a timeout
                    seen.append(await running())
                    if predicate(seen[-1]):
                        break
                    await asyncio.sleep(interval_s)
                return seen

            # The first request pays for compiling the model's step (over a minute on a busy machine) and
            # sets the scheduler gauges; before it /metrics has no vllm:num_requests_* series at all.
            warm = await client.post("/v1/completions", json=engine.completion_body([1, 2, 3, 4], 8))
            assert warm.status_code == 200, warm.text
            await running()  # present from now on
            load = asyncio.gather(*(worker(i) for i in range(100)))
            try:
                assert (await until(lambda r: r >= 16, 600, 0.1))[-1] >= 16
                await put(4)
                samples = await until(lambda r: r <= 4, 1200, 0.05)
                assert samples[-1] <= 4, samples
                assert all(b <= a for a, b in itertools.pairwise(samples)), (
                    samples
                )  # nothing admitted meanwhile
                after = []
                for _ in range(10):
                    after.append(await running())
                    await asyncio.sleep(0.1)
                assert max(after) <= 4
                assert await gauge("vllm:num_requests_waiting") > 0  # the cap, not a lack of work, held it
                await put(16)
                assert (await until(lambda r: r > 4, 200, 0.1))[-1] > 4
                rng = random.Random(3)
                for _ in range(20):
                    await put(rng.randint(1, 32))
                await put(32)
            finally:
                stop.set()
            await load
        assert len(results) >= 100
        assert all(r["usage"]["completion_tokens"] == 800 for r in results)

        def totals() -> list[float]:
            text = engine.metrics_text()
            return [engine.metric(name, text, engine="0") or 0.0 for name in STEP_SERIES]

        # The step counters keep their contract where batches overlap (async scheduling's batch queue).
        await check_step_accounting(engine.base_url, engine.completion_body, totals)
        log = engine.log_path.read_text(errors="replace")
        assert "AssertionError" not in log
