"""A Prometheus that loads the shipped rules and can notify an Alertmanager, and a real Alertmanager.

Builds on the shared tests.support.prometheus.PrometheusServer (the Debian binary on a loopback port); the
subclass only adds `rule_files` and `alerting` to the configuration it writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.engine import free_port
from tests.support.prometheus import PrometheusServer

ALERTMANAGER = (
    shutil.which("prometheus-alertmanager")
    or shutil.which("alertmanager")
    or "/usr/bin/prometheus-alertmanager"
)


class RulesPrometheus(PrometheusServer):
    def __init__(self, workdir: Path, rule_files: list[Path], alertmanager: str | None = None) -> None:
        self.rule_files = rule_files
        self.alertmanager = alertmanager
        super().__init__(workdir)

    def _write(self) -> None:
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": self.interval,
                "evaluation_interval": self.interval,
                "scrape_timeout": self.interval,
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": self.scrape_configs,
        }
        if self.alertmanager:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [self.alertmanager]}]}]}
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def alerts(self) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.url}/api/v1/alerts", timeout=10.0).json()
        result: list[dict[str, Any]] = body["data"]["alerts"]
        return result


@contextlib.contextmanager
def running_alertmanager(workdir: Path, config: dict[str, Any]) -> Iterator[str]:
    """A real Alertmanager on a loopback port; yields its host:port."""
    port, cluster_port = free_port(), free_port()
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = (workdir / "alertmanager.log").open("ab")
    process = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--cluster.listen-address=127.0.0.1:{cluster_port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError((workdir / "alertmanager.log").read_text()[-2000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("alertmanager not ready")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
