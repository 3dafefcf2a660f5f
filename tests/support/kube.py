"""A Kubernetes API for tests: kmock's KubernetesEmulator plus what a real API server does that it lacks.

kmock 0.8 stores objects and serves list/watch/get/create/merge-patch/delete with finalizers. The read side
(tests/support/kube_reads.py) adds typed lists with a real ``resourceVersion``, watches that resume from one
without gap or stale replay, selectors, Tables, discovery and OpenAPI v3 for kubectl. This module adds the
write side, as the operator, Kopf and kubectl rely on it:

* ``metadata.uid``, ``creationTimestamp``, ``generation`` (1 on create, +1 when anything but metadata and
  status changes) and a ``resourceVersion`` that changes on every write, deletes included; ``generateName``;
* merge patches with a ``metadata.resourceVersion`` precondition (409 when stale), JSON patches (422 when a
  ``test`` op fails: Kopf's optimistic finalizer patches), strategic merge patches (named list items merge
  by name), PUT (replace, with the same precondition), server-side apply (``application/apply-patch+yaml``:
  creates when absent; see tests/support/kube_patches.py for what it reduces);
* status/spec separation for resources with a ``status`` subresource; ``/scale`` GET, PATCH and PUT;
* Secrets' ``stringData`` folded into base64 ``data``.

Opt-in, because other tests hand the operator specs a real server would refuse (tests/operator):

* ``validate_schemas``: custom resources are checked against their CRD's ``openAPIV3Schema`` on create and
  when their spec changes (422 Invalid; unknown fields pruned, or 400 under ``fieldValidation=Strict``);
* ``garbage_collection``: deleting an object deletes its dependents at once (background propagation).

What it does NOT emulate: controllers (no pods, no Deployment status: tests write ``/status`` as the
controller would), admission, aggregated discovery, watch bookmarks and ``timeoutSeconds``, managedFields and
apply conflicts. Without ``garbage_collection``, tests call :meth:`Emulator.collect_garbage` explicitly.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import secrets
import string
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, overload

import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal import enums, k8s, rendering

from tests.support import kube_validation
from tests.support.kube_patches import (
    Path,
    json_patch,
    leaf_paths,
    merge_diff,
    merge_patch,
    server_side_apply,
    strategic_merge_patch,
)
from tests.support.kube_reads import ReadingEmulator, not_found

T = TypeVar("T")
CRD_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
APPLY = "application/apply-patch+yaml"


def _conflict() -> k8s.KubernetesError:
    return k8s.KubernetesError(
        status=409,
        reason="Conflict",
        details={},
        message="the object has been modified; please apply your changes to the latest version and try again",
    )


@attrs.define(kw_only=True)
class Emulator(ReadingEmulator):
    validate_schemas: bool = False
    garbage_collection: bool = False
    _applied: dict[tuple[Any, ...], set[Path]] = attrs.field(factory=dict, init=False)

    def register_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve a CRD's resource with every verb, its subresources, its schema and its printer columns."""
        names, group = crd["spec"]["names"], crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            resource = kmock.resource(group, version["name"], names["plural"])
            self.resources[resource] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=crd["spec"]["scope"] == "Namespaced",
                verbs=CRD_VERBS,
                shortnames=names.get("shortNames", []),
                categories=names.get("categories", []),
                subresources=set(version.get("subresources", {})),
            )
            self._crds[resource] = {
                "schema": (version.get("schema") or {}).get("openAPIV3Schema"),
                "columns": version.get("additionalPrinterColumns", []),
            }

    def _subresources(self, resource: kmock.resource) -> set[str]:
        return set(self.resources[resource].subresources) if resource in self.resources else set()

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        try:
            if request.resource is not None and request.method == enums.method.PUT and request.name:
                object.__setattr__(request, "action", enums.action.UPDATE)  # kmock knows PATCH only
            if request.action == enums.action.FETCH and request.subresource == "scale":
                return aiohttp.web.json_response(self._scale(request))
            if (
                request.action == enums.action.FETCH
                and request.resource
                and live_object(self, request.resource, request.namespace, request.name or "") is None
            ):
                raise not_found(request.resource, request.name)  # kmock would answer with its own wording
            if request.resource is None or request.action not in (
                enums.action.CREATE,
                enums.action.UPDATE,
                enums.action.DELETE,
            ):
                return await super()._handle(request)
            async with self._writes:
                if request.action == enums.action.CREATE:
                    self._prepare_create(request)
                elif request.action == enums.action.UPDATE:
                    self._prepare_update(request)
                elif request.name is not None:
                    self._prepare_delete(request)
                response = await super()._handle(request)
                if request.subresource == "scale" and response.status < 300:
                    response = aiohttp.web.json_response(self._scale(request))  # a Scale, not the object
            if self.garbage_collection and request.action != enums.action.CREATE:
                await self.collect_garbage()
            return response
        except k8s.KubernetesError as error:
            return await self._render_error(error)

    def _live(self, request: rendering.Request) -> dict[str, Any] | None:
        assert request.resource is not None
        key = (request.resource, request.namespace, request.name or "")
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def _scale(self, request: rendering.Request) -> dict[str, Any]:
        live = self._live(request)
        if live is None:
            assert request.resource is not None
            raise not_found(request.resource, request.name)
        meta, status = live["metadata"], live.get("status") or {}
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
            "spec": {"replicas": (live.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": status.get("replicas", 0), "selector": status.get("selector", "")},
        }

    def _validate(self, request: rendering.Request, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The CRD schema's verdict on ``new`` (see the module docstring); prunes unknown fields in place."""
        assert request.resource is not None
        schema = self._crds.get(request.resource, {}).get("schema")
        if not self.validate_schemas or schema is None or request.subresource:
            return
        if old is not None and {k: v for k, v in new.items() if k not in ("metadata", "status")} == {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }:
            return  # metadata-only writes (finalizers, annotations) are not re-validated
        kind, name = self._kind(request.resource), new.get("metadata", {}).get("name")
        unknown = kube_validation.unknown_fields(new, schema)
        if unknown and request.params.get("fieldValidation") == "Strict":
            fields = ", ".join(f'unknown field "{path}"' for path in unknown)
            raise k8s.KubernetesError(
                status=400,
                reason="BadRequest",
                details={},
                message=(
                    f'{kind} in version "{request.resource.version}" cannot be handled as a {kind}: '
                    f"strict decoding error: {fields}"
                ),
            )
        kube_validation.prune(new, unknown)
        causes = kube_validation.invalid_causes(new, schema)
        if causes:
            raise k8s.KubernetesError(
                status=422,
                reason="Invalid",
                message=kube_validation.invalid_message(
                    kind, request.resource.group or "", str(name), causes
                ),
                details={"name": name, "group": request.resource.group, "kind": kind, "causes": causes},
            )

    def _prepare_create(self, request: rendering.Request) -> None:
        data = request.data if isinstance(request.data, dict) else {}
        meta = data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        assert request.resource is not None
        self._validate(request, data, None)
        meta.update(
            uid=str(uuid.uuid4()),
            generation=1,
            resourceVersion=self._next_version(),
            creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        for key in ("deletionTimestamp", "managedFields"):
            meta.pop(key, None)
        if "status" in self._subresources(request.resource):
            data.pop("status", None)
        if request.resource == kmock.resource("", "v1", "secrets") and "stringData" in data:
            encoded = {
                k: base64.b64encode(str(v).encode()).decode() for k, v in data.pop("stringData").items()
            }
            data["data"] = {**data.get("data", {}), **encoded}

    def _body(self, request: rendering.Request) -> Any:
        if request.data is None and request.text.strip():
            return yaml.safe_load(request.text)  # apply patches may be YAML
        return request.data

    def _apply_create(self, request: rendering.Request, body: dict[str, Any]) -> None:
        """Server-side apply of an absent object creates it."""
        object.__setattr__(request, "action", enums.action.CREATE)
        object.__setattr__(request, "data", body)
        self._prepare_create(request)
        manager = request.params.get("fieldManager", "")
        self._applied[(request.resource, request.namespace, request.name, manager)] = set(leaf_paths(body))

    def _patched(self, request: rendering.Request, live: dict[str, Any]) -> dict[str, Any]:
        """The object after this PATCH or PUT, before status separation and server-owned metadata."""
        content_type = request.headers.get("Content-Type", "")
        body = self._body(request)
        if "json-patch" in content_type:
            try:
                return json_patch(live, body)
            except (ValueError, KeyError, IndexError, TypeError) as error:
                raise k8s.KubernetesError(
                    status=422, reason="Invalid", message=str(error), details={}
                ) from None
        patch = body if isinstance(body, dict) else {}
        wanted_version = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_version and wanted_version != live["metadata"].get("resourceVersion"):
            raise _conflict()
        if request.subresource == "scale":
            return dict(merge_patch(live, {"spec": {"replicas": (patch.get("spec") or {}).get("replicas")}}))
        if request.method == enums.method.PUT:
            return {**copy.deepcopy(patch), "metadata": {**live["metadata"], **patch.get("metadata", {})}}
        if content_type.startswith(APPLY):
            key = (request.resource, request.namespace, request.name, request.params.get("fieldManager", ""))
            before = self._applied.get(key, set())
            self._applied[key] = set(leaf_paths(patch))
            return server_side_apply(live, patch, before)
        if "strategic-merge-patch" in content_type:
            return dict(strategic_merge_patch(live, patch))
        return dict(merge_patch(live, patch))

    def _prepare_update(self, request: rendering.Request) -> None:
        assert request.resource is not None
        live = self._live(request)
        if live is None:
            body = self._body(request)
            if request.headers.get("Content-Type", "").startswith(APPLY) and isinstance(body, dict):
                return self._apply_create(request, body)
            raise not_found(request.resource, request.name)
        new = copy.deepcopy(
            self._patched(request, live)
        )  # merge_patch shares untouched sub-dicts with `live`
        if "status" in self._subresources(request.resource):
            if request.subresource == "status":
                new = {**live, "status": new.get("status")}
            else:
                new["status"] = live.get("status")
            new = {k: v for k, v in new.items() if v is not None}
        for key in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp", "generation"):
            if key in live["metadata"]:
                new.setdefault("metadata", {})[key] = live["metadata"][key]
        new.get("metadata", {}).pop("managedFields", None)
        self._validate(request, new, live)
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
        return None

    def _prepare_delete(self, request: rendering.Request) -> None:
        """A delete is a write: the object's last state (MODIFIED or DELETED) has a new resourceVersion."""
        assert request.resource is not None
        key = (request.resource, request.namespace, request.name or "")
        if key not in self.objects or self.objects[key].deleted:
            raise not_found(request.resource, request.name)
        if not self.objects[key].raw["metadata"].get("deletionTimestamp"):
            self.objects[key].patch({"metadata": {"resourceVersion": self._next_version()}})

    async def collect_garbage(self) -> list[tuple[str, str | None, str]]:
        """Stand-in for the GC controller: delete objects whose owners (by uid) no longer exist."""
        removed: list[tuple[str, str | None, str]] = []
        async with self._writes, self._lock:
            alive = {obj.raw["metadata"].get("uid") for obj in self.objects.values() if not obj.deleted}
            for (resource, namespace, name), obj in list(self.objects.items()):
                if obj.deleted:
                    continue
                owners = obj.raw["metadata"].get("ownerReferences") or []
                if owners and not any(ref.get("uid") in alive for ref in owners):
                    obj.patch({"metadata": {"resourceVersion": self._next_version()}})
                    raw = obj.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})
                    removed.append((resource.plural or "", namespace, name))
        return removed


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    interval: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    interval: float = ...,
    what: str = ...,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    *,
    timeout: float = 15.0,  # noqa: ASYNC109
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
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


def live_object(
    emulator: Emulator, resource: kmock.resource, namespace: str | None, name: str
) -> dict[str, Any] | None:
    """The stored object as the API would answer it now, or None when it is absent or deleted (kmock keeps
    deleted objects in its store)."""
    key = (resource, namespace, name)
    if key not in emulator.objects or emulator.objects[key].deleted:  # kmock's ObjectsArray has no .get
        return None
    raw: dict[str, Any] = emulator.objects[key].raw
    return raw
