"""The runtime's pure parts: bounds, the prompt window, auth, the launcher's command line, metric names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from governor.core import signals
from governor_runtime import auth, metrics, steps, vllm_compat
from governor_runtime.launcher import (
    ENDPOINT_PLUGIN,
    GENERAL_PLUGIN,
    LaunchError,
    build_launch,
    plugin_allowlist,
)
from governor_runtime.limits import Bounds, LimitsError, resolve
from governor_runtime.prompts import PromptWindow, long_factor

BOUNDS = Bounds(ceiling=32, token_budget_ceiling=2048)


def test_metric_names_and_buckets_equal_the_operators() -> None:
    assert metrics.CAP == signals.RUNTIME_CAP
    assert metrics.CEILING == signals.RUNTIME_CEILING
    assert metrics.TOKEN_BUDGET == signals.RUNTIME_TOKEN_BUDGET
    assert metrics.PROMPT_P95 == signals.RUNTIME_PROMPT_P95
    assert metrics.LONG_PROMPTS == signals.RUNTIME_LONG_PROMPTS
    assert metrics.PER_TOKEN_BUCKETS == signals.PER_TOKEN_BUCKETS
    assert metrics.REQUEST_BUCKETS == signals.REQUEST_BUCKETS


def test_runtime_does_not_import_the_operator() -> None:
    sources = Path(metrics.__file__).parent.glob("*.py")
    assert not [
        path.name
        for path in sources
        if "import governor\n" in path.read_text() or "from governor." in path.read_text()
    ]


@pytest.mark.parametrize(
    ("cap", "budget", "held"),
    [
        (None, None, (16, 2048)),
        (1, None, (1, 2048)),
        (32, None, (32, 2048)),
        (4, 4, (4, 4)),
        (None, 100, (16, 100)),
    ],
)
def test_changes_within_bounds_are_held(cap: int | None, budget: int | None, held: tuple[int, int]) -> None:
    assert resolve(BOUNDS, 16, 2048, cap, budget) == held


@pytest.mark.parametrize(
    ("cap", "budget", "code"),
    [
        (0, None, "invalid"),
        (-3, None, "invalid"),
        (33, None, "above_ceiling"),
        ("8", None, "invalid"),
        (8.0, None, "invalid"),
        (True, None, "invalid"),
        (None, 2049, "above_ceiling"),
        (None, 15, "invalid"),  # smaller than the current cap 16
        (20, 19, "invalid"),
    ],
)
def test_changes_out_of_bounds_are_refused(cap: object, budget: object, code: str) -> None:
    with pytest.raises(LimitsError) as refused:
        resolve(BOUNDS, 16, 2048, cap, budget)
    assert refused.value.code == code


def test_without_chunked_prefill_the_budget_must_hold_a_whole_prompt() -> None:
    with pytest.raises(LimitsError):
        resolve(Bounds(32, 4096, min_token_budget_floor=2048), 4, 4096, None, 1000)
    assert resolve(Bounds(32, 4096, min_token_budget_floor=2048), 4, 4096, None, 2048) == (4, 2048)


def test_prompt_window_p95_and_long_prompts() -> None:
    window = PromptWindow(window_s=60, min_samples=20)
    assert not any(window.observe(float(t), 100 + t % 10) for t in range(40))
    assert window.stats(40).p95 == 109
    assert not window.observe(41, 141)  # 1.3 × 109 = 141.7
    assert window.observe(41, 142)
    assert window.stats(41).long_prompts_total == 1
    # 60 s later the old prompts have left the window
    assert window.stats(200).prompts_in_window == 0
    assert window.stats(200).p95 == 0


def test_the_long_prompt_factor_comes_from_the_environment() -> None:
    env = "GOVERNOR_LONG_PROMPT_FACTOR"
    assert long_factor({}) == 1.3 and long_factor({env: " "}) == 1.3
    assert long_factor({env: "2.0"}) == 2.0
    for bad in ("1.0", "0.5", "x", "inf", "nan"):
        with pytest.raises(ValueError, match=env):
            long_factor({env: bad})
    window = PromptWindow(window_s=60, min_samples=20, long_factor=long_factor({env: "2.0"}))
    for t in range(40):
        window.observe(float(t), 100 + t % 10)
    assert not window.observe(41, 142)  # long at 1.3 x 109; not at 2 x 109 = 218
    assert window.observe(41, 219)


def test_a_bad_long_prompt_factor_stops_the_plugin_loading_never_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from governor_runtime import plugin

    monkeypatch.setenv("GOVERNOR_LONG_PROMPT_FACTOR", "0.9")
    with pytest.raises(ValueError, match="GOVERNOR_LONG_PROMPT_FACTOR"):
        plugin.register()  # at start-up, before anything touches vLLM

    class Core:  # the engine core the plugin keys its prompt window on
        pass

    core = Core()
    monkeypatch.setattr(plugin, "_long_factor", 2.0)  # what register() read from a good value
    plugin.observe_prompt(core, 100)  # the bad variable is not read again on the request path
    assert plugin._windows[core].long_factor == 2.0


def test_prompt_window_waits_for_enough_prompts() -> None:
    window = PromptWindow(min_samples=20)
    assert not any(window.observe(0.0, length) for length in (10, 10, 10, 5000))


def test_auth_needs_the_exact_bearer_token(tmp_path: Path) -> None:
    config = auth.AuthConfig.from_env({auth.TOKEN_ENV: "s3cret"})
    assert auth.check(config, "Bearer s3cret") is auth.Verdict.ALLOWED
    assert auth.check(config, "bearer s3cret") is auth.Verdict.ALLOWED
    for wrong in (None, "", "Bearer", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"):
        assert auth.check(config, wrong) is auth.Verdict.UNAUTHORIZED
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    from_file = auth.AuthConfig.from_env({auth.TOKEN_FILE_ENV: str(token_file)})
    assert auth.check(from_file, "Bearer from-file") is auth.Verdict.ALLOWED


def test_without_a_token_the_route_refuses_unless_allowed() -> None:
    assert auth.check(auth.AuthConfig.from_env({}), None) is auth.Verdict.UNCONFIGURED
    assert auth.check(auth.AuthConfig.from_env({auth.TOKEN_FILE_ENV: "/nonexistent"}), None) is (
        auth.Verdict.UNCONFIGURED
    )
    local = auth.AuthConfig.from_env({auth.ALLOW_UNAUTHENTICATED_ENV: "1"})
    assert auth.check(local, None) is auth.Verdict.ALLOWED


def test_plugins_keep_what_the_user_named() -> None:
    assert plugin_allowlist("lora_resolver", []) == f"lora_resolver,{GENERAL_PLUGIN},{ENDPOINT_PLUGIN}"
    assert plugin_allowlist(f"{GENERAL_PLUGIN},x", []) == f"{GENERAL_PLUGIN},x,{ENDPOINT_PLUGIN}"
    # Unset: every installed plugin stayed allowed; it still is.
    assert plugin_allowlist(None, ["other", GENERAL_PLUGIN]) == f"other,{GENERAL_PLUGIN},{ENDPOINT_PLUGIN}"


def test_launch_command() -> None:
    launch = build_launch(
        ["--initial-cap", "4", "--model", "m", "--max-num-seqs", "32"], {"VLLM_PLUGINS": "a"}, []
    )
    args = launch.argv
    assert args[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert args[args.index("--max-num-active-seqs") + 1] == "4"
    assert launch.env["VLLM_PLUGINS"] == f"a,{GENERAL_PLUGIN},{ENDPOINT_PLUGIN}"
    buckets = json.loads(args[args.index("--custom-histogram-buckets") + 1])
    assert buckets["inter_token_latency"] == list(signals.PER_TOKEN_BUCKETS)
    assert buckets["request_latency"] == list(signals.REQUEST_BUCKETS)
    assert buckets["time_to_first_token"] == list(signals.REQUEST_BUCKETS)


def test_launch_keeps_the_users_buckets() -> None:
    mine = json.dumps({"request_latency": [1.0, 2.0], "iteration_tokens": [1, 2]})
    args = build_launch(["--model", "m", f"--custom-histogram-buckets={mine}"], {}, []).argv
    assert sum(arg.startswith("--custom-histogram-buckets") for arg in args) == 1
    buckets = json.loads(args[args.index("--custom-histogram-buckets") + 1])
    assert buckets["request_latency"] == [1.0, 2.0]
    assert buckets["iteration_tokens"] == [1, 2]
    assert buckets["inter_token_latency"] == list(signals.PER_TOKEN_BUCKETS)
    plain = build_launch(["--vllm-default-buckets", "--model", "m"], {}, []).argv
    assert "--custom-histogram-buckets" not in plain


def test_launch_on_vllm_without_active_seqs_carries_cap_and_buckets_in_the_environment() -> None:
    launch = build_launch(["--initial-cap", "4", "--model", "m"], {}, [], version="0.26.0")
    assert not [arg for arg in launch.argv if arg in ("--max-num-active-seqs", "--custom-histogram-buckets")]
    assert launch.env[vllm_compat.INITIAL_CAP_ENV] == "4"
    assert json.loads(launch.env[vllm_compat.BUCKETS_ENV])["inter_token_latency"] == list(
        signals.PER_TOKEN_BUCKETS
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--initial-cap", "0"],
        ["--initial-cap", "40", "--max-num-seqs", "32"],
        ["--initial-cap", "4", "--max-num-active-seqs", "4"],
        ["--custom-histogram-buckets", "[1, 2]"],
    ],
)
def test_launch_refuses_bad_arguments(argv: list[str]) -> None:
    with pytest.raises(LaunchError):
        build_launch(argv, {}, [])


def test_older_vllm_is_refused_clearly() -> None:
    with pytest.raises(vllm_compat.UnsupportedVLLMVersion, match=r"needs vLLM >= .*found vLLM 0\.20\.1"):
        vllm_compat.require_supported("0.20.1")
    assert vllm_compat.require_supported("0.32.0+cpu") == (0, 32)
    assert vllm_compat.require_supported("1.0.0") == (1, 0)


def test_launcher_cli_refuses_without_serve() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "governor_runtime", "start"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "governor-runtime serve" in done.stderr


def test_metrics_in_vllms_multiprocess_registry(tmp_path: Path) -> None:
    """The runtime's series appear through vLLM's own multiprocess registry (a fresh process: the mode is
    fixed when prometheus_client is first imported)."""
    script = textwrap.dedent(
        """
        from prometheus_client import generate_latest
        from governor_runtime.metrics import RuntimeMetrics
        from vllm.v1.metrics.prometheus import get_prometheus_registry

        series = RuntimeMetrics()
        engine = {"engine": 0, "cap": 5, "ceiling": 32, "token_budget": 2048,
                  "prompt_tokens_p95": 120.0, "long_prompts_total": 3, "step_seconds_total": 1.5,
                  "steps_total": 10.0, "step_sequences_total": 40.0, "step_context_tokens_total": 900.0,
                  "step_prefill_tokens_total": 64.0}
        series.publish_snapshot("m", engine)
        series.publish_snapshot("m", {**engine, "long_prompts_total": 4, "step_seconds_total": 2.25})
        print(generate_latest(get_prometheus_registry()).decode())
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    text = done.stdout
    assert 'vllm_governor:max_num_active_seqs{engine="0",model_name="m"} 5.0' in text
    assert 'vllm_governor:max_num_seqs{engine="0",model_name="m"} 32.0' in text
    assert 'vllm_governor:max_num_scheduled_tokens{engine="0",model_name="m"} 2048.0' in text
    assert 'vllm_governor:prompt_tokens_p95{engine="0",model_name="m"} 120.0' in text
    assert 'vllm_governor:long_prompts_total{engine="0",model_name="m"} 4.0' in text
    assert 'vllm_governor:engine_step_seconds_total{engine="0",model_name="m"} 2.25' in text
    assert 'vllm_governor:engine_step_context_tokens_total{engine="0",model_name="m"} 900.0' in text


