"""The process: its ids, its name, its children, and the calls that would make another.

There is one process (:data:`~kpsdk.targets.unicorn.linux.calls.core.PID`, its own group and
session leader) and it has no children: ``wait4`` is ``ECHILD``; ``fork``, ``clone``,
``execve`` would need another process or thread and are a
:class:`~kpsdk.errors.NotEmulatedError`.  ``exit`` and ``exit_group`` end the run: the target
does that itself (it stops the engine and tells plugins), so they have no handler here, only
their strace signatures (:data:`STRACE_ONLY`).
"""

from __future__ import annotations

import errno
import os
from pathlib import PurePosixPath

from kpsdk.errors import NotEmulatedError
from kpsdk.targets.unicorn.linux.calls.core import PID, PPID, ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import signature_only, syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno

PR_SET_NAME, PR_GET_NAME = 15, 16

#: the calls the target runs itself (:meth:`kpsdk.targets.unicorn.target.UnicornTarget._syscall`)
STRACE_ONLY = (signature_only("exit", "d"), signature_only("exit_group", "d"))


class ProcessCalls(ProcessCore):
    """The calls about the process as a whole."""

    @syscall("getpid", "")
    @syscall("gettid", "")
    @syscall("getpgrp")
    def sys_getpid(self, *_: int) -> int:
        return PID

    @syscall("getppid", "")
    def sys_getppid(self, *_: int) -> int:
        return PPID

    @syscall("getpgid")
    @syscall("getsid")
    def sys_getpgid(self, *_: int) -> int:
        return PID

    @syscall("setpgid")
    def sys_setpgid(self, *_: int) -> int:
        return 0

    @syscall("prctl")
    def sys_prctl(self, option: int, arg: int, *_: int) -> int:
        if option == PR_SET_NAME:
            return 0
        if option == PR_GET_NAME:
            self.write(arg, os.fsencode(PurePosixPath(self.exe).name)[:15].ljust(16, b"\0"))
            return 0
        raise _GuestErrno(errno.EINVAL)

    @syscall("wait4")
    def sys_wait4(self, *_: int) -> int:
        raise _GuestErrno(errno.ECHILD)

    @syscall("clone")
    @syscall("clone3")
    @syscall("fork")
    @syscall("vfork")
    @syscall("execve")
    def sys_no_process(self, *_: int) -> int:
        raise NotEmulatedError("the program starts a thread or process (clone/fork/execve): threads, fork and "
                               "exec are not emulated yet on the Unicorn target (run it with --target qemu-user)")
