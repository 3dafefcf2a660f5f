"""``governor``: one entry point, one module per subcommand.

cli.py only dispatches. A subcommand is a module under ``governor.commands`` that defines ``HELP`` (one
line), ``add_arguments(parser)`` and ``main(args) -> int``; list it in :data:`COMMANDS` to add it
(``operator`` here; ``run`` (standalone) and ``demo`` come from their own modules). A listed module that
is not installed yet is left out of the help rather than breaking the others.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from types import ModuleType

COMMANDS: dict[str, str] = {
    "operator": "governor.commands.operator",
    "run": "governor.commands.run",
    "demo": "governor_dev.command",
}


def _load(module: str) -> ModuleType | None:
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ModuleNotFoundError:
        return None
    return importlib.import_module(module)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="governor",
                                     description="vLLM Governor: hold vLLM inside a latency SLO.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = _load(module_name)
        if module is None:
            continue
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args._main(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
