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


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (
            {"adaptive": {"minCap": 10, "maxCap": 5}},
            "adaptive.minCap (10) must not exceed adaptive.maxCap (5)",
        ),
        (
            {"engine": {"maxNumSeqs": 64}, "adaptive": {"maxCap": 128}},
            "adaptive.maxCap (128) is above engine.maxNumSeqs (64)",
        ),
        (
            {"resources": {"gpu": {"type": "L4"}}, "adaptive": {"maxCap": 64}},
            "above the default ceiling for L4 GPUs and small models",
        ),
        ({"adaptive": {"initialCap": 300}}, "adaptive.initialCap (300) must lie in"),
        ({"adaptive": {"tickSeconds": 30, "windowSeconds": 10}}, "shorter than adaptive.tickSeconds"),
        ({"adaptive": {"enabled": True}, "slo": None}, "spec.slo is missing"),
        (
            {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
            "autoscaling.minReplicas (5) must not exceed",
        ),
        ({"engine": {"tensorParallelSize": 4}, "resources": {"gpu": {"count": 2}}}, "needs that many GPUs"),
        ({"engine": {"maxNumBatchedTokens": 100, "maxNumSeqs": 256}}, "must be at least the ceiling"),
        ({"engine": {"extraArgs": ["--max-num-seqs=512"]}}, "use spec.engine.maxNumSeqs instead"),
        ({"slo": {"targetMs": 20, "quantile": 1.0}}, "spec.slo.quantile: Input should be less than 1"),
        ({"slo": {"targetMs": 0}}, "spec.slo.targetMs: Input should be greater than 0"),
        ({"engine": {"maxNumSeq": 3}}, "spec.engine.maxNumSeq: unknown field"),
    ],
)
def test_cross_field_and_field_rules_speak_plainly(spec: dict[str, Any], fragment: str) -> None:
    assert fragment in _error({"model": "m", "slo": {"targetMs": 20}} | spec)


def test_h200_defaults_come_from_calibration() -> None:
    def resolved(target: float | None) -> Any:
        slo = {"slo": {"targetMs": target}} if target else {}
        return parse_spec(
            {"model": "meta-llama/Llama-3.1-8B", "resources": {"gpu": {"type": "NVIDIA-H200"}}} | slo
        ).resolve()

    assert resolved(20).ceiling == 256
    assert "calibration" in resolved(20).profile_source
    # worst measured TPOT P99: 16 → 7.8 ms, 32 → 10.3, 64 → 14.9, 128 → 25.9, 256 → 42.8
    assert [resolved(t).initial_cap for t in (5, 8, 15, 26, 50)] == [16, 16, 64, 128, 256]
    static = resolved(None)
    assert static.adaptive is False and static.initial_cap == 256


def test_profile_rows_say_where_they_come_from() -> None:
    assert all(
        p.source.split(":")[0] in {"calibration", "seed-4.1", "seed-derive", "scaled", "cpu-measured"}
        for p in profiles.PROFILES.values()
    )
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


BLANK_PLACES: dict[str, Any] = {
    "model": lambda b: {"model": b},
    "servedModelName": lambda b: {"servedModelName": b},
    "image": lambda b: {"image": b},
    "gpu.type": lambda b: {"resources": {"gpu": {"type": b}}},
    "pvcName": lambda b: {"modelCache": {"pvcName": b}},
    "toleration.key": lambda b: {"resources": {"tolerations": [{"key": b, "operator": "Exists"}]}},
    "nodeSelector value": lambda b: {"resources": {"nodeSelector": {"zone": b}}},
    "cidr": lambda b: {"networkPolicy": {"clients": [{"cidr": b}]}},
    "podLabels value": lambda b: {"networkPolicy": {"clients": [{"podLabels": {"app": b}}]}},
}


@pytest.mark.parametrize("place", sorted(BLANK_PLACES))
@pytest.mark.parametrize("blank", ["", " ", "\t", " llama "])
def test_string_fields_refuse_blank_values(place: str, blank: str) -> None:
    message = _error({"model": "m"} | BLANK_PLACES[place](blank))
    assert "must not be empty or start or end with whitespace" in message


def test_blank_extra_args_and_node_selector_keys_are_refused() -> None:
    assert "spec.engine.extraArgs.0: must not be empty" in _error(
        {"model": "m", "engine": {"extraArgs": [""]}}
    )
    assert "nodeSelector key must not be blank" in _error(
        {"model": "m", "resources": {"nodeSelector": {" ": "a"}}}
    )


