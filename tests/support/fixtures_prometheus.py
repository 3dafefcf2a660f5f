"""The shared real-Prometheus fixture (auto-loaded by tests/conftest.py).

- ``prometheus`` (session): one Debian `prometheus` process for the whole session on a free loopback port,
  scraping every second, with an empty scrape configuration. Tests call ``prometheus.configure(jobs)``
  (reloads in place), ``wait_for_targets(n)``, ``query(expr)``, and ``with prometheus.stopped(): ...`` for
  fault tests (started again, same port and data, when the block ends).
- ``prometheus_for`` (function): a factory that configures the session Prometheus for some static targets
  with the label convention of governor.observability.scrape and waits until they are scraped; the
  configuration is emptied again after the test.

Mark tests that use them ``@pytest.mark.prometheus``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from governor.observability.queries import ISVC_LABEL, NAMESPACE_LABEL

from tests.support.prometheus import PrometheusServer, running_prometheus

ConfigureTargets = Callable[[dict[tuple[str, str], list[str]]], PrometheusServer]


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with running_prometheus(tmp_path_factory.mktemp("prometheus")) as server:
        yield server


@pytest.fixture
def prometheus_for(prometheus: PrometheusServer) -> Iterator[ConfigureTargets]:
    """configure({(namespace, inferenceservice): ["127.0.0.1:PORT", ...]}) -> the running Prometheus."""

    def configure(services: dict[tuple[str, str], list[str]]) -> PrometheusServer:
        jobs = [
            {
                "job_name": f"{namespace}-{name}",
                "scrape_interval": prometheus.interval,
                "static_configs": [
                    {
                        "targets": [target],
                        "labels": {NAMESPACE_LABEL: namespace, ISVC_LABEL: name, "pod": f"{name}-{i}"},
                    }
                    for i, target in enumerate(targets)
                ],
            }
            for (namespace, name), targets in services.items()
        ]
        prometheus.configure(jobs)
        targets = [t for listed in services.values() for t in listed]
        prometheus.wait_for_targets(len(targets), instances=targets)
        return prometheus

    yield configure
    if prometheus.process is None:
        prometheus.start()
    prometheus.configure([])
