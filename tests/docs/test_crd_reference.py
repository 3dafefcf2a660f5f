"""The CRD reference in docs/ is generated from the models: it must not drift from them."""

from governor import crddoc


def test_reference_matches_models() -> None:
    assert crddoc.DEFAULT_OUT.read_text() == crddoc.render(), "run: python -m governor.crddoc"


def test_reference_names_every_top_level_spec_field() -> None:
    from governor.crd import build_crd

    text = crddoc.render()
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in schema["properties"]["spec"]["properties"]:
        assert f"| `{name}` |" in text
