"""Label and field selectors as the API server applies them on list and watch (pure functions).

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``.
Field selectors: ``path=v``, ``path==v``, ``path!=v`` with dotted paths from the object's root
(``metadata.name``, ``involvedObject.uid`` …); a real server allows only some paths per kind, this one any.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def _term(term: str, labels: Mapping[str, str]) -> bool:
    found = _SET.match(term)
    if found:
        key, op, values = found.groups()
        wanted = {value.strip() for value in values.split(",")}
        return (labels.get(key) in wanted) if op == "in" else (labels.get(key) not in wanted)
    if "!=" in term:
        key, value = (s.strip() for s in term.split("!=", 1))
        return labels.get(key) != value
    if "=" in term:
        key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
        return labels.get(key) == value
    if term.startswith("!"):
        return term[1:].strip() not in labels
    return term in labels


def labels_match(selector: str | None, labels: Mapping[str, str] | None) -> bool:
    return all(_term(term, labels or {}) for term in _split(selector or ""))


def _field(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for key in path.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return "" if node is None else str(node)


def fields_match(selector: str | None, obj: Mapping[str, Any]) -> bool:
    for term in _split(selector or ""):
        if "!=" in term:
            path, value = term.split("!=", 1)
            if _field(obj, path.strip()) == value.strip():
                return False
        else:
            path, value = term.replace("==", "=").split("=", 1)
            if _field(obj, path.strip()) != value.strip():
                return False
    return True


def selected(params: Mapping[str, str], obj: Mapping[str, Any]) -> bool:
    """Whether an object passes a request's ``labelSelector`` and ``fieldSelector`` query parameters."""
    labels = (obj.get("metadata") or {}).get("labels")
    return labels_match(params.get("labelSelector"), labels) and fields_match(
        params.get("fieldSelector"), obj
    )
