"""The Linux process on Unicorn and its system-call dispatch: a number, a name, a handler.

:class:`LinuxProcess` combines the subsystems of :mod:`kpsdk.targets.unicorn.linux.calls`
(why mixins: that package's docstring).  The arch's table names every number
(:attr:`kpsdk.arch.Syscalls.calls`, the kernel's); the calls its Linux ABI lists
(:attr:`kpsdk.arch.LinuxAbi.calls`) get the handler marked with that name, so nothing here
depends on the architecture except through data.  A call without a handler returns
``-ENOSYS`` and is recorded in :attr:`LinuxProcess.unimplemented` under its name.  What would
need a second thread, a second process or a signal delivered raises
:class:`~kpsdk.errors.NotEmulatedError` (an honest "not yet").
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING

import unicorn

from kpsdk.targets.unicorn.linux.calls import process
from kpsdk.targets.unicorn.linux.calls.attrs import AttrCalls
from kpsdk.targets.unicorn.linux.calls.clocks import ClockCalls
from kpsdk.targets.unicorn.linux.calls.core import PID, PPID, ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import collect
from kpsdk.targets.unicorn.linux.calls.eventfd import EventCalls
from kpsdk.targets.unicorn.linux.calls.filestat import StatCalls
from kpsdk.targets.unicorn.linux.calls.fs import FsCalls
from kpsdk.targets.unicorn.linux.calls.ids import IdCalls
from kpsdk.targets.unicorn.linux.calls.mm import MemoryCalls
from kpsdk.targets.unicorn.linux.calls.names import NameCalls
from kpsdk.targets.unicorn.linux.calls.poll import PollCalls
from kpsdk.targets.unicorn.linux.calls.process import ProcessCalls
from kpsdk.targets.unicorn.linux.calls.rw import ReadWriteCalls
from kpsdk.targets.unicorn.linux.calls.signals import SignalCalls
from kpsdk.targets.unicorn.linux.calls.sockets import SocketCalls
from kpsdk.targets.unicorn.linux.calls.sysinfo import SysinfoCalls
from kpsdk.targets.unicorn.linux.calls.thread import ThreadCalls
from kpsdk.targets.unicorn.linux.calls.xattr import XattrCalls
from kpsdk.targets.unicorn.linux.files import Sysroot, _GuestErrno
from kpsdk.targets.unicorn.linux.memory import AddressSpace
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.targets.unicorn.output import GuestOutput

__all__ = ["PID", "PPID", "SIGNATURES", "LinuxProcess", "signature"]


class LinuxProcess(FsCalls, NameCalls, AttrCalls, ReadWriteCalls, StatCalls, XattrCalls, MemoryCalls, ThreadCalls,
                   ProcessCalls, IdCalls, SignalCalls, PollCalls, EventCalls, ClockCalls, SocketCalls, SysinfoCalls):
    """One single-threaded Linux process's kernel side, over a Unicorn engine."""

    def __init__(self, arch: Arch, uc: unicorn.Uc, console: GuestOutput, space: AddressSpace, sysroot: Sysroot,
                 stdin: bytes, cwd: str, exe: str) -> None:
        super().__init__(arch, uc, console, space, sysroot, stdin, cwd, exe)
        assert arch.syscalls is not None
        sysroot.fd_target = self.fd_target
        missing = sorted(self.abi.calls - HANDLERS.keys())
        if missing:
            raise ValueError(f"{arch.name}'s Linux ABI lists calls no handler answers: {', '.join(missing)}")
        #: by number: the call's name and its handler (None: not emulated, -ENOSYS)
        self.handlers = Handlers(self, {nr: (name, HANDLERS[name] if name in self.abi.calls else None)
                                        for name, nr in arch.syscalls.calls.items()})

    def syscall(self, nr: int, args: tuple[int, ...]) -> int | None:
        """Run call ``nr``; its result (``-errno`` on failure; None: the kernel took the task
        elsewhere).  The kernel (:mod:`.kernel`) runs calls itself; this serves callers
        without one."""
        name, handler = self.handlers.lookup(nr, f"syscall_{nr}")
        if handler is None:
            self.unimplemented[name] += 1
            return -errno.ENOSYS
        try:
            return handler(*args)
        except _GuestErrno as e:
            return -e.errno

    def close(self) -> None:
        self.fds.close_all()
        self.root.close()  # the binds' host directories

    def fork(self, pid: int, flags: int) -> ProcessCore:
        """The process a ``clone`` without CLONE_THREAD makes: the same program, its memory
        copied or shared (``CLONE_VM``), its descriptors copied or shared (``CLONE_FILES``), its
        signal actions copied or shared (``CLONE_SIGHAND``); a fresh pid and no children."""
        from kpsdk.targets.unicorn.linux.lifecycle import CLONE_FILES, CLONE_SIGHAND, CLONE_VM

        child = object.__new__(type(self))
        child.__dict__.update(self.__dict__)
        child.pid = pid
        child.parent, child.children, child.threads = None, [], []
        if flags & CLONE_VM:
            self.mem.users += 1
        else:
            child.mem = self.mem.fork()
        if flags & CLONE_FILES:
            self.fds.users += 1
        else:
            child.fds = self.fds.fork()
        child.sighand = self.sighand if flags & CLONE_SIGHAND else self.sighand.copy()
        child.shared_pending, child.shared_rt = {}, []
        child.mapped = list(self.mapped)
        child.exit_status = child.exit_signal_status = None
        child.child_wait = WaitQueue("a child changed state")
        child.vfork_done = WaitQueue("vfork child done")
        child.stop_report, child.continued = None, False
        child.handlers = Handlers(child, self.handlers.table)
        return child

    def release(self) -> None:
        """The process ended: its descriptors and memory go (unless a CLONE_FILES/CLONE_VM
        clone still uses them)."""
        self.fds.users -= 1
        if self.fds.users <= 0:
            self.fds.close_all()
        self.mem.release()


#: the method answering each call, by the call's name; each call's strace argument kinds
#: (:mod:`kpsdk.targets.unicorn.linux.calls.declare`), read by :mod:`kpsdk.cli.strace`
HANDLERS, SIGNATURES = collect(LinuxProcess, process.STRACE_ONLY)


class Handlers(dict[int, tuple[str, "Callable[..., int | None] | None"]]):
    """A process's calls by number, each bound to the process at its first use: a fork's
    child shares the table and binds only the calls it makes (binding all ~400 of them
    cost ~2.5 ms a fork)."""

    def __init__(self, owner: LinuxProcess, table: dict[int, tuple[str, str | None]]) -> None:
        super().__init__()
        self.owner = owner
        #: by number: the call's name and its method's name (None: not emulated)
        self.table = table

    def lookup(self, nr: int, unknown: str) -> tuple[str, Callable[..., int | None] | None]:
        """Call ``nr``'s name and bound handler (``(unknown, None)`` for a number the arch
        does not have)."""
        found = self.get(nr)
        if found is None:
            name, method = self.table.get(nr, (unknown, None))
            found = self[nr] = (name, None if method is None else getattr(self.owner, method))
        return found


def signature(name: str) -> tuple[str, ...] | None:
    """How strace prints call ``name``'s arguments (None: its six registers, in hex)."""
    return SIGNATURES.get(name)
