"""A Kubernetes API for tests: kmock's KubernetesEmulator plus the server-side metadata it lacks.

kmock 0.8 stores objects and serves list/watch/get/create/merge-patch/delete with finalizers. This subclass
adds what a real API server does and the operator (and Kopf) rely on:

* ``metadata.uid``, ``creationTimestamp``, ``generation`` (1 on create, +1 when anything but metadata and
  status changes) and a ``resourceVersion`` that changes on every write; ``generateName`` (Kopf's Events);
* JSON-patch (``application/json-patch+json``: add/replace/remove/test), answering 422 when a ``test`` op
  fails (Kopf's optimistic finalizer patches), and a ``metadata.resourceVersion`` precondition in merge
  patches (409 when stale);
* status/spec separation for resources with a ``status`` subresource (a patch of the main resource leaves
  ``status`` alone; a patch of ``/status`` changes only ``status``); ``/scale`` GET and PATCH;
* Secrets' ``stringData`` folded into base64 ``data``.

What it does NOT emulate, and how the tests work around it:

* Owner-reference garbage collection: nothing deletes dependents when their owner goes. Tests call
  :meth:`Emulator.collect_garbage`, an explicit stand-in for the GC controller, when they need it, and
  assert the owner references themselves (controller=true, the owner's uid).
* Label and field selectors on list/watch: ignored (all objects are returned). The operator never relies on
  them: Kopf filters handlers by labels client-side and governor.adapters.kube reads children by name.
* Controllers: no Deployment controller, so no pods and no ``status.readyReplicas``. Tests write a
  Deployment's status through ``/status`` as the controller would.
* Schema validation, defaulting and pruning (no OpenAPI checks on write), strategic-merge patches (treated
  as merge patches), PUT/replace, server-side apply, watch bookmarks and 410 Gone. The CRD schema is tested
  separately (tests/operator/test_crd.py validates the examples against it).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import itertools
import secrets
import string
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, k8s, rendering

T = TypeVar("T")
CRD_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new`` (kmock's store applies merge patches only)."""
    diff: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key in old and isinstance(old[key], Mapping) and isinstance(value, Mapping):
            sub = merge_diff(old[key], value)
            if sub:
                diff[key] = sub
        elif key not in old or old[key] != value:
            diff[key] = value
    return diff


