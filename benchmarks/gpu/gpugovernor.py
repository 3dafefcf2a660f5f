"""The `governor run` process a governed point runs beside the load (the loop and the budget parts).

Standard library only (it runs under the GPU image's python3)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def governor_command(args: argparse.Namespace, policy: str) -> str | None:
    """'governor' runs --governor-cmd; 'governor-NAME' adds the arguments --governor-variants gives NAME."""
    if not args.governor_cmd:
        return None
    if policy == "governor":
        return str(args.governor_cmd)
    variants = dict(v.split("=", 1) for v in args.governor_variants.split(";") if "=" in v)
    extra = variants.get(policy.removeprefix("governor-"))
    return None if extra is None else f"{args.governor_cmd} {extra}"


def start_governor(command_line: str, policy: str, out: Path) -> subprocess.Popen[bytes]:
    command = shlex.split(command_line)
    handle = (out / f"{policy}.log").open("ab")  # governor.log for the default command, as before
    log("governor: " + " ".join(command))
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop_governor(process: subprocess.Popen[bytes]) -> int | None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
    return process.returncode
