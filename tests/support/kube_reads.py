"""The read side of the test API server: discovery, OpenAPI, list, watch and get as kubectl and Kopf use them.

kmock 0.8's emulator answers a list with neither ``kind`` nor a real ``resourceVersion`` and starts every
watch by replaying all objects as ADDED, whatever ``resourceVersion`` the client asked to resume from; an
event written between a client's list and its watch was lost. This layer does what a real server does:

* a list is a ``<Kind>List`` with ``apiVersion`` and the store's current ``resourceVersion``;
* a watch from a ``resourceVersion`` streams exactly the events after it (kept per resource, in order), then
  the live ones, with no gap and no stale replay; a watch without one starts with the current objects as
  ADDED; a version older than the kept history answers an ERROR event with 410 Gone (Kopf re-lists);
* ``labelSelector`` and ``fieldSelector`` filter lists and watches (kubectl describe finds Events by
  ``involvedObject``, kubectl delete waits on ``metadata.name``);
* Tables for ``kubectl get`` (tests/support/kube_tables.py), discovery and OpenAPI v3 documents for kubectl
  (tests/support/kube_openapi.py), Kubernetes-worded NotFound errors.
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import aiobus, enums, k8s, k8s_dicts, references, rendering

from tests.support import kube_openapi, kube_tables
from tests.support.kube_selectors import selected

HISTORY_LIMIT = 20_000  # events kept per resource for watches that resume from a resourceVersion
SERVED = {  # what kmock's own fallback reactions serve for each Kubernetes verb on a resource
    enums.action.LIST: "_serve_list",
    enums.action.WATCH: "_serve_watch",
    enums.action.FETCH: "_serve_fetch",
    enums.action.CREATE: "_serve_create",
    enums.action.UPDATE: "_serve_update",
    enums.action.DELETE: "_serve_delete",
}


@attrs.mutable(weakref_slot=True)
class HistoryBus(aiobus.Bus[Any]):
    """kmock's event bus, also keeping each event with its object's resourceVersion for resuming watches."""

    history: collections.deque[tuple[int, dict[str, Any]]] = attrs.field(
        factory=lambda: collections.deque(maxlen=HISTORY_LIMIT)
    )
    forgotten: int = 0  # the newest resourceVersion no longer in ``history``

    async def put(self, *items: Any) -> None:
        for item in items:
            if len(self.history) == self.history.maxlen:
                self.forgotten = self.history[0][0]
            version = (item.get("object", {}).get("metadata") or {}).get("resourceVersion", "0")
            self.history.append((int(version) if str(version).isdigit() else 0, copy.deepcopy(item)))
        await super().put(*items)


def not_found(resource: references.resource, name: str | None) -> k8s.KubernetesError:
    qualified = f"{resource.plural}.{resource.group}" if resource.group else str(resource.plural)
    return k8s.KubernetesError(
        status=404,
        reason="NotFound",
        message=f'{qualified} "{name}" not found',
        details={"name": name, "group": resource.group, "kind": resource.plural},
    )


class DirectDispatch(kmock.RawHandler):
    """kmock picks a request's answer by testing it against every reaction's filters in priority order, its
    own fallbacks included (paths as regular expressions, rebuilt per request): over half of the emulator's
    CPU at 300 objects (py-spy). While no test added a reaction of its own, a Kubernetes verb on a resource
    goes straight to the method kmock's fallback for that verb serves, rendered the same way. Placed after
    kmock's KubernetesEmulator in the MRO, so its bookkeeping of writes runs first, as before."""

    __slots__ = ()
    _builtin_reactions: int  # kmock's own reactions, counted once they are registered

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        plural = request.resource.plural if request.resource is not None else None
        serve = SERVED.get(request.action) if plural and request.action else None
        if serve is None or len(self._payloads) != self._builtin_reactions:
            return await super()._handle(request)
        return await rendering.Response(payload=getattr(self, serve))(request)


