"""Generate the InferenceService CRD from the pydantic models.

Usage: ``python -m governor.crd [--check] [--out DIR]``.

The schema is structural (what apiextensions.k8s.io/v1 demands): every ``$ref`` is inlined, ``Optional[X]``
becomes ``X`` with ``nullable: true``, JSON-Schema-2020 exclusive bounds become OpenAPI-3.0 booleans,
``additionalProperties: false`` is dropped (the API server prunes unknown fields; the operator reports them as
Invalid), and defaults move into the description (the operator applies them, so the stored object shows what
the user wrote). ``status`` keeps ``x-kubernetes-preserve-unknown-fields`` because Kopf may write its own
fields there; annotations (where Kopf keeps its progress and diff-base here) live in ``metadata``, which the
API server never prunes.

Group ``governor.vllm.ai``; short name ``gisvc`` and category ``governor`` so that KServe's CRD (same kind,
short name ``isvc``) can be installed beside it. With both installed use the full name:
``kubectl get inferenceservices.governor.vllm.ai``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from governor.core import spec, status

CRD_NAME = f"{spec.PLURAL}.{spec.GROUP}"
CRD_FILE = f"{CRD_NAME}.yaml"
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "crds"

_DROP = {"title", "examples", "default", "$defs"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    default = node.get("default")
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "default"}}
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
        return _structural(node, defs)
    if "anyOf" in node:
        return _nullable_union(node, defs, default)
    out = _structural_keys(node, defs)
    if "properties" in out and "type" not in out:
        out["type"] = "object"
    if "enum" in out and "type" not in out:
        out["type"] = "string" if all(isinstance(v, str) for v in out["enum"]) else "integer"
    return _finish(out, False, default)


def _nullable_union(node: dict[str, Any], defs: dict[str, Any], default: Any) -> dict[str, Any]:
    """``anyOf`` of one type and null (pydantic's ``X | None``) becomes that type with ``nullable: true``."""
    options = node.pop("anyOf")
    variants = [v for v in options if v.get("type") != "null"]
    nullable = len(variants) < len(options)
    if len(variants) != 1:
        raise ValueError(f"cannot express a union of {variants!r} structurally")
    inner = variants[0]
    if "$ref" in inner:
        inner = dict(defs[inner["$ref"].split("/")[-1]])
    return _finish(_structural({**inner, **node}, defs), nullable, default)


def _structural_keys(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs)
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = _structural(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    return out


def _finish(out: dict[str, Any], nullable: bool, default: Any) -> dict[str, Any]:
    if nullable:
        out["nullable"] = True
    if default not in (None, "") and not isinstance(default, (dict, list)):
        text = out.get("description", "").rstrip()
        shown = str(default).lower() if isinstance(default, bool) else default
        out["description"] = (f"{text} " if text else "") + f"Default: {shown}."
    return dict(sorted(out.items()))


def schema_of(model: type[spec._Model]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    result: dict[str, Any] = _structural(raw, raw.get("$defs", {}))
    return result


def build_crd() -> dict[str, Any]:
    spec_schema = schema_of(spec.InferenceServiceSpec)
    status_schema = schema_of(status.InferenceServiceStatus)
    status_schema["x-kubernetes-preserve-unknown-fields"] = True
    law = status_schema["properties"]["law"]
    law.update({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    conditions = status_schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    root = {
        "type": "object",
        "description": "A vLLM deployment held inside a latency SLO by moving the engine's concurrency cap.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    column = _column
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "vllm-governor"}},
        "spec": {
            "group": spec.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": spec.KIND,
                "listKind": f"{spec.KIND}List",
                "plural": spec.PLURAL,
                "singular": spec.SINGULAR,
                "shortNames": list(spec.SHORT_NAMES),
                "categories": list(spec.CATEGORIES),
            },
            "versions": [
                {
                    "name": spec.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        column(
                            "Ready",
                            "string",
                            '.status.conditions[?(@.type=="Ready")].status',
                            "Whether all desired replicas serve",
                        ),
                        column("Replicas", "integer", ".status.readyReplicas", "Ready replicas"),
                        column(
                            "Cap", "integer", ".status.cap", "Live concurrency cap (max active sequences)"
                        ),
                        column("P99", "number", ".status.smoothedP99Ms", "Smoothed latency quantile, ms"),
                        column("SLO", "number", ".spec.slo.targetMs", "Latency target, ms"),
                        column("Mode", "string", ".status.mode", "Control mode"),
                        column("Age", "date", ".metadata.creationTimestamp", ""),
                    ],
                }
            ],
        },
    }


def _column(name: str, type_: str, path: str, description: str) -> dict[str, Any]:
    out = {"name": name, "type": type_, "jsonPath": path}
    if description:
        out["description"] = description
    return out


def render() -> str:
    header = "# Generated by `python -m governor.crd` from governor/spec.py. Do not edit by hand.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, allow_unicode=True, width=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m governor.crd", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the CRD file")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the models")
    args = parser.parse_args(argv)
    path = args.out / CRD_FILE
    text = render()
    if args.check:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is out of date: run python -m governor.crd", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
