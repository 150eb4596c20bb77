"""Helpers of the CLI tests: the ``kpsdk`` app's commands and their options, as click sees them.

The commands are read from the built app, the built-in ones and those a plugin's
``kpsdk_cli`` hook adds (``kpsdk trace``), so a test over them covers every
command without naming one.
"""

from __future__ import annotations

from typing import Any

import typer
import typer.core
import typer.main

from kpsdk.cli import app


def app_commands() -> dict[str, Any]:
    """Every command of the app (typer's click commands) by name, the root group itself as ``kpsdk``."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    ctx = typer.Context(group)
    found: dict[str, Any] = {"kpsdk": group}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        found[name] = command
    return found


def command_params(command: Any) -> dict[str, Any]:
    """The command's arguments and options by their Python name, ``--help`` included."""
    return {p.name: p for p in command.get_params(typer.Context(command))}


def command_options(command: Any) -> dict[str, Any]:
    """The command's options by their Python name, ``--help`` included."""
    return {name: p for name, p in command_params(command).items() if p.param_type_name == "option"}


def option_names(option: Any) -> list[str]:
    """Every name an option answers to on the command line (``--flag``, ``-f``, ``--no-flag``)."""
    return [*option.opts, *option.secondary_opts]
