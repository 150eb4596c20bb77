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


#: the most of a line a program's output holds back waiting for its end (then printed in parts)
LINE_LIMIT = 1 << 16


class ProgramOutput:
    """An ``elf:`` program's standard output and error as the commands show them (its
    ``stdout=``/``stderr=``): printed on ``con`` a line at a time as the program writes them
    (so that hit and ``--strace`` lines fall between lines; a line past :data:`LINE_LIMIT` in
    parts), under heading ``title`` (at the first line; None: none).  A program writing
    gigabytes streams them: ``s.console`` keeps only its tail, this at most a line."""

    def __init__(self, con: Console, title: str | None = None) -> None:
        self.con = con
        self.title = title
        self.started = False
        self.last = ""
        self._pending = ""
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode

    def _begin(self) -> None:
        if not self.started:
            if self.title is not None:
                heading(self.con, self.title)
            self.started = True

    def write(self, data: bytes) -> int:
        pending = self._pending + self._decode(data)
        cut = pending.rfind("\n") + 1 or (len(pending) if len(pending) >= LINE_LIMIT else 0)
        self._pending = pending[cut:]
        self._put(pending[:cut])
        return len(data)

    def _put(self, text: str) -> None:
        if text:
            self._begin()
            out = self.con.file
            out.write(text)
            out.flush()
            self.last = text[-1]

    def end(self, newline: bool = True) -> None:
        """The run is over: the heading even for no output, the last line ended (``newline``)."""
        self._begin()
        self._put(self._pending + self._decode(b"", final=True))
        self._pending = ""
        if newline and self.last not in ("", "\n"):
            self._put("\n")
