"""The shared real-engine fixtures (auto-loaded by tests/conftest.py).

- ``engine`` (session): one real vLLM CPU server with the governor runtime for the whole test session,
  started on first use through ``python -m governor_runtime serve`` with a tiny dummy Llama. It has
  ``.base_url``, ``.admin_token``, ``.model`` (served model name), ``.ceiling`` (startup max_num_seqs, 32),
  ``.initial_cap`` (16), and helpers: ``complete(prompt_ids, max_tokens)``, ``completion_body(...)``,
  ``limits()``, ``set_limits(cap=..., token_budget=...)``, ``metric(name, **labels)``, ``metrics_text()``.
  Prometheus runs in vLLM's multiprocess mode. The server log is kept under the session's temp dir.
- ``engine_limits`` (function): for tests that change the cap or token budget. Yields the engine and puts
  back the limits it had before the test, so every test starts from the same cap.
- ``run_demo`` (function): ``governor demo --short --plain --slo 0.5ms`` plus the flags given, against the
  engine as a user runs it with ``--endpoint``, into the test's tmp_path; returns its summary.json.

Mark tests that use them ``@pytest.mark.vllm``. To iterate on tests without a 1–3 minute start each run,
point the session at a server already started by ``tests.support.engine.start_runtime`` (or the launcher,
with ``--served-model-name tiny-llama``): ``GOVERNOR_TEST_ENGINE_URL=http://127.0.0.1:PORT
GOVERNOR_TEST_ENGINE_TOKEN=...``; its current cap then counts as ``initial_cap``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from governor.cli import main

from tests.support.engine import DEFAULT_MODEL_NAME, Engine, start_runtime, write_tiny_llama


def _attached(base_url: str, token: str) -> Engine:
    engine = Engine(
        base_url, DEFAULT_MODEL_NAME, ceiling=0, initial_cap=0, admin_token=token, log_path=Path()
    )
    limits = engine.limits()
    engine.ceiling, engine.initial_cap = limits["ceiling"], limits["cap"]
    return engine


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    if url := os.environ.get("GOVERNOR_TEST_ENGINE_URL"):
        yield _attached(url, os.environ["GOVERNOR_TEST_ENGINE_TOKEN"])
        return
    root = tmp_path_factory.mktemp("engine")
    with start_runtime(write_tiny_llama(root / "model"), log_dir=root) as running:
        # The first request compiles the model's step; pay for it here, not in the first test's timings.
        running.complete([1, 2, 3, 4], max_tokens=8)
        yield running


@pytest.fixture
def engine_limits(engine: Engine) -> Iterator[Engine]:
    before = engine.limits()
    yield engine
    engine.set_limits(cap=before["cap"], token_budget=before["token_budget"])


RunDemo = Callable[..., dict[str, Any]]


@pytest.fixture
def run_demo(engine_limits: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDemo:
    """0.5 ms per token is below what any CPU engine gives one sequence: the law must move the cap."""

    def run(*flags: str) -> dict[str, Any]:
        monkeypatch.setenv("GOVERNOR_ADMIN_TOKEN", engine_limits.admin_token)
        argv = ["demo", *flags, "--short", "--plain", "--slo", "0.5ms", "--endpoint", engine_limits.base_url,
                "--model", engine_limits.model, "--out", str(tmp_path)]  # fmt: skip
        assert main(argv) == 0
        summary: dict[str, Any] = json.loads((tmp_path / "summary.json").read_text())
        return summary

    return run
