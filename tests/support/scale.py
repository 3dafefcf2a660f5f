"""The operator at scale (issue 13, item 4): N InferenceServices against the API emulator, the real
``governor operator`` process, one twin process serving N engines (one port each) as the pods, and a real
Prometheus scraping them, which the operator reads (GOVERNOR_PROMETHEUS_URL).

``measure(n, seconds)`` returns the figures of one run: time from the first ``create`` to every child
present, then over a steady window of ``seconds``: Prometheus queries per tick (from Prometheus's own
``prometheus_http_requests_total``, read on its /metrics so the reading is not itself counted), the
operator's CPU per tick and memory (psutil), control ticks per object (the operator's own
``governor_decisions_total``: status is written on change and every few ticks), and the API requests the
emulator received, by verb and resource. Used by benchmarks/scale_bench.py and tests/scale.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kmock
import psutil
from governor import crd
from governor.core import builders
from governor.core.signals import OP_DECISIONS
from governor.observability.queries import ISVC_LABEL, NAMESPACE_LABEL
from prometheus_client.parser import text_string_to_metric_families

from tests.support.engine import free_port
from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, PDBS, SECRETS, SERVICES
from tests.support.kube import Emulator, eventually, live_object
from tests.support.prometheus import PrometheusServer, running_prometheus

NS, TOKEN, TICK_S = "scale", "twin-admin-token-for-scale", 5.0
CHILDREN = ((DEPLOYMENTS, ""), (SERVICES, ""), (PDBS, "-pdb"), (SECRETS, "-admin-token"))
BIN = Path(sys.executable).parent
QUERY_COUNTER = 'prometheus_http_requests_total{code="200",handler="/api/v1/query"}'


@dataclass
class Figures:
    n: int
    seconds: float
    create_to_children_s: float
    ticks_expected: float
    ticks_per_object: list[int]
    prom_queries: float
    cpu_s: float
    rss_mib: float
    api_calls: dict[str, int] = field(default_factory=dict)
    cpu_by_process: dict[str, float] = field(default_factory=dict)  # CPU seconds in the steady window
    settle_s: float = 0.0  # from every object ticking to the set-up's reconciles done (see _settle)

    @property
    def queries_per_tick(self) -> float:
        return self.prom_queries / self.ticks_expected

    @property
    def cpu_per_tick_s(self) -> float:
        return self.cpu_s / self.ticks_expected

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.seconds

    @property
    def holding(self) -> float:
        """Share of objects whose ticks advanced at >= 90 % of the 5 s grid's rate."""
        return sum(t >= 0.9 * self.ticks_expected for t in self.ticks_per_object) / self.n

    def cpu_shares(self) -> dict[str, float]:
        """Each process's CPU over the steady window, as a share of one core."""
        return {k: v / self.seconds for k, v in self.cpu_by_process.items()}

    def api_per_tick(self) -> dict[str, float]:
        return {k: v / self.ticks_expected for k, v in sorted(self.api_calls.items())}


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "governor.vllm.ai/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": "tiny-llama",
            "resources": {"gpu": {"count": 0}},
            "engine": {"maxNumSeqs": 32},
            "slo": {"targetMs": 1000},
            "adaptive": {"tickSeconds": TICK_S, "initialCap": 16},
        },
    }


def name_of(i: int) -> str:
    return f"svc-{i:04d}"


def free_port_range(n: int, start: int = 20000, stop: int = 60000) -> int:
    """The first port of `n` consecutive free loopback ports."""
    base = start
    while base + n < stop:
        for offset in range(n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + offset))
                except OSError:
                    base += offset + 1
                    break
        else:
            return base
    raise RuntimeError(f"no {n} consecutive free ports")


@contextlib.contextmanager
def twin_process(n: int, base_port: int, log: Path) -> Iterator[psutil.Process]:
    env = {**os.environ, "GOVERNOR_ADMIN_TOKEN": TOKEN}
    args = ["--engines", str(n), "--port", str(base_port), "--initial-cap", "16", "--max-num-seqs", "32"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(BIN / "python"), "-m", "governor_twin", "serve", *args, "--served-model-name", "tiny-llama"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield psutil.Process(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)


def scrape_jobs(n: int, base_port: int, interval: str) -> list[dict[str, Any]]:
    """One job, a static target per engine, labelled as governor.observability.scrape relabels pods."""
    targets = [
        {
            "targets": [f"127.0.0.1:{base_port + i}"],
            "labels": {NAMESPACE_LABEL: NS, ISVC_LABEL: name_of(i), "pod": f"{name_of(i)}-0"},
        }
        for i in range(n)
    ]
    return [{"job_name": "engines", "scrape_interval": interval, "static_configs": targets}]


def query_count(prom: PrometheusServer) -> float:
    text = httpx.get(f"{prom.url}/metrics", timeout=10.0).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(QUERY_COUNTER))


