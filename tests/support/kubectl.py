"""The real ``kubectl`` binary against the test API server, run without blocking the loop that serves it."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

KUBECTL = shutil.which("kubectl")


def write_kubeconfig(path: Path, server: str, namespace: str = "default") -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters:\n- name: emulator\n  cluster: {{server: "{server}"}}\n'
        "users:\n- name: tester\n  user: {token: test}\n"
        "contexts:\n- name: emulator\n"
        f"  context: {{cluster: emulator, user: tester, namespace: {namespace}}}\n"
        "current-context: emulator\n"
    )
    return path


@dataclass
class Result:
    rc: int
    out: str
    err: str


@dataclass
class Kubectl:
    """``await kubectl("get", "gisvc")``: the binary with its own kubeconfig and discovery cache."""

    kubeconfig: Path
    cache: Path

    async def run(self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
        assert KUBECTL is not None, "kubectl is not installed"
        environ = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "KUBECACHEDIR": str(self.cache),
            **(env or {}),
        }
        process = await asyncio.create_subprocess_exec(
            KUBECTL,
            *args,
            env=environ,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), timeout=30)
        assert process.returncode is not None
        return Result(process.returncode, out.decode(), err.decode())

    async def __call__(self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
        """Run and return stdout; a non-zero exit fails the test with kubectl's own message."""
        result = await self.run(*args, stdin=stdin, env=env)
        assert result.rc == 0, f"kubectl {' '.join(args)} exited {result.rc}: {result.err}"
        return result.out
