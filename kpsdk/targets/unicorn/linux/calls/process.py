"""The process: its ids, name, children and end; the calls that make another (clone, fork,
vfork, execve) and wait for one (wait4, waitid).

The first process is :data:`~kpsdk.targets.unicorn.linux.calls.core.PID` (its own group and
session leader, with no parent kpsdk shows); the ids of the tasks and processes it makes
follow.  What a call does to tasks (making them, ending them, waiting) is the kernel's
(:mod:`kpsdk.targets.unicorn.linux.lifecycle`); these handlers decode the arguments as each
arch passes them.
"""

from __future__ import annotations

import errno
import os
import struct

from kpsdk.targets.unicorn.linux import lifecycle
from kpsdk.targets.unicorn.linux.calls.core import PPID, ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import Declared, syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.waits import _Block

PR_SET_NAME, PR_GET_NAME = 15, 16
SIGCHLD = 17
P_ALL, P_PID, P_PGID = 0, 1, 2
#: waitid's CLD_* codes (si_code of SIGCHLD)
CLD_EXITED, CLD_KILLED, CLD_DUMPED, CLD_STOPPED, CLD_CONTINUED = 1, 2, 3, 5, 6

#: the calls whose only declaration is their strace signature (``declare.signature_only``):
#: calls the layer does not emulate (they answer ENOSYS) that strace decodes and programs make;
#: none at present (the sockets' are emulated now)
STRACE_ONLY: tuple[Declared, ...] = ()


