"""Tasks and processes coming and going: ``clone`` (threads and ``fork``), a process's end,
and ``wait4``'s view of it (kernel/fork.c, kernel/exit.c).

``clone`` makes a task with the caller's registers (the call returns 0 in it), and shares or
copies what its flags say: ``CLONE_VM`` the address space (a copy otherwise:
:meth:`Space.fork <kpsdk.targets.unicorn.space.Space.fork>`), ``CLONE_FILES`` the
descriptor table, ``CLONE_FS`` the working directory, ``CLONE_SIGHAND`` the signal actions,
``CLONE_THREAD`` the process itself.  A process ends with its last task: its descriptors are
closed, its children are orphaned (reaped by kpsdk when they end), its parent hears
``SIGCHLD`` (or whatever ``exit_signal`` the clone asked for) and can reap it with ``wait4``
until then it is a zombie.
"""

from __future__ import annotations

import contextlib
import errno
from typing import TYPE_CHECKING

import unicorn

from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.tasks import DEAD, STOPPED, Task
from kpsdk.targets.unicorn.linux.waits import WaitQueue, _Block

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore as LinuxProcess
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel

CSIGNAL = 0xFF
CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND = 0x100, 0x200, 0x400, 0x800
CLONE_PIDFD, CLONE_PTRACE, CLONE_VFORK, CLONE_PARENT, CLONE_THREAD = 0x1000, 0x2000, 0x4000, 0x8000, 0x10000
CLONE_NEWNS, CLONE_SYSVSEM, CLONE_SETTLS = 0x20000, 0x40000, 0x80000
CLONE_PARENT_SETTID, CLONE_CHILD_CLEARTID, CLONE_DETACHED = 0x100000, 0x200000, 0x400000
CLONE_UNTRACED, CLONE_CHILD_SETTID, CLONE_IO = 0x800000, 0x1000000, 0x80000000
#: namespaces and the like: a process of its own world, which kpsdk does not make
CLONE_NAMESPACES = 0x7E020000 | CLONE_NEWNS
#: wait4's options
WNOHANG, WUNTRACED, WCONTINUED, WEXITED, WNOWAIT = 1, 2, 8, 4, 0x01000000
WALL, WCLONE, WNOTHREAD = 0x40000000, 0x80000000, 0x20000000


def clone(kernel: LinuxKernel, parent: Task, flags: int, stack: int, ptid: int, ctid: int, tls: int) -> int:
    """``clone``: the new task's id (see the module docstring).  Raises :class:`_GuestErrno`
    for flags Linux refuses."""
    if flags & CLONE_THREAD and not flags & CLONE_SIGHAND or flags & CLONE_SIGHAND and not flags & CLONE_VM:
        raise _GuestErrno(errno.EINVAL)
    if flags & CLONE_NAMESPACES:
        raise _GuestErrno(errno.EPERM)  # an unprivileged user's answer to a new namespace
    tid = kernel.new_id()
    process = parent.process
    if not flags & CLONE_THREAD:
        parent_mem = process.mem
        process = process.fork(tid, flags)
        if process.mem is not parent_mem:
            kernel.host.forked_space(parent_mem, process.mem)
        process.parent = parent.process if not flags & CLONE_PARENT else parent.process.parent
        if process.parent is not None:
            process.parent.children.append(process)
        process.exit_signal = flags & CSIGNAL
    task = Task(kernel, tid, process, sigmask=parent.sigmask, comm=parent.comm)
    if flags & CLONE_VM and not flags & CLONE_VFORK:
        task.altstack = (0, 0, 2)  # a thread starts without the alternate stack (copy_sighand's rule)
    else:
        task.altstack = parent.altstack
    task.context = _child_context(kernel, stack, flags & CLONE_SETTLS, tls)
    if flags & CLONE_PARENT_SETTID:
        process_write_u32(kernel, parent.process, ptid, tid)
    if flags & CLONE_CHILD_SETTID:
        process_write_u32(kernel, process, ctid, tid)
    if flags & CLONE_CHILD_CLEARTID:
        task.clear_child_tid = ctid
    kernel.adopt(task)
    copies_stack = not flags & CLONE_VM or bool(flags & CLONE_VFORK)  # on (a copy of) the parent's stack
    kernel.host.task_cloned(parent.tid, tid, copies_stack)
    return tid


def process_write_u32(kernel: LinuxKernel, process: LinuxProcess, addr: int, value: int) -> None:
    """Write a 32-bit word into ``process``'s memory (in the engine or not); a bad address is
    ignored, as Linux's put_user at clone time is."""
    data = value.to_bytes(4, kernel.arch.endian)
    table = process.mem.table
    if table.active:
        with contextlib.suppress(unicorn.UcError):  # an unmapped address: the program's own mistake
            kernel.uc.mem_write(addr, data)
    else:
        table.write(addr, data)


