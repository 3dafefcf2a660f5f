"""The twin in real time, behind the runtime's HTTP surface: the operator and Prometheus cannot tell it apart.

Per engine, on its own port:
- `POST /v1/completions` (OpenAI; token-id prompts, or text counted as whitespace-separated tokens;
  `max_tokens`, `stream`, `stream_options.include_usage`; output is generated until `max_tokens`, as with
  `ignore_eos`);
- `GET /metrics` with vLLM's metric names (governor.core.signals), labels `model_name` and `engine`, the
buckets
  the runtime starts vLLM with, and the runtime's own `vllm_governor:*` series;
- `GET|PUT /governor/v1/limits`, the runtime's admin route: same auth (governor_runtime.auth), same bounds
  (governor_runtime.limits), same JSON and error shapes;
- `GET /health`, `GET /v1/models`.
One process can host many engines (`--engines N` on consecutive ports), for scale tests.

    python -m governor_twin serve --profile cpu_tiny_llama --engines 4 --port 8100 --initial-cap 16
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import uvicorn
from governor.core import signals
from governor_runtime import auth, contract
from governor_runtime.limits import Bounds, LimitsError, resolve
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from governor_twin.engine import DONE, REJECTED, Engine, Histogram
from governor_twin.profile import EngineProfile

LIMITS_PATH = contract.LIMITS_PATH
PROMPT_WINDOW_S = 60.0
LONG_PROMPT_FACTOR = 1.3


class TwinEngine:
    """One simulated engine driven by the wall clock (seconds since it started)."""

    def __init__(
        self,
        profile: EngineProfile,
        model_name: str = "twin",
        index: int = 0,
        initial_cap: int | None = None,
        seed: int = 0,
    ) -> None:
        self.engine = Engine(profile, cap=initial_cap, seed=seed)
        self.model_name = model_name
        self.index = index
        self.started = time.monotonic()
        self._progress = asyncio.Event()
        self._wake = asyncio.Event()
        self._prompts: deque[tuple[float, int]] = deque()
        self.prompt_p95 = 0.0
        self.long_prompts = 0.0
        self.lock = asyncio.Lock()

    def now(self) -> float:
        return time.monotonic() - self.started

    async def drive(self) -> None:
        """Advance the engine to the wall clock; wake waiting handlers when anything moved."""
        engine = self.engine
        while True:
            steps = engine.stats.steps
            engine.advance(self.now())
            finished = bool(engine.finished)
            engine.finished.clear()
            if engine.stats.steps != steps or finished:
                self._progress.set()
                self._progress = asyncio.Event()
            busy = bool(engine.running or engine.waiting)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.001 if busy else 0.05)

    def _note_prompt(self, now: float, length: int) -> None:
        """The runtime's prompt signals: 60 s windowed P95 and a counter of prompts above 1.3 × it."""
        if self._prompts and length > LONG_PROMPT_FACTOR * self.prompt_p95:
            self.long_prompts += 1
        self._prompts.append((now, length))
        while self._prompts and self._prompts[0][0] < now - PROMPT_WINDOW_S:
            self._prompts.popleft()
        self.prompt_p95 = float(np.percentile([p for _, p in self._prompts], 95))

    def submit(self, prompt_tokens: int, max_tokens: int) -> int:
        now = self.now()
        self._note_prompt(now, prompt_tokens)
        rid = self.engine.submit(now, prompt_tokens, max_tokens)
        self._wake.set()
        return rid

    async def tokens(self, rid: int) -> AsyncIterator[int]:
        """Yield the number of new tokens each time the request progresses, until it finishes."""
        engine = self.engine
        sent = 0
        while True:
            event = self._progress
            generated = int(engine.generated[rid])
            if generated > sent:
                yield generated - sent
                sent = generated
            if engine.state[rid] == DONE:
                return
            await event.wait()

    def limits(self) -> dict[str, int]:
        e = self.engine
        return {
            "engine": self.index,
            "cap": e.cap,
            "ceiling": e.ceiling,
            "token_budget": e.token_budget,
            "token_budget_ceiling": e.token_budget_ceiling,
        }


# ---------------------------------------------------------------------------------------------- metrics
def _histogram(name: str, doc: str, hist: Histogram, labels: list[str]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["model_name", "engine"])
    cumulative = hist.cumulative()
    buckets = [
        (repr(float(edge)), float(count)) for edge, count in zip(hist.edges, cumulative[:-1], strict=True)
    ]
    buckets.append(("+Inf", float(cumulative[-1])))
    family.add_metric(labels, buckets, hist.total)
    return family


