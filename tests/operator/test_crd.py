"""The CRD is generated from the models, structural, and accepts the examples."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from governor import crd
from governor.core import spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _schema() -> dict[str, Any]:
    result: dict[str, Any] = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def _as_draft4(node: Any) -> Any:
    """OpenAPI 3.0 → JSON Schema draft 4 (nullable becomes a null type; the rest is already draft 4)."""
    if isinstance(node, list):
        return [_as_draft4(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_draft4(v) for k, v in node.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def test_crds_directory_matches_the_models() -> None:
    on_disk = (ROOT / "crds" / crd.CRD_FILE).read_text()
    assert on_disk == crd.render(), "crds/ drifted from governor/spec.py: run `python -m governor.crd`"
    assert crd.main(["--check", "--out", str(ROOT / "crds")]) == 0


def test_check_mode_fails_on_drift(tmp_path: Path) -> None:
    (tmp_path / crd.CRD_FILE).write_text(crd.render().replace("gisvc", "isvc"))
    assert crd.main(["--check", "--out", str(tmp_path)]) == 1


def test_schema_is_structural() -> None:
    def walk(node: dict[str, Any], path: str) -> None:
        assert not {"$ref", "anyOf", "allOf", "oneOf", "$defs", "const"} & set(node), path
        assert node.get("additionalProperties") is not False, path
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            assert "type" in node, f"{path} has no type"
        for key in ("minimum", "maximum"):
            assert not isinstance(node.get(key), bool), path
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    schema = _schema()
    walk(schema, "")
    status = schema["properties"]["status"]
    assert status["x-kubernetes-preserve-unknown-fields"] is True
    assert status["properties"]["law"]["x-kubernetes-preserve-unknown-fields"] is True
    assert (
        schema["properties"]["spec"]["properties"]["engine"]["properties"]["maxNumSeqs"]["nullable"] is True
    )


def test_crd_is_a_valid_customresourcedefinition() -> None:
    kubernetes_validate.validate(crd.build_crd(), "1.30.0", strict=True)


def test_names_subresources_and_columns() -> None:
    body = crd.build_crd()
    names = body["spec"]["names"]
    assert body["metadata"]["name"] == "inferenceservices.governor.vllm.ai"
    assert names["kind"] == "InferenceService" and "isvc" not in names["shortNames"]
    assert "all" not in names["categories"]
    version = body["spec"]["versions"][0]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    columns = [c["name"].upper() for c in version["additionalPrinterColumns"]]
    assert columns == ["READY", "REPLICAS", "CAP", "P99", "SLO", "MODE", "AGE"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate_against_the_generated_schema(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    jsonschema.Draft4Validator(_as_draft4(_schema())).validate(doc)
    spec.parse_spec(doc["spec"])  # and the operator accepts it


def test_schema_rejects_what_the_api_server_would() -> None:
    validator = jsonschema.Draft4Validator(_as_draft4(_schema()))
    doc = yaml.safe_load((ROOT / "examples" / "minimal.yaml").read_text())
    for path, value in (
        (("slo", "quantile"), 1.0),
        (("replicas",), -1),
        (("slo", "kind"), "p95"),
        (("engine", "gpuMemoryUtilization"), 0),
    ):
        bad = copy.deepcopy(doc)
        node = bad["spec"]
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        assert not validator.is_valid(bad), path
