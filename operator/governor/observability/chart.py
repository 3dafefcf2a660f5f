"""The Helm chart's values.schema.json, generated so the alert settings it allows (SLO kinds and the bucket
boundaries each admits) are the ones alerts.py accepts."""

from __future__ import annotations

import json
from typing import Any

from governor.core.signals import LatencyKind
from governor.observability.alerts import SLO_THRESHOLDS

_DURATION = {"type": "string", "pattern": "^[0-9]+(ms|s|m|h|d)$"}
_NUMBER_STRING = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        body["required"] = list(required)
    return body


def _slo() -> dict[str, Any]:
    per_kind = [
        {
            "if": {"properties": {"latency": {"const": kind.value}}},
            "then": {"properties": {"thresholdSeconds": {"enum": list(SLO_THRESHOLDS[kind])}}},
        }
        for kind in LatencyKind
    ]
    slo = _object(
        {
            "latency": {"enum": [kind.value for kind in LatencyKind]},
            "thresholdSeconds": {
                "type": "string",
                "description": "A bucket boundary of the histogram (in vLLM's and the runtime's buckets).",
            },
            "objective": {"type": "string", "pattern": r"^0\.[0-9]*[1-9]$"},
        },
        ("latency", "thresholdSeconds", "objective"),
    )
    slo["allOf"] = per_kind
    return slo


def values_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "vllm-governor chart values",
        **_object(
            {
                "image": _object(
                    {
                        "repository": {"type": "string", "minLength": 1},
                        "tag": {"type": "string"},
                        "digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
                        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    },
                    ("repository",),
                ),
                "imagePullSecrets": {"type": "array", "items": {"type": "object"}},
                "nameOverride": {"type": "string"},
                "fullnameOverride": {"type": "string"},
                "watchNamespaces": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "serviceAccount": _object(
                    {
                        "create": {"type": "boolean"},
                        "name": {"type": "string"},
                        "annotations": _LABELS,
                    }
                ),
                "rbac": _object({"create": {"type": "boolean"}}),
                "resources": {"type": "object"},
                "podAnnotations": _LABELS,
                "nodeSelector": _LABELS,
                "tolerations": {"type": "array", "items": {"type": "object"}},
                "affinity": {"type": "object"},
                "extraEnv": {"type": "array", "items": {"type": "object", "required": ["name"]}},
                "probes": _object({"port": _PORT}),
                "metrics": _object({"port": _PORT}),
                "webhook": _object(
                    {
                        "enabled": {"type": "boolean"},
                        "port": _PORT,
                        "repeatAfterSeconds": {"type": "integer", "minimum": 0},
                        "auth": _object(
                            {
                                "token": {"type": "string"},
                                "existingSecret": {"type": "string"},
                                "secretKey": {"type": "string", "minLength": 1},
                            }
                        ),
                    }
                ),
                "networkPolicy": _object(
                    {
                        "enabled": {"type": "boolean"},
                        "ingressFrom": {"type": "array", "items": {"type": "object"}},
                    }
                ),
                "serviceMonitor": _object(
                    {"enabled": {"type": "boolean"}, "interval": _DURATION, "labels": _LABELS}
                ),
                "podMonitor": _object(
                    {"enabled": {"type": "boolean"}, "interval": _DURATION, "labels": _LABELS}
                ),
                "prometheusRule": _object({"enabled": {"type": "boolean"}, "labels": _LABELS}),
                "alerts": _object(
                    {
                        "slo": _slo(),
                        "queueTimeP95Seconds": _NUMBER_STRING,
                        "headroom": _object({"utilisation": _NUMBER_STRING}),
                        "for": _object(
                            {
                                "queueSaturated": _DURATION,
                                "capAtFloor": _DURATION,
                                "headroom": _DURATION,
                                "metricsAbsent": _DURATION,
                            }
                        ),
                    }
                ),
                "dashboards": _object(
                    {
                        "enabled": {"type": "boolean"},
                        "sidecarLabel": {"type": "string", "minLength": 1},
                        "sidecarLabelValue": {"type": "string"},
                        "namespace": {"type": "string"},
                        "folder": {"type": "string"},
                    }
                ),
            }
        ),
    }


def render_values_schema() -> str:
    return json.dumps(values_schema(), indent=2) + "\n"
