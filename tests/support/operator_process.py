"""The processes the end-to-end tests start: ``governor operator`` (the real command, as a Deployment runs
it), which a test may SIGKILL, and a twin engine as the governed pod. Shared by the restart, fault and
peering tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from governor_dev.ports import free_port

BIN = Path(sys.executable).parent


class Operator:
    """``governor operator`` as its own process (the real command, as a Deployment runs it)."""

    def __init__(self, server: str, log: Path | None = None, *extra: str) -> None:
        self.server, self.log, self.extra = server, log, extra
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "GOVERNOR_PROMETHEUS_URL"}  # scrape the pods
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(self.log.open("ab")) if self.log else subprocess.DEVNULL
            self.process = await asyncio.create_subprocess_exec(
                str(BIN / "governor"),
                "operator",
                "--server",
                self.server,
                "--metrics-port",
                "0",
                "--liveness",
                f"http://127.0.0.1:{free_port()}/healthz",
                *self.extra,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), timeout=10)
            if self.alive:
                await self.kill()


@contextlib.contextmanager
def twin_engine(token: str, initial_cap: int, ceiling: int) -> Iterator[int]:
    """The twin engine (``python -m governor_twin serve``) as the governed pod; yields its port."""
    port = free_port()
    process = subprocess.Popen(
        [
            BIN / "python",
            "-m",
            "governor_twin",
            "serve",
            "--port",
            str(port),
            "--initial-cap",
            str(initial_cap),
            "--max-num-seqs",
            str(ceiling),
            "--served-model-name",
            "tiny-llama",
        ],
        env={**os.environ, "GOVERNOR_ADMIN_TOKEN": token},
    )
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)
