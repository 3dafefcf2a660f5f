"""The one adapter that talks to the Kubernetes API (besides Kopf's own watching, patching and Events).

Client: ``httpx.AsyncClient`` (already a dependency; async, typed, HTTP/1.1 keep-alive), configured from the
same credentials Kopf logs in with (``configure`` is called from the login handler), so the operator has one
notion of "the cluster". Every request goes through :func:`_request`, which refuses any (group, resource,
verb) missing from :data:`PERMISSIONS`: that table is the least-privilege RBAC of this module, and a test
can derive the ClusterRole from it.

Writes are idempotent: ``POST``; on 409 read and merge-patch; names are deterministic (builders.names).
Drift is "a field we set differs": the live object must contain the desired fields (``covers``); fields
the API server or other controllers add are left alone. Status updates are read-modify-write with the
resourceVersion as a precondition (409 → re-read), so two writers of conditions never lose each other's.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from governor.core import spec as api

Manifest = dict[str, Any]
Verb = Literal["get", "list", "watch", "create", "patch", "delete"]

# (api group, resource) → verbs this module uses. Kopf itself additionally needs: list/watch on every
# resource it serves (inferenceservices and the watched children), patch on inferenceservices (finalizers,
# annotations), create on events, and get on customresourcedefinitions for discovery.
PERMISSIONS: dict[tuple[str, str], frozenset[Verb]] = {
    (api.GROUP, api.PLURAL): frozenset({"get"}),
    (api.GROUP, f"{api.PLURAL}/status"): frozenset({"patch"}),
    (api.GROUP, f"{api.PLURAL}/scale"): frozenset({"patch"}),  # the replica planner, the only replicas writer
    ("apps", "deployments"): frozenset({"get", "create", "patch"}),
    ("", "services"): frozenset({"get", "create", "patch"}),
    ("", "secrets"): frozenset({"get", "create", "patch"}),
    ("policy", "poddisruptionbudgets"): frozenset({"get", "create", "patch"}),
    ("monitoring.coreos.com", "podmonitors"): frozenset({"get", "create", "patch"}),
    ("networking.k8s.io", "networkpolicies"): frozenset({"get", "create", "patch"}),
}
PLURALS: dict[str, str] = {
    "Deployment": "deployments", "Service": "services", "Secret": "secrets",
    "PodDisruptionBudget": "poddisruptionbudgets", "PodMonitor": "podmonitors",
    "NetworkPolicy": "networkpolicies", api.KIND: api.PLURAL,
}
_HTTP_VERB: dict[Verb, str] = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST",
                               "patch": "PATCH", "delete": "DELETE"}


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Busy(KubeError):
    """The object is being deleted; retry once it is gone."""


@dataclass(frozen=True)
class Outcome:
    action: Literal["created", "patched", "unchanged"]
    kind: str
    name: str
    body: Manifest


@dataclass(frozen=True)
class Connection:
    server: str
    token: str | None = None
    insecure: bool = False


@dataclass
class _State:
    client: httpx.AsyncClient | None = None
    connection: Connection | None = None
    explicit: bool = False
    groups: dict[str, tuple[float, bool]] | None = None


_state = _State()
API_GROUP_TTL_S = 60.0


def configure(
    server: str, *, token: str | None = None, ca_path: str | None = None, ca_data: str | bytes | None = None,
    insecure: bool = False, cert_path: str | None = None, cert_data: str | bytes | None = None,
    key_path: str | None = None, key_data: str | bytes | None = None, timeout_s: float = 30.0,
    explicit: bool = True,
) -> None:
    """Point the adapter at a cluster.

    ``explicit`` (the default) pins it: the operator's login handler then hands this server to Kopf too
    (tests against an emulator, ``governor operator --server``). The login handler itself configures it
    with ``explicit=False`` from Kopf's in-cluster or kubeconfig credentials.
    """
    verify: ssl.SSLContext | bool = True
    if server.startswith("https"):
        context = ssl.create_default_context(cafile=ca_path)
        if ca_data:
            text = ca_data.decode() if isinstance(ca_data, bytes) else ca_data
            context.load_verify_locations(cadata=_pem(text))
        if insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cert_path or cert_data:
            context.load_cert_chain(cert_path or _to_file(cert_data), key_path or _to_file(key_data))
        verify = context
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    _state.client = httpx.AsyncClient(base_url=server.rstrip("/"), headers=headers, verify=verify,
                                      timeout=timeout_s)
    _state.connection = Connection(server=server, token=token, insecure=insecure)
    _state.explicit = explicit
    _state.groups = {}


def explicit_connection() -> Connection | None:
    return _state.connection if _state.explicit else None


def _pem(text: str) -> str:
    return text if "BEGIN CERTIFICATE" in text else base64.b64decode(text).decode()


def _to_file(data: str | bytes | None) -> str:
    raw = data.encode() if isinstance(data, str) else (data or b"")
    if b"-----BEGIN" not in raw:
        raw = base64.b64decode(raw)
    handle, path = tempfile.mkstemp(prefix="governor-kube-", suffix=".pem")
    with os.fdopen(handle, "wb") as file:
        file.write(raw)
    return path


async def close() -> None:
    if _state.client is not None:
        await _state.client.aclose()
    _state.client, _state.connection, _state.explicit = None, None, False


async def close_implicit() -> None:
    """Close a connection the login handler made; leave an explicitly configured one to its owner."""
    if not _state.explicit:
        await close()


def configured() -> bool:
    return _state.client is not None


def _split(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _path(api_version: str, plural: str, namespace: str | None, name: str | None = None,
          subresource: str | None = None) -> str:
    group, version = _split(api_version)
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


async def _request(
    verb: Verb, api_version: str, plural: str, namespace: str | None, name: str | None = None, *,
    subresource: str | None = None, body: Any = None, content_type: str = "application/json",
) -> Manifest:
    group = _split(api_version)[0]
    resource = f"{plural}/{subresource}" if subresource else plural
    if verb not in PERMISSIONS.get((group, resource), frozenset()):
        raise PermissionError(f"the kube adapter does not declare {verb} on {group or 'core'}/{resource}")
    if _state.client is None:
        raise RuntimeError("the kube adapter is not configured: the login handler calls configure()")
    response = await _state.client.request(
        _HTTP_VERB[verb], _path(api_version, plural, namespace, name, subresource),
        json=body, headers={"Content-Type": content_type} if body is not None else None,
    )
    if response.status_code >= 400:
        raise _error(response)
    result: Manifest = response.json()
    return result


def _error(response: httpx.Response) -> KubeError:
    try:
        payload = response.json()
    except ValueError:
        payload = {}
    reason = str(payload.get("reason") or response.reason_phrase)
    message = str(payload.get("message") or response.text[:200])
    cls = {404: NotFound, 409: Conflict}.get(response.status_code, KubeError)
    return cls(response.status_code, reason, message)


# --- reading ---------------------------------------------------------------------------------------

async def get(api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
    try:
        return await _request("get", api_version, PLURALS[kind], namespace, name)
    except NotFound:
        return None


async def get_inferenceservice(namespace: str, name: str) -> Manifest | None:
    return await get(api.API_VERSION, api.KIND, namespace, name)


async def get_deployment(namespace: str, name: str) -> Manifest | None:
    return await get("apps/v1", "Deployment", namespace, name)


async def has_api_group(group: str) -> bool:
    """Whether an API group is served (e.g. monitoring.coreos.com). Cached for a minute."""
    if _state.client is None:
        raise RuntimeError("governor.adapters.kube is not configured")
    groups = _state.groups if _state.groups is not None else {}
    cached = groups.get(group)
    now = time.monotonic()
    if cached is not None and now - cached[0] < API_GROUP_TTL_S:
        return cached[1]
    response = await _state.client.get(f"/apis/{group}")  # discovery: readable by every authenticated user
    if response.status_code not in (200, 404):
        raise _error(response)
    groups[group] = (now, response.status_code == 200)
    _state.groups = groups
    return response.status_code == 200


# --- writing ---------------------------------------------------------------------------------------

def covers(live: Any, desired: Any) -> bool:
    """True when every field in ``desired`` has the same value in ``live`` (extra live fields are fine)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and covers(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (isinstance(live, list) and len(live) == len(desired)
                and all(covers(a, d) for a, d in zip(live, desired, strict=True)))
    return bool(live == desired)


def _owned_part(manifest: Manifest) -> Manifest:
    """What the operator owns in a child: its labels, owner references and everything but metadata."""
    meta = manifest["metadata"]
    part: Manifest = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")}
    part["metadata"] = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
    return part


async def merge_patch(api_version: str, kind: str, namespace: str, name: str, patch: Manifest,
                      subresource: str | None = None) -> Manifest:
    return await _request("patch", api_version, PLURALS[kind], namespace, name, subresource=subresource,
                          body=patch, content_type="application/merge-patch+json")


async def create(manifest: Manifest) -> Manifest:
    meta = manifest["metadata"]
    return await _request("create", manifest["apiVersion"], PLURALS[manifest["kind"]], meta["namespace"],
                          body=manifest)


async def ensure(manifest: Manifest) -> Outcome:
    """Create the child, or patch the fields that drifted from ``manifest``. Tolerates 409 on create."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    live = await get(api_version, kind, namespace, name)
    if live is None:
        try:
            return Outcome("created", kind, name, await create(manifest))
        except Conflict:
            live = await get(api_version, kind, namespace, name)
            if live is None:
                raise
    if (live.get("metadata") or {}).get("deletionTimestamp"):
        raise Busy(409, "Terminating", f"{kind} {namespace}/{name} is being deleted")
    wanted = _owned_part(manifest)
    if covers(live, wanted):
        return Outcome("unchanged", kind, name, live)
    return Outcome("patched", kind, name, await merge_patch(api_version, kind, namespace, name, wanted))


def secret_value(secret: Manifest | None, key: str) -> str | None:
    data = (secret or {}).get("data") or {}
    raw = data.get(key)
    return base64.b64decode(raw).decode() if raw else None


async def ensure_secret(manifest_for: Callable[[str], Manifest], key: str,
                        new_value: Callable[[], str]) -> tuple[str, Outcome]:
    """A Secret whose value is generated once: never rewritten while it holds a value for ``key``.

    Returns the value in force. Labels and owner references are repaired like any child; the data only
    when the key is missing or empty (then nothing valid is lost).
    """
    probe = manifest_for("")
    namespace, name = probe["metadata"]["namespace"], probe["metadata"]["name"]
    live = await get("v1", "Secret", namespace, name)
    if live is None:
        value = new_value()
        try:
            return value, Outcome("created", "Secret", name, await create(manifest_for(value)))
        except Conflict:
            live = await get("v1", "Secret", namespace, name)
            if live is None:
                raise
    current = secret_value(live, key)
    if current:
        wanted = {"metadata": _owned_part(probe)["metadata"]}
        if covers(live, wanted):
            return current, Outcome("unchanged", "Secret", name, live)
        return current, Outcome("patched", "Secret", name,
                                await merge_patch("v1", "Secret", namespace, name, wanted))
    value = new_value()
    wanted = _owned_part(manifest_for(value))
    patched = await merge_patch("v1", "Secret", namespace, name, wanted)
    return value, Outcome("patched", "Secret", name, patched)


async def update_inferenceservice_status(
    namespace: str, name: str, change: Callable[[Manifest], Manifest | None], attempts: int = 5,
) -> Manifest | None:
    """Read-modify-write of ``status``: ``change(live_object)`` returns a partial status (merge-patched) or
    None for nothing to do. The live resourceVersion is a precondition; on 409 it re-reads and retries.
    Returns the updated object, or None when the InferenceService is gone.
    """
    for _ in range(attempts):
        live = await get_inferenceservice(namespace, name)
        if live is None:
            return None
        status_patch = change(live)
        if not status_patch:
            return live
        version = live["metadata"].get("resourceVersion")
        body = {"metadata": {"resourceVersion": version}, "status": status_patch}
        try:
            return await merge_patch(api.API_VERSION, api.KIND, namespace, name, body, subresource="status")
        except NotFound:
            return None
        except Conflict:
            continue
    raise Conflict(409, "Conflict", f"status of {namespace}/{name} kept changing under {attempts} attempts")
