"""A real vLLM CPU server with the governor runtime on this machine: for the demo, benchmarks and tests.

    with start_runtime(write_tiny_llama(tmp / "model"), initial_cap=16) as engine:
        engine.complete([1, 2, 3], max_tokens=32)
        engine.set_limits(cap=4)
        engine.metric(RUNNING)

The model is a tiny Llama config (2 layers, hidden 128) with dummy weights and no tokenizer: prompts are
token ids. The server runs vLLM's OpenAI module through ``python -m governor_runtime serve`` (the launcher
under test) or, with ``governed=False``, plain vLLM with the governor plugins kept out (``VLLM_PLUGINS``).
Processes are started in their own session and stopped as a group (API server, EngineCore, worker).

On a machine with two or more cores the EngineCore and its worker are pinned, every thread, to one core
(the last, ``engine_cpu``) once the server is up; the API server and the clients keep the others. Left to
roam, the two processes that hand every step to each other through vLLM's shared-memory queue make the
engine bistable: measured here at 24 closed-loop clients, 576-6144 tokens/s unpinned against
12 200-13 300 pinned (2 cores, nothing else running).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from governor_runtime import contract
from prometheus_client.parser import text_string_to_metric_families

from governor_dev.ports import free_port

LIMITS_PATH = contract.LIMITS_PATH
DEFAULT_MODEL_NAME = "tiny-llama"
DEFAULT_CEILING = 32
DEFAULT_INITIAL_CAP = 16
DEFAULT_MAX_MODEL_LEN = 2048
STARTUP_TIMEOUT_S = float(os.environ.get("GOVERNOR_TEST_ENGINE_STARTUP_S", "420"))

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": DEFAULT_MAX_MODEL_LEN,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}

# One compute thread, placed by us (`pin_engine`), not by vLLM's auto-binding (which binds the worker
# alone, and every server on the machine to the same core).
CPU_ENV = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


# The demo's model: the tiny one's per-token time hardly depends on the batch on a pinned core (1.0 ms at one
# sequence, 1.7 ms at 24), so the cap would have nothing to trade. Four times wider and twice as deep, TPOT
# goes 2.2 ms (1) -> 4.4 (16) -> 7.8 (32) -> 12.6 ms (64) and throughput peaks at 32: a GPU-like lever.
DEMO_LLAMA = {
    **TINY_LLAMA,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
}


def write_tiny_llama(directory: Path, config: Mapping[str, Any] = TINY_LLAMA) -> Path:
    """Write a Llama config (the tiny one unless given) into ``directory`` (created) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def default_engine_cpu() -> int | None:
    """The core the engine gets to itself: the last one this process may use, if there are two or more."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if len(cpus) >= 2 else None


def pin_engine(server_pid: int, cpu: int) -> int:
    """Pin every thread of the server's child processes (EngineCore, worker) to ``cpu``; the number pinned.
    Threads started later inherit the affinity of the thread that starts them."""
    pinned = 0
    with contextlib.suppress(psutil.NoSuchProcess):  # the server died: _wait_ready's caller will see it
        children = psutil.Process(server_pid).children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):  # exited meanwhile
                for thread in child.threads():
                    os.sched_setaffinity(thread.id, {cpu})
                    pinned += 1
    return pinned


def prompt_ids(length: int, seed: int = 0) -> list[int]:
    """A token-id prompt of ``length`` tokens (ids 3..1000, avoiding BOS/EOS)."""
    return [3 + (seed * 7919 + i * 31) % 997 for i in range(length)]


@dataclass
class Engine:
    """A running server. ``ceiling`` is the startup max_num_seqs; ``initial_cap`` what it started with."""

    base_url: str
    model: str
    ceiling: int
    initial_cap: int
    admin_token: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # ---- plain HTTP helpers (sync; use httpx.AsyncClient(base_url=engine.base_url) for concurrency) ----

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def completion_body(self, prompt: Sequence[int], max_tokens: int, **extra: Any) -> dict[str, Any]:
        """A /v1/completions body that generates exactly ``max_tokens`` tokens (EOS ignored)."""
        return {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            **extra,
        }

    def complete(self, prompt: Sequence[int], max_tokens: int = 16, **extra: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post("/v1/completions", json=self.completion_body(prompt, max_tokens, **extra))
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    def limits(self) -> dict[str, Any]:
        with self.client() as client:
            response = client.get(LIMITS_PATH, headers=self.admin_headers)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def set_limits(self, cap: int | None = None, token_budget: int | None = None) -> dict[str, Any]:
        change = {
            key: value for key, value in (("cap", cap), ("token_budget", token_budget)) if value is not None
        }
        with self.client() as client:
            response = client.put(LIMITS_PATH, json=change, headers=self.admin_headers)
        if response.status_code != 200:
            raise AssertionError(f"PUT {change} -> {response.status_code} {response.text}")
        body: dict[str, Any] = response.json()
        return body

    def metrics_text(self) -> str:
        with self.client() as client:
            response = client.get("/metrics")
        response.raise_for_status()
        return response.text

    def metric(self, name: str, text: str | None = None, **labels: str) -> float | None:
        """The value of the sample ``name`` (a full sample name, e.g. ``vllm:num_requests_running``) whose
        labels include ``labels`` and ``model_name``; summed over the remaining labels; None if absent."""
        return metric_value(
            self.metrics_text() if text is None else text, name, model_name=self.model, **labels
        )


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """Sum of the samples called ``name`` whose labels include ``labels``; None when there is none."""
    found: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                found = (found or 0.0) + sample.value
    return found


def _server_command(
    model_dir: Path,
    port: int,
    model_name: str,
    ceiling: int,
    initial_cap: int | None,
    governed: bool,
    extra_args: Sequence[str],
) -> list[str]:
    vllm_args = [
        "--model", str(model_dir),
        "--served-model-name", model_name,
        "--load-format", "dummy",
        "--skip-tokenizer-init",
        "--dtype", "bfloat16",
        "--gpu-memory-utilization", "0.1",
        "--max-model-len", str(DEFAULT_MAX_MODEL_LEN),
        "--max-num-seqs", str(ceiling),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--disable-uvicorn-access-log",
        *extra_args,
    ]  # fmt: skip
    if not governed:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *vllm_args]
    cap_args = [] if initial_cap is None else ["--initial-cap", str(initial_cap)]
    return [sys.executable, "-m", "governor_runtime", "serve", *cap_args, *vllm_args]


def _stop(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM the server's process group (API server, EngineCore, worker), then SIGKILL what is left."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


def _wait_ready(engine: Engine, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=engine.base_url, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if client.get("/health").status_code == 200:
                    return
            time.sleep(1.0)
    tail = engine.log_path.read_text(errors="replace")[-6000:] if engine.log_path.exists() else ""
    state = (
        f"exited with {process.returncode}" if process.poll() is not None else f"not ready in {timeout_s}s"
    )
    raise RuntimeError(f"vLLM server {state}; log {engine.log_path}:\n{tail}")


@contextlib.contextmanager
def start_runtime(
    model_dir: Path | None = None,
    *,
    ceiling: int = DEFAULT_CEILING,
    initial_cap: int | None = DEFAULT_INITIAL_CAP,
    governed: bool = True,
    model_name: str = DEFAULT_MODEL_NAME,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    multiprocess_metrics: bool = True,
    log_dir: Path | None = None,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    port: int | None = None,
    engine_cpu: int | None = default_engine_cpu(),
) -> Iterator[Engine]:
    """Start a server, wait until /health answers, yield an :class:`Engine`, and always stop it.

    ``multiprocess_metrics`` runs vLLM's Prometheus client in multiprocess mode (a fresh
    ``PROMETHEUS_MULTIPROC_DIR``), the mode vLLM uses with several API servers. ``engine_cpu`` is the
    core the EngineCore and its worker are pinned to (None: not pinned).
    """
    with contextlib.ExitStack() as cleanup:
        scratch = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="governor-engine-")))
        model_dir = model_dir or write_tiny_llama(scratch / "model")
        log_path = (log_dir or scratch) / f"vllm-{'governed' if governed else 'plain'}-{os.getpid()}.log"
        port = port or free_port()
        token = secrets.token_urlsafe(24)
        server_env = {**os.environ, **CPU_ENV, "GOVERNOR_ADMIN_TOKEN": token}
        server_env.pop("GOVERNOR_ADMIN_TOKEN_FILE", None)
        server_env.pop("GOVERNOR_ADMIN_ALLOW_UNAUTHENTICATED", None)
        server_env.setdefault("GOVERNOR_METRICS_INTERVAL_S", "0.5")
        server_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if multiprocess_metrics:
            metrics_dir = scratch / "prometheus"
            metrics_dir.mkdir()
            server_env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        if not governed:
            server_env["VLLM_PLUGINS"] = ""  # an allowlist naming nothing: the governor plugins stay out
        server_env.update(env or {})
        command = _server_command(model_dir, port, model_name, ceiling, initial_cap, governed, extra_args)
        log = cleanup.enter_context(log_path.open("wb"))
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=server_env, start_new_session=True
        )
        cleanup.callback(_stop, process)
        engine = Engine(
            base_url=f"http://127.0.0.1:{port}",
            model=model_name,
            ceiling=ceiling,
            initial_cap=ceiling if initial_cap is None or not governed else initial_cap,
            admin_token=token,
            log_path=log_path,
            process=process,
        )
        _wait_ready(engine, process, startup_timeout_s)
        if engine_cpu is not None:
            pin_engine(process.pid, engine_cpu)
        yield engine