class TwinCollector:
    """vLLM's series for one engine, read from the engine at scrape time."""

    def __init__(self, twin: TwinEngine) -> None:
        self.twin = twin

    def collect(self) -> Iterator[Metric]:
        twin, e = self.twin, self.twin.engine
        e.flush()
        labels = [twin.model_name, str(twin.index)]
        names = ["model_name", "engine"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        yield gauge(signals.RUNNING, "Number of requests in model execution batches.", e.num_running)
        yield gauge(signals.WAITING, "Number of requests waiting to be processed.", e.num_waiting)
        by_reason = GaugeMetricFamily(
            signals.WAITING_BY_REASON, "Waiting requests by reason.", labels=[*names, "reason"]
        )
        by_reason.add_metric([*labels, "capacity"], e.num_waiting)
        by_reason.add_metric([*labels, "deferred"], 0.0)
        yield by_reason
        yield gauge(signals.KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage.", e.kv_usage)
        yield counter(signals.PREEMPTIONS, "Cumulative number of preemptions.", e.preemptions)
        yield counter(signals.PROMPT_TOKENS, "Number of prefill tokens processed.", e.prompt_tokens_total)
        yield counter(
            signals.GENERATION_TOKENS, "Number of generation tokens processed.", e.generation_tokens_total
        )
        success = CounterMetricFamily(
            signals.REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        success.add_metric([*labels, "length"], e.success_total)
        yield success
        yield _histogram(signals.E2E_LATENCY, "End-to-end request latency in seconds.", e.e2e_hist, labels)
        yield _histogram(signals.TTFT, "Time to first token in seconds.", e.ttft_hist, labels)
        yield _histogram(signals.INTER_TOKEN_LATENCY, "Inter-token latency in seconds.", e.itl_hist, labels)
        yield _histogram(
            signals.TPOT, "Time per output token (mean decode gap) per request.", e.tpot_hist, labels
        )
        yield _histogram(signals.QUEUE_TIME, "Time spent in the waiting queue.", e.queue_hist, labels)
        yield _histogram(signals.REQUEST_PROMPT_TOKENS, "Prompt tokens per request.", e.prompt_hist, labels)
        yield _histogram(
            signals.REQUEST_GENERATION_TOKENS, "Generated tokens per request.", e.generation_hist, labels
        )
        yield gauge(signals.RUNTIME_CAP, "The live admission cap (max_num_active_seqs).", e.cap)
        yield gauge(signals.RUNTIME_CEILING, "The startup max_num_seqs.", e.ceiling)
        yield gauge(signals.RUNTIME_TOKEN_BUDGET, "The live per-step token budget.", e.token_budget)
        yield gauge(signals.RUNTIME_PROMPT_P95, "Prompt tokens P95 over the last 60 s.", twin.prompt_p95)
        yield counter(
            signals.RUNTIME_LONG_PROMPTS, "Prompts above 1.3 x the windowed P95.", twin.long_prompts
        )


# ---------------------------------------------------------------------------------------------- routes
def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _openai_error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
        status_code=status,
    )


def _authorize(request: Request) -> JSONResponse | None:
    verdict = auth.check(auth.AuthConfig.from_env(), request.headers.get("authorization"))
    if verdict is auth.Verdict.ALLOWED:
        return None
    if verdict is auth.Verdict.UNCONFIGURED:
        return _error(
            503,
            "unavailable",
            f"no admin token configured: set {auth.TOKEN_ENV} or "
            f"{auth.TOKEN_FILE_ENV} (or {auth.ALLOW_UNAUTHENTICATED_ENV}=1)",
        )
    return _error(401, "unauthorized", "missing or wrong bearer token")


def _limits_body(twin: TwinEngine) -> dict[str, Any]:
    engine = twin.limits()
    return {**{k: v for k, v in engine.items() if k != "engine"}, "engines": [engine]}


def build_app(twin: TwinEngine) -> Starlette:
    async def limits(request: Request) -> Response:
        if (refused := _authorize(request)) is not None:
            return refused
        if request.method == "GET":
            return JSONResponse(_limits_body(twin))
        try:
            try:
                body = json.loads(await request.body() or b"null")
            except ValueError as bad:
                raise LimitsError("invalid", f"the body is not JSON: {bad}") from None
            if not isinstance(body, dict):
                raise LimitsError("invalid", 'the body must be a JSON object such as {"cap": 8}')
            unknown = sorted(set(body) - {"cap", "token_budget"})
            if unknown:
                raise LimitsError("invalid", f"unknown field(s) {unknown}; allowed: ['cap', 'token_budget']")
            if not body:
                raise LimitsError("invalid", "give at least one of ['cap', 'token_budget']")
            e = twin.engine
            async with twin.lock:
                cap, budget = resolve(
                    Bounds(e.ceiling, e.token_budget_ceiling),
                    e.cap,
                    e.token_budget,
                    body.get("cap"),
                    body.get("token_budget"),
                )
                e.set_cap(cap)
                e.set_token_budget(budget)
        except LimitsError as bad:
            return _error(422, bad.code, bad.message)
        return JSONResponse(_limits_body(twin))

    async def metrics(request: Request) -> Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(TwinCollector(twin))
        return PlainTextResponse(
            generate_latest(registry).decode(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": twin.model_name,
                        "object": "model",
                        "owned_by": "governor-twin",
                        "max_model_len": twin.engine.profile.max_model_len,
                    }
                ],
            }
        )

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _openai_error("the body is not JSON")
        if body.get("model") not in (None, twin.model_name):
            return _openai_error(f"The model `{body.get('model')}` does not exist.", 404)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            if len(prompt) != 1:
                return _openai_error("the twin serves one prompt per request")
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_tokens = max(1, len(prompt.split()))
        elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) and prompt:
            prompt_tokens = len(prompt)
        else:
            return _openai_error("prompt must be a string or a non-empty list of token ids")
        max_tokens = body.get("max_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _openai_error("max_tokens must be a positive integer")
        limit = twin.engine.profile.max_model_len
        if prompt_tokens + max_tokens > limit:
            return _openai_error(
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                f"messages, {max_tokens} in the completion)."
            )
        rid = twin.submit(prompt_tokens, max_tokens)
        if twin.engine.state[rid] == REJECTED:
            return _openai_error("request rejected")
        request_id = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens,
            "total_tokens": prompt_tokens + max_tokens,
        }

        def text(n: int, start: int) -> str:
            return "".join(f" t{(rid * 31 + start + i) % 1000}" for i in range(n))

        if not body.get("stream"):
            async for _ in twin.tokens(rid):
                pass
            return JSONResponse(
                {
                    "id": request_id,
                    "object": "text_completion",
                    "created": created,
                    "model": twin.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "text": text(max_tokens, 0),
                            "logprobs": None,
                            "finish_reason": "length",
                            "stop_reason": None,
                        }
                    ],
                    "usage": usage,
                }
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def events() -> AsyncIterator[str]:
            done = 0
            async for n in twin.tokens(rid):
                done += n
                finish = "length" if done >= max_tokens else None
                chunk = {
                    "id": request_id,
                    "object": "text_completion",
                    "created": created,
                    "model": twin.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "text": text(n, done - n),
                            "logprobs": None,
                            "finish_reason": finish,
                            "stop_reason": None,
                        }
                    ],
                }
                yield f"data: {json.dumps(chunk)}\n\n"
            if include_usage:
                chunk = {
                    "id": request_id,
                    "object": "text_completion",
                    "created": created,
                    "model": twin.model_name,
                    "choices": [],
                    "usage": usage,
                }
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route(LIMITS_PATH, limits, methods=["GET", "PUT"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


# ---------------------------------------------------------------------------------------------- hosting
@dataclass
class Hosted:
    twins: list[TwinEngine]
    ports: list[int]
    host: str = "127.0.0.1"

    @property
    def base_urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.ports]


async def serve(
    twins: Sequence[TwinEngine],
    ports: Sequence[int],
    host: str = "127.0.0.1",
    started: threading.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve each engine on its port in this event loop until `stop` is set (or forever)."""
    servers = [
        uvicorn.Server(
            uvicorn.Config(
                build_app(t), host=host, port=p, log_level="warning", access_log=False, lifespan="off"
            )
        )
        for t, p in zip(twins, ports, strict=True)
    ]
    for twin in twins:
        twin.started = time.monotonic()
        twin._progress = asyncio.Event()
        twin._wake = asyncio.Event()
        twin.lock = asyncio.Lock()
    drivers = [asyncio.create_task(t.drive()) for t in twins]
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    for _ in range(3000):  # uvicorn exposes no "started" event
        if all(s.started for s in servers):
            break
        await asyncio.sleep(0.01)
    if started is not None:
        started.set()
    try:
        if stop is None:
            await asyncio.gather(*tasks)
        else:
            await stop.wait()
    finally:
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        for d in drivers:
            d.cancel()
        await asyncio.gather(*drivers, return_exceptions=True)


@contextlib.contextmanager
def hosted(
    profile: EngineProfile,
    engines: int = 1,
    model_name: str = "twin",
    initial_cap: int | None = None,
    ports: Sequence[int] | None = None,
) -> Iterator[Hosted]:
    """Host `engines` twins in a background thread (own event loop) on free ports; for tests and demos."""
    import socket

    def free_port() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
            return port

    chosen = list(ports) if ports is not None else [free_port() for _ in range(engines)]
    twins = [TwinEngine(profile, model_name, i, initial_cap, seed=i) for i in range(engines)]
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop_holder: dict[str, asyncio.Event] = {}

    def runner() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            stop_holder["stop"] = asyncio.Event()
            await serve(twins, chosen, started=started, stop=stop_holder["stop"])

        loop.run_until_complete(main())

    thread = threading.Thread(target=runner, name="governor-twin", daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("twin servers did not start")
    try:
        yield Hosted(twins, chosen)
    finally:
        loop.call_soon_threadsafe(stop_holder["stop"].set)
        thread.join(30)
