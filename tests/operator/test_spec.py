"""Spec models: cross-field rules with human messages, and defaults from the GPU profile table."""

from __future__ import annotations

from typing import Any

import pytest
from governor.core import profiles
from governor.core.spec import describe, name_problems, parse_spec
from pydantic import ValidationError


def _error(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        parse_spec(raw)
    return describe(info.value)


@pytest.mark.parametrize(("spec", "fragment"), [
    ({"adaptive": {"minCap": 10, "maxCap": 5}}, "adaptive.minCap (10) must not exceed adaptive.maxCap (5)"),
    ({"engine": {"maxNumSeqs": 64}, "adaptive": {"maxCap": 128}},
     "adaptive.maxCap (128) is above engine.maxNumSeqs (64)"),
    ({"resources": {"gpu": {"type": "L4"}}, "adaptive": {"maxCap": 64}},
     "above the default ceiling for L4 GPUs and small models"),
    ({"adaptive": {"initialCap": 300}}, "adaptive.initialCap (300) must lie in"),
    ({"adaptive": {"tickSeconds": 30, "windowSeconds": 10}}, "shorter than adaptive.tickSeconds"),
    ({"adaptive": {"enabled": True}, "slo": None}, "spec.slo is missing"),
    ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "autoscaling.minReplicas (5) must not exceed"),
    ({"engine": {"tensorParallelSize": 4}, "resources": {"gpu": {"count": 2}}}, "needs that many GPUs"),
    ({"engine": {"maxNumBatchedTokens": 100, "maxNumSeqs": 256}}, "must be at least the ceiling"),
    ({"engine": {"extraArgs": ["--max-num-seqs=512"]}}, "use spec.engine.maxNumSeqs instead"),
    ({"slo": {"targetMs": 20, "quantile": 1.0}}, "spec.slo.quantile: Input should be less than 1"),
    ({"slo": {"targetMs": 0}}, "spec.slo.targetMs: Input should be greater than 0"),
    ({"engine": {"maxNumSeq": 3}}, "spec.engine.maxNumSeq: unknown field"),
])
def test_cross_field_and_field_rules_speak_plainly(spec: dict[str, Any], fragment: str) -> None:
    assert fragment in _error({"model": "m", "slo": {"targetMs": 20}} | spec)


def test_h200_defaults_come_from_calibration() -> None:
    def resolved(target: float | None) -> Any:
        slo = {"slo": {"targetMs": target}} if target else {}
        return parse_spec({"model": "meta-llama/Llama-3.1-8B", "resources": {"gpu": {"type": "NVIDIA-H200"}}}
                          | slo).resolve()
    assert resolved(20).ceiling == 256
    assert "calibration" in resolved(20).profile_source
    # worst measured TPOT P99: 16 → 7.8 ms, 32 → 10.3, 64 → 14.9, 128 → 25.9, 256 → 42.8
    assert [resolved(t).initial_cap for t in (5, 8, 15, 26, 50)] == [16, 16, 64, 128, 256]
    static = resolved(None)
    assert static.adaptive is False and static.initial_cap == 256


def test_profile_rows_say_where_they_come_from() -> None:
    assert all(p.source.split(":")[0] in {"calibration", "seed-4.1", "seed-derive", "scaled", "cpu-measured"}
               for p in profiles.PROFILES.values())
    assert profiles.lookup("A100-SXM4-80GB", profiles.ModelSize.MEDIUM).ceiling == 64
    assert profiles.lookup("L40S", profiles.ModelSize.SMALL).ceiling == 128
    assert profiles.lookup("L4", profiles.ModelSize.SMALL).ceiling == 48
    assert profiles.lookup("TPU", profiles.ModelSize.SMALL).source.startswith("vllm-default")
    assert profiles.guess_size("meta-llama/Llama-3.1-70B-Instruct") is profiles.ModelSize.LARGE
    assert profiles.guess_size("Qwen2.5-14B") is profiles.ModelSize.MEDIUM
    assert profiles.guess_size("tiny-llama") is profiles.ModelSize.SMALL


def test_names_must_fit_children() -> None:
    assert name_problems("llama") == []
    assert "must start with a letter" in name_problems("8b-llama")[0]
    assert "at most" in name_problems("x" * 60)[0]
