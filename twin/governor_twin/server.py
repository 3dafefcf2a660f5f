"""The twin in real time, behind the runtime's HTTP surface: the operator and Prometheus cannot tell it apart.

Per engine, on its own port:
- `POST /v1/completions` (OpenAI; token-id prompts, or text counted as whitespace-separated tokens;
  `max_tokens`, `stream`, `stream_options.include_usage`; output is generated until `max_tokens`, as with
  `ignore_eos`);
- `GET /metrics` with vLLM's metric names (governor_runtime.contract), labels `model_name` and `engine`,
  the buckets the runtime starts vLLM with, and the runtime's own `vllm_governor:*` series;
- `GET|PUT /governor/v1/limits`, the runtime's admin route: same auth (governor_runtime.auth), same bounds
  (governor_runtime.limits), same JSON and error shapes;
- `GET /health`, `GET /v1/models`.
One process can host many engines (`--engines N` on consecutive ports, one server routing by port), for
scale tests.

    python -m governor_twin serve --profile cpu_tiny_llama --engines 4 --port 8100 --initial-cap 16
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn
from governor_dev.ports import free_port
from governor_runtime import auth, contract
from governor_runtime.limits import Bounds, LimitsError, parse_change, resolve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from governor_twin.engine import REJECTED
from governor_twin.exposition import metrics_text
from governor_twin.live import TwinEngine
from governor_twin.profile import EngineProfile

__all__ = ["LIMITS_PATH", "Hosted", "TwinEngine", "build_app", "build_router", "hosted", "serve"]

LIMITS_PATH = contract.LIMITS_PATH


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


def _prompt_tokens(prompt: Any) -> int | str:
    """The prompt's length in tokens, or why it is refused."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        if len(prompt) != 1:
            return "the twin serves one prompt per request"
        prompt = prompt[0]
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) and prompt:
        return len(prompt)
    return "prompt must be a string or a non-empty list of token ids"


def _completion_request(body: Any, twin: TwinEngine) -> tuple[int, int] | JSONResponse:
    """(prompt tokens, max tokens) of a valid request, else vLLM's error answer."""
    if body.get("model") not in (None, twin.model_name):
        return _openai_error(f"The model `{body.get('model')}` does not exist.", 404)
    prompt_tokens = _prompt_tokens(body.get("prompt"))
    if isinstance(prompt_tokens, str):
        return _openai_error(prompt_tokens)
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
    return prompt_tokens, max_tokens


