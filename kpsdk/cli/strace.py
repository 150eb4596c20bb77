"""An ``strace``-like printer of a Unicorn Linux program's system calls: a plugin like any other.

It listens to :func:`~kpsdk.hookspecs.kpsdk_syscall_entry` and
:func:`~kpsdk.hookspecs.kpsdk_syscall_exit` (fired by the Unicorn target's Linux
layer) and writes one line per call, as strace(1) does with its default
``-s 32``: ``openat(AT_FDCWD, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 3``,
``read(3, "root:x:0:0:root:/root:/bin/sh\\nkp"..., 4096) = 61``, failures as
``= -1 ENOENT (No such file or directory)``, the result column at 40 and the exit
as ``+++ exited with 42 +++``.  Paths and data written are read when the call
starts, data read when it returned.  Structures (``struct stat``, iovecs, signal
actions) print as their address: strace decodes them, this printer does not (yet).
How each call's arguments print is declared where the call is emulated, next to its
handler (``@syscall("read", "fd rbuf u")``: :mod:`kpsdk.targets.unicorn.linux.calls.declare`);
a call without one prints its six argument registers in hex.

``kpsdk probe PROG --strace`` registers one for the run; from Python::

    printer = kpsdk.cli.strace.StracePrinter(sys.stderr)
    kpsdk.get_registry().pm.register(printer)   # and pm.unregister(printer) after

Only the Unicorn target has a Linux layer that fires these hooks: a live target's
system calls are run by QEMU or the guest kernel, unseen by kpsdk.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from kpsdk.errors import TargetFault
from kpsdk.registry import hookimpl

if TYPE_CHECKING:
    from kpsdk.events import SyscallEvent
    from kpsdk.session import Session
    from kpsdk.target import Target

#: how many bytes of a string strace shows (its ``-s`` default)
STRING_LIMIT = 32
#: the column the ``= result`` is aligned to (strace's ``-a`` default)
RESULT_COLUMN = 40
AT_FDCWD = -100
PATH_MAX = 4096
PAGE = 4096

#: open(2) flags in strace's order (its xlat/open_mode_flags), with asm-generic's values; an
#: architecture's own bits for some of them come from :attr:`kpsdk.arch.LinuxAbi.open_flag_bits`
GENERIC_OPEN_FLAGS: tuple[tuple[str, int], ...] = (
    ("O_CREAT", 0o100), ("O_EXCL", 0o200), ("O_NOCTTY", 0o400), ("O_TRUNC", 0o1000), ("O_APPEND", 0o2000),
    ("O_NONBLOCK", 0o4000), ("O_SYNC", 0o4010000), ("O_DSYNC", 0o10000), ("O_DIRECT", 0o40000),
    ("O_LARGEFILE", 0o100000), ("O_NOFOLLOW", 0o400000), ("O_NOATIME", 0o1000000), ("O_CLOEXEC", 0o2000000),
    ("O_PATH", 0o10000000), ("O_TMPFILE", 0o20200000), ("O_DIRECTORY", 0o200000), ("FASYNC", 0o20000),
)
ACCESS_MODES = ("O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE")
PROT_FLAGS = (("PROT_READ", 1), ("PROT_WRITE", 2), ("PROT_EXEC", 4))
MAP_FLAGS = (("MAP_SHARED", 0x1), ("MAP_PRIVATE", 0x2), ("MAP_FIXED", 0x10), ("MAP_ANONYMOUS", 0x20),
             ("MAP_NORESERVE", 0x4000), ("MAP_DENYWRITE", 0x800), ("MAP_STACK", 0x20000),
             ("MAP_FIXED_NOREPLACE", 0x100000))
WHENCE = ("SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE")
#: calls that never return (``= ?``)
NO_RETURN = frozenset({"exit", "exit_group"})
#: calls whose result is an address (printed in hex)
ADDRESS_RESULT = frozenset({"mmap", "mmap2", "brk", "mremap"})

def quoted(data: bytes, limit: int = STRING_LIMIT, cut: bool | None = None) -> str:
    """``data`` as strace quotes it: C escapes for ``\\t\\n\\v\\f\\r"\\\\``, other bytes
    outside printable ASCII in the shortest octal (three digits when a digit follows),
    and ``...`` after the quote when more than ``limit`` bytes were there (or ``cut``)."""
    shown = data[:limit]
    out = []
    for i, b in enumerate(shown):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\t\n\v\f\r":
            out.append({"\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}[c])
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            following = shown[i + 1:i + 2]
            out.append(f"\\{b:03o}" if following and following in b"01234567" else f"\\{b:o}")
    more = len(data) > limit if cut is None else cut
    return '"' + "".join(out) + '"' + ("..." if more else "")


def flag_names(value: int, table: tuple[tuple[str, int], ...]) -> list[str]:
    """The names of the flags set in ``value`` (a multi-bit flag only when all its bits are),
    then what is left in hex."""
    names = []
    for name, bits in table:
        if bits and value & bits == bits:
            names.append(name)
            value &= ~bits
    if value:
        names.append(f"{value:#x}")
    return names


def errno_text(code: int) -> str:
    """``-1 ENOENT (No such file or directory)``."""
    return f"-1 {errno.errorcode.get(code, f'E{code}')} ({os.strerror(code)})"


class StracePrinter:
    """Writes each system call of a Unicorn Linux program to ``out`` as strace would.

    :param out: a text stream (``sys.stderr``, as strace's default).
    :param session: only this session's calls (None: every session's).
    """

    def __init__(self, out: TextIO, session: Session | None = None) -> None:
        self.out = out
        self.session = session
        self._pending: dict[int, tuple[str, list[str | None]]] = {}

    # -- the hooks ------------------------------------------------------------------------------

    @hookimpl
    def kpsdk_syscall_entry(self, session: Session, call: SyscallEvent) -> None:
        if self._mine(session):
            self._pending[id(call)] = (call.name, self._arguments(session, call))

    @hookimpl
    def kpsdk_syscall_exit(self, session: Session, call: SyscallEvent) -> None:
        if not self._mine(session):
            return
        _, args = self._pending.pop(id(call), (call.name, []))
        # what a call filled in (read's buffer) is read now; such calls have one argument per register
        shown = [a if a is not None else self._read_buffer(session.target, call.args[i], call.result)
                 for i, a in enumerate(args)]
        self._line(f"{call.name}({', '.join(shown)})", self._result(call))

    @hookimpl
    def kpsdk_program_exit(self, session: Session, status: int) -> None:
        if not self._mine(session):
            return
        for name, args in self._pending.values():  # exit/exit_group: they never return
            self._line(f"{name}({', '.join(a or '?' for a in args)})", "?")
        self._pending.clear()
        self.out.write(f"+++ exited with {status} +++\n")
        self.out.flush()

    # -- formatting ---------------------------------------------------------------------------

    def _mine(self, session: Session) -> bool:
        return self.session is None or session is self.session

    def _line(self, text: str, result: str) -> None:
        self.out.write(f"{text.ljust(RESULT_COLUMN)}= {result}\n" if len(text) < RESULT_COLUMN
                       else f"{text} = {result}\n")
        self.out.flush()

    def _result(self, call: SyscallEvent) -> str:
        result = call.result
        if result is None or call.name in NO_RETURN:
            return "?"
        if -4096 < result < 0:
            return errno_text(-result)
        return f"{result:#x}" if call.name in ADDRESS_RESULT else str(result)

    def _arguments(self, session: Session, call: SyscallEvent) -> list[str | None]:
        """The call's arguments as text at its entry; None for one only known at exit."""
        kinds = _signature(call.name)
        if kinds is None:
            return [f"{a:#x}" for a in call.args]
        target = session.target
        word = target.arch.word_size * 8
        signed = _signed(word)
        syscalls = target.arch.syscalls
        abi = syscalls.linux if syscalls is not None else None
        oflags = _open_flags(abi.open_flag_bits if abi is not None else ())
        out: list[str | None] = []
        for i, kind in enumerate(kinds):
            value = call.args[i] if i < len(call.args) else 0
            if kind == "oflags" and abi is not None:  # MIPS's own bits named by their generic ones
                value = abi.generic_flags(value, abi.open_flags)
            if kind == "rbuf":
                out.append(None)
                continue
            out.append(_format(kind, value, call, i, target, signed, oflags))
            if kind == "oflags" and value & 0o20100100 and i + 1 < len(call.args):  # O_CREAT, O_TMPFILE
                out.append(f"{call.args[i + 1] & 0o7777:#05o}")
        return out

    @staticmethod
    def _read_buffer(target: Target, addr: int, result: int | None) -> str:
        if result is None or -4096 < result < 0:
            return _pointer(addr)
        return _string_at(target, addr, result, exact=True)


