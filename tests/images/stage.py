"""Replay a Dockerfile build stage on this machine (no Docker here): its COPY sources into a fresh context,
its ENV, then its RUN commands with the image's absolute paths moved under a temporary directory.

The operator image's build stage builds the wheel and installs it into a fresh venv; replaying the stage's own
commands (rather than a copy of them in the test) keeps the test and the image from drifting apart.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dockerfile  # type: ignore[import-not-found]  # no stubs: a compiled binding of Docker's parser

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Instruction:
    cmd: str  # upper case: RUN, COPY, ENV …
    flags: tuple[str, ...]
    value: tuple[str, ...]


def parse(path: Path) -> list[Instruction]:
    parsed = dockerfile.parse_file(str(path))
    return [Instruction(c.cmd.upper(), tuple(c.flags), tuple(c.value)) for c in parsed]


def stages(path: Path) -> list[list[Instruction]]:
    """Instructions per stage (the ARGs before the first FROM are left out)."""
    result: list[list[Instruction]] = []
    for instruction in parse(path):
        if instruction.cmd == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


@dataclass(frozen=True)
class PathMap:
    """Absolute paths of the image (``/opt/venv``) and where they live on this machine."""

    paths: dict[str, Path]

    def map(self, text: str) -> str:
        # Whole path components only: /tmp maps, /tmpfs and /x/tmp do not.
        alternatives = "|".join(re.escape(p) for p in sorted(self.paths, key=len, reverse=True))
        pattern = rf"(?<![\w./-])({alternatives})(?![\w.-])"
        return re.sub(pattern, lambda m: str(self.paths[m.group(1)]), text)


def replay(stage: list[Instruction], scratch: Path, paths: PathMap) -> Path:
    """Run ``stage`` with the image's paths moved by ``paths``; its WORKDIR becomes a fresh copy of the COPY
    sources under ``scratch``. ``python`` is this interpreter (3.11, as in the image). Returns that copy.
    """
    context = scratch / "context"
    context.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    for instruction in stage:
        if instruction.cmd == "ENV":
            pairs = instruction.value
            env.update(zip(pairs[::2], pairs[1::2], strict=True))
        elif instruction.cmd == "COPY":
            assert not instruction.flags, f"cannot replay COPY {instruction.flags}"
            *sources, dest = instruction.value
            for source in sources:
                target = context / dest / Path(source).name if dest.endswith("/") else context / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                if (ROOT / source).is_dir():
                    shutil.copytree(
                        ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                    )
                else:
                    shutil.copy2(ROOT / source, target)
        elif instruction.cmd == "RUN":
            (command,) = instruction.value
            command = paths.map(command)
            # Docker's default shell form.
            result = subprocess.run(
                ["/bin/sh", "-c", command],
                cwd=context,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert result.returncode == 0, f"RUN {command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return context
