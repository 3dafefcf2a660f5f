"""Discovery and OpenAPI v3 documents of the test API server, built from what it serves (pure functions).

kubectl reads these before it writes anything: the APIResourceList of a group/version (names, short names,
categories, subresources: ``scale`` is an ``autoscaling/v1`` Scale), the OpenAPI v3 root (``/openapi/v3``)
and one document per group/version. A PATCH operation that accepts the ``fieldValidation`` query parameter
tells kubectl the server validates fields itself (``kubectl apply`` and ``create`` then send
``fieldValidation=Strict`` instead of downloading the OpenAPI v2 protobuf to validate client-side); a PATCH
body that does not list ``application/strategic-merge-patch+json`` makes ``kubectl apply`` send a JSON
merge patch, as it does for custom resources on a real server. CRD kinds carry their ``openAPIV3Schema``;
built-in kinds are served with an open schema (this server does not know their fields).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPEN_SCHEMA: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
WRITE_PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "string"}}
    for name in ("dryRun", "fieldManager", "fieldValidation")
]
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


@dataclass(frozen=True)
class Served:
    """One resource as the server serves it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    verbs: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    schema: Mapping[str, Any] | None = None
    printer_columns: tuple[Mapping[str, Any], ...] = field(default=())

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


def resource_list(group: str, version: str, served: list[Served]) -> dict[str, Any]:
    """The legacy discovery document of one group/version (``GET /apis/<group>/<version>``)."""
    resources: list[dict[str, Any]] = []
    for res in served:
        resources.append(
            {
                "name": res.plural,
                "singularName": res.singular or res.plural.rstrip("s"),
                "kind": res.kind,
                "namespaced": res.namespaced,
                "verbs": sorted(res.verbs),
                "shortNames": list(res.short_names),
                "categories": list(res.categories),
            }
        )
        if "status" in res.subresources:
            resources.append(
                {
                    "name": f"{res.plural}/status",
                    "singularName": "",
                    "kind": res.kind,
                    "namespaced": res.namespaced,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if "scale" in res.subresources:
            resources.append(
                {
                    "name": f"{res.plural}/scale",
                    "singularName": "",
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "namespaced": res.namespaced,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "apiVersion": "v1",
        "kind": "APIResourceList",
        "groupVersion": f"{group}/{version}".lstrip("/"),
        "resources": resources,
    }


def schema_name(group: str, version: str, kind: str) -> str:
    """The OpenAPI definition name: the group reversed, as the real server names CRD kinds."""
    reverse = ".".join(reversed(group.split("."))) if group else "io.k8s.api.core"
    return f"{reverse}.{version}.{kind}"


def _operation(
    res: Served, action: str, kind: tuple[str, str, str], body: tuple[str, ...] = ()
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{action}{res.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": kind[0], "version": kind[1], "kind": kind[2]},
        "responses": {"200": {"description": "OK"}},
    }
    if body:
        op["requestBody"] = {
            "content": {t: {"schema": {"$ref": f"#/components/schemas/{META}.Patch"}} for t in body}
        }
        op["parameters"] = WRITE_PARAMETERS
    return op


def _paths(res: Served) -> dict[str, Any]:
    gvk = (res.group, res.version, res.kind)
    base = (
        f"{res.prefix}/namespaces/{{namespace}}/{res.plural}"
        if res.namespaced
        else f"{res.prefix}/{res.plural}"
    )
    paths: dict[str, Any] = {
        base: {
            "get": _operation(res, "list", gvk),
            "post": _operation(res, "post", gvk, ("application/json",)),
            "parameters": WRITE_PARAMETERS,
        },
        f"{base}/{{name}}": {
            "get": _operation(res, "get", gvk),
            "put": _operation(res, "put", gvk, ("application/json",)),
            "patch": _operation(res, "patch", gvk, PATCH_TYPES),
            "delete": _operation(res, "delete", gvk),
            "parameters": WRITE_PARAMETERS,
        },
    }
    for sub in res.subresources:
        sub_gvk = ("autoscaling", "v1", "Scale") if sub == "scale" else gvk
        paths[f"{base}/{{name}}/{sub}"] = {
            "get": _operation(res, "get", sub_gvk),
            "put": _operation(res, "put", sub_gvk, ("application/json",)),
            "patch": _operation(res, "patch", sub_gvk, PATCH_TYPES),
            "parameters": WRITE_PARAMETERS,
        }
    return paths


def group_version_document(group: str, version: str, served: list[Served]) -> dict[str, Any]:
    """The OpenAPI v3 document of one group/version (``GET /openapi/v3/apis/<group>/<version>``)."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {
        f"{META}.Patch": {"type": "object"},
        f"{META}.ObjectMeta": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    for res in served:
        paths.update(_paths(res))
        gvk = [{"group": res.group, "version": res.version, "kind": res.kind}]
        schema = dict(res.schema or OPEN_SCHEMA)
        properties = dict(schema.get("properties") or {})
        if properties:
            properties["metadata"] = {"$ref": f"#/components/schemas/{META}.ObjectMeta"}
            schema["properties"] = properties
        schemas[schema_name(res.group, res.version, res.kind)] = {
            **schema,
            "x-kubernetes-group-version-kind": gvk,
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (test emulator)", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _gv_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def root_document(documents: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, Any]:
    """``GET /openapi/v3``: where each group/version's document lives, with a content hash for caching."""
    paths = {}
    for (group, version), doc in documents.items():
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        paths[_gv_key(group, version)] = {
            "serverRelativeURL": f"/openapi/v3/{_gv_key(group, version)}?hash={digest}"
        }
    return {"paths": paths}


def documents(served: list[Served]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every group/version's OpenAPI v3 document, keyed by (group, version)."""
    by_gv: dict[tuple[str, str], list[Served]] = {}
    for res in served:
        by_gv.setdefault((res.group, res.version), []).append(res)
    return {gv: group_version_document(*gv, items) for gv, items in by_gv.items()}


def document_for_path(
    path: str, docs: Mapping[tuple[str, str], Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The document at ``/openapi/v3/api/v1`` or ``/openapi/v3/apis/<group>/<version>``, if served."""
    parts = path.removeprefix("/openapi/v3/").split("/")
    if parts[0] == "api" and len(parts) == 2:
        return docs.get(("", parts[1]))
    if parts[0] == "apis" and len(parts) == 3:
        return docs.get((parts[1], parts[2]))
    return None
