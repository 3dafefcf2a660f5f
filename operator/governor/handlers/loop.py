"""Kopf: the control loop, one daemon per InferenceService, ticking the control step on a fixed grid.

Every tick (spec.adaptive.tickSeconds, default 5 s) the daemon hands the InferenceService's ready pods and
the admin token (from Kopf indices, never a LIST or GET per tick) to governor.services.governed.govern:
the control step (governor.services.control) reads the signals, decides with the law from the state kept in
status.law, holds the cap on every ready pod, hands a replica wish to the replica writer, and writes status
when something changed (and every few ticks otherwise: governor.core.status.loop_write_due).
Without metrics the cap is held (the law's "no-data" rule) and MetricsAvailable turns False.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from governor.adapters import kube, opmetrics
from governor.core import builders
from governor.core import spec as api
from governor.core.law import LawState
from governor.services.control import on_grid
from governor.services.governed import OperatorContext, PodInfo, govern, law_config, resume

ISVC = (api.GROUP, api.VERSION, api.PLURAL)
DEFAULT_TICK_S = 5.0


@kopf.index("v1", "pods", labels={builders.LABEL_OWNER: kopf.PRESENT})
async def governed_pods(  # async: no thread hop per pod event (see handlers.children)
    namespace: str | None,
    name: str,
    uid: str | None,
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    **_: Any,
) -> dict[tuple[str, str], PodInfo]:
    port = api.HTTP_PORT
    for container in spec.get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == "http" and p.get("containerPort"):
                port = int(p["containerPort"])
    ip = status.get("podIP")
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])
    info = PodInfo(
        name=name,
        uid=uid or name,
        url=f"http://{ip}:{port}" if ip else None,
        ready=conditions.get("Ready") == "True",
        restarts=restarts,
    )
    return {(namespace or "", labels[builders.LABEL_OWNER]): info}


@kopf.index("v1", "secrets", labels={builders.LABEL_OWNER: kopf.PRESENT})
async def admin_tokens(
    namespace: str | None,
    name: str,
    labels: Mapping[str, str],
    body: kopf.Body,
    **_: Any,
) -> dict[tuple[str, str], str]:
    """(namespace, owner) → the engines' admin token, from the Secret watch Kopf keeps anyway: a tick reads
    no Secret (at 1,000 objects the once-a-minute reads were a quarter of the operator's API calls)."""
    owner = labels[builders.LABEL_OWNER]
    if name != builders.names(owner).secret:
        return {}
    token = kube.secret_value(dict(body), builders.TOKEN_KEY)
    return {(namespace or "", owner): token} if token else {}


@kopf.daemon(*ISVC, cancellation_timeout=10.0, initial_delay=1.0)
async def control_loop(
    name: str,
    namespace: str | None,
    body: kopf.Body,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    governed_pods: kopf.Index[tuple[str, str], PodInfo] | None = None,
    admin_tokens: kopf.Index[tuple[str, str], str] | None = None,
    **_: Any,
) -> None:
    key = (namespace or "", name)
    ctx: OperatorContext = memo.governor
    state: LawState | None = None

    async def tick() -> float:
        nonlocal state
        try:
            spec = api.parse_spec(body.get("spec"))
            resolved = spec.resolve()
        except ValidationError:
            return DEFAULT_TICK_S  # the children handler reports Invalid; the loop waits for a valid spec
        cfg = law_config(spec, resolved)
        state = state or resume(body, cfg)
        indexed: Iterable[PodInfo] = governed_pods.get(key, []) if governed_pods is not None else []
        pods = [p for p in indexed if p.url and p.ready]
        try:
            if pods:  # no ready pod: nothing to govern, and nothing new to report
                token = next(iter(admin_tokens.get(key, [])), None) if admin_tokens is not None else None
                state = await govern(ctx, body, spec, resolved, cfg, state, pods, logger, token)
        except (kube.KubeError, OSError) as exc:
            logger.warning(f"control loop tick failed, retrying next tick: {exc}")
        return spec.adaptive.tick_seconds

    try:
        await on_grid(tick, stopped.wait, lambda: bool(stopped))
    finally:
        ctx.forget(key)
        opmetrics.forget_service(*key)
