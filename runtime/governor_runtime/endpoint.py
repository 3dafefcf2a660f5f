"""Endpoint plugin (``vllm.endpoint_plugins``): the admin route ``GET``/``PUT /governor/v1/limits``.

vLLM 0.32 calls the entry point with no argument and expects an object with ``name``,
``required_tasks``, ``attach_router(app)`` and ``async init_state(engine_client, state, args)``. The route
reaches the engines through the utilities the general plugin installs (:mod:`governor_runtime.plugin`),
applies a change to every engine behind this server (data-parallel ranks) and answers with what each
engine now holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
from argparse import Namespace
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from governor_runtime import auth, contract, vllm_compat
from governor_runtime.limits import Bounds, LimitsError, parse_change, resolve
from governor_runtime.metrics import RuntimeMetrics

logger = logging.getLogger(__name__)

PATH = contract.LIMITS_PATH
PUBLIC_KEYS = ("engine", "cap", "ceiling", "token_budget", "token_budget_ceiling")
METRICS_INTERVAL_ENV = "GOVERNOR_METRICS_INTERVAL_S"

_metrics: RuntimeMetrics | None = None


def runtime_metrics(publish_counter: bool) -> RuntimeMetrics:
    """One set of series per process (prometheus_client refuses to register a name twice)."""
    global _metrics
    if _metrics is None:
        _metrics = RuntimeMetrics(publish_counter=publish_counter)
    return _metrics


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def limits_body(engines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The contract's shape: top-level values are the minimum over engines, then each engine's own."""
    listed = sorted(
        ({key: int(engine[key]) for key in PUBLIC_KEYS} for engine in engines), key=lambda e: e["engine"]
    )
    top = {key: min(engine[key] for engine in listed) for key in PUBLIC_KEYS if key != "engine"}
    return {**top, "engines": listed}


class Governor:
    """The route's state: how to reach the engines, and the metrics it keeps in step."""

    def __init__(
        self, call_all: Callable[..., Awaitable[list[Any]]], model_name: str, metrics: RuntimeMetrics
    ):
        self.call_all = call_all
        self.model_name = model_name
        self.metrics = metrics
        self.lock = asyncio.Lock()
        self.poller: asyncio.Task[None] | None = None
        self.known: list[dict[str, Any]] = []
        """What the engines held at the last answer: their bounds never change, their limits only here."""

    def _held(self, engines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.known = engines
        for engine in engines:
            self.metrics.publish_limits(self.model_name, engine)
        return engines

    async def limits(self) -> list[dict[str, Any]]:
        return self._held(await self.call_all(vllm_compat.GET_METHOD))

    async def change(self, cap: Any, token_budget: Any) -> list[dict[str, Any]]:
        """Apply a change to every engine, or to none: :class:`LimitsError` means nothing changed.

        The change is checked here against what the engines last held (so a bad request never reaches
        them), then each engine checks it again against what it holds now and applies it between two
        scheduler steps: one round trip. All engines hold the same limits, so they give the same verdict.
        """
        async with self.lock:
            for engine in self.known or await self.limits():
                bounds = Bounds(
                    engine["ceiling"], engine["token_budget_ceiling"], engine["min_token_budget_floor"]
                )
                resolve(bounds, engine["cap"], engine["token_budget"], cap, token_budget)
            engines = self._held(await self.call_all(vllm_compat.SET_METHOD, cap, token_budget))
        refused = [engine["error"] for engine in engines if engine.get("error")]
        if refused:
            if len(refused) < len(engines):
                logger.warning("governor: engines disagree on %s: %s", (cap, token_budget), engines)
            raise LimitsError(refused[0]["code"], refused[0]["message"])
        return engines

    async def refresh_metrics(self) -> None:
        engines: list[dict[str, Any]] = await self.call_all(vllm_compat.SNAPSHOT_METHOD)
        self.known = engines
        for engine in engines:
            self.metrics.publish_snapshot(self.model_name, engine)

    async def poll_metrics(self, interval_s: float) -> None:
        while True:
            try:
                await self.refresh_metrics()
            except asyncio.CancelledError:
                raise
            except Exception as failed:  # the engine may be starting or stopping; the next tick retries
                logger.debug("governor: metrics refresh failed: %s", failed)
            await asyncio.sleep(interval_s)


def _authorize(request: Request) -> JSONResponse | None:
    verdict = auth.check(auth.AuthConfig.from_env(), request.headers.get("authorization"))
    if verdict is auth.Verdict.ALLOWED:
        return None
    if verdict is auth.Verdict.UNCONFIGURED:
        return error(
            503,
            "unavailable",
            f"no admin token configured: set {auth.TOKEN_ENV} or {auth.TOKEN_FILE_ENV} "
            f"(or {auth.ALLOW_UNAUTHENTICATED_ENV}=1 for a local, unauthenticated mode)",
        )
    return error(401, "unauthorized", "missing or wrong bearer token")


def _governor(request: Request) -> Governor | None:
    governor: Governor | None = getattr(request.app.state, "governor", None)
    return governor


router = APIRouter()


@router.get(PATH)
async def get_limits(request: Request) -> JSONResponse:
    if (refused := _authorize(request)) is not None:
        return refused
    if (governor := _governor(request)) is None:
        return error(503, "unavailable", "this server has no engine")
    return JSONResponse(limits_body(await governor.limits()))


@router.put(PATH)
async def put_limits(request: Request) -> JSONResponse:
    if (refused := _authorize(request)) is not None:
        return refused
    if (governor := _governor(request)) is None:
        return error(503, "unavailable", "this server has no engine")
    try:
        change = parse_change(await request.body())
        engines = await governor.change(change.get("cap"), change.get("token_budget"))
    except LimitsError as bad:
        return error(422, bad.code, bad.message)
    return JSONResponse(limits_body(engines))


class GovernorAdminPlugin:
    name = "governor_admin"
    required_tasks = None  # any server with an engine; the engine-less render server answers 503

    def attach_router(self, app: FastAPI) -> None:
        app.include_router(router)

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        if engine_client is None:
            return
        vllm_compat.require_supported()
        first_server = vllm_compat.client_index(engine_client) == 0
        model_name = str(engine_client.model_config.served_model_name)
        governor = Governor(
            vllm_compat.utility_caller(engine_client), model_name, runtime_metrics(first_server)
        )
        state.governor = governor
        config = auth.AuthConfig.from_env()
        if config.token is None:
            logger.warning(
                "governor: no admin token (%s / %s); %s answers %s",
                auth.TOKEN_ENV,
                auth.TOKEN_FILE_ENV,
                PATH,
                "unauthenticated" if config.allow_unauthenticated else "503",
            )
        try:
            await governor.refresh_metrics()
        except Exception as failed:
            raise RuntimeError(
                "governor: the engine has no governor utilities; is governor_limits named in VLLM_PLUGINS?"
            ) from failed
        interval_s = float(os.environ.get(METRICS_INTERVAL_ENV, "1.0"))
        if first_server and interval_s > 0:
            # Only API server 0 polls: in multiprocess mode the counter would otherwise be counted once per
            # server.
            governor.poller = asyncio.get_running_loop().create_task(governor.poll_metrics(interval_s))


def register() -> GovernorAdminPlugin:
    """Entry point ``governor_runtime.endpoint:register``: vLLM calls it with no argument."""
    return GovernorAdminPlugin()
