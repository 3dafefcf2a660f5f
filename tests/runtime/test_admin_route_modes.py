"""The admin route's auth modes, which the shared engine (started with a token) cannot show: no token
configured (503), and the explicit unauthenticated local mode. The route and the plugin's engine-side
functions are the real ones; the engine behind them is a stand-in holding a scheduler's two attributes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from governor_runtime import auth, plugin
from governor_runtime.endpoint import PATH, Governor, GovernorAdminPlugin, register, runtime_metrics
from vllm.plugins.endpoint_plugins.interface import EndpointPlugin


def stand_in_core() -> Any:
    config = SimpleNamespace(
        max_num_seqs=32,
        max_num_scheduled_tokens=None,
        max_num_batched_tokens=2048,
        enable_chunked_prefill=True,
    )
    return SimpleNamespace(
        engine_index=0,
        scheduler=SimpleNamespace(max_num_active_reqs=16, max_num_scheduled_tokens=2048),
        vllm_config=SimpleNamespace(
            scheduler_config=config, model_config=SimpleNamespace(max_model_len=2048)
        ),
    )


@pytest.fixture
async def route(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    for name in (auth.TOKEN_ENV, auth.TOKEN_FILE_ENV, auth.ALLOW_UNAUTHENTICATED_ENV):
        monkeypatch.delenv(name, raising=False)
    core = stand_in_core()
    methods = {"governor_get_limits": plugin.get_limits, "governor_set_limits": plugin.set_limits}

    async def call_all(method: str, *args: Any) -> list[Any]:
        return [methods[method](core, *args)]

    app = FastAPI()
    GovernorAdminPlugin().attach_router(app)
    app.state.governor = Governor(call_all, "m", runtime_metrics(True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://route") as client:
        yield client, core


def test_the_entry_point_satisfies_vllms_endpoint_plugin_protocol() -> None:
    made = register()
    assert isinstance(made, EndpointPlugin)
    assert made.name == "governor_admin"


async def test_without_a_token_the_route_answers_503(route: tuple[httpx.AsyncClient, Any]) -> None:
    client, core = route
    for response in (await client.get(PATH), await client.put(PATH, json={"cap": 4})):
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "unavailable"
    assert core.scheduler.max_num_active_reqs == 16


async def test_unauthenticated_local_mode_must_be_asked_for(
    route: tuple[httpx.AsyncClient, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, core = route
    monkeypatch.setenv(auth.ALLOW_UNAUTHENTICATED_ENV, "1")
    response = await client.put(PATH, json={"cap": 4, "token_budget": 512})
    assert response.status_code == 200
    assert (response.json()["cap"], response.json()["token_budget"]) == (4, 512)
    assert (core.scheduler.max_num_active_reqs, core.scheduler.max_num_scheduled_tokens) == (4, 512)


async def test_a_token_file_is_read_at_each_request(
    route: tuple[httpx.AsyncClient, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    client, _ = route
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    monkeypatch.setenv(auth.TOKEN_FILE_ENV, str(token_file))
    assert (await client.get(PATH, headers={"Authorization": "Bearer first"})).status_code == 200
    token_file.write_text("rotated\n")
    assert (await client.get(PATH, headers={"Authorization": "Bearer first"})).status_code == 401
    assert (await client.get(PATH, headers={"Authorization": "Bearer rotated"})).status_code == 200


def test_the_engine_refuses_what_the_route_would_refuse() -> None:
    """The engine-side utility checks again (a change can reach it from another API server)."""
    core = stand_in_core()
    refused = plugin.set_limits(core, 33, None)
    assert refused["error"]["code"] == "above_ceiling"
    assert plugin.set_limits(core, 8, 4)["error"]["code"] == "invalid"
    assert core.scheduler.max_num_active_reqs == 16
    assert plugin.set_limits(core, 3, None)["error"] is None
    assert plugin.get_limits(core)["cap"] == core.scheduler.max_num_active_reqs == 3
