"""Patch semantics of the test API server (tests/support/kube.py): pure functions over plain dicts.

* RFC 7386 merge patches and the diff that produces one (kmock's store applies merge patches only, so every
  write reaches it as the merge diff between the live object and the wanted one);
* RFC 6902 JSON patches (add/replace/remove/test);
* strategic merge patches, reduced to what kubectl sends for built-in kinds: lists of named items
  (containers, ports, env, volumes …) merge by ``name`` and ``$patch: delete`` removes an item;
* server-side apply, reduced to one rule per field manager: fields the manager applied before and leaves out
  now are removed; everything else merges as in a merge patch (lists are atomic; no conflict detection).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

Path = tuple[str, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new``."""
    diff: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key in old and isinstance(old[key], Mapping) and isinstance(value, Mapping):
            sub = merge_diff(old[key], value)
            if sub:
                diff[key] = sub
        elif key not in old or old[key] != value:
            diff[key] = value
    return diff


def _pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace/remove/test. Raises ValueError on a failed test or a bad path."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = op["op"]
        if kind == "test":
            current = node[int(last)] if isinstance(node, list) else node.get(last)
            if current != op.get("value"):
                raise ValueError(f"test failed at {op['path']}: {current!r} != {op.get('value')!r}")
        elif kind in ("add", "replace"):
            if isinstance(node, list):
                if last == "-":
                    node.append(op["value"])
                elif kind == "add":
                    node.insert(int(last), op["value"])
                else:
                    node[int(last)] = op["value"]
            else:
                node[last] = op["value"]
        elif kind == "remove":
            if isinstance(node, list):
                del node[int(last)]
            else:
                del node[last]
        else:
            raise ValueError(f"unsupported JSON-patch op {kind!r}")
    return doc


def _named(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(i, Mapping) and "name" in i for i in items)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch in which lists of named items merge item by item (see the module docstring)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if value is None:
            result.pop(key, None)
        elif _named(value) and _named(result.get(key)):
            merged = {item["name"]: item for item in result[key]}
            for item in value:
                if item.get("$patch") == "delete":
                    merged.pop(item["name"], None)
                else:
                    merged[item["name"]] = strategic_merge_patch(merged.get(item["name"]), item)
            result[key] = list(merged.values())
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def leaf_paths(doc: Mapping[str, Any], prefix: Path = ()) -> Iterator[Path]:
    """Every field path that holds a value which is not a non-empty mapping (lists count as leaves)."""
    for key, value in doc.items():
        if isinstance(value, Mapping) and value:
            yield from leaf_paths(value, (*prefix, key))
        else:
            yield (*prefix, key)


def _remove(doc: dict[str, Any], path: Path) -> None:
    node: Any = doc
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


def server_side_apply(
    live: Mapping[str, Any], applied: Mapping[str, Any], before: set[Path]
) -> dict[str, Any]:
    """``live`` after one manager applies ``applied``, having applied the fields ``before`` last time."""
    result: dict[str, Any] = merge_patch(copy.deepcopy(dict(live)), _without_nulls(applied))
    now = set(leaf_paths(applied))
    for path in sorted(before - now, key=len, reverse=True):
        if path[0] not in ("apiVersion", "kind") and not any(p[: len(path)] == path for p in now):
            _remove(result, path)
    return result


def _without_nulls(doc: Any) -> Any:
    if isinstance(doc, Mapping):
        return {k: _without_nulls(v) for k, v in doc.items() if v is not None}
    return doc