class ProcessCalls(ProcessCore):
    """The calls about processes and tasks as wholes."""

    # -- ids ----------------------------------------------------------------------------------

    @syscall("getpid", "")
    def sys_getpid(self, *_: int) -> int:
        return self.pid

    @syscall("gettid", "")
    def sys_gettid(self, *_: int) -> int:
        return self.task.tid

    @syscall("getppid", "")
    def sys_getppid(self, *_: int) -> int:
        return self.parent.pid if self.parent is not None else PPID

    def _process(self, pid: int) -> ProcessCore:
        """The process ``pid`` names for getpgid/getsid/setpgid (0: the caller)."""
        pid = self.sint(pid)
        if pid == 0:
            return self
        process = self.kernel.processes.get(pid)
        if process is None or process.exit_status is not None:
            raise _GuestErrno(errno.ESRCH)
        return process

    @syscall("getpgid", "d")
    def sys_getpgid(self, pid: int, *_: int) -> int:
        return self._process(pid).pgid

    @syscall("getpgrp", "")
    def sys_getpgrp(self, *_: int) -> int:
        return self.pgid

    @syscall("getsid", "d")
    def sys_getsid(self, pid: int, *_: int) -> int:
        return self._process(pid).sid

    @syscall("setpgid", "d d")
    def sys_setpgid(self, pid: int, pgid: int, *_: int) -> int:
        target = self._process(pid)
        if target is not self and target.parent is not self:
            raise _GuestErrno(errno.ESRCH)
        pgid = self.sint(pgid)
        if pgid < 0:
            raise _GuestErrno(errno.EINVAL)
        if target.sid != self.sid or target.pgid == target.pid == target.sid:
            raise _GuestErrno(errno.EPERM)  # another session, or a session leader
        pgid = pgid or target.pid
        if pgid != target.pid and not any(p.pgid == pgid and p.sid == self.sid
                                          for p in self.kernel.processes.values()):
            raise _GuestErrno(errno.EPERM)  # no such group in the session
        target.pgid = pgid
        return 0

    @syscall("setsid", "")
    def sys_setsid(self, *_: int) -> int:
        if any(p.pgid == self.pid for p in self.kernel.processes.values() if p is not self) or self.pgid == self.pid:
            raise _GuestErrno(errno.EPERM)  # already a group leader
        self.sid = self.pgid = self.pid
        return self.pid

    @syscall("prctl", "d x")
    def sys_prctl(self, option: int, arg: int, *_: int) -> int:
        if option == PR_SET_NAME:
            name = self.read(arg, 16).split(b"\0")[0].decode("utf-8", "replace")
            self.task.comm = name
            if self.task is self.threads[0]:
                self.comm = name
            return 0
        if option == PR_GET_NAME:
            name = self.task.comm or self.comm
            self.write(arg, os.fsencode(name)[:15].ljust(16, b"\0"))
            return 0
        raise _GuestErrno(errno.EINVAL)

    # -- new tasks and processes -----------------------------------------------------------------

    @syscall("clone", "clone p p p p")
    def sys_clone(self, flags: int, stack: int, a: int, b: int, c: int, *_: int) -> int | None:
        # the argument order is the arch's (CONFIG_CLONE_BACKWARDS: tls before the child's tid)
        ptid, ctid, tls = (a, c, b) if self.abi.clone_backwards else (a, b, c)
        return self._clone(flags & 0xFFFFFFFF, stack, ptid, ctid, tls)

    @syscall("fork", "")
    def sys_fork(self, *_: int) -> int | None:
        return self._clone(SIGCHLD, 0, 0, 0, 0)

    @syscall("vfork", "")
    def sys_vfork(self, *_: int) -> int | None:
        return self._clone(lifecycle.CLONE_VM | lifecycle.CLONE_VFORK | SIGCHLD, 0, 0, 0, 0)

    @syscall("clone3", "p u")
    def sys_clone3(self, *_: int) -> int:
        return -errno.ENOSYS  # glibc then makes its threads and processes with clone

    def _clone(self, flags: int, stack: int, ptid: int, ctid: int, tls: int) -> int | None:
        task = self.task
        if isinstance(task.progress, tuple) and task.progress[0] == "vfork":  # run again: the child is done
            child = self.kernel.processes.get(task.progress[1])
            if child is not None and child.exit_status is None and child.mem is self.mem:
                raise _Block([child.vfork_done], interruptible=False, restart="never")
            pid, task.progress = task.progress[1], None
            return int(pid)
        tid = lifecycle.clone(self.kernel, task, flags, stack, ptid, ctid, tls)
        if flags & lifecycle.CLONE_VFORK:
            task.progress = ("vfork", tid)
            raise _Block([self.kernel.processes[tid].vfork_done], interruptible=False, restart="never")
        return tid

    @syscall("execve", "path p p")
    def sys_execve(self, path: int, argv: int, envp: int, *_: int) -> int | None:
        from kpsdk.targets.unicorn.linux import execs

        return execs.execve(self, path, argv, envp)

    # -- ends -------------------------------------------------------------------------------------

    @syscall("exit", "d")
    def sys_exit(self, code: int, *_: int) -> int | None:
        self.kernel.exit_task(self.task, code & 0xFF)
        return None

    @syscall("exit_group", "d")
    def sys_exit_group(self, code: int, *_: int) -> int | None:
        self.kernel.exit_group(self, (code & 0xFF) << 8)
        return None

    # -- waiting for children --------------------------------------------------------------------

    @syscall("wait4", "d wstatus waitopts p")
    def sys_wait4(self, pid: int, status: int, options: int, rusage: int, *_: int) -> int:
        child, value = lifecycle.wait(self.kernel, self, self.sint(pid), options)
        if child and status:
            self.write(status, struct.pack(self.order + "i", value))
        if child and rusage:
            self.write(rusage, bytes(18 * self.word.size))  # struct rusage: no times counted
        return child

    @syscall("waitpid", "d wstatus waitopts")
    def sys_waitpid(self, pid: int, status: int, options: int, *_: int) -> int:
        return self.sys_wait4(pid, status, options, 0)

    @syscall("waitid", "d d p x p")
    def sys_waitid(self, idtype: int, ident: int, info: int, options: int, rusage: int, *_: int) -> int:
        if idtype == P_ALL:
            selector = -1
        elif idtype == P_PID:
            selector = self.sint(ident)
        elif idtype == P_PGID:
            selector = -self.sint(ident) if ident else 0
        else:
            raise _GuestErrno(errno.EINVAL)
        if not options & (lifecycle.WEXITED | lifecycle.WUNTRACED | lifecycle.WCONTINUED):
            raise _GuestErrno(errno.EINVAL)
        child, value = lifecycle.wait(self.kernel, self, selector, options)
        if info:
            from kpsdk.targets.unicorn.linux.sigframes import siginfo_chld

            if child:
                if value & 0x7F == 0:
                    code, what = CLD_EXITED, value >> 8 & 0xFF
                elif value & 0xFF == 0x7F:
                    code, what = CLD_STOPPED, value >> 8 & 0xFF
                elif value == 0xFFFF:
                    code, what = CLD_CONTINUED, 18
                else:
                    code, what = (CLD_DUMPED if value & 0x80 else CLD_KILLED), value & 0x7F
                self.write(info, siginfo_chld(self.arch.name, code=code, pid=child, uid=os.getuid(), status=what))
            else:
                self.write(info, bytes(128))  # WNOHANG with nothing to report: si_pid 0
        return 0
