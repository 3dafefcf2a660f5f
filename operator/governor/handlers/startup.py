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


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Kopf keeps its bookkeeping in our annotations (not in status, which users read)."""
    settings.persistence.finalizer = f"{api.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=api.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=api.GROUP)
    settings.posting.level = logging.INFO


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """One notion of the cluster for Kopf and governor.adapters.kube.

    When governor.adapters.kube was configured explicitly before start (tests, ``governor operator
    --server``), Kopf
    uses that server; otherwise the in-cluster service account or the kubeconfig, handed to
    governor.adapters.kube.
    """
    explicit = kube.explicit_connection()
    if explicit is not None:
        return kopf.ConnectionInfo(server=explicit.server, token=explicit.token, insecure=explicit.insecure)
    info: kopf.ConnectionInfo | None = (
        kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    )
    if info is not None:
        kube.configure(
            info.server, token=info.token, ca_path=_text(info.ca_path), ca_data=info.ca_data,
            insecure=bool(info.insecure), cert_path=_text(info.certificate_path),
            cert_data=info.certificate_data, key_path=_text(info.private_key_path),
            key_data=info.private_key_data, explicit=False,
        )
    return info


def _text(path: Any) -> str | None:
    return None if path is None else str(path)


@kopf.on.startup()
def create_context(memo: kopf.Memo, **_: Any) -> None:
    memo.governor = OperatorContext()


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext | None = memo.get("governor")
    if ctx is not None:
        await ctx.aclose()
    await kube.close_implicit()