@pytest.mark.parametrize(
    ("scheduled", "computed_after", "prompt", "known", "split"),
    [
        (40, 40, 40, 40, (40, 0)),  # a whole prompt in one step
        (16, 32, 40, 40, (16, 0)),  # a middle chunk
        (8, 40, 40, 40, (8, 0)),  # the last chunk: it samples the first token, still prefill
        (1, 41, 40, 41, (0, 40)),  # a decode reads the 40 tokens before it
        (3, 43, 40, 41, (0, 40)),  # a decode with two speculative tokens
        (46, 46, 40, 47, (46, 0)),  # a preempted request recomputes prompt and output
    ],
)
def test_a_requests_tokens_split_into_prefill_and_decode_context(
    scheduled: int, computed_after: int, prompt: int, known: int, split: tuple[int, int]
) -> None:
    assert steps.split_tokens(scheduled, computed_after, prompt, known) == split


def test_step_clock_counts_busy_time_once_where_batches_overlap() -> None:
    clock = steps.StepClock()
    clock.scheduled(1, 10.0, steps.StepWork(4, 400, 0))
    clock.applied(1, 10.5)  # a step alone: scheduled to applied
    clock.scheduled(2, 11.0, steps.StepWork(5, 410, 30))
    clock.scheduled(3, 11.2, steps.StepWork(5, 415, 0))  # scheduled while 2 runs (async scheduling)
    clock.applied(2, 11.4)
    clock.applied(3, 11.9)  # counts from 2's end, not from its own scheduling
    clock.scheduled(4, 12.0, steps.StepWork(0, 0, 0))  # an empty batch is no step
    clock.applied(4, 12.1)
    clock.applied(99, 13.0)  # never scheduled: nothing
    t = clock.totals
    assert t.seconds == pytest.approx(0.5 + 0.4 + 0.5)
    assert (t.steps, t.sequences, t.context_tokens, t.prefill_tokens) == (3, 14, 1225, 30)
    for batch in range(100, 100 + steps.MAX_IN_FLIGHT + 5):  # batches never applied are forgotten
        clock.scheduled(batch, 20.0, steps.StepWork(1, 1, 0))
    assert len(clock._in_flight) == steps.MAX_IN_FLIGHT