class OperatorProcess:
    """``governor operator`` as its own process, pointed at the emulator and at Prometheus."""

    def __init__(self, server: str, prometheus_url: str, log: Path) -> None:
        self.server, self.prometheus_url, self.log = server, prometheus_url, log
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()

    def start(self) -> psutil.Process:
        env = {**os.environ, "GOVERNOR_PROMETHEUS_URL": self.prometheus_url}
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        command = [
            str(BIN / "governor"),
            "operator",
            "--server",
            self.server,
            "--metrics-port",
            str(self.metrics_port),
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [*command, "--liveness", liveness], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        return psutil.Process(self.process.pid)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    async def ticks(self, n: int) -> list[int]:
        """Control ticks so far per object, from the operator's /metrics: every tick makes one decision
        (holds included), counted in governor_decisions_total by object."""
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30.0)).text
        return await asyncio.to_thread(_decisions_per_object, text, n)


def _live(emulator: Emulator, resource: kmock.resource, name: str) -> dict[str, Any] | None:
    return live_object(emulator, resource, NS, name)


def _decisions_per_object(text: str, n: int) -> list[int]:
    per_name: collections.Counter[str] = collections.Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == OP_DECISIONS and sample.labels.get("namespace") == NS:
                per_name[sample.labels["name"]] += int(sample.value)
    return [per_name[name_of(i)] for i in range(n)]


class Tally:
    """The emulator's requests by verb and resource. kmock keeps every request and scans the whole log on
    each new one (quadratic: at 100 objects the emulator, not the operator, became the bottleneck), so the
    log is drained into counters every `every_s`."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.counts: collections.Counter[str] = collections.Counter()

    def drain(self) -> None:
        log: list[Any] = self.emulator._requests
        requests, log[:] = list(log), []
        for r in requests:
            resource = r.resource.plural if r.resource is not None else "other"
            sub = f"/{r.subresource}" if r.subresource else ""
            action = r.action.name.lower() if r.action is not None else str(r.method)
            self.counts[f"{action} {resource}{sub}"] += 1

    async def run(self, every_s: float = 0.5) -> None:
        while True:
            self.drain()
            await asyncio.sleep(every_s)


async def _send(emulator: Emulator, method: str, path: str, body: dict[str, Any], content: str) -> None:
    async with emulator.request(method, path, json=body, headers={"Content-Type": content}) as response:
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: {response.status} {await response.text()}")


async def _gather_bounded(calls: list[Any], limit: int = 32) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(call: Any) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))


def _token_secret(i: int) -> dict[str, Any]:
    token = base64.b64encode(TOKEN.encode()).decode()
    meta = {"name": builders.names(name_of(i)).secret, "namespace": NS}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {builders.TOKEN_KEY: token}}


async def _pod_at_twin(emulator: Emulator, i: int, port: int) -> None:
    """What the kubelet would write: a ready pod at engine i's port."""
    name, merge = name_of(i), "application/merge-patch+json"
    http = {"name": "http", "containerPort": port}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": NS, "labels": {builders.LABEL_OWNER: name}},
        "spec": {"containers": [{"name": "vllm", "image": "runtime", "ports": [http]}]},
    }
    await _send(emulator, "POST", f"/api/v1/namespaces/{NS}/pods", pod, "application/json")
    ready = {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}
    await _send(emulator, "PATCH", f"/api/v1/namespaces/{NS}/pods/{name}-0/status", {"status": ready}, merge)


@contextlib.asynccontextmanager
async def _emulator() -> AsyncIterator[Emulator]:
    async with Emulator() as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        emulator.register_crd(crd.build_crd())
        yield emulator


async def measure(
    n: int, seconds: float, workdir: Path | None = None, scrape_interval: str = "5s", say: Any = print
) -> Figures:
    """One run at N objects; `seconds` of steady state are measured once every object has ticked."""
    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="governor-scale-")))
        base_port = free_port_range(n)
        twin = stack.enter_context(twin_process(n, base_port, root / "twin.log"))
        (root / "prometheus").mkdir(exist_ok=True)
        prom = stack.enter_context(running_prometheus(root / "prometheus", interval=scrape_interval))
        prom.configure(scrape_jobs(n, base_port, scrape_interval))
        assert prom.process is not None
        others = {"twin": twin, "prometheus": psutil.Process(prom.process.pid)}
        async with _emulator() as emulator:
            url = str(emulator.url).rstrip("/")
            operator = OperatorProcess(url, prom.url, root / "operator.log")
            proc = operator.start()
            processes = {"operator": proc, "emulator": psutil.Process(), **others}
            tally = Tally(emulator)
            draining = asyncio.create_task(tally.run())
            try:
                return await _run(emulator, operator, tally, prom, processes, n, seconds, base_port, say)
            finally:
                draining.cancel()
                operator.stop()  # before the emulator goes, or its watches retry against a closed port
    raise AssertionError("unreachable")


