"""`governor run` stops on SIGINT and SIGTERM, promptly and cleanly, even when started in the background with
SIGINT ignored (what a shell's `&`, nohup or a parent that ignores it hand down: an H200 run saw the process
outlive its SIGINT). The endpoint is the twin engine behind the runtime's HTTP surface."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.operator_process import twin_engine

TOKEN = "twin-admin-token-for-run-signals"
BIN = Path(sys.executable).parent


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_governor_run_stops_on_a_signal_even_with_sigint_inherited_ignored(sig: signal.Signals) -> None:
    with twin_engine(TOKEN, initial_cap=16, ceiling=32) as port:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:  # the twin answers once it listens
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the twin engine did not start"
                time.sleep(0.2)
        command = ["run", "--endpoint", url, "--slo-p99", "20ms", "--ttft-bound", "2s", "--tick", "1s",
                   "--window", "5s"]  # fmt: skip
        process = subprocess.Popen(
            [BIN / "governor", *command],
            env={**os.environ, "GOVERNOR_ADMIN_TOKEN": TOKEN},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_ignore_sigint,  # the point of the test: a background start
        )
        try:
            time.sleep(4)  # a few ticks
            assert process.poll() is None, process.communicate()[0].decode()
            sent = time.monotonic()
            process.send_signal(sig)
            output, _ = process.communicate(timeout=10)
            took = time.monotonic() - sent
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    log = output.decode()
    assert process.returncode == 0, log
    assert took < 5, f"stopped {took:.1f} s after {sig.name}"
    assert f"stopped by {sig.name}" in log, log
    assert "cap 16 -> 16" in log, log  # it was governing (holding the engine's cap) before the signal
    assert "slo 0.02s ttft 2s;" in log, log  # with the SLO's TTFT bound
