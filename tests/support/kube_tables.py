"""Server-side printing (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``), as kubectl get asks.

A CRD's ``additionalPrinterColumns`` become the columns after NAME, evaluated with the JSONPath subset CRDs
use (``.a.b``, ``.a[0]``, ``.a[*].b``, ``.a[?(@.k=="v")].b``); ``date`` columns render as ages (``3m``),
as the real server's table convertor does. Resources without printer columns get NAME and AGE.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

_STEP = re.compile(
    r"\.([A-Za-z0-9_-]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]"
)
DEFAULT_COLUMNS = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj`` (empty when nothing matches)."""
    nodes, position = [obj], 0
    for step in _STEP.finditer(path):
        if step.start() != position:
            raise ValueError(f"unsupported JSONPath {path!r}")
        position = step.end()
        key, index, field, value = step.groups()
        found: list[Any] = []
        for node in nodes:
            if key is not None and isinstance(node, Mapping) and key in node:
                found.append(node[key])
            elif index == "*" and isinstance(node, list):
                found.extend(node)
            elif index is not None and index != "*" and isinstance(node, list) and int(index) < len(node):
                found.append(node[int(index)])
            elif field is not None and isinstance(node, list):
                found.extend(
                    item for item in node if [str(v) for v in jsonpath(item, "." + field)][:1] == [value]
                )
        nodes = found
    if position != len(path):
        raise ValueError(f"unsupported JSONPath {path!r}")
    return nodes


def human_duration(seconds: float) -> str:
    """Kubernetes' HumanDuration: 45s, 3m20s, 12m, 5h3m, 30h, 3d4h, 20d, 2y30d."""
    s = int(seconds)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{max(s, 0)}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 365 * 8 else f"{days // 365}y"


def _cell(column_type: str, values: list[Any], now: datetime.datetime) -> Any:
    if not values:
        return None
    value = values[0] if len(values) == 1 else ",".join(str(v) for v in values)
    if column_type == "date" and isinstance(value, str):
        stamp = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return human_duration((now - stamp).total_seconds())
    if column_type == "integer" and isinstance(value, int | float):
        return int(value)
    if column_type == "number" and isinstance(value, int | float):
        return value
    return value if isinstance(value, str | int | float | bool) else str(value)


def _row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return dict(obj)
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    objects: Sequence[Mapping[str, Any]],
    columns: Sequence[Mapping[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects`` with a NAME column, then ``columns``."""
    now = datetime.datetime.now(datetime.UTC)
    columns = list(columns) or DEFAULT_COLUMNS
    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "priority": 0,
            "description": "Name must be unique within a namespace.",
        }
    ]
    definitions += [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "priority": c.get("priority", 0),
            "description": c.get("description", ""),
        }
        for c in columns
    ]
    rows = []
    for obj in objects:
        cells = [obj.get("metadata", {}).get("name", "")]
        cells += [_cell(c.get("type", "string"), jsonpath(obj, c["jsonPath"]), now) for c in columns]
        row: dict[str, Any] = {"cells": cells}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a Table first (kubectl get sends Table, then plain JSON)."""
    first = accept.split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first