@attrs.define(kw_only=True)
class ReadingEmulator(kmock.KubernetesEmulator, DirectDispatch):
    _buses: dict[references.resource, HistoryBus] = attrs.field(  # type: ignore[assignment]  # a subclass
        factory=lambda: collections.defaultdict(HistoryBus), init=False
    )
    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)  # one write at a time, in order
    _latest: int = attrs.field(default=1000, init=False)  # the newest resourceVersion handed out
    _crds: dict[references.resource, dict[str, Any]] = attrs.field(factory=dict, init=False)
    _builtin_reactions: int = attrs.field(default=-1, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._builtin_reactions = len(self._payloads)

    def _next_version(self) -> str:
        self._latest += 1
        return str(self._latest)

    # --- what is served -------------------------------------------------------------------------------------

    def _served(self) -> list[kube_openapi.Served]:
        served = []
        for resource in self.resources:
            info = self.resources[resource]
            crd = self._crds.get(resource, {})
            served.append(
                kube_openapi.Served(
                    group=resource.group or "",
                    version=resource.version or "",
                    plural=resource.plural or "",
                    kind=info.kind or str(resource.plural).capitalize(),
                    namespaced=bool(info.namespaced),
                    singular=info.singular or "",
                    verbs=tuple(info.verbs),
                    short_names=tuple(info.shortnames),
                    categories=tuple(info.categories),
                    subresources=tuple(sorted(info.subresources)),
                    schema=crd.get("schema"),
                    printer_columns=tuple(crd.get("columns", ())),
                )
            )
        return served

    def _kind(self, resource: references.resource) -> str:
        kind = self.resources[resource].kind if resource in self.resources else None
        return kind or str(resource.plural).capitalize()

    async def _serve_version(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        group, version = request.resource.group or "", request.resource.version or ""
        served = [s for s in self._served() if (s.group, s.version) == (group, version)]
        if not served and group:
            raise k8s.KubernetesResourceNotFoundError()
        return kube_openapi.resource_list(group, version, served)

    def _openapi(self, path: str) -> aiohttp.web.StreamResponse:
        documents = kube_openapi.documents(self._served())
        if path.rstrip("/") == "/openapi/v3":
            return aiohttp.web.json_response(kube_openapi.root_document(documents))
        document = kube_openapi.document_for_path(path, documents)
        if document is None:
            raise k8s.KubernetesError(status=404, reason="NotFound", message=f"{path} not found", details={})
        return aiohttp.web.json_response(document)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.method == enums.method.GET and request.url.path.startswith("/openapi/v3"):
            try:
                return self._openapi(request.url.path)
            except k8s.KubernetesError as error:
                return await self._render_error(error)
        if (
            request.method == enums.method.GET
            and request.url.path.startswith("/api/v1/namespaces/")
            and (request.url.path.count("/") == 4)
        ):
            return await self._namespace(request)
        return await super()._handle(request)

    async def _namespace(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """``GET /api/v1/namespaces/<ns>`` (kubectl asks after a 404): one exists once it holds objects."""
        name = request.namespace
        if any(ns == name and not obj.deleted for (_, ns, _), obj in self.objects.items()):
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                }
            )
        return await self._render_error(not_found(kmock.resource("", "v1", "namespaces"), name))

    # --- list, get, watch -----------------------------------------------------------------------------------

    def _matching(self, request: rendering.Request) -> list[dict[str, Any]]:
        found = []
        for (resource, namespace, name), obj in self.objects.items():
            if resource != request.resource or obj.deleted:
                continue
            if request.namespace is not None and namespace != request.namespace:
                continue
            if (request.name is None or name == request.name) and selected(request.params, obj.raw):
                found.append(copy.deepcopy(obj.raw))
        return found

    def _table(self, request: rendering.Request, objects: list[dict[str, Any]]) -> dict[str, Any]:
        assert request.resource is not None
        return kube_tables.table(
            objects,
            self._crds.get(request.resource, {}).get("columns", []),
            resource_version=str(self._latest),
            include_object=request.params.get("includeObject", "Metadata"),
        )

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        if request.resource not in self._get_resources():
            raise k8s.KubernetesResourceNotFoundError()
        async with self._writes:
            items, version = self._matching(request), str(self._latest)
        if kube_tables.wants_table(request.headers.get("Accept", "")):
            return self._table(request, items)
        resource = request.resource
        return {
            "apiVersion": f"{resource.group}/{resource.version}" if resource.group else resource.version,
            "kind": f"{self._kind(resource)}List",
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    def _named(self, request: rendering.Request, name: str | None = None) -> k8s_dicts.Object | None:
        """The object a request names, by its key (kmock scans every stored object for it: O(N) a request)."""
        assert request.resource is not None
        key = (request.resource, request.namespace, name or request.name or "")
        return self.objects[key] if key in self.objects and not self.objects[key].empty else None

    async def _serve_fetch(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        named = self._named(request) if request.name and request.namespace is not None else None
        if named is not None and not named.deleted:
            found = [copy.deepcopy(named.raw)]
        else:
            found = self._matching(attrs.evolve(request, params={}))
        if not found:
            raise not_found(request.resource, request.name)
        if kube_tables.wants_table(request.headers.get("Accept", "")):
            return self._table(request, found)
        return found[0]

    # What a write answers, as kmock's own methods do (the object after the write, the last state before a
    # deletion); the object is found by its key instead of kmock's scan of every object.

    async def _serve_create(self, request: rendering.Request) -> rendering.Payload:
        meta = (request.data or {}).get("metadata", {})
        key = attrs.evolve(request, namespace=request.namespace or meta.get("namespace"))
        async with self._lock:
            obj = self._named(key, request.name or meta.get("name"))
        assert obj is not None  # stored by kmock's KubernetesEmulator._handle before this runs
        return obj.raw

    async def _serve_update(self, request: rendering.Request) -> rendering.Payload:
        async with self._lock:
            obj = self._named(request)
        assert obj is not None  # patched by kmock's KubernetesEmulator._handle before this runs
        return obj.last.raw

    async def _serve_delete(self, request: rendering.Request) -> rendering.Payload:
        async with self._lock:
            obj = self._named(request)
        assert obj is not None  # deleted by kmock's KubernetesEmulator._handle before this runs
        return obj.last.raw

    def _watched(self, request: rendering.Request, event: Mapping[str, Any]) -> bool:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        return (
            (request.namespace is None or meta.get("namespace") == request.namespace)
            and (request.name is None or meta.get("name") == request.name)
            and selected(request.params, obj)
        )

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        yield b""  # send the headers now: a watch may stay silent for long
        assert request.resource is not None
        bus = self._buses[request.resource]
        since = str(request.params.get("resourceVersion") or "")
        async with self._writes:  # no write between the backlog and the live stream
            marker = await bus.mark()
            if not since.isdigit() or since == "0":
                backlog = [{"type": "ADDED", "object": obj} for obj in self._matching(request)]
            elif int(since) < bus.forgotten:
                backlog = [
                    {
                        "type": "ERROR",
                        "object": {
                            "apiVersion": "v1",
                            "kind": "Status",
                            "status": "Failure",
                            "code": 410,
                            "reason": "Expired",
                            "message": f"too old resource version: {since} ({bus.forgotten})",
                        },
                    }
                ]
            else:
                backlog = [copy.deepcopy(event) for version, event in bus.history if version > int(since)]
        try:
            for event in backlog:
                if event["type"] == "ERROR" or self._watched(request, event):
                    yield event
            if backlog and backlog[0]["type"] == "ERROR":
                return
            async for event in bus.stream(since=marker):
                if self._watched(request, event):
                    yield event
        finally:
            await bus.unmark(marker)
