"""Kopf: the operator's set-up and tear-down: settings, the cluster login, and the long-lived context.

A startup handler puts the operator's clients and state (`OperatorContext`: the signal hub, the engines'
admin client, the replica writer, reconcile locks) into Kopf's memo, where every handler finds it; cleanup
closes them. Nothing long-lived sits in a module global, so each operator run (and each test) starts clean.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from governor.adapters import kube
from governor.core import spec as api
from governor.services.governed import OperatorContext
from governor.services.reconcile import Reconciler

EXPLICIT_CONNECTION = "kube_connection"  # memo key: a kube.Connection given before Kopf starts
STATUS_REFRESH = "status_refresh_ticks"  # memo key: `governor operator --status-refresh-ticks`


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Kopf keeps its bookkeeping in our annotations (not in status, which users read)."""
    settings.persistence.finalizer = f"{api.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=api.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=api.GROUP)
    settings.posting.level = logging.INFO
    # API faults (measured in tests/reliability, table in docs/reliability.md).
    # A request the API server does not answer in 20 s is abandoned and retried (Kopf's default, 5 min,
    # would freeze an object's handling that long); real requests answer in well under a second.
    settings.networking.request_timeout = 20.0
    settings.networking.connect_timeout = 5.0  # a dead endpoint fails fast and goes to the backoffs below
    # 5xx answers and connection errors are retried after these delays (41 s in all): long enough to ride
    # out an API server restart, short enough that a handler is not stuck behind one request.
    settings.networking.error_backoffs = (0.5, 1, 2, 4, 8, 10, 15)
    # Watches: the server closes each stream after 5 min and the client gives up 1 min later, so a
    # stream silently lost (a proxy, a half-open TCP connection) is replaced without waiting for events.
    settings.watching.server_timeout = 300.0
    settings.watching.client_timeout = 360.0
    settings.watching.connect_timeout = 5.0
    # A cut stream is re-opened at once from its last resourceVersion (0.5 s, not 0.1 s: a failing API
    # server is not hammered by every watch at 10 Hz).
    settings.watching.reconnect_backoff = 0.5
    # Errors inside Kopf's own event processing (e.g. its finalizer patch refused): Kopf's default
    # throttling, kept, but capped at 1 min instead of 10 so an object recovers soon after the API does.
    # Kopf drops the event that failed so; the resync timer (handlers.children.resync) reconciles the object.
    settings.queueing.error_delays = (1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 60)
    # A handler that fails with an unexpected error (not kopf.TemporaryError) is retried in 10 s, not 60 s.
    settings.execution.default_backoff = 10.0
    # Peering (``governor operator --peering NAME``): a replica that stops touching the peering object is
    # taken over by the next-highest one after this long (Kopf's default is 60 s).
    settings.peering.lifetime = 15


@kopf.on.startup()
def create_context(memo: kopf.Memo, **_: Any) -> None:
    """The context, with an unconnected API client: Kopf runs the startup handlers before it logs in."""
    ctx = OperatorContext(kube=kube.Kube())
    ctx.status_refresh_ticks = memo.get(STATUS_REFRESH, ctx.status_refresh_ticks)
    memo.governor = ctx
    memo.reconciler = Reconciler(ctx.kube)


@kopf.on.login()
async def login(memo: kopf.Memo, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """One notion of the cluster for Kopf and the operator's API client (``memo.governor.kube``).

    With an explicit connection in the memo (:func:`operator_memo`: tests, ``governor operator --server``)
    Kopf uses that server; otherwise the in-cluster service account or the kubeconfig. Kopf calls this again
    when the API refuses its credentials; the client then follows the new ones.
    """
    ctx: OperatorContext = memo.governor
    explicit: kube.Connection | None = memo.get(EXPLICIT_CONNECTION)
    if explicit is not None:
        await ctx.kube.connect(explicit)
        return kopf.ConnectionInfo(
            server=explicit.server,
            token=explicit.token,
            insecure=explicit.insecure,
            ca_path=explicit.ca_path,
            ca_data=explicit.ca_data,
            certificate_path=explicit.cert_path,
            certificate_data=explicit.cert_data,
            private_key_path=explicit.key_path,
            private_key_data=explicit.key_data,
        )
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(
        **kwargs
    ) or kopf.login_with_kubeconfig(**kwargs)
    if info is not None:
        await ctx.kube.connect(
            kube.Connection(
                info.server,
                token=info.token,
                ca_path=_text(info.ca_path),
                ca_data=info.ca_data,
                insecure=bool(info.insecure),
                cert_path=_text(info.certificate_path),
                cert_data=info.certificate_data,
                key_path=_text(info.private_key_path),
                key_data=info.private_key_data,
            )
        )
    return info


def _text(path: Any) -> str | None:
    return None if path is None else str(path)


def operator_memo(
    connection: kube.Connection | None = None, status_refresh_ticks: int | None = None
) -> kopf.Memo:
    """The memo to start Kopf with (``kopf.operator(memo=...)``): an explicit connection, if any, for both
    Kopf and the operator's API client, and the loop's status refresh (governor.core.status)."""
    memo = kopf.Memo()
    if connection is not None:
        memo[EXPLICIT_CONNECTION] = connection
    if status_refresh_ticks is not None:
        if status_refresh_ticks < 1:
            raise ValueError(f"status_refresh_ticks must be at least 1, not {status_refresh_ticks}")
        memo[STATUS_REFRESH] = status_refresh_ticks
    return memo


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext | None = memo.get("governor")
    if ctx is not None:
        await ctx.aclose()  # the API client with the others