def _signature(name: str) -> tuple[str, ...] | None:
    """Call ``name``'s argument kinds, as its handler in the Linux layer declares them
    (:mod:`kpsdk.targets.unicorn.linux.calls.declare`); None: strace prints its registers.
    Imported at the first call: only a Unicorn run fires these hooks, and the CLI starts
    without loading Unicorn."""
    from kpsdk.targets.unicorn.linux.syscalls import signature

    return signature(name)


def _signed(bits: int) -> Callable[[int, int], int]:
    def signed(value: int, width: int = 32) -> int:
        width = min(width, bits)
        value &= (1 << width) - 1
        return value - (1 << width) if value >> (width - 1) else value
    return signed


def _open_flags(arch_bits: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    own = dict(arch_bits)
    return tuple((name, own.get(name, bits)) for name, bits in GENERIC_OPEN_FLAGS)


def _pointer(value: int) -> str:
    return "NULL" if not value else f"{value:#x}"


def _string_at(target: Target, addr: int, count: int, exact: bool) -> str:
    """``count`` bytes at ``addr`` quoted (``exact``: a buffer, at most ``-s`` shown), or a
    NUL-terminated path (shown whole up to PATH_MAX, as strace shows paths)."""
    if not addr:
        return "NULL"
    read = target.read_memory
    try:
        if exact:
            return quoted(bytes(read(addr, min(count, STRING_LIMIT))), cut=count > STRING_LIMIT)
        data = b""
        while len(data) < PATH_MAX:  # page by page: a path may end just before an unmapped page
            at = addr + len(data)
            data += bytes(read(at, min(PATH_MAX - len(data), PAGE - at % PAGE)))
            end = data.find(b"\0")
            if end >= 0:
                return quoted(data[:end], limit=PATH_MAX)
        return quoted(data, limit=PATH_MAX, cut=True)
    except TargetFault:  # unreadable: the address, as strace prints it
        return f"{addr:#x}"


def _format(kind: str, value: int, call: SyscallEvent, i: int, target: Target,
            signed: Callable[[int, int], int], oflags: tuple[tuple[str, int], ...]) -> str:
    if kind in ("d", "fd"):
        return str(signed(value, 64 if kind == "d" else 32))
    if kind == "dirfd":
        fd = signed(value, 32)
        return "AT_FDCWD" if fd == AT_FDCWD else str(fd)
    if kind == "u":
        return str(value)
    if kind == "x":
        return f"{value:#x}"
    if kind == "p":
        return _pointer(value)
    if kind == "mode":
        return f"{value & 0o7777:#05o}" if value else "0"
    if kind == "path":
        return _string_at(target, value, 0, exact=False)
    if kind == "wbuf":
        count = call.args[i + 1] if i + 1 < len(call.args) else 0
        return _string_at(target, value, count, exact=True)
    if kind == "oflags":
        mode = ACCESS_MODES[value & 3]
        return "|".join([mode, *flag_names(value & ~3, oflags)])
    if kind == "prot":
        return "|".join(flag_names(value, PROT_FLAGS)) or "PROT_NONE"
    if kind == "mflags":
        return "|".join(flag_names(value, MAP_FLAGS)) or "0"
    if kind == "whence":
        return WHENCE[value] if value < len(WHENCE) else str(value)
    raise ValueError(f"unknown argument kind {kind!r}")