def _pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace/remove/test. Raises ValueError on a failed test or a bad path."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = op["op"]
        if kind == "test":
            current = node[int(last)] if isinstance(node, list) else node.get(last)
            if current != op.get("value"):
                raise ValueError(f"test failed at {op['path']}: {current!r} != {op.get('value')!r}")
        elif kind in ("add", "replace"):
            if isinstance(node, list):
                if last == "-":
                    node.append(op["value"])
                elif kind == "add":
                    node.insert(int(last), op["value"])
                else:
                    node[int(last)] = op["value"]
            else:
                node[last] = op["value"]
        elif kind == "remove":
            if isinstance(node, list):
                del node[int(last)]
            else:
                del node[last]
        else:
            raise ValueError(f"unsupported JSON-patch op {kind!r}")
    return doc


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    _versions: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1000), init=False)
    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    def register_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve a CustomResourceDefinition's resource with every verb and its subresources."""
        names, group = crd["spec"]["names"], crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            self.resources[f"{group}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=crd["spec"]["scope"] == "Namespaced",
                verbs=CRD_VERBS,
                shortnames=names.get("shortNames", []),
                categories=names.get("categories", []),
                subresources=set(version.get("subresources", {})),
            )

    def _subresources(self, resource: kmock.resource) -> set[str]:
        try:
            return set(self.resources[resource].subresources) if resource in self.resources else set()
        except KeyError:
            return set()

    def _next_version(self) -> str:
        return str(next(self._versions))

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource is None or request.action not in (
            enums.action.CREATE,
            enums.action.UPDATE,
            enums.action.FETCH,
        ):
            return await super()._handle(request)
        if request.action == enums.action.FETCH:
            if request.subresource == "scale":
                return aiohttp.web.json_response(self._scale(request))
            return await super()._handle(request)
        async with self._writes:
            if request.action == enums.action.CREATE:
                self._prepare_create(request)
            else:
                self._prepare_update(request)
            return await super()._handle(request)

    def _live(self, request: rendering.Request) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def _scale(self, request: rendering.Request) -> dict[str, Any]:
        live = self._live(request)
        if live is None:
            raise k8s.KubernetesObjectNotFoundError()
        meta, status = live["metadata"], live.get("status") or {}
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
            "spec": {"replicas": (live.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": status.get("replicas", 0), "selector": status.get("selector", "")},
        }

    def _prepare_create(self, request: rendering.Request) -> None:
        data = request.data if isinstance(request.data, dict) else {}
        meta = data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        meta.update(
            uid=str(uuid.uuid4()),
            generation=1,
            resourceVersion=self._next_version(),
            creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        meta.pop("deletionTimestamp", None)
        assert request.resource is not None
        if "status" in self._subresources(request.resource):
            data.pop("status", None)
        if request.resource == kmock.resource("", "v1", "secrets") and "stringData" in data:
            encoded = {
                k: base64.b64encode(str(v).encode()).decode() for k, v in data.pop("stringData").items()
            }
            data["data"] = {**data.get("data", {}), **encoded}

    def _prepare_update(self, request: rendering.Request) -> None:
        live = self._live(request)
        if live is None:
            return  # kmock answers 404
        assert request.resource is not None
        content_type = request.headers.get("Content-Type", "")
        if "json-patch" in content_type:
            try:
                new = json_patch(live, request.data)
            except (ValueError, KeyError, IndexError, TypeError) as error:
                raise k8s.KubernetesError(status=422, reason="Invalid", message=str(error)) from None
        else:
            patch = request.data if isinstance(request.data, dict) else {}
            wanted_version = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted_version is not None and wanted_version != live["metadata"].get("resourceVersion"):
                raise k8s.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message="the object has been modified; apply your changes again",
                )
            if request.subresource == "scale":
                patch = {"spec": {"replicas": (patch.get("spec") or {}).get("replicas")}}
            new = merge_patch(live, patch)
        new = copy.deepcopy(new)  # merge_patch shares untouched sub-dicts with `live`
        if "status" in self._subresources(request.resource):
            if request.subresource == "status":
                new = {**live, "status": new.get("status")}
            else:
                new["status"] = live.get("status")
            new = {k: v for k, v in new.items() if v is not None}
        for key in ("uid", "creationTimestamp", "name", "namespace"):
            if key in live["metadata"]:
                new.setdefault("metadata", {})[key] = live["metadata"][key]
        if new != live:
            body = (
                {k: v for k, v in new.items() if k not in ("metadata", "status")},
                {k: v for k, v in live.items() if k not in ("metadata", "status")},
            )
            meta = new.setdefault("metadata", {})
            if body[0] != body[1]:
                meta["generation"] = int(live["metadata"].get("generation", 1)) + 1
            meta["resourceVersion"] = self._next_version()
        object.__setattr__(request, "data", merge_diff(live, new))

    async def collect_garbage(self) -> list[tuple[str, str | None, str]]:
        """Stand-in for the GC controller: delete objects whose owners (by uid) no longer exist."""
        removed: list[tuple[str, str | None, str]] = []
        async with self._lock:
            alive = {obj.raw["metadata"].get("uid") for obj in self.objects.values() if not obj.deleted}
            for (resource, namespace, name), obj in list(self.objects.items()):
                if obj.deleted:
                    continue
                owners = obj.raw["metadata"].get("ownerReferences") or []
                if owners and not any(ref.get("uid") in alive for ref in owners):
                    raw = obj.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})
                    removed.append((resource.plural or "", namespace, name))
        return removed


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = 15.0,  # noqa: ASYNC109
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll until ``check`` returns a truthy value (assertion errors count as 'not yet')."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            result = check()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return result
        except (AssertionError, KeyError, LookupError) as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}") from last
        await asyncio.sleep(interval)
