"""Subcommands of the ``governor`` CLI, one module each (see governor.cli)."""
