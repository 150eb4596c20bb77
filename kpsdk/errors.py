"""Typed errors.

Every failure a user can cause or meet has its own class here, and carries the
context needed to act on it.  Probe registration errors are :class:`KprobeError`,
an :class:`OSError` whose ``errno`` is the one the Linux kernel's kprobes would
return for the same mistake, so code ported from a kernel module can check
``e.errno == errno.EINVAL`` exactly as before.  Only ``kpsdk/cli.py`` turns
these into exit codes.
"""

from __future__ import annotations

import errno as _errno
import os


class KpsdkError(Exception):
    """Base class of every error kpsdk raises on purpose."""


class KprobeError(KpsdkError, OSError):
    """A probe operation failed; ``errno`` is the kernel's errno for the same case."""

    def __init__(self, err: int, message: str) -> None:
        OSError.__init__(self, err, f"{_errno.errorcode.get(err, str(err))}: {message}")
        self.reason = message

    def __str__(self) -> str:
        return str(self.strerror)


class UnknownNameError(KpsdkError, LookupError):
    """A name (architecture, register, target kind, probe type) is not known.

    The message lists the valid names so the user can correct the spelling.
    """

    def __init__(self, what: str, name: str, valid: list[str] | tuple[str, ...]) -> None:
        self.what, self.name, self.valid = what, name, tuple(valid)
        super().__init__(f"unknown {what} {name!r}; valid: {', '.join(sorted(self.valid))}")


class TargetError(KpsdkError):
    """The target could not be opened, or cannot do what was asked."""


class UnsupportedTargetError(TargetError):
    """The requested architecture/target combination cannot work on this machine.

    The message names the cause (for example an upstream emulator bug) and the
    alternative.
    """


class ToolMissingError(TargetError):
    """A program kpsdk needs (gdb, QEMU, a compiler) is not installed.

    ``tool`` is the program and ``package`` the Debian package that provides it.
    """

    def __init__(self, tool: str, package: str) -> None:
        self.tool, self.package = tool, package
        super().__init__(f"{tool} is not installed (Debian: apt-get install {package})")


class TargetExited(TargetError):
    """The target went away (process killed, connection closed) while kpsdk needed it."""


class TargetFault(TargetError):
    """The emulated or live CPU faulted while running target code.

    ``pc`` is where it stopped and ``where`` the ``sym+0xoff`` of that address.
    """

    def __init__(self, message: str, pc: int | None = None, where: str | None = None) -> None:
        self.pc, self.where = pc, where
        loc = f" at {where or ''}{' ' if where else ''}(pc={pc:#x})" if pc is not None else ""
        super().__init__(f"{message}{loc}")


class ProbeHandlerError(KpsdkError):
    """A probe handler raised and no fault_handler claimed it (K4).

    The original exception is the ``__cause__``; ``probe`` and ``address`` say
    where it happened.
    """

    def __init__(self, probe: object, address: int, where: str, phase: str, exc: BaseException) -> None:
        self.probe, self.address, self.where, self.phase = probe, address, where, phase
        super().__init__(
            f"{phase} of {probe!r} at {where} ({address:#x}) raised "
            f"{type(exc).__name__}: {exc}"
        )


class SymbolError(KpsdkError, LookupError):
    """A symbol or ``sym+off`` expression could not be resolved."""


class ImageFormatError(TargetError, SymbolError):
    """A file kpsdk was given to read cannot be used: a malformed or truncated ELF file,
    kernel image, kallsyms table, System.map or kallsyms list, one too large to read, or
    something that is not a regular file at all (a FIFO, ``/dev/zero``).

    ``path`` is the file (or ``<text>``/``<image>`` for data passed in memory), ``line`` the
    line of a text file (else None), and the message says what is wrong and where: the field,
    the file offset or the line.  It is both a :class:`TargetError` (what opening a target on
    a bad file raises) and a :class:`SymbolError` (what reading symbols from a bad file
    raises), so code written against either keeps catching it.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, line: int | None = None) -> None:
        self.path, self.problem, self.line = os.fspath(path), problem, line
        super().__init__(f"{self.path}{'' if line is None else f':{line}'}: {problem}")


def strerror(err: int) -> str:
    """The symbolic name of an errno value (``EINVAL``), for messages."""
    return _errno.errorcode.get(err, os.strerror(err))
