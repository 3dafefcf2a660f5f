"""A real Prometheus (the Debian `prometheus` binary) for tests, the demo and benchmarks (no pytest needed).

    with running_prometheus(tmp) as prom:
        prom.configure(static_scrape_configs(...))   # writes the config and reloads (/-/reload)
        prom.wait_for_targets(1)
        prom.query("up")
        with prom.stopped():                          # a fault: the process is gone, the port refuses
            ...
It listens on a free loopback port, keeps its TSDB in a temp dir, scrapes every second, and is stopped by
process id (SIGTERM, then SIGKILL) when the context ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.engine import free_port

BINARY = os.environ.get("GOVERNOR_TEST_PROMETHEUS", shutil.which("prometheus") or "/usr/bin/prometheus")


class PrometheusServer:
    def __init__(self, workdir: Path, *, port: int | None = None, interval: str = "1s") -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.interval = interval
        self.config_path = workdir / "prometheus.yml"
        self.data_dir = workdir / "data"
        self.log_path = workdir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.scrape_configs: list[dict[str, Any]] = []
        self._write()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write(self) -> None:
        config = {
            "global": {
                "scrape_interval": self.interval,
                "evaluation_interval": self.interval,
                "scrape_timeout": self.interval,
            },
            "scrape_configs": self.scrape_configs,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self, timeout_s: float = 60.0) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                BINARY,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=2h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready in {timeout_s}s: {self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Stop Prometheus for the body of the block, then start it again on the same port and data."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def configure(self, scrape_configs: Sequence[dict[str, Any]]) -> None:
        """Replace the scrape configuration and reload it (a running server reloads in place)."""
        self.scrape_configs = list(scrape_configs)
        self._write()
        if self.process is not None and self.process.poll() is None:
            httpx.post(f"{self.url}/-/reload", timeout=10.0).raise_for_status()

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10.0).json()
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for_targets(
        self, count: int, timeout_s: float = 30.0, instances: Sequence[str] | None = None
    ) -> None:
        """Until `count` targets are up and have been scraped at least twice (so rate() has two points);
        with `instances`, those targets: a target of an earlier test that a reload has not yet marked
        stale still reads up, and counting it returned before the new one had been scraped."""
        # A regex in a PromQL string: its backslashes escaped once more.
        pattern = "|".join(re.escape(i).replace("\\", "\\\\") for i in instances or ())
        only = "" if instances is None else f'{{instance=~"{pattern}"}}'
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            up = [r for r in self.query(f"count_over_time(up{only}[1m]) >= 2 and up{only} == 1")]
            if len(up) >= count:
                return
            time.sleep(0.5)
        raise TimeoutError(f"fewer than {count} targets up: {self.query('up')}")


@contextlib.contextmanager
def running_prometheus(workdir: Path | None = None, interval: str = "1s") -> Iterator[PrometheusServer]:
    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="governor-prom-")))
        server = PrometheusServer(root, interval=interval)
        stack.callback(server.stop)
        server.start()
        yield server