@dataclass
class _Completion:
    """One accepted completion request and the OpenAI shapes of its answer."""

    twin: TwinEngine
    rid: int
    prompt_tokens: int
    max_tokens: int
    request_id: str
    created: int

    def text(self, n: int, start: int) -> str:
        return "".join(f" t{(self.rid * 31 + start + i) % 1000}" for i in range(n))

    def usage(self) -> dict[str, int]:
        prompt, completion = self.prompt_tokens, self.max_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def envelope(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.twin.model_name,
            "choices": choices,
            **extra,
        }

    def choice(self, text: str, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

    async def whole(self) -> JSONResponse:
        async for _ in self.twin.tokens(self.rid):
            pass
        choice = self.choice(self.text(self.max_tokens, 0), "length")
        return JSONResponse(self.envelope([choice], usage=self.usage()))

    async def events(self, include_usage: bool) -> AsyncIterator[str]:
        done = 0
        async for n in self.twin.tokens(self.rid):
            done += n
            choice = self.choice(self.text(n, done - n), "length" if done >= self.max_tokens else None)
            yield f"data: {json.dumps(self.envelope([choice]))}\n\n"
        if include_usage:
            yield f"data: {json.dumps(self.envelope([], usage=self.usage()))}\n\n"
        yield "data: [DONE]\n\n"


@dataclass
class _Routes:
    """The runtime's HTTP surface for one twin engine."""

    twin: TwinEngine

    async def limits(self, request: Request) -> Response:
        if (refused := _authorize(request)) is not None:
            return refused
        if request.method == "GET":
            return JSONResponse(_limits_body(self.twin))
        try:
            change = parse_change(await request.body())
            e = self.twin.engine
            async with self.twin.lock:
                cap, budget = resolve(
                    Bounds(e.ceiling, e.token_budget_ceiling),
                    e.cap,
                    e.token_budget,
                    change.get("cap"),
                    change.get("token_budget"),
                )
                e.set_cap(cap)
                e.set_token_budget(budget)
        except LimitsError as bad:
            return _error(422, bad.code, bad.message)
        return JSONResponse(_limits_body(self.twin))

    async def metrics(self, request: Request) -> Response:
        media_type = "text/plain; version=0.0.4; charset=utf-8"
        return PlainTextResponse(metrics_text(self.twin), media_type=media_type)

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        model = {
            "id": self.twin.model_name,
            "object": "model",
            "owned_by": "governor-twin",
            "max_model_len": self.twin.engine.profile.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _openai_error("the body is not JSON")
        accepted = _completion_request(body, self.twin)
        if isinstance(accepted, JSONResponse):
            return accepted
        prompt_tokens, max_tokens = accepted
        rid = self.twin.submit(prompt_tokens, max_tokens)
        if self.twin.engine.state[rid] == REJECTED:
            return _openai_error("request rejected")
        completion = _Completion(
            self.twin, rid, prompt_tokens, max_tokens, f"cmpl-{uuid.uuid4().hex}", int(time.time())
        )
        if not body.get("stream"):
            return await completion.whole()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(completion.events(include_usage), media_type="text/event-stream")


def build_app(twin: TwinEngine) -> Starlette:
    routes = _Routes(twin)
    return Starlette(
        routes=[
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
            Route(LIMITS_PATH, routes.limits, methods=["GET", "PUT"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/v1/models", routes.models, methods=["GET"]),
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


def build_router(twins: Sequence[TwinEngine], ports: Sequence[int]) -> Any:
    """One ASGI app for many engines: the engine is the one whose port the connection arrived on."""
    apps = {port: build_app(twin) for twin, port in zip(twins, ports, strict=True)}

    async def route(scope: Any, receive: Any, send: Any) -> None:
        app = apps.get((scope.get("server") or ("", 0))[1])
        if app is None:
            await PlainTextResponse("no engine on this port", status_code=404)(scope, receive, send)
            return
        await app(scope, receive, send)

    return route


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    sock.set_inheritable(True)
    return sock


async def serve(
    twins: Sequence[TwinEngine],
    ports: Sequence[int],
    host: str = "127.0.0.1",
    started: threading.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve each engine on its port in this event loop until `stop` is set (or forever).

    One uvicorn server listens on every engine's socket (a thousand engines cost one server, not a
    thousand), and routes each connection by the local port it arrived on.
    """
    sockets = [_listen(host, p) for p in ports]
    server = uvicorn.Server(
        uvicorn.Config(
            build_router(twins, ports), log_level="warning", access_log=False, lifespan="off", backlog=256
        )
    )
    for twin in twins:
        twin.started = time.monotonic()
        twin._progress = asyncio.Event()
        twin._wake = asyncio.Event()
        twin.lock = asyncio.Lock()
    drivers = [asyncio.create_task(t.drive()) for t in twins]
    task = asyncio.create_task(server.serve(sockets=sockets))
    for _ in range(3000):  # uvicorn exposes no "started" event
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if started is not None:
        started.set()
    try:
        if stop is None:
            await task
        else:
            await stop.wait()
    finally:
        server.should_exit = True
        await asyncio.gather(task, return_exceptions=True)
        for d in drivers:
            d.cancel()
        await asyncio.gather(*drivers, return_exceptions=True)
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def hosted(
    profile: EngineProfile,
    engines: int = 1,
    model_name: str = "twin",
    initial_cap: int | None = None,
    ports: Sequence[int] | None = None,
) -> Iterator[Hosted]:
    """Host `engines` twins in a background thread (own event loop) on free ports; for tests and demos."""
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
