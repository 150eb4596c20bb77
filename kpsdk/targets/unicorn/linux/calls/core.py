"""What every subsystem's calls share: the process's state and the program's memory as the calls see it.

:class:`ProcessCore` is the base of each subsystem's class (:mod:`.fs`, :mod:`.mm`...): it
holds the state of the one emulated process (descriptors, address space, sysroot, working
directory, the records the calls keep) and the ways a call reads and writes the program's
memory (``EFAULT`` where it is not mapped) and takes its arguments (a C ``int`` in a
register, a 64-bit value in two registers on a 32-bit arch).
"""

from __future__ import annotations

import errno
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import unicorn

from kpsdk.targets.unicorn.linux.files import FdTable, Sysroot, _GuestErrno
from kpsdk.targets.unicorn.linux.memory import PAGE, AddressSpace

if TYPE_CHECKING:
    from kpsdk.arch import Arch, LinuxAbi

#: the process's ids (there is one process; it has no parent kpsdk shows)
PID, PPID = 1000, 1
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = 0x100, 0x1000


class ProcessCore:
    """One single-threaded Linux process's kernel-side state, over a Unicorn engine."""

    def __init__(self, arch: Arch, uc: unicorn.Uc, console: bytearray, space: AddressSpace, sysroot: Sysroot,
                 stdin: bytes, cwd: str, exe: str) -> None:
        assert arch.syscalls is not None and arch.syscalls.linux is not None
        self.arch, self.uc, self.console, self.mem, self.root = arch, uc, console, space, sysroot
        self.abi: LinuxAbi = arch.syscalls.linux
        self.order = "<" if arch.endian == "little" else ">"
        self.word = struct.Struct(self.order + ("Q" if arch.word_size == 8 else "I"))
        self.bits = 8 * arch.word_size
        self.fds = FdTable(stdin)
        self.cwd = cwd
        #: the file-creation mask (umask(2)); what the calls that make files take off their mode
        self.umask = 0o022
        self.exe = exe
        #: calls the layer does not emulate, by name, with how often the program made them; also the
        #: files of its own /proc it does not make (``open /proc/self/status``: ENOENT, :mod:`.procself`)
        self.unimplemented: Counter[str] = Counter()
        #: what ``/proc/self`` shows (set by ``start_process``): the arguments and environment
        #: strings, the auxiliary vector as the stack holds it, the stack's range
        self.argv: list[bytes] = []
        self.envp: list[bytes] = []
        self.auxv = b""
        self.stack: tuple[int, int] | None = None
        #: signal actions the program installed (handler word by signal): recorded, never delivered
        self.sigactions: dict[int, bytes] = {}
        self.clock_skew = 0.0  #: seconds nanosleep "slept" (the clocks move on, nothing waits)
        #: i386's GDT page for set_thread_area (0: not mapped yet)
        self.gdt = 0
        #: called as ``(host path, address, file offset)`` after a file is mapped (ld.so mapping a library)
        self.on_file_map: Callable[[Path, int, int], None] | None = None
        #: called as ``(start, end)`` before ``munmap`` removes that range (ld.so unmapping a
        #: library at dlclose): while its pages are still there to take probes out of
        self.on_unmap: Callable[[int, int], None] | None = None

    # -- arguments ------------------------------------------------------------------------------

    def sint(self, x: int, bits: int | None = None) -> int:
        """A register's value as the signed C ``int`` (32 bits) or ``long`` it holds."""
        bits = bits or 32
        x &= (1 << bits) - 1
        return x - (1 << bits) if x >> (bits - 1) else x

    def pair(self, args: tuple[int, ...], i: int) -> int:
        """A 64-bit argument from ``args[i]`` (two registers on a 32-bit arch: low word first in a
        little-endian one, and starting at an even register where the ABI says so)."""
        if self.bits == 64:
            return args[i]
        if self.abi.pair_aligned and i % 2:
            i += 1
        lo, hi = (args[i], args[i + 1]) if self.order == "<" else (args[i + 1], args[i])
        return (hi << 32) | lo

    # -- guest memory --------------------------------------------------------------------------

    def read(self, addr: int, size: int) -> bytes:
        try:
            return bytes(self.uc.mem_read(addr, size))
        except unicorn.UcError:
            raise _GuestErrno(errno.EFAULT) from None

    def write(self, addr: int, data: bytes) -> None:
        try:
            self.uc.mem_write(addr, data)
        except unicorn.UcError:
            raise _GuestErrno(errno.EFAULT) from None

    def read_word(self, addr: int) -> int:
        return int(self.word.unpack(self.read(addr, self.word.size))[0])

    def string(self, addr: int, limit: int = 4096) -> str:
        """A NUL-terminated string the program passed (a path), read page by page."""
        if not addr:
            raise _GuestErrno(errno.EFAULT)
        out = bytearray()
        while len(out) < limit:
            chunk = self.read(addr + len(out), min(limit - len(out), PAGE - (addr + len(out)) % PAGE))
            end = chunk.find(b"\0")
            if end >= 0:
                return (out + chunk[:end]).decode("utf-8", "surrogateescape")
            out += chunk
        raise _GuestErrno(errno.ENAMETOOLONG)

    # -- paths --------------------------------------------------------------------------------

    def base(self, dirfd: int, path: str) -> str:
        """The directory a relative ``path`` starts from: the cwd, or ``dirfd``'s own path."""
        dirfd = self.sint(dirfd)
        if path.startswith("/") or dirfd == AT_FDCWD:
            return self.cwd
        f = self.fds.get(dirfd)
        if f.kind not in ("dir", "path") or f.node is None or not f.node.mode & 0o040000:
            raise _GuestErrno(errno.ENOTDIR)
        return self.root.path_of(f.node, f.path)
