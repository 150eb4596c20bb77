"""Where the CLI prints: rich consoles on stdout and stderr, and section headings.

Every command prints through :func:`console` rather than a console made once,
because typer's test runner (and a user's redirection) swaps ``sys.stdout``
between calls: a console looks the stream up when it prints.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

#: Width used when output is not a terminal and COLUMNS is not set (pipes, tests):
#: wide enough that tables and disassembly lines are not wrapped.
PIPE_WIDTH = 200


def console(stderr: bool = False) -> Console:
    """A rich console on the current stdout/stderr (looked up at print time)."""
    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = PIPE_WIDTH
    return con


def heading(con: Console, title: str) -> None:
    """``── title ─────``: the rule between the sections of a report (``kpsdk probe``'s end)."""
    con.print(Text(f"── {title} " + "─" * max(4, 40 - len(title)), style="bold dim"))
