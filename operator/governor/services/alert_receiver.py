"""The Alertmanager webhook receiver: an aiohttp server (started by governor.handlers.webhook).

POST /alertmanager (Alertmanager's webhook_config url) — authenticated with a bearer token (or Basic auth
whose password is the token) from GOVERNOR_WEBHOOK_TOKEN or the file GOVERNOR_WEBHOOK_TOKEN_FILE (the chart
mounts a Secret there). Each step governor.core.notifications.decide asks for goes to the replica planner
(governor.services.replicas.request_scale, the only writer of replicas); each is recorded in
status.alertmanager
and becomes an Event on the InferenceService. Refusals change nothing and answer JSON
{"error": {"code", "message"}}: 401 wrong or missing credentials, 400/415/422 a bad payload, 503 no token.
GET /healthz answers 200.

Environment: GOVERNOR_WEBHOOK_ENABLED (default false; the chart sets true), GOVERNOR_WEBHOOK_PORT (8081),
GOVERNOR_WEBHOOK_HOST (0.0.0.0), GOVERNOR_WEBHOOK_REPEAT_AFTER_SECONDS (600).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from governor.adapters.kube import Kube
from governor.core import notifications as alerts
from governor.core import spec as api
from governor.core import status

logger = logging.getLogger(__name__)

# (namespace, name, direction, source, reason) -> the planner's answer (its reason is reported back).
ScaleRequester = Callable[[str, str, int, str, str], Awaitable[Any]]


@dataclass
class ReceiverConfig:
    token: str
    port: int = 8081
    host: str = "0.0.0.0"
    repeat_after_s: float = 600.0
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ReceiverConfig:
        token = env.get("GOVERNOR_WEBHOOK_TOKEN", "")
        token_file = env.get("GOVERNOR_WEBHOOK_TOKEN_FILE")
        if not token and token_file:
            token = Path(token_file).read_text().strip()
        return cls(
            token=token,
            port=int(env.get("GOVERNOR_WEBHOOK_PORT", "8081")),
            host=env.get("GOVERNOR_WEBHOOK_HOST", "0.0.0.0"),
            repeat_after_s=float(env.get("GOVERNOR_WEBHOOK_REPEAT_AFTER_SECONDS", "600")),
        )


@dataclass
class Receiver:
    config: ReceiverConfig
    request_scale: ScaleRequester
    kube: Kube
    state: alerts.ReceiverState = field(default_factory=alerts.ReceiverState)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            if not self.config.token:
                raise alerts.WebhookError(
                    503,
                    "unconfigured",
                    "no webhook token configured: every request "
                    "is refused (set GOVERNOR_WEBHOOK_TOKEN or _TOKEN_FILE)",
                )
            if not alerts.authorized(request.headers.get("Authorization"), self.config.token):
                raise alerts.WebhookError(
                    401,
                    "unauthorized",
                    "missing or wrong credentials (Authorization: Bearer <token> from the webhook Secret)",
                )
            body = await request.content.read(alerts.MAX_BODY_BYTES + 1)
            notification = alerts.parse(body, request.headers.get("Content-Type"))
        except alerts.WebhookError as error:
            logger.warning("Alertmanager webhook refused: %s", error.message)
            return web.json_response(error.body(), status=error.status)
        async with self.lock:  # notifications are decided one at a time: the state is shared
            decision = alerts.decide(
                self.state, notification, self.config.clock(), self.config.repeat_after_s
            )
            self.state = decision.state
            results = [await self._apply(step) for step in decision.steps]
        return web.json_response(
            {
                "receiver": notification.receiver,
                "steps": results,
                "skipped": [{"alert": s.alertname, "why": s.why} for s in decision.skipped],
            }
        )

    async def _apply(self, step: alerts.Step) -> dict[str, Any]:
        result: dict[str, Any] = {
            "namespace": step.namespace,
            "name": step.name,
            "direction": step.direction,
            "reason": step.reason,
        }
        body = await self.kube.get_inferenceservice(step.namespace, step.name)
        refusal = _refusal(body)
        if refusal:
            result["outcome"] = refusal
            return result
        assert body is not None
        try:
            answer = await self.request_scale(
                step.namespace, step.name, step.direction, alerts.SOURCE, step.reason
            )
        except Exception as error:  # the planner's failure is reported, not raised into Alertmanager's retry
            logger.exception("replica planner failed for %s/%s", step.namespace, step.name)
            result["outcome"] = f"error: {error}"
            return result
        outcome = "ignored: not autoscaled" if answer is None else str(getattr(answer, "reason", answer))
        result["outcome"] = outcome
        verb = "out" if step.direction > 0 else "in"
        await self.kube.update_inferenceservice_status(
            step.namespace,
            step.name,
            lambda _: {
                "alertmanager": {
                    "lastStep": {
                        "time": status.now_iso(),
                        "direction": step.direction,
                        "reason": step.reason,
                        "alerts": list(step.alerts),
                        "outcome": outcome,
                        "message": f"Alertmanager asked to scale {verb} by one ({step.reason}): {outcome}",
                    },
                }
            },
        )
        return result


def _refusal(body: Mapping[str, Any] | None) -> str | None:
    if body is None:
        return "ignored: no such InferenceService"
    try:
        scaling = api.parse_spec(body.get("spec")).autoscaling
    except (ValidationError, ValueError):
        return "ignored: the InferenceService's spec is invalid"
    if not scaling.enabled or scaling.mode != "planner":
        return "ignored: autoscaling is off or driven externally (HPA/KEDA)"
    if not scaling.alert_driven:
        return "ignored: autoscaling.alertDriven is false"
    return None


def build_app(receiver: Receiver) -> web.Application:
    app = web.Application(client_max_size=alerts.MAX_BODY_BYTES + 1024)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_post("/alertmanager", receiver.handle)
    app.router.add_get("/healthz", healthz)
    return app


async def start(receiver: Receiver) -> web.AppRunner:
    runner = web.AppRunner(build_app(receiver), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, receiver.config.host, receiver.config.port).start()
    return runner