@pytest.mark.parametrize(
    "arg",
    [
        "--max-num-seqs",
        "--max_num_seqs",
        "--max-num-seqs=8",
        "--max_num_seqs=8",
        "--max-num-s",
        "--max-num-seqs.x",
        "--model=x",
        "--served_model_name",
        "--host=::",
        "--port",
        "--initial-cap=3",
        "--initial_cap",
        "--max-model-len",
        "--max_num_batched_tokens=9",
        "--gpu-memory-utilization=0.5",
        "--device-memory-utilization",
        "--block-size=32",
        "--dtype",
        "--tensor-parallel-size=2",
        "-tp",
        "-tp=2",
        "-tp2",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable_chunked_prefill",
        "--no-enable-chunked-prefill",
        "--config=serve.yaml",
    ],
)
def test_every_owned_flag_is_refused_in_every_spelling(arg: str) -> None:
    assert "engine.extraArgs must not set" in _error({"model": "m", "engine": {"extraArgs": [arg]}})


def test_flags_the_builders_write_are_all_owned() -> None:
    from governor.core import builders, engine_flags

    isvc = parse_spec(
        {
            "model": "m",
            "slo": {"targetMs": 20},
            "resources": {"gpu": {"count": 2}},
            "engine": {
                "maxModelLen": 4096,
                "maxNumBatchedTokens": 8192,
                "gpuMemoryUtilization": 0.9,
                "blockSize": 16,
                "dtype": "half",
                "tensorParallelSize": 2,
                "enablePrefixCaching": False,
                "enableChunkedPrefill": True,
            },
        }
    )
    written = {a for a in builders.vllm_args(isvc) if a.startswith("--")}
    assert len(written) == 14
    assert {engine_flags.owned_flag(a) for a in written} == written


@pytest.mark.parametrize(
    "arg",
    [
        "--disable-uvicorn-access-log",
        "--max-num-partial-prefills=2",
        "--quantization",
        "-q",
        "--enforce-eager",
        "--kv-cache-dtype=fp8",
        "-O3",
        "fp8",
    ],
)
def test_other_flags_pass(arg: str) -> None:
    assert parse_spec({"model": "m", "engine": {"extraArgs": [arg]}}).engine.extra_args == [arg]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (
            {"adaptive": {"tickSeconds": 0.5}},
            "spec.adaptive.tickSeconds: Input should be greater than or equal",
        ),
        ({"adaptive": {"windowSeconds": 0.2}}, "spec.adaptive.windowSeconds: Input should be greater than"),
        (
            {"adaptive": {"cooldownSeconds": -1}},
            "spec.adaptive.cooldownSeconds: Input should be greater than or",
        ),
        (
            {"adaptive": {"cooldownSeconds": 10**6}},
            "spec.adaptive.cooldownSeconds: Input should be less than or",
        ),
        ({"autoscaling": {"scaleUpCooldownSeconds": -5}}, "spec.autoscaling.scaleUpCooldownSeconds"),
        ({"autoscaling": {"scaleDownCooldownSeconds": -5}}, "spec.autoscaling.scaleDownCooldownSeconds"),
        ({"monitoring": {"interval": "500ms"}}, "500ms is outside 1s..1h"),
        ({"monitoring": {"interval": "0s"}}, "0s is outside 1s..1h"),
        ({"monitoring": {"interval": "2h"}}, "2h is outside 1s..1h"),
        ({"networkPolicy": {"clients": [{}]}}, "needs podLabels, namespaceLabels or cidr"),
        ({"networkPolicy": {"clients": [{"cidr": "10.0.0.0/8", "podLabels": {"a": "b"}}]}}, "not both"),
        ({"networkPolicy": {"clients": [{"cidr": "10.0.0.300/8"}]}}, "is not an address range"),
    ],
)
def test_timing_and_network_bounds(spec: dict[str, Any], fragment: str) -> None:
    assert fragment in _error({"model": "m", "slo": {"targetMs": 20}} | spec)


def test_timing_lower_bounds_still_allow_fast_tests() -> None:
    spec = parse_spec(
        {
            "model": "m",
            "adaptive": {"tickSeconds": 1, "windowSeconds": 1, "cooldownSeconds": 0},
            "autoscaling": {"scaleUpCooldownSeconds": 0},
            "monitoring": {"interval": "1s"},
        }
    )
    assert spec.adaptive.tick_seconds == 1 and spec.monitoring.interval == "1s"
