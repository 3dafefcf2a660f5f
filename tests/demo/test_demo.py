"""The README's main job, shortened: `governor demo --short` against the session's real vLLM engine.

The SLO is set below what the CPU engine can reach (0.5 ms per token), so the law must lower the cap; the
test reads what the engine holds, not what the demo printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine import Engine
from tests.support.fixtures_engine import RunDemo


@pytest.mark.vllm
def test_short_demo_moves_the_cap_and_leaves_a_picture(
    engine_limits: Engine, tmp_path: Path, run_demo: RunDemo
) -> None:
    engine = engine_limits
    summary = run_demo()

    png = tmp_path / "demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    governed = summary["caps"]["governed"]
    for label in ("static before", "static after"):
        assert set(summary["caps"][label]) == {engine.ceiling}, f"the {label} pass must hold the ceiling"
    assert min(governed) < engine.ceiling, "the governed pass must have lowered the cap inside the engine"
    assert summary["decisions"], "every cap change is a recorded decision with a reason"
    assert all(d["reason"] and d["detail"] for d in summary["decisions"])
    reasons = summary["reasons"]  # every tick of the governed pass, counted by its reason
    assert sum(reasons.values()) == len(governed), reasons
    assert {d["reason"] for d in summary["decisions"]} <= set(reasons), reasons
    # The levers law (the default) says what its models saw at some decision.
    assert any(d["model"] for d in summary["decisions"]), summary["decisions"]
    drift = summary["host_drift"]
    assert drift["control"] == "light"
    # The SLO here (0.5 ms) is below any CPU engine's light-load latency: the law may cut in the light phase,
    # and then that phase is no control and no ratio is claimed.
    assert drift["ratio"] > 0 if drift["cap_held"] else drift["ratio"] is None
    assert drift["static_passes"] > 0, "both static passes hold the ceiling: the whole run is a control"
    for label in ("static before", "governed", "static after"):
        whole = summary["scores"][label]["all"]
        assert whole["requests"] > 0 and whole["failed"] == 0, "no request may fail while the cap moves"
    before, after, static = (
        summary["scores"][label]["all"] for label in ("static before", "static after", "static")
    )
    assert static["goodput_tok_s"] == pytest.approx((before["goodput_tok_s"] + after["goodput_tok_s"]) / 2)
    governed_all = summary["scores"]["governed"]["all"]
    assert summary["meets_check"] == (
        governed_all["attainment"] >= static["attainment"]
        and governed_all["goodput_tok_s"] >= static["goodput_tok_s"]
    )
