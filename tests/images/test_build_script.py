"""scripts/build-images.sh: the commands it runs (a stand-in container tool records them; no Docker daemon
here), the tag it picks, and the helm flags it prints, installed with the real chart."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import install
from tests.images.stage import ROOT

SCRIPT = ROOT / "scripts" / "build-images.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SYSTEM_PATH = "/usr/bin:/bin"  # no docker or podman there on the test machine (checked below)


def _run(
    *args: str, script: Path = SCRIPT, path: str = SYSTEM_PATH, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **env},
    )


def _commands(stdout: str) -> list[list[str]]:
    """The command lines a dry run prints, split as the shell would."""
    return [shlex.split(line) for line in stdout.splitlines() if line.startswith(("docker ", "podman "))]


def test_the_test_path_has_no_container_tool() -> None:
    assert [shutil.which(tool, path=SYSTEM_PATH) for tool in ("docker", "podman")] == [None, None]


def test_dry_run_prints_both_builds_from_the_repository_root_and_no_push() -> None:
    result = _run("--dry-run", "registry.example.com/ml/", "1.2.3")
    assert result.returncode == 0, result.stderr
    assert _commands(result.stdout) == [
        [
            "docker",
            "build",
            "-f",
            "operator/Dockerfile",
            "-t",
            "registry.example.com/ml/vllm-governor-operator:1.2.3",
            ".",
        ],
        [
            "docker",
            "build",
            "-f",
            "runtime/Dockerfile",
            "-t",
            "registry.example.com/ml/vllm-governor-runtime:1.2.3",
            ".",
        ],
    ]
    assert "image: registry.example.com/ml/vllm-governor-runtime:1.2.3" in result.stdout


def test_dry_run_passes_base_images_and_push_and_only() -> None:
    pinned = "python:3.11-slim-bookworm@sha256:" + "a" * 64
    result = _run(
        "--dry-run",
        "--push",
        "--only",
        "operator",
        "--python-image",
        pinned,
        "ghcr.io/alice",
        "2.0",
        CONTAINER_TOOL="podman",
    )
    assert result.returncode == 0, result.stderr
    assert _commands(result.stdout) == [
        [
            "podman",
            "build",
            "-f",
            "operator/Dockerfile",
            "-t",
            "ghcr.io/alice/vllm-governor-operator:2.0",
            "--build-arg",
            f"PYTHON_IMAGE={pinned}",
            ".",
        ],
        ["podman", "push", "ghcr.io/alice/vllm-governor-operator:2.0"],
    ]
    runtime = _run(
        "--dry-run", "--only", "runtime", "--vllm-image", "vllm/vllm-openai:v0.33.0", "r.io/x", "3"
    )
    assert _commands(runtime.stdout) == [
        [
            "docker",
            "build",
            "-f",
            "runtime/Dockerfile",
            "-t",
            "r.io/x/vllm-governor-runtime:3",
            "--build-arg",
            "VLLM_IMAGE=vllm/vllm-openai:v0.33.0",
            ".",
        ],
    ]


def _set_flags(stdout: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in re.findall(r"--set (\S+)=(\S+)", stdout):
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return values


def test_the_printed_helm_flags_make_the_chart_run_the_built_operator_image() -> None:
    result = _run("--dry-run", "registry.example.com:5000/team", "1.2.3")
    values = _set_flags(result.stdout)
    assert values == {
        "image": {"repository": "registry.example.com:5000/team/vllm-governor-operator", "tag": "1.2.3"}
    }
    (container,) = install(values).one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com:5000/team/vllm-governor-operator:1.2.3"


def _stub_tool(directory: Path, name: str, log: Path) -> None:
    directory.mkdir(exist_ok=True)
    tool = directory / name
    tool.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> {shlex.quote(str(log))}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_without_dry_run_it_runs_the_tool_it_finds_and_pushes(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    _stub_tool(tmp_path / "bin", "podman", log)
    result = _run("--push", "r.io/x", "7", path=f"{tmp_path / 'bin'}:{SYSTEM_PATH}")
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == [
        "podman build -f operator/Dockerfile -t r.io/x/vllm-governor-operator:7 .",
        "podman build -f runtime/Dockerfile -t r.io/x/vllm-governor-runtime:7 .",
        "podman push r.io/x/vllm-governor-operator:7",
        "podman push r.io/x/vllm-governor-runtime:7",
    ]
    assert "built and pushed" in result.stdout


def test_a_failed_build_stops_the_script(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 3\n")
    (bin_dir / "docker").chmod(0o755)
    result = _run("--push", "r.io/x", "7", path=f"{bin_dir}:{SYSTEM_PATH}")
    assert result.returncode == 3
    assert "helm install" not in result.stdout


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["r.io/x"], "neither docker nor podman"),
        (["--dry-run", "Registry.io/X"], "is not a registry"),
        (["--dry-run", "r.io/x:1.0"], "is not a registry"),
        (["--dry-run", "r.io/x", "bad tag"], "is not a valid image tag"),
        (["--dry-run", "--only", "twin", "r.io/x"], "--only takes operator or runtime"),
        (["--dry-run", "--frobnicate", "r.io/x"], "unknown option --frobnicate"),
        (["--dry-run"], "usage:"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], complaint: str) -> None:
    result = _run(*args)
    assert result.returncode == 2
    assert complaint in result.stderr


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": SYSTEM_PATH,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env, timeout=30
    ).stdout.strip()


def _default_tag(script: Path) -> str:
    result = _run("--dry-run", "r.io/x", script=script)
    assert result.returncode == 0, result.stderr
    tags: set[str] = set(re.findall(r"vllm-governor-\w+:(\S+)", result.stdout))
    (tag,) = tags
    return tag


def test_default_tag_is_the_version_at_a_release_else_it_names_the_commit(tmp_path: Path) -> None:
    """A throwaway copy (script + pyproject.toml): outside git, at the release tag, past it, then dirty."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / SCRIPT.name
    shutil.copy2(SCRIPT, script)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert _default_tag(script) == VERSION

    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "release")
    _git(tmp_path, "tag", f"v{VERSION}")
    assert _default_tag(script) == VERSION

    (tmp_path / "notes").write_text("x")
    _git(tmp_path, "add", "notes")
    _git(tmp_path, "commit", "-q", "-m", "later")
    later = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert _default_tag(script) == f"{VERSION}-g{later}"

    (tmp_path / "notes").write_text("changed")
    assert _default_tag(script) == f"{VERSION}-g{later}-dirty"
