"""Kopf handlers: an InferenceService's children, its status from them, and drift repair.

Thin on purpose: each handler hands the object to the reconcile service (governor.services.reconcile),
which parses it, builds the children (pure), applies them through the one API adapter and reports status.

* create / update / resume of an InferenceService → reconcile every child, then status.
* a child (found by the ``governor.vllm.ai/inferenceservice`` label) modified or deleted by hand → the same
  reconcile for its owner, found in a Kopf index (no LIST calls): the edit is reverted, a deleted child is
  re-created. Deployment changes also refresh Ready/Progressing/Degraded.
* an invalid spec → condition ``Invalid`` with a message naming each field, a Warning Event, and
  ``kopf.PermanentError`` (no retries until the spec changes again; the operator keeps running).
* deletion → nothing to delete by hand (children carry owner references, the garbage collector removes
  them); the handler releases the finalizer once the bookkeeping is done.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kopf

from governor.core import builders
from governor.core import spec as api

ISVC = (api.GROUP, api.VERSION, api.PLURAL)
CHILD_LABELS = {builders.LABEL_OWNER: kopf.PRESENT}


@kopf.index(*ISVC)
def inferenceservices(
    namespace: str | None, name: str, body: kopf.Body, **_: Any,
) -> dict[tuple[str, str], Any]:
    """(namespace, name) → the object, for child events to find their owner without a LIST."""
    return {(namespace or "", name): copy.deepcopy(dict(body))}


@kopf.on.resume(*ISVC)
@kopf.on.create(*ISVC)
@kopf.on.update(*ISVC)
async def reconcile_inferenceservice(body: kopf.Body, reason: str, memo: kopf.Memo, **_: Any) -> None:
    await memo.reconciler.reconcile(dict(body), trigger=str(reason))


@kopf.on.delete(*ISVC)
def release(name: str, namespace: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    memo.reconciler.release(namespace or "", name)
    logger.info("Released; the garbage collector removes the children through their owner references.")


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event("v1", "services", labels=CHILD_LABELS)
@kopf.on.event("v1", "secrets", labels=CHILD_LABELS)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=CHILD_LABELS)
async def child_changed(
    type: str, labels: Mapping[str, str], namespace: str | None, memo: kopf.Memo, logger: kopf.Logger,
    inferenceservices: kopf.Index[tuple[str, str], Any] | None = None, **_: Any,
) -> None:
    """A child was edited or deleted (by hand, or its status moved): bring it back to the spec."""
    if type not in ("MODIFIED", "DELETED"):
        return  # ADDED: our own create, or the initial listing (the resume handler covers that)
    owner = (namespace or "", labels.get(builders.LABEL_OWNER, ""))
    store = inferenceservices.get(owner) if inferenceservices is not None else None
    if not store:
        return
    body = next(iter(store))
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return
    try:
        await memo.reconciler.reconcile(body, trigger="child")
    except (kopf.PermanentError, kopf.TemporaryError) as error:
        logger.debug(f"Child reconcile of {owner} deferred: {error}")
