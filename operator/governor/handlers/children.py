"""Kopf handlers: an InferenceService's children, its status from them, and drift repair.

Thin on purpose: each handler hands the object to the reconcile service (governor.services.reconcile),
which parses it, builds the children (pure), applies them through the one API adapter and reports status.

* create / update / resume of an InferenceService → reconcile every child, then status.
* a child (found by the ``governor.vllm.ai/inferenceservice`` label) modified or deleted by hand → the same
  reconcile for its owner, found in a Kopf index (no LIST calls): the edit is reverted, a deleted child is
  re-created. Deployment changes also refresh Ready/Progressing/Degraded.
* an invalid spec → condition ``Invalid`` with a message naming each field, a Warning Event, and
  ``kopf.PermanentError`` (no retries until the spec changes again; the operator keeps running).
* every RESYNC_S, an InferenceService that is still behind (status.observedGeneration is not its
  generation, or a child it had is missing from the child index) → the same reconcile (see ``resync``).
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


# The indices are async (trivial, non-blocking): Kopf runs a sync handler in a thread, and at hundreds of
# objects ticking every 5 s the thread hops of the index updates cost the operator ~10 % of its CPU (py-spy).
@kopf.index(*ISVC)
async def inferenceservices(
    namespace: str | None,
    name: str,
    body: kopf.Body,
    **_: Any,
) -> dict[tuple[str, str], Any]:
    """(namespace, name) → the object, for child events to find their owner without a LIST."""
    return {(namespace or "", name): copy.deepcopy(dict(body))}


@kopf.index("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.index("v1", "services", labels=CHILD_LABELS)
@kopf.index("v1", "secrets", labels=CHILD_LABELS)
@kopf.index("policy", "v1", "poddisruptionbudgets", labels=CHILD_LABELS)
async def children_present(
    namespace: str | None,
    labels: Mapping[str, str],
    resource: kopf.Resource,
    **_: Any,
) -> dict[tuple[str, str], str]:
    """(namespace, owner) → the kinds of its children that exist (from the watches Kopf keeps anyway)."""
    return {(namespace or "", labels.get(builders.LABEL_OWNER, "")): resource.kind or resource.plural}


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
    type: str,
    labels: Mapping[str, str],
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    inferenceservices: kopf.Index[tuple[str, str], Any] | None = None,
    **_: Any,
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


RESYNC_S = 10.0
INDEXED_KINDS = frozenset({"Deployment", "Service", "Secret", "PodDisruptionBudget"})  # children_present


# Why a timer: when Kopf's own write for an event is refused (its finalizer or progress patch gets a 409 or a
# 500 past its retries), Kopf throttles the object and drops that event; its handlers are not retried until
# the object changes again, and a new object nobody edits would never get its children. Kopf has no setting
# that re-queues the dropped event (``settings.queueing.error_delays`` only spaces out the throttling), while
# timers, like daemons, are spawned before Kopf's first patch of the object, so this one runs even when that
# patch failed. It is cheap when all is well: it reads the object Kopf already holds and the child index, and
# writes nothing. When it does reconcile, the status write is a new event, on which Kopf retries its own
# patch (the finalizer). ``idle``: never while the object is being edited (its handlers are at work then).
@kopf.timer(*ISVC, interval=RESYNC_S, idle=RESYNC_S)
async def resync(
    body: kopf.Body,
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    logger: kopf.Logger,
    children_present: kopf.Index[tuple[str, str], str] | None = None,
    **_: Any,
) -> None:
    if body.metadata.get("deletionTimestamp"):
        return
    key = (namespace or "", name)
    had = memo.reconciler.managed.get(key)
    present = set(children_present.get(key, [])) if children_present is not None else set()
    stale = (body.get("status") or {}).get("observedGeneration") != body.metadata.get("generation")
    missing = sorted((had & INDEXED_KINDS) - present) if had is not None else []
    if not stale and not missing:
        return
    lock = memo.reconciler.locks.get(key)
    if lock is not None and lock.locked():
        return  # a reconcile is at work on it (a slow create, at hundreds of objects): it reports status
    logger.info(f"Resync: {'status behind the spec' if stale else 'missing ' + ', '.join(missing)}")
    try:
        await memo.reconciler.reconcile(copy.deepcopy(dict(body)), trigger="resync")
    except (kopf.PermanentError, kopf.TemporaryError) as error:
        logger.warning(f"Resync failed, next in {RESYNC_S:.0f} s: {error}")
