"""Alertmanager v4 webhook payloads, shaped as Alertmanager 0.25 sends them."""

from __future__ import annotations

from typing import Any

STARTS = "2026-01-01T00:00:00Z"


def alert(
    alertname: str,
    status: str = "firing",
    *,
    namespace: str = "ai",
    name: str = "chat",
    scale: str | None = "out",
    fingerprint: str | None = None,
    starts_at: str = STARTS,
) -> dict[str, Any]:
    labels = {"alertname": alertname, "namespace": namespace, "inferenceservice": name, "severity": "warning"}
    if scale is not None:
        labels["governor_scale"] = scale
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"{alertname} for {namespace}/{name}"},
        "startsAt": starts_at,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-01-01T00:10:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint or f"{alertname}-{namespace}-{name}",
    }


def notification(*alerts: dict[str, Any]) -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {
        "version": "4",
        "groupKey": '{}:{alertname="x"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "vllm-governor",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": list(alerts),
    }
