"""The one adapter that talks to the Kubernetes API (besides Kopf's own watching, patching and Events).

Client: a :class:`Kube` object holds one ``httpx.AsyncClient`` (already a dependency; async, typed, HTTP/1.1
keep-alive) for one :class:`Connection` (governor.adapters.kube_connection). The operator makes one per run
(kept in Kopf's memo, in the OperatorContext) and its login handler connects it with the same credentials
Kopf logs in with, so the operator has one notion of "the cluster"; tests make their own. Nothing here is
module-level mutable state. Every request goes through :meth:`Kube._request`, which refuses any (group,
resource, verb) missing from :data:`PERMISSIONS`: that table is the least-privilege RBAC of this module, and a
test derives the ClusterRole from it.

Writes are idempotent: ``POST``; on 409 read and merge-patch; names are deterministic (builders.names).
Drift is "a field we set differs": the live object must contain the desired fields (``covers``); fields
the API server or other controllers add are left alone. Status updates are read-modify-write with the
resourceVersion as a precondition (409 → re-read), so two writers of conditions never lose each other's.

Faults: a request that fails in transport (timeout, reset, refused) raises :class:`Unreachable`, a
:class:`KubeError`, so callers that handle API errors handle these too. Every request is retried on 500, 502,
503, 504 and transport errors with a short exponential backoff (tenacity): every request here is safe to
repeat. Reads trivially; merge patches set absolute values (and status patches carry a resourceVersion
precondition); a create whose first answer was lost gets 409 on its retry, which ``ensure`` reads as "exists".
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import httpx
import tenacity

from governor.adapters.kube_connection import MAX_IN_FLIGHT
from governor.adapters.kube_connection import Connection as Connection  # re-exported: kube.Connection
from governor.core import spec as api

Manifest = dict[str, Any]
Verb = Literal["get", "list", "watch", "create", "patch", "delete"]

# (api group, resource) → verbs this module uses. Kopf itself additionally needs: list/watch on every
# resource it serves (inferenceservices and the watched children), patch on inferenceservices (finalizers,
# annotations), create on events, and get on customresourcedefinitions for discovery.
PERMISSIONS: dict[tuple[str, str], frozenset[Verb]] = {
    # patch: the replica planner, the only replicas writer (spec.replicas with its state's annotation)
    (api.GROUP, api.PLURAL): frozenset({"get", "patch"}),
    (api.GROUP, f"{api.PLURAL}/status"): frozenset({"patch"}),
    ("apps", "deployments"): frozenset({"get", "create", "patch"}),
    ("", "services"): frozenset({"get", "create", "patch"}),
    ("", "secrets"): frozenset({"get", "create", "patch"}),
    ("policy", "poddisruptionbudgets"): frozenset({"get", "create", "patch"}),
    ("monitoring.coreos.com", "podmonitors"): frozenset({"get", "create", "patch"}),
    ("networking.k8s.io", "networkpolicies"): frozenset({"get", "create", "patch"}),
}
PLURALS: dict[str, str] = {
    "Deployment": "deployments",
    "Service": "services",
    "Secret": "secrets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "PodMonitor": "podmonitors",
    "NetworkPolicy": "networkpolicies",
    api.KIND: api.PLURAL,
}
_HTTP_VERB: dict[Verb, str] = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "patch": "PATCH",
    "delete": "DELETE",
}
API_GROUP_TTL_S = 60.0
RETRIED_STATUSES = frozenset({500, 502, 503, 504})
# 4 attempts, 0.2 s, 0.4 s, 0.8 s apart (+ up to 0.1 s jitter): rides out a blip of a busy API server while a
# caller (a reconcile, a control-loop tick) is held at most a few seconds beyond its requests' timeouts.
ATTEMPTS = 4
BACKOFF_S = 0.2


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


class Unreachable(KubeError):
    """The request failed in transport (timeout, connection refused or reset): no answer from the server."""

    def __init__(self, error: httpx.TransportError) -> None:
        super().__init__(0, "Unreachable", f"{type(error).__name__}: {error}")


def _retried(error: BaseException) -> bool:
    if isinstance(error, Unreachable):
        return True
    return isinstance(error, KubeError) and error.status in RETRIED_STATUSES


@dataclass(frozen=True)
class Outcome:
    action: Literal["created", "patched", "unchanged"]
    kind: str
    name: str
    body: Manifest


def _split(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _path(
    api_version: str,
    plural: str,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
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


def _error(response: httpx.Response) -> KubeError:
    try:
        payload = response.json()
    except ValueError:
        payload = {}
    reason = str(payload.get("reason") or response.reason_phrase)
    message = str(payload.get("message") or response.text[:200])
    cls = {404: NotFound, 409: Conflict}.get(response.status_code, KubeError)
    return cls(response.status_code, reason, message)


def covers(live: Any, desired: Any) -> bool:
    """True when every field in ``desired`` has the same value in ``live`` (extra live fields are fine)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and covers(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(covers(a, d) for a, d in zip(live, desired, strict=True))
        )
    return bool(live == desired)


