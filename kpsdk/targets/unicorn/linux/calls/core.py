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
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import unicorn

from kpsdk.targets.unicorn.linux.files import FdTable, Sysroot, _GuestErrno
from kpsdk.targets.unicorn.linux.memory import PAGE, AddressSpace
from kpsdk.targets.unicorn.linux.sched import KTIME_MAX, NSEC
from kpsdk.targets.unicorn.linux.tasks import SigHand
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.arch import Arch, LinuxAbi
    from kpsdk.target import MappedFile
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.syscalls import Handlers
    from kpsdk.targets.unicorn.linux.tasks import Task
    from kpsdk.targets.unicorn.linux.tree import FdTarget
    from kpsdk.targets.unicorn.output import GuestOutput

#: the first process's id (what the program kpsdk.open starts is told), and its parent's (none
#: kpsdk shows); the processes it makes get the ids after it
PID, PPID = 1000, 1
AT_FDCWD = -100
#: the largest file position (loff_t)
LLONG_MAX = (1 << 63) - 1
AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = 0x100, 0x1000


class ProcessCore:
    """One Linux process's kernel-side state (a thread group: what its tasks share), over the
    Unicorn engine its kernel (:class:`~kpsdk.targets.unicorn.linux.kernel.LinuxKernel`) runs."""

    def __init__(self, arch: Arch, uc: unicorn.Uc, console: GuestOutput, space: AddressSpace, sysroot: Sysroot,
                 stdin: bytes, cwd: str, exe: str) -> None:
        assert arch.syscalls is not None and arch.syscalls.linux is not None
        self.arch, self.uc, self.console, self.mem, self.root = arch, uc, console, space, sysroot
        self.abi: LinuxAbi = arch.syscalls.linux
        self.order = "<" if arch.endian == "little" else ">"
        self.word = struct.Struct(self.order + ("Q" if arch.word_size == 8 else "I"))
        self.bits = 8 * arch.word_size
        self.fds = FdTable(stdin, console.split)
        #: open(2)'s O_NONBLOCK and O_CLOEXEC on this arch (asm-generic's but where the arch says otherwise)
        bits = dict(self.abi.open_flag_bits)
        self.o_nonblock = bits.get("O_NONBLOCK", 0o4000)
        self.o_cloexec = bits.get("O_CLOEXEC", 0o2000000)
        self.cwd = cwd
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
        #: the kernel running this process's tasks (set when it joins one)
        self.kernel: LinuxKernel = None  # type: ignore[assignment]
        #: its ids: the process (thread group), its group and session, its parent
        self.pid = PID
        self.pgid = PID
        self.sid = PID
        self.parent: ProcessCore | None = None
        self.children: list[ProcessCore] = []
        #: its tasks (threads), the first one first
        self.threads: list[Task] = []
        #: the name ``/proc/PID/comm`` and the trace prefix show (its program's, 15 bytes)
        self.comm = PurePosixPath(exe).name[:15]
        #: the signal actions (shared with CLONE_SIGHAND clones) and the signals sent to the
        #: process as a whole (any of its tasks may take one)
        self.sighand = SigHand()
        self.shared_pending: dict[int, bytes] = {}
        self.shared_rt: list[tuple[int, bytes]] = []
        #: its wait status once its last task ended (a zombie until reaped); the status a fatal
        #: signal or exit_group decided; the signal its parent hears at its end (SIGCHLD)
        self.exit_status: int | None = None
        self.exit_signal_status: int | None = None
        self.exit_signal = 17
        #: woken when a child changes state (wait4 sleeps here), and when a vfork child execs or ends
        self.child_wait = WaitQueue("a child changed state")
        self.vfork_done = WaitQueue("vfork child done")
        #: a stop to report to wait4(WUNTRACED) (the signal), and a SIGCONT to report (WCONTINUED)
        self.stop_report: int | None = None
        self.continued = False
        #: the ELF objects mapped in this process (its program, ld.so, its libraries): whether a
        #: mapping is an object's first (:func:`kpsdk.targets.unicorn.linux.library_mapped`)
        self.mapped: list[MappedFile] = []
        #: the file-creation mask (umask: inherited across fork, kept across exec)
        self.umask = 0o022
        #: ITIMER_REAL (alarm, setitimer): its deadline on the kernel's clock and its interval (ns)
        self.itimer: tuple[int, int] | None = None
        #: i386's GDT page for set_thread_area (0: not mapped yet)
        self.gdt = 0
        #: called as ``(host path, address, file offset)`` after a file is mapped (ld.so mapping a library)
        self.on_file_map: Callable[[Path, int, int], None] | None = None
        #: called as ``(start, end)`` before ``munmap`` removes that range (ld.so unmapping a
        #: library at dlclose): while its pages are still there to take probes out of
        self.on_unmap: Callable[[int, int], None] | None = None

    #: by call number: the call's name and its handler (None: not emulated), built by LinuxProcess
    handlers: Handlers

    def fork(self, pid: int, flags: int) -> ProcessCore:
        """The process ``clone`` makes (``LinuxProcess.fork``, :mod:`kpsdk.targets.unicorn.linux.syscalls`)."""
        raise NotImplementedError

    def release(self) -> None:
        """The process ended: its descriptors and memory go."""
        raise NotImplementedError

    def fd_target(self, fd: int) -> FdTarget | None:
        """Where ``/proc/self/fd/N`` leads in the file system (:mod:`.procself`)."""
        raise NotImplementedError

    def thread_area(self, desc: int) -> None:
        """i386's set_thread_area of the ``struct user_desc`` at ``desc`` (:mod:`.thread`)."""
        raise NotImplementedError

    @property
    def task(self) -> Task:
        """The task making the call now (the kernel's current task, one of this process's)."""
        task = self.kernel.current
        assert task is not None
        return task

    def shared_pending_mask(self) -> int:
        mask = 0
        for sig in self.shared_pending:
            mask |= 1 << (sig - 1)
        for sig, _ in self.shared_rt:
            mask |= 1 << (sig - 1)
        return mask

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

    def position(self, args: tuple[int, ...], i: int) -> int:
        """A file position (``loff_t``: :meth:`pair`'s 64 bits, signed) checked as Linux checks
        pread64's and pwrite64's before anything else: a negative one is EINVAL."""
        return self.checked_position(self.sint(self.pair(args, i), 64))

    @staticmethod
    def checked_position(pos: int, count: int = 0) -> int:
        """``pos`` if ``count`` bytes from it are a range of file positions (rw_verify_area:
        not negative, not past ``LLONG_MAX``), else EINVAL."""
        if pos < 0 or pos + count > LLONG_MAX:
            raise _GuestErrno(errno.EINVAL)
        return pos

    def timespec_ns(self, addr: int, wide: bool = False, micro: bool = False) -> int:
        """The ``struct timespec`` (``timeval``: ``micro``) at ``addr`` in ns, decoded and checked
        as Linux's get_timespec64 and timespec64_valid do: the arch's own layout (two longs), or
        ``wide``, the time64 one (two 64-bit words, the nanoseconds checked whole, as qemu-user
        checks them: a 32-bit kernel would drop their high half); a negative second or a fraction
        outside ``[0, 1 s)`` is EINVAL; the result is capped at KTIME_MAX (timespec64_to_ktime)."""
        if wide:
            sec, frac = struct.unpack(self.order + "qq", self.read(addr, 16))
        else:
            sec, frac = struct.unpack(self.order + ("qq" if self.bits == 64 else "ii"), self.read(addr, self.bits // 4))
        scale = 1000 if micro else 1
        if sec < 0 or not 0 <= frac * scale < NSEC:
            raise _GuestErrno(errno.EINVAL)
        return min(int(sec) * NSEC + int(frac) * scale, KTIME_MAX)

    # -- guest memory --------------------------------------------------------------------------

    def read(self, addr: int, size: int) -> bytes:
        if self.mem.table.arenas and self.mem.table.in_hole(addr, size):
            raise _GuestErrno(errno.EFAULT)
        try:
            return bytes(self.uc.mem_read(addr, size))
        except unicorn.UcError:
            if size and self.mem.grow_stack(addr):  # the kernel's own access grows the stack too
                return self.read(addr, size)
            raise _GuestErrno(errno.EFAULT) from None

    def write(self, addr: int, data: bytes) -> None:
        if self.mem.table.arenas and self.mem.table.in_hole(addr, len(data)):
            raise _GuestErrno(errno.EFAULT)
        try:
            self.uc.mem_write(addr, data)
        except unicorn.UcError:
            if data and self.mem.grow_stack(addr):  # a signal frame below the stack's mapped part
                self.write(addr, data)
                return
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
