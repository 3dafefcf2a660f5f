"""Alertmanager notifications → replica steps. Pure: parsing, authentication and decisions; no I/O.

The receiver (governor.handlers.webhook) authenticates the request, parses it here, asks :func:`decide`
what to do, and hands each step to the replica planner (the only writer of replicas, DESIGN.md "Who owns
replicas").

Which alerts act (labels set by the shipped rules, governor/observability/alerts.py):
- ``governor_scale="out"`` firing: scale the InferenceService named by ``namespace`` and ``inferenceservice``
  (or ``name``) out by one;
- ``governor_scale="in"`` (sustained headroom) firing while no scale-out alert of that object fires, or a
  scale-out alert resolving while headroom fires: scale in by one;
- anything else is acknowledged and ignored.
Idempotence: Alertmanager repeats a notification every repeat_interval and re-sends the whole group when one
alert changes. An alert (its fingerprint, in one firing episode given by startsAt) acts once; if it still
fires ``repeat_after_s`` after the step it caused, the step did not suffice and it acts once more. The
planner's cooldowns and bounds apply on top, so the same overload seen by the law and an alert is one step.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from governor.observability.alerts import SCALE_IN, SCALE_LABEL, SCALE_OUT
from governor.observability.queries import ISVC_LABEL, NAMESPACE_LABEL

MAX_BODY_BYTES = 1 << 20
SOURCE = "alertmanager"


class WebhookError(Exception):
    """A request the receiver refuses; ``status`` and ``code`` go into the JSON error answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class Alert(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    starts_at: datetime = Field(alias="startsAt")
    ends_at: datetime | None = Field(default=None, alias="endsAt")
    fingerprint: str = Field(min_length=1)


class Notification(BaseModel):
    """Alertmanager's webhook payload, version 4."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Literal["4"]
    group_key: str = Field(alias="groupKey")
    status: Literal["firing", "resolved"]
    receiver: str
    truncated_alerts: int = Field(default=0, alias="truncatedAlerts", ge=0)
    alerts: list[Alert]


def authorized(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>`` or Basic auth whose password is the token (any user name)."""
    if not token or not header:
        return False
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() == "bearer":
        return hmac.compare_digest(credentials.strip().encode(), token.encode())
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(decoded.partition(":")[2].encode(), token.encode())
    return False


def parse(body: bytes, content_type: str | None = "application/json") -> Notification:
    if len(body) > MAX_BODY_BYTES:
        raise WebhookError(413, "too_large", f"payload above {MAX_BODY_BYTES} bytes")
    if content_type is not None and not content_type.startswith("application/json"):
        raise WebhookError(415, "unsupported_media_type", f"expected application/json, got {content_type}")
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WebhookError(400, "malformed", f"not JSON: {error}") from None
    try:
        return Notification.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()[:5]
        )
        raise WebhookError(422, "invalid", f"not an Alertmanager v4 notification: {problems}") from None


Target = tuple[str, str]  # (namespace, InferenceService name)


def target_of(alert: Alert) -> Target | None:
    namespace = alert.labels.get(NAMESPACE_LABEL)
    name = alert.labels.get(ISVC_LABEL) or alert.labels.get("name")
    return (namespace, name) if namespace and name else None


@dataclass(frozen=True)
class Step:
    namespace: str
    name: str
    direction: Literal[-1, 1]
    reason: str
    alerts: tuple[str, ...]  # alert names behind the step


@dataclass(frozen=True)
class Skipped:
    alertname: str
    why: str


@dataclass(frozen=True)
class ReceiverState:
    """What the receiver remembers between notifications (in memory; the planner's own state is in status)."""

    firing_out: dict[Target, frozenset[str]] = field(default_factory=dict)  # target -> fingerprints
    headroom: dict[Target, frozenset[str]] = field(default_factory=dict)
    acted: dict[str, tuple[datetime, float]] = field(default_factory=dict)  # fingerprint -> (startsAt, when)


@dataclass(frozen=True)
class Decision:
    steps: tuple[Step, ...]
    skipped: tuple[Skipped, ...]
    state: ReceiverState


Book = dict[Target, frozenset[str]]


def _with(mapping: Book, key: Target, fp: str, present: bool) -> Book:
    updated = dict(mapping)
    members = set(updated.get(key, frozenset()))
    if present:
        members.add(fp)
    else:
        members.discard(fp)
    if members:
        updated[key] = frozenset(members)
    else:
        updated.pop(key, None)
    return updated


