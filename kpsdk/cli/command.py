"""How a command joins the app: its function, its examples and how typer should parse it.

Each command module declares one :class:`Command`; :mod:`kpsdk.cli.root` adds
the built-in ones in order, and a plugin's ``kpsdk_cli(app)`` hook may use
:meth:`Command.add_to` too (``kpsdk trace`` does), so every command's help
ends with its examples in the same form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer


@dataclass(frozen=True)
class Command:
    """One ``kpsdk NAME`` command."""

    name: str
    func: Callable[..., None]
    #: example command lines, one a line, shown under the help
    examples: str
    #: the help text, when not the function's docstring; short_help: the line in ``kpsdk --help``
    help: str | None = None
    short_help: str | None = None
    #: the command takes arguments it does not declare (``kpsdk probe ... --call add 2 -3``)
    extra_args: bool = False

    def add_to(self, app: typer.Typer) -> None:
        """Register the command on ``app``, its examples as the help's epilog."""
        epilog = "[bold]Examples[/bold]\n" + "\n".join(f"  {line}" for line in self.examples.splitlines())
        context: dict[str, Any] | None = (
            {"allow_extra_args": True, "ignore_unknown_options": True} if self.extra_args else None)
        app.command(self.name, help=self.help, short_help=self.short_help, epilog=epilog,
                    context_settings=context)(self.func)
