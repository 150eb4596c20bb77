"""Where the CLI prints: rich consoles on stdout and stderr, section headings, a program's output.

Every command prints through :func:`console` rather than a console made once,
because typer's test runner (and a user's redirection) swaps ``sys.stdout``
between calls: a console looks the stream up when it prints.
"""

from __future__ import annotations

import codecs
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


class ProgramOutput:
    """An ``elf:`` program's standard output and error as the commands show them (its
    ``stdout=``/``stderr=``): printed on ``con`` as the program writes them, under heading
    ``title`` (at the first byte; None: none), so that a program writing gigabytes streams
    them (``s.console`` keeps only its tail)."""

    def __init__(self, con: Console, title: str | None = None) -> None:
        self.con = con
        self.title = title
        self.started = False
        self.last = ""
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode

    def _begin(self) -> None:
        if not self.started:
            if self.title is not None:
                heading(self.con, self.title)
            self.started = True

    def write(self, data: bytes) -> int:
        self._begin()
        self._put(self._decode(data))
        return len(data)

    def _put(self, text: str) -> None:
        if text:
            out = self.con.file
            out.write(text)
            out.flush()
            self.last = text[-1]

    def end(self, newline: bool = True) -> None:
        """The run is over: the heading even for no output, the last line ended (``newline``)."""
        self._begin()
        self._put(self._decode(b"", final=True))
        if newline and self.last not in ("", "\n"):
            self._put("\n")