def _child_context(kernel: LinuxKernel, stack: int, settls: int, tls: int) -> object:
    """The new task's registers: the caller's (its pc after the call) with the call's result
    0, ``stack`` as its stack pointer when given, and its thread pointer set from ``tls``."""
    uc, arch, abi = kernel.uc, kernel.arch, kernel.abi
    fast = kernel.host.fast
    saved = uc.context_save()
    try:
        assert arch.syscalls is not None
        result = arch.register(arch.syscalls.result)
        if abi.error_flag is not None:  # the call succeeded in the child: the error bit clear
            reg, bit = abi.error_flag
            uc.reg_write(reg, uc.reg_read(reg) & ~bit)
        fast.write(result, 0)
        if arch.syscalls.unicorn_insn is not None:
            # an instruction hook (x86_64's syscall) runs before Unicorn moves the pc past the
            # instruction; a trap's interrupt hook runs after: the child starts after it either way
            pc = arch.register(arch.pc)
            fast.write(pc, fast.read(pc) + abi.syscall_insn_size)
        if stack:
            fast.write(arch.register(arch.sp), stack)
        if settls:
            if abi.set_thread_area is not None:  # i386: tls is a struct user_desc, loaded as set_thread_area
                assert kernel.current is not None
                kernel.current.process.thread_area(tls)
                if abi.tls_segment is not None:  # the child's segment register caches the new base
                    uc.reg_write(abi.tls_segment, uc.reg_read(abi.tls_segment))
            elif abi.tls_register is not None:
                uc.reg_write(abi.tls_register, tls)
            elif abi.tls_gpr is not None:
                fast.write(arch.register(abi.tls_gpr), tls)
        return uc.context_save()
    finally:
        uc.context_restore(saved)


def process_ended(kernel: LinuxKernel, process: LinuxProcess, status: int) -> None:
    """``process``'s last task ended with wait status ``status``: it becomes a zombie for its
    parent to reap (or is reaped at once when nobody will)."""
    from kpsdk.targets.unicorn.linux import signaling

    process.exit_status = status
    process.release()
    process.vfork_done.wake()
    for child in process.children:
        child.parent = None  # orphans: reaped by kpsdk when they end
        if child.exit_status is not None:
            kernel.processes.pop(child.pid, None)
    process.children.clear()
    parent = process.parent
    if process is kernel.init:
        kernel.init_status = status
        code = status >> 8 & 0xFF if not status & 0x7F else 128 + (status & 0x7F)
        kernel.host.emit("program_exit", status=code)
    if parent is None or parent.exit_status is not None:
        kernel.processes.pop(process.pid, None)
        return
    if process.exit_signal:
        if signaling.ignores_children(parent, process.exit_signal):
            kernel.processes.pop(process.pid, None)  # SIGCHLD ignored: no zombie (Linux's autoreap)
            parent.children.remove(process)
            parent.child_wait.wake()
            return
        signaling.child_ended(kernel, parent, process, status)
    parent.child_wait.wake()


def wait(kernel: LinuxKernel, waiter: LinuxProcess, selector: int, options: int) -> tuple[int, int]:
    """``wait4``'s answer: (the child's pid, its status) for the first child ``selector``
    chooses that has something to report, (0, 0) with WNOHANG when none has yet; raises
    :class:`_Block` to wait, ``ECHILD`` when no child matches."""
    if options & ~(WNOHANG | WUNTRACED | WCONTINUED | WALL | WCLONE | WNOTHREAD | WEXITED | WNOWAIT):
        raise _GuestErrno(errno.EINVAL)
    candidates = [c for c in waiter.children if _matches(c, selector, waiter)]
    if not candidates:
        raise _GuestErrno(errno.ECHILD)
    for child in candidates:
        if child.exit_status is not None:
            if not options & WNOWAIT:
                waiter.children.remove(child)
                kernel.processes.pop(child.pid, None)
            return child.pid, child.exit_status
        if options & WUNTRACED and child.stop_report is not None:
            sig, child.stop_report = child.stop_report, None
            return child.pid, 0x7F | sig << 8
        if options & WCONTINUED and child.continued:
            child.continued = False
            return child.pid, 0xFFFF
    if options & WNOHANG:
        return 0, 0
    raise _Block([waiter.child_wait])


def _matches(child: LinuxProcess, selector: int, waiter: LinuxProcess) -> bool:
    if selector > 0:
        return child.pid == selector
    if selector == 0:
        return child.pgid == waiter.pgid
    if selector == -1:
        return True
    return child.pgid == -selector


def stop_process(kernel: LinuxKernel, process: LinuxProcess, sig: int) -> None:
    """A stop signal's default action: every task of ``process`` stops; the parent hears it."""
    from kpsdk.targets.unicorn.linux import signaling

    for task in process.threads:
        if task.state != DEAD:
            kernel.stopped(task)
    process.stop_report = sig
    parent = process.parent
    if parent is not None:
        signaling.child_stopped(kernel, parent, process, sig)
        parent.child_wait.wake()


def continue_process(kernel: LinuxKernel, process: LinuxProcess) -> None:
    """SIGCONT: the stopped tasks of ``process`` go on (their pending calls run again)."""
    was_stopped = False
    for task in process.threads:
        if task.state == STOPPED:
            was_stopped = True
            task.state = "blocked" if task.call is not None else "runnable"
            if task.call is None:
                kernel.sched.add(task)
            else:
                kernel.wake(task)
    if was_stopped:
        process.continued = True
        process.stop_report = None
        if process.parent is not None:
            process.parent.child_wait.wake()


__all__ = ["WaitQueue", "clone", "continue_process", "process_ended", "stop_process", "wait"]
