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


class FieldTypeError(KprobeError, TypeError):
    """A probe field holds a value of the wrong Python type (``Kprobe(offset="4")``).

    A ``KprobeError`` with ``EINVAL``, raised when the probe is made or
    registered, never at a hit; also a ``TypeError``, so ``except TypeError``
    keeps working.  ``field`` is the field's name and ``value`` what it held.
    """

    def __init__(self, owner: str, field: str, value: object, want: str) -> None:
        self.owner, self.field, self.value = owner, field, value
        super().__init__(_errno.EINVAL, f"{owner} field {field}={shown(value)}: want {want}, "
                                        f"not {type(value).__name__}")


class LocationError(KprobeError, ValueError):
    """A probe location that does not parse (``"add+"``, ``"prog:"``): ``EINVAL``, and a ``ValueError``."""


class ArgumentError(KpsdkError, TypeError, ValueError):
    """An argument of a kpsdk call that it does not accept: a value outside its range
    (``s.run(timeout=nan)``) or of the wrong type (``s.register_kprobe(42)``).

    The message names the argument, the value and what it wants.  It is both a
    ``TypeError`` and a ``ValueError``, so the ``except`` clause Python's own
    conventions suggest for either case catches it.
    """


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


class CapabilityError(KprobeError, UnsupportedTargetError):
    """A feature needs something the architecture's backend does not provide.

    ``arch`` and ``capability`` name them (``out_of_line.return_jump``: the
    kretprobe trampoline on Unicorn); raised when the feature is asked for (a
    probe's registration, with ``errno`` ``EOPNOTSUPP``), never in the middle
    of a run.  A backend author reads the optional capabilities off
    :class:`kpsdk.arch.Arch`.
    """

    def __init__(self, arch: str, capability: str, feature: str) -> None:
        self.arch, self.capability, self.feature = arch, capability, feature
        KprobeError.__init__(self, _errno.EOPNOTSUPP,
                             f"{feature} needs the {capability!r} capability, which the {arch} backend lacks")


class ToolMissingError(TargetError):
    """A program kpsdk needs (gdb, QEMU, a compiler) is not installed.

    ``tool`` is the program and ``package`` the Debian package that provides it.
    """

    def __init__(self, tool: str, package: str) -> None:
        self.tool, self.package = tool, package
        super().__init__(f"{tool} is not installed (Debian: apt-get install {package})")


class TargetExited(TargetError):
    """The target went away (process killed, connection closed) while kpsdk needed it."""


class TargetStalled(TargetError):
    """A live target stopped making progress for longer than its stall limit.

    QEMU was stopped (``SIGSTOP``), or gdb stopped answering because it was stuck
    talking to the gdbstub, or the target could not be halted for ``run(timeout=...)``
    or ``stop()``.  gdb has been killed and the session closed: a gdb that lost
    step with its stub cannot be trusted with the next hit.
    """


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


#: longest rendering of a user's value in a message (a fuzzed 5,000-character name stays one line)
SHOWN_MAX = 60


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN_MAX` characters: a message names the input
    without copying all of it."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user's object whose repr fails still gets its error named
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= SHOWN_MAX else f"{text[:SHOWN_MAX - 3]}..."


def caret_log(header: str, command: str, column: int) -> str:
    """The kernel's three-line ``error_log`` entry: ``header``, ``Command: COMMAND``, a caret under
    ``column``.  A character that would break the line or not print (CR, tab, NUL) shows as a
    space, so the caret stays under its column and the entry three lines."""
    prefix = "  Command: "
    shown_command = "".join(c if c.isprintable() else " " for c in command)
    return f"{header}\n{prefix}{shown_command}\n{' ' * (len(prefix) + column)}^"


def strerror(err: int) -> str:
    """The symbolic name of an errno value (``EINVAL``), for messages."""
    return _errno.errorcode.get(err, os.strerror(err))