def _owned_part(manifest: Manifest) -> Manifest:
    """What the operator owns in a child: its labels, owner references and everything but metadata."""
    meta = manifest["metadata"]
    part: Manifest = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")}
    part["metadata"] = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
    return part


def secret_value(secret: Manifest | None, key: str) -> str | None:
    data = (secret or {}).get("data") or {}
    raw = data.get(key)
    return base64.b64decode(raw).decode() if raw else None


class Kube:
    """The adapter: one HTTP client for one connection, and the operations the operator needs.

    Made unconnected (the operator's startup handler) and connected by :meth:`connect` (its login handler,
    again whenever Kopf logs in anew), or connected at once (``Kube(connection)``; tests). The owner closes
    it (:meth:`aclose`, or ``async with``).
    """

    def __init__(
        self, connection: Connection | None = None, *, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S
    ) -> None:
        self.connection = connection
        self._retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_retried),
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_exponential(multiplier=backoff_s, max=4 * backoff_s)
            + tenacity.wait_random(0, backoff_s / 2),
            reraise=True,
        )
        self._client = connection.client() if connection is not None else None
        self._groups: dict[str, tuple[float, bool]] = {}
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)  # see kube_connection.MAX_IN_FLIGHT

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def connect(self, connection: Connection) -> None:
        """Use ``connection`` from now on; a re-login with the same credentials keeps the open client."""
        if connection == self.connection and self._client is not None:
            return
        previous, self._client = self._client, connection.client()
        self.connection, self._groups = connection, {}
        if previous is not None:  # its credentials were refused or replaced: nothing to keep it for
            await previous.aclose()

    async def aclose(self) -> None:
        client, self._client, self.connection = self._client, None, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("the kube adapter is not connected: the operator's login handler connects it")
        return self._client

    async def _request(
        self,
        verb: Verb,
        api_version: str,
        plural: str,
        namespace: str | None,
        name: str | None = None,
        *,
        subresource: str | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Manifest:
        group = _split(api_version)[0]
        resource = f"{plural}/{subresource}" if subresource else plural
        if verb not in PERMISSIONS.get((group, resource), frozenset()):
            raise PermissionError(f"the kube adapter does not declare {verb} on {group or 'core'}/{resource}")
        response = await self._send(
            _HTTP_VERB[verb],
            _path(api_version, plural, namespace, name, subresource),
            json=body,
            headers={"Content-Type": content_type} if body is not None else None,
        )
        if response.status_code >= 400:
            raise _error(response)
        result: Manifest = response.json()
        return result

    async def _send(self, method: str, path: str, **options: Any) -> httpx.Response:
        """One request, retried (see the module docstring); the last error is raised when all fail."""
        client = self._http()
        async for attempt in self._retrying.copy():  # a copy per call: the retry state is per request
            with attempt:
                try:
                    async with self._slot():
                        response = await client.request(method, path, **options)
                except httpx.TransportError as error:
                    raise Unreachable(error) from error
                if response.status_code in RETRIED_STATUSES:
                    raise _error(response)
                return response
        raise AssertionError("tenacity re-raises the last error")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the MAX_IN_FLIGHT request slots. Waiting for one counts as waiting for a pooled connection
        did before: past the connection's timeout it is an httpx.PoolTimeout (retried, then Unreachable)."""
        timeout_s = self.connection.timeout_s if self.connection is not None else None
        try:
            async with asyncio.timeout(timeout_s):
                await self._in_flight.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout(f"no request slot free within {timeout_s} s") from None
        try:
            yield
        finally:
            self._in_flight.release()

    # --- reading -----------------------------------------------------------------------------------

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        try:
            return await self._request("get", api_version, PLURALS[kind], namespace, name)
        except NotFound:
            return None

    async def get_inferenceservice(self, namespace: str, name: str) -> Manifest | None:
        return await self.get(api.API_VERSION, api.KIND, namespace, name)

    async def get_deployment(self, namespace: str, name: str) -> Manifest | None:
        return await self.get("apps/v1", "Deployment", namespace, name)

    async def has_api_group(self, group: str) -> bool:
        """Whether an API group is served (e.g. monitoring.coreos.com). Cached for a minute."""
        self._http()
        cached = self._groups.get(group)
        now = time.monotonic()
        if cached is not None and now - cached[0] < API_GROUP_TTL_S:
            return cached[1]
        response = await self._send("GET", f"/apis/{group}")  # discovery: readable by any authenticated user
        if response.status_code not in (200, 404):
            raise _error(response)
        self._groups[group] = (now, response.status_code == 200)
        return response.status_code == 200

    # --- writing -----------------------------------------------------------------------------------

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Manifest,
        subresource: str | None = None,
    ) -> Manifest:
        return await self._request(
            "patch",
            api_version,
            PLURALS[kind],
            namespace,
            name,
            subresource=subresource,
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def create(self, manifest: Manifest) -> Manifest:
        meta = manifest["metadata"]
        return await self._request(
            "create", manifest["apiVersion"], PLURALS[manifest["kind"]], meta["namespace"], body=manifest
        )

    async def _create_unless_present(
        self, probe: Manifest, manifest: Callable[[], Manifest], attempts: int = 3
    ) -> Manifest | Outcome:
        """The live object (named like ``probe``), or the Outcome of creating ``manifest()`` when absent.

        A 409 on create is "it exists" (a racing writer, or a retried create that had landed): read it. If
        the read still finds nothing (it was deleted meanwhile, or the 409 was spurious), create again.
        """
        api_version, kind = probe["apiVersion"], probe["kind"]
        namespace, name = probe["metadata"]["namespace"], probe["metadata"]["name"]
        for attempt in range(attempts):
            live = await self.get(api_version, kind, namespace, name)
            if live is not None:
                return live
            try:
                return Outcome("created", kind, name, await self.create(manifest()))
            except Conflict:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def ensure(self, manifest: Manifest) -> Outcome:
        """Create the child, or patch the fields that drifted from ``manifest``. Tolerates 409 on create."""
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        live = await self._create_unless_present(manifest, lambda: manifest)
        if isinstance(live, Outcome):
            return live
        if (live.get("metadata") or {}).get("deletionTimestamp"):
            raise Busy(409, "Terminating", f"{kind} {namespace}/{name} is being deleted")
        wanted = _owned_part(manifest)
        if covers(live, wanted):
            return Outcome("unchanged", kind, name, live)
        patched = await self.merge_patch(api_version, kind, namespace, name, wanted)
        return Outcome("patched", kind, name, patched)

    async def ensure_secret(
        self, manifest_for: Callable[[str], Manifest], key: str, new_value: Callable[[], str]
    ) -> tuple[str, Outcome]:
        """A Secret whose value is generated once: never rewritten while it holds a value for ``key``.

        Returns the value in force. Labels and owner references are repaired like any child; the data only
        when the key is missing or empty (then nothing valid is lost).
        """
        probe = manifest_for("")
        namespace, name = probe["metadata"]["namespace"], probe["metadata"]["name"]
        value = new_value()
        live = await self._create_unless_present(probe, lambda: manifest_for(value))
        if isinstance(live, Outcome):
            return value, live
        current = secret_value(live, key)
        if current:
            wanted = {"metadata": _owned_part(probe)["metadata"]}
            if covers(live, wanted):
                return current, Outcome("unchanged", "Secret", name, live)
            return current, Outcome(
                "patched", "Secret", name, await self.merge_patch("v1", "Secret", namespace, name, wanted)
            )
        value = new_value()
        patched = await self.merge_patch("v1", "Secret", namespace, name, _owned_part(manifest_for(value)))
        return value, Outcome("patched", "Secret", name, patched)

    async def update_inferenceservice_status(
        self,
        namespace: str,
        name: str,
        change: Callable[[Manifest], Manifest | None],
        attempts: int = 5,
        known: Mapping[str, Any] | None = None,
    ) -> Manifest | None:
        """Read-modify-write of ``status``: ``change(live_object)`` returns a partial status (merge-patched)
        or None for nothing to do. The live resourceVersion is a precondition; on 409 it re-reads and
        retries. `known`, an up-to-date copy (a Kopf daemon's body, which Kopf's watch keeps current),
        replaces the first read: a tick then costs one request, not two, which matters at hundreds of
        objects. Returns the updated object, or None when the InferenceService is gone.
        """
        for attempt in range(attempts):
            version = (known.get("metadata") or {}).get("resourceVersion") if known is not None else None
            if attempt == 0 and known is not None and version:
                live: Manifest | None = dict(known)
            else:
                live = await self.get_inferenceservice(namespace, name)
            if live is None:
                return None
            status_patch = change(live)
            if not status_patch:
                return live
            version = live["metadata"].get("resourceVersion")
            body = {"metadata": {"resourceVersion": version}, "status": status_patch}
            try:
                return await self.merge_patch(
                    api.API_VERSION, api.KIND, namespace, name, body, subresource="status"
                )
            except NotFound:
                return None
            except Conflict:
                continue
        raise Conflict(
            409, "Conflict", f"status of {namespace}/{name} kept changing under {attempts} attempts"
        )