async def _run(
    emulator: Emulator,
    operator: OperatorProcess,
    tally: Tally,
    prom: PrometheusServer,
    processes: dict[str, psutil.Process],
    n: int,
    seconds: float,
    base_port: int,
    say: Any,
) -> Figures:
    await eventually(
        lambda: tally.counts["watch inferenceservices"] > 0,
        timeout=60,
        what="the operator watching InferenceServices",
    )
    # The admin token the twin accepts, in place before its InferenceService (a user bringing their own
    # token, e.g. from a secret manager): the operator adopts it, so the Deployment's token hash is right
    # from its first build. Written afterwards, it changed every Deployment (two reconciles per object,
    # still running at 1,000 objects when the steady window opened).
    await _gather_bounded(
        [
            _send(emulator, "POST", f"/api/v1/namespaces/{NS}/secrets", _token_secret(i), "application/json")
            for i in range(n)
        ]
    )
    say(f"[N={n}] operator watching; creating {n} InferenceServices")
    started = time.monotonic()
    path = f"/apis/{ISVC.group}/{ISVC.version}/namespaces/{NS}/{ISVC.plural}"
    await _gather_bounded(
        [_send(emulator, "POST", path, manifest(name_of(i)), "application/json") for i in range(n)]
    )

    def all_children() -> bool:
        return all(_live(emulator, r, name_of(i) + s) for i in range(n) for r, s in CHILDREN)

    await eventually(all_children, timeout=max(120.0, n * 0.5), interval=0.5, what="every child")
    create_to_children = time.monotonic() - started
    say(f"[N={n}] every child present {create_to_children:.1f}s after the first create")
    await _gather_bounded([_pod_at_twin(emulator, i, base_port + i) for i in range(n)])
    await asyncio.to_thread(prom.wait_for_targets, n, max(60.0, n * 0.1))
    deadline = time.monotonic() + max(120.0, n * 0.5)
    ticks = await operator.ticks(n)
    while min(ticks) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(2.0)
        ticks = await operator.ticks(n)
    if min(ticks) >= 2:
        say(f"[N={n}] every object ticking; measuring {seconds:.0f}s")
    else:  # where the operator cannot keep up is a figure to report, not a crash
        ticking = sum(t >= 2 for t in ticks)
        say(f"[N={n}] only {ticking} of {n} objects ticking after the wait; measuring {seconds:.0f}s anyway")
    settle_s = await _settle(tally, timeout_s=max(120.0, n * 0.3))
    say(f"[N={n}] set-up reconciles done {settle_s:.1f}s later; measuring {seconds:.0f}s")
    figures = await _steady(operator, tally, prom, processes, n, seconds)
    figures.create_to_children_s, figures.settle_s = create_to_children, settle_s
    say(f"[N={n}] done")
    return figures


async def _settle(tally: Tally, timeout_s: float) -> float:
    """Seconds until a whole tick passes with no child read (every reconcile reads the Deployment), at most
    `timeout_s`. Set-up work still queued (the operator's adoption of each token Secret comes back to it as
    a child event, one reconcile per object) must not be counted as steady load."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        before = tally.counts["fetch deployments"]
        await asyncio.sleep(TICK_S)
        if tally.counts["fetch deployments"] == before:
            break
    return time.monotonic() - started


def _cpu_s(process: psutil.Process) -> float:
    return float(sum(process.cpu_times()[:2]))


async def _steady(
    operator: OperatorProcess,
    tally: Tally,
    prom: PrometheusServer,
    processes: dict[str, psutil.Process],
    n: int,
    seconds: float,
) -> Figures:
    """The steady window. CPU of every process of the set-up: the operator, the emulator (this process, with
    the harness's own polling), the twin and Prometheus."""
    proc = processes["operator"]
    tally.drain()
    ticks0 = await operator.ticks(n)
    queries0, requests0 = query_count(prom), collections.Counter(tally.counts)
    cpu0 = {name: _cpu_s(p) for name, p in processes.items()}
    rss: list[float] = []
    deadline = time.monotonic() + seconds
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        rss.append(proc.memory_info().rss / 2**20)
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    elapsed = time.monotonic() - t0
    cpu = {name: _cpu_s(p) - cpu0[name] for name, p in processes.items()}
    ticks = [b - a for a, b in zip(ticks0, await operator.ticks(n), strict=True)]
    queries = query_count(prom) - queries0
    tally.drain()
    calls = dict(tally.counts - requests0)
    return Figures(
        n=n,
        seconds=elapsed,
        create_to_children_s=0.0,
        ticks_expected=elapsed / TICK_S,
        ticks_per_object=ticks,
        prom_queries=queries,
        cpu_s=cpu["operator"],
        rss_mib=max(rss) if rss else 0.0,
        api_calls=calls,
        cpu_by_process=cpu,
    )


def median_ticks(figures: Figures) -> float:
    return statistics.median(figures.ticks_per_object) if figures.ticks_per_object else 0.0
