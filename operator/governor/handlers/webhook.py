"""Kopf: the Alertmanager webhook receiver's life (GOVERNOR_WEBHOOK_ENABLED), and its steps as Events.

The receiver itself is governor.services.alert_receiver; each step it takes goes to the operator's one
replica writer (in Kopf's memo, shared with the control loop), so an overload seen by both is one step.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from governor.core import spec as api
from governor.services.alert_receiver import Receiver, ReceiverConfig, start
from governor.services.governed import OperatorContext


@kopf.on.event(api.GROUP, api.VERSION, api.PLURAL)
async def announce_alert_step(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Each step the receiver recorded in status becomes an Event on the object.

    The receiver serves HTTP outside any object's Kopf task, where Kopf cannot post Events; the object's own
    watch stream can. The first sight of an object (e.g. after an operator restart) only remembers its step.
    Remembered per object: one value for all of them announced again on every event of another object. Async:
    it runs on every event of every object (each status write), and Kopf runs a sync handler in a thread.
    """
    step = (body.get("status") or {}).get("alertmanager", {}).get("lastStep") or {}
    announced = step.get("time")
    seen = memo.governor.alert_steps  # per object, forgotten when its control loop ends (OperatorContext)
    key = (body.metadata.namespace or "", body.metadata.name or "")
    if key not in seen:
        seen[key] = announced
        return
    if announced and seen[key] != announced:
        seen[key] = announced
        verb = "Out" if step.get("direction", 0) > 0 else "In"
        kopf.info(body, reason=f"AlertScale{verb}", message=str(step.get("message", "")))


@kopf.on.startup()
async def start_receiver(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    if os.environ.get("GOVERNOR_WEBHOOK_ENABLED", "false").lower() not in ("1", "true", "yes"):
        return
    config = ReceiverConfig.from_env()
    if not config.token:
        logger.warning("Alertmanager webhook: no token configured; it refuses every request with 503")
    ctx: OperatorContext = memo.governor
    memo.webhook_runner = await start(Receiver(config, ctx.replicas.request_scale, ctx.kube))
    logger.info(f"Alertmanager webhook listening on {config.host}:{config.port}/alertmanager")


@kopf.on.cleanup()
async def stop_receiver(memo: kopf.Memo, **_: Any) -> None:
    runner = memo.get("webhook_runner")
    if runner is not None:
        await runner.cleanup()
        memo.webhook_runner = None