@dataclass
class _Deciding:
    """The working state of one :func:`decide` call."""

    firing_out: Book
    headroom: Book
    acted: dict[str, tuple[datetime, float]]
    now_s: float
    repeat_after_s: float
    skipped: list[Skipped] = field(default_factory=list)
    wanted: dict[Target, tuple[Literal[-1, 1], list[str], str]] = field(default_factory=dict)

    def due(self, alert: Alert, key: str) -> bool:
        last = self.acted.get(key)
        return last is None or last[0] != alert.starts_at or self.now_s - last[1] >= self.repeat_after_s

    def want(self, target: Target, direction: Literal[-1, 1], alertname: str, reason: str) -> None:
        current = self.wanted.get(target)
        if current is None or direction > current[0]:
            self.wanted[target] = (direction, [alertname], reason)
        elif direction == current[0]:
            current[1].append(alertname)

    def record(self, alert: Alert) -> None:
        """What fires, so that a group carrying both kinds decides on the whole picture."""
        target, kind = target_of(alert), alert.labels.get(SCALE_LABEL)
        if target is None or kind not in (SCALE_OUT, SCALE_IN):
            return
        firing = alert.status == "firing"
        if kind == SCALE_OUT:
            self.firing_out = _with(self.firing_out, target, alert.fingerprint, firing)
        else:
            self.headroom = _with(self.headroom, target, alert.fingerprint, firing)

    def judge(self, alert: Alert) -> None:
        alertname = alert.labels.get("alertname", alert.fingerprint)
        target, kind = target_of(alert), alert.labels.get(SCALE_LABEL)
        if kind not in (SCALE_OUT, SCALE_IN):
            self.skipped.append(Skipped(alertname, f"no {SCALE_LABEL} label: not an autoscaling alert"))
        elif target is None:
            self.skipped.append(Skipped(alertname, f"labels lack {NAMESPACE_LABEL} and {ISVC_LABEL}"))
        elif kind == SCALE_OUT:
            self._scale_out(alert, alertname, target)
        else:
            self._headroom(alert, alertname, target)

    def _scale_out(self, alert: Alert, alertname: str, target: Target) -> None:
        if alert.status == "firing":
            if self.due(alert, alert.fingerprint):
                self.acted[alert.fingerprint] = (alert.starts_at, self.now_s)
                self.want(target, 1, alertname, f"{alertname} firing since {alert.starts_at.isoformat()}")
            else:
                self.skipped.append(Skipped(alertname, "repeat of a notification already acted on"))
            return
        self.acted.pop(alert.fingerprint, None)
        resolved_key = f"{alert.fingerprint}/resolved"
        if self.headroom.get(target) and not self.firing_out.get(target) and self.due(alert, resolved_key):
            self.acted[resolved_key] = (alert.starts_at, self.now_s)
            self.want(target, -1, alertname, f"{alertname} resolved and headroom sustained")
        else:
            self.skipped.append(Skipped(alertname, "resolved; no sustained headroom, or already acted on"))

    def _headroom(self, alert: Alert, alertname: str, target: Target) -> None:
        if alert.status != "firing":
            self.acted.pop(alert.fingerprint, None)
            self.skipped.append(Skipped(alertname, "headroom resolved"))
        elif self.firing_out.get(target):
            self.skipped.append(Skipped(alertname, "headroom while a scale-out alert still fires"))
        elif self.due(alert, alert.fingerprint):
            self.acted[alert.fingerprint] = (alert.starts_at, self.now_s)
            self.want(target, -1, alertname, f"{alertname}: sustained headroom, no scale-out alert firing")
        else:
            self.skipped.append(Skipped(alertname, "repeat of a notification already acted on"))


def decide(state: ReceiverState, notification: Notification, now_s: float, repeat_after_s: float) -> Decision:
    """The steps one notification asks for, at most one per InferenceService (out wins over in)."""
    work = _Deciding(dict(state.firing_out), dict(state.headroom), dict(state.acted), now_s, repeat_after_s)
    for alert in notification.alerts:
        work.record(alert)
    for alert in notification.alerts:
        work.judge(alert)
    steps = tuple(
        Step(namespace, name, direction, reason, tuple(names))
        for (namespace, name), (direction, names, reason) in sorted(work.wanted.items())
    )
    new_state = replace(state, firing_out=work.firing_out, headroom=work.headroom, acted=work.acted)
    return Decision(steps=steps, skipped=tuple(work.skipped), state=new_state)
