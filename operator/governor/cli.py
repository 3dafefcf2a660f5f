"""``governor``: one entry point, one module per subcommand.

cli.py only dispatches. A subcommand is a module under ``governor.commands`` that defines ``HELP`` (one
line), ``add_arguments(parser)`` and ``main(args) -> int``; list it in :data:`COMMANDS` to add it
(``operator`` here; ``run`` (standalone) and ``demo`` come from their own modules). A listed module that
is not installed yet is left out of the help rather than breaking the others.

Only the chosen subcommand's module is imported: ``governor operator`` must start from the base dependencies
alone (the operator image installs no extras), while ``demo`` imports the ``tools`` extra (rich, numpy). A
module installed without an optional dependency it imports is listed as unavailable, with the reason.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import sys
from types import ModuleType

COMMANDS: dict[str, str] = {
    "operator": "governor.commands.operator",
    "run": "governor.commands.run",
    "demo": "governor_dev.command",
}


_OWN_PACKAGES = {"governor", "governor_runtime", "governor_twin", "governor_dev"}


def _load(module: str) -> ModuleType | str | None:
    """The subcommand's module; None if it is not installed; why not, if an optional dependency is missing."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ModuleNotFoundError:
        return None
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.partition(".")[0] in _OWN_PACKAGES:
            raise  # our own module missing is a packaging bug, not an absent extra
        return f"needs {missing!r}, which this install lacks (pip install 'vllm-governor[tools]')"


def _unavailable(name: str, why: str, _args: argparse.Namespace | None = None) -> int:
    print(f"governor {name}: {why}", file=sys.stderr)
    return 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All subcommands, or only ``only`` (then no other subcommand's module is imported)."""
    parser = argparse.ArgumentParser(
        prog="governor", description="vLLM Governor: hold vLLM inside a latency SLO."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = _load(module_name)
        if module is None:
            continue
        if isinstance(module, str):
            command = sub.add_parser(name, help=f"(unavailable: {module})")
            command.set_defaults(_main=functools.partial(_unavailable, name, module))
            continue
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    if chosen is not None:
        module = _load(COMMANDS[chosen])
        if isinstance(module, str):  # before parsing: its own flags are unknown without its module
            return _unavailable(chosen, module)
    args = build_parser(only=chosen).parse_args(argv)
    result: int = args._main(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
