"""What the API server does with a custom resource's body against its CRD's ``openAPIV3Schema`` (pure).

* value validation (types, bounds, enums, patterns, required) with jsonschema's draft-4 validator, the
  dialect of OpenAPI 3.0 once ``nullable`` becomes a null type; failures become a 422 ``Invalid`` Status
  with one cause per field, worded like the real server's (``spec.replicas: Invalid value: -1: …``);
* unknown fields: rejected under ``fieldValidation=Strict`` (kubectl's default) as a 400 ``BadRequest``
  "strict decoding error", otherwise pruned, except below ``x-kubernetes-preserve-unknown-fields``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema  # type: ignore[import-untyped]

META_FIELDS = {"apiVersion", "kind", "metadata"}


def as_draft4(node: Any) -> Any:
    """OpenAPI 3.0 → JSON Schema draft 4 (``nullable`` becomes a null type; ``x-kubernetes-*`` dropped)."""
    if isinstance(node, list):
        return [as_draft4(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: as_draft4(v) for k, v in node.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if node.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def unknown_fields(doc: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Dotted paths of fields the schema does not declare (what pruning would drop)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    if isinstance(doc, Mapping) and schema.get("type") == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in doc.items():
            child = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                found += unknown_fields(value, properties[key], child)
            elif isinstance(extra, Mapping):
                found += unknown_fields(value, extra, child)
            elif properties is not None and not (path == "" and key in META_FIELDS):
                found.append(child)
    elif isinstance(doc, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(doc):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found


def prune(doc: dict[str, Any], unknown: list[str]) -> dict[str, Any]:
    """``doc`` without the fields at ``unknown`` (paths from :func:`unknown_fields`)."""
    for dotted in unknown:
        node: Any = doc
        *parents, last = dotted.replace("[", ".[").split(".")
        for part in parents:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        if isinstance(node, dict):
            node.pop(last, None)
    return doc


def _field(error: jsonschema.ValidationError) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path]
    return "".join(parts).lstrip(".")


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return names.get(type(value), "null")


def _cause(error: jsonschema.ValidationError) -> dict[str, str]:
    where = _field(error)
    if error.validator == "required":
        missing = str(error.message).split("'")[1]
        where = f"{where}.{missing}" if where else missing
        return {"reason": "FieldValueRequired", "field": where, "message": "Required value"}
    value, rule = error.instance, error.validator
    worded = {
        "minimum": f"should be greater than or equal to {error.validator_value}",
        "maximum": f"should be less than or equal to {error.validator_value}",
        "minLength": f"should be at least {error.validator_value} chars long",
        "maxLength": f"may not be longer than {error.validator_value}",
        "pattern": f"should match '{error.validator_value}'",
        "type": f"must be of type {error.validator_value}",
        "enum": "Unsupported value",
    }.get(str(rule), str(error.message))
    if rule == "enum":
        allowed = ", ".join(f'"{v}"' for v in error.validator_value if v is not None)
        return {
            "reason": "FieldValueNotSupported",
            "field": where,
            "message": f"Unsupported value: {json.dumps(value)}: supported values: {allowed}",
        }
    if rule == "type":
        return {
            "reason": "FieldValueTypeInvalid",
            "field": where,
            "message": f'Invalid value: "{_json_type(value)}": {where} in body {worded}',
        }
    return {
        "reason": "FieldValueInvalid",
        "field": where,
        "message": f"Invalid value: {json.dumps(value)}: {where} in body {worded}",
    }


def invalid_causes(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> list[dict[str, str]]:
    """The real server's causes for a body that breaks the schema's value rules (empty when it is valid)."""
    validator = jsonschema.Draft4Validator(as_draft4(schema))
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [_cause(error) for error in errors]


def invalid_message(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> str:
    details = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return (
        f'{kind}.{group} "{name}" is invalid: [{details}]'
        if len(causes) > 1
        else (f'{kind}.{group} "{name}" is invalid: {details}')
    )
