"""Faults a busy or broken API server shows, injected into the test emulator (tests/support/kube.py).

A test arms :class:`Fault` rules on a :class:`FaultyEmulator` and clears them when the fault should stop::

    emulator.inject(Fault(effect="conflict", on=WRITES))      # 409 on every write
    emulator.inject(Fault(effect="error", on={"patch"}, every=2))  # 500 on every second patch
    emulator.inject(Fault(effect="hang", seconds=20, agent="kopf"))  # Kopf's requests get no answer for 20 s
    emulator.inject(Fault(effect="cut", on={"watch"}, times=3))  # 3 watch streams cut mid-event
    emulator.inject(Fault(effect="slow", seconds=0.3, on=ALL))   # every answer 0.3 s late
    emulator.clear()

Requests are classed by what they do: ``create``, ``patch`` (PATCH or PUT of the object), ``status`` and
``scale`` (writes to those subresources), ``delete``, ``watch`` and ``read`` (get, list, discovery). A rule
may also be limited to one resource (plural) and to one client by its User-Agent (``kopf`` for Kopf's own
requests, ``httpx`` for the operator's adapter, governor.adapters.kube). Each rule counts what it injected
(``injected``), so a test can assert the fault really happened.

Effects, each as a real server (or the network in front of it) shows it:

* ``conflict``: 409 Conflict, as for a stale ``resourceVersion`` or an object created meanwhile;
* ``error``: 500 InternalError, nothing written;
* ``hang``: no answer for ``seconds``, then the request is served (a write lands late, as when a client's
  timeout fires while the server is still working);
* ``slow``: like ``hang``, for slow answers that clients should wait for;
* ``cut``: a watch stream sends the first half of its next event's JSON line and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection
from typing import Any, Literal

import aiohttp.web
import attrs
from kmock._internal import enums, k8s, rendering

from tests.support.kube import Emulator

Effect = Literal["conflict", "error", "hang", "slow", "cut"]
WRITES = frozenset({"create", "patch", "status", "scale", "delete"})
ALL = WRITES | {"watch", "read"}
CUT: tuple[Effect, ...] = ("cut",)
HARNESS_AGENT = "test-harness"  # the test's own requests (the user, the kubelet): never faulted


@attrs.define(kw_only=True)
class Fault:
    effect: Effect
    on: Collection[str] = WRITES  # request classes (see the module docstring)
    resource: str | None = None  # a plural, e.g. "inferenceservices"; None: every resource
    agent: str | None = None  # a substring of the User-Agent; None: every client
    seconds: float = 0.0  # hang and slow
    every: int = 1  # hit every n-th matching request (1: each one)
    times: int | None = None  # stop after this many hits; None: until cleared
    matched: int = attrs.field(default=0, init=False)
    injected: int = attrs.field(default=0, init=False)

    def hits(self, kind: str, request: rendering.Request) -> bool:
        """Whether this rule applies to the request (and counts it)."""
        if kind not in self.on or (self.times is not None and self.injected >= self.times):
            return False
        plural = request.resource.plural if request.resource is not None else None
        if self.resource is not None and plural != self.resource:
            return False
        agent = next((v for k, v in request.headers.items() if k.lower() == "user-agent"), "")
        if agent == HARNESS_AGENT:
            return False
        if self.agent is not None and self.agent not in agent:
            return False
        self.matched += 1
        if self.matched % self.every:
            return False
        self.injected += 1
        return True


def request_kind(request: rendering.Request) -> str:
    """The class of a request, as fault rules name it."""
    if request.resource is None:
        return "read"
    if request.action == enums.action.WATCH:
        return "watch"
    if request.action == enums.action.CREATE:
        return "create"
    if request.action == enums.action.DELETE:
        return "delete"
    if request.action == enums.action.UPDATE or (request.method == enums.method.PUT and request.name):
        return request.subresource if request.subresource in ("status", "scale") else "patch"
    return "read"


@attrs.define(kw_only=True)
class FaultyEmulator(Emulator):
    faults: list[Fault] = attrs.field(factory=list)

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def _hit(self, kind: str, request: rendering.Request, effects: Collection[Effect]) -> Fault | None:
        return next((f for f in list(self.faults) if f.effect in effects and f.hits(kind, request)), None)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        kind = request_kind(request)
        delay = self._hit(kind, request, ("hang", "slow"))
        if delay is not None:
            await asyncio.sleep(delay.seconds)
        fault = self._hit(kind, request, ("conflict", "error"))
        if fault is not None and fault.effect == "conflict":
            return await self._render_error(
                k8s.KubernetesError(
                    status=409,
                    reason="Conflict",
                    details={},
                    message="Operation cannot be fulfilled: the object has been modified (injected)",
                )
            )
        if fault is not None:
            return await self._render_error(
                k8s.KubernetesError(
                    status=500,
                    reason="InternalError",
                    details={},
                    message="an error on the server has prevented the request from succeeding (injected)",
                )
            )
        return await super()._handle(request)

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        async for event in super()._serve_watch(request):
            if event == b"" or not self._hit("watch", request, CUT):
                yield event
                continue
            line = json.dumps(event).encode()
            yield line[: len(line) // 2]  # half an event, no newline
            await asyncio.sleep(0.05)  # let the half leave the socket before the connection drops
            transport = request._raw_request.transport if request._raw_request is not None else None
            if transport is not None:
                transport.abort()
            return  # kmock's renderer ignores the ConnectionError of writing the end to a dead socket


def events_of(emulator: Emulator, kind: str, agent: str | None = None) -> list[Any]:
    """The requests of one class the emulator served (for what crossed the wire)."""
    found = []
    for request in list(emulator):
        user_agent = next((v for k, v in request.headers.items() if k.lower() == "user-agent"), "")
        if request_kind(request) == kind and (agent is None or agent in user_agent):
            found.append(request)
    return found
