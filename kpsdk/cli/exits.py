"""The one place in kpsdk where exceptions become exit codes.

Everything else raises: the Python API, the targets, the plugins and each
command of this package.  Here, a :class:`kpsdk.KpsdkError` (or an ``OSError``
such as ``KprobeError``) prints one red ``error: ...`` line on stderr and
exits 1, whichever command raised it, a plugin's included
(:class:`KpsdkGroup`), or while the app was being built (plugins loaded with
``-p``: :func:`exit_on_user_error`).  Usage errors exit 2 as typer's do;
anything else is a bug and keeps its traceback.  A command that catches
Ctrl-C to close its target exits :data:`INTERRUPTED`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from kpsdk.cli.consoles import console
from kpsdk.errors import KpsdkError

#: the exit status after Ctrl-C, as a shell reports a process killed by SIGINT (128 + 2)
INTERRUPTED = 130


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is something a user caused or met (one error line), not a bug (a traceback)."""
    if isinstance(exc, BrokenPipeError):
        return False  # typer handles a closed pipe (kpsdk list | head) quietly
    return isinstance(exc, KpsdkError | OSError)


def report_error(exc: BaseException) -> None:
    """The one-line ``error: ...`` for a kpsdk error, on stderr."""
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, KpsdkError) and exc.strerror:
        msg = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    console(stderr=True).print(f"[bold red]error:[/] {escape(' '.join(msg.split()))}", soft_wrap=True)
    detail = getattr(exc, "error_log", None)  # a definition error: the kernel's error_log, caret included
    if isinstance(detail, str):
        console(stderr=True).out(detail, highlight=False)


class KpsdkGroup(TyperGroup):
    """The root command: turns kpsdk errors raised by any command (plugins' too) into exit 1."""

    def invoke(self, ctx: Any) -> Any:
        with exit_on_user_error(typer.Exit):
            return super().invoke(ctx)


@contextmanager
def exit_on_user_error(exit_with: Callable[[int], BaseException] = SystemExit) -> Iterator[None]:
    """A user's error raised inside is its error line, then ``exit_with(1)``.

    Around a command, ``typer.Exit`` (click ends the run); around the whole
    console script, ``SystemExit``, for an error outside any command (a plugin
    that ``-p`` names but cannot load).
    """
    try:
        yield
    except Exception as exc:
        if not is_user_error(exc):
            raise
        report_error(exc)
        raise exit_with(1) from None
