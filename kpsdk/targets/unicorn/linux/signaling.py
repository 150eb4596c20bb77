"""Signals in the Linux layer: sending, choosing, delivering, returning (kernel/signal.c).

A signal sent to a task (``tgkill``, a fault) waits in its pending set, one sent to a process
(``kill``, ``SIGCHLD``, ``alarm``) in the process's, until a task that does not block it is
about to run again: :func:`deliver` then takes the lowest pending one and does what its action
says: nothing (ignored), the default action (terminate, dump core, stop, continue), or a call of
the program's handler on a frame Linux lays out for the arch (:mod:`.sigframes`), the signal
mask widened while it runs and restored by ``rt_sigreturn`` (:func:`sigreturn`).  A task
waiting in an interruptible call is woken; the call then ends with EINTR, or starts again
after the handler (``SA_RESTART``, or a signal with no handler), as Linux restarts it: the
program counter moved back over the system-call instruction (:func:`interrupt`).  A fault
(an unmapped or forbidden access, an invalid instruction, a division by zero) is a
synchronous SIGSEGV/SIGBUS/SIGILL/SIGFPE for the task that made it (:func:`fault`).

Everything here runs between two runs of the engine, never inside a Unicorn hook.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kpsdk.errors import TargetFault
from kpsdk.targets.unicorn.linux import sigframes
from kpsdk.targets.unicorn.linux.sigframes import (
    SA_NOCLDSTOP,
    SA_NOCLDWAIT,
    SA_NODEFER,
    SA_ONSTACK,
    SA_RESETHAND,
    SA_RESTART,
    SS_AUTODISARM,
    SS_DISABLE,
    siginfo_chld,
    siginfo_fault,
    siginfo_kernel,
    siginfo_kill,
)
from kpsdk.targets.unicorn.linux.sigframes.siginfo import CLD_EXITED, CLD_KILLED, CLD_STOPPED, SI_TKILL, SI_USER
from kpsdk.targets.unicorn.linux.sigframes.unicorn import UnicornFrameCpu
from kpsdk.targets.unicorn.linux.tasks import BLOCKED, DEAD, RUNNABLE, SIG_DFL, SIG_IGN, SigAction, Task

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore as LinuxProcess
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.waits import _Block

#: the default action of each signal by name (signal(7)); real-time signals terminate
_TERMINATE = {"SIGHUP", "SIGINT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT",
              "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPOLL", "SIGPWR", "SIGEMT"}
_CORE = {"SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGIOT", "SIGBUS", "SIGFPE", "SIGSEGV", "SIGXCPU", "SIGXFSZ",
         "SIGSYS"}
_IGNORE = {"SIGCHLD", "SIGCLD", "SIGURG", "SIGWINCH", "SIGCONT"}
_STOP = {"SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU"}


class Numbers:
    """The signal numbers of an arch by name, and their default actions."""

    def __init__(self, arch: str) -> None:
        self.by_name = sigframes.signals(arch)
        self.names: dict[int, str] = {}
        for name, number in self.by_name.items():
            self.names.setdefault(number, name)
        self.nsig = self.by_name["SIGRTMAX"]
        by = self.by_name
        self.SIGKILL, self.SIGSTOP = by["SIGKILL"], by["SIGSTOP"]
        self.SIGCHLD, self.SIGCONT = by["SIGCHLD"], by["SIGCONT"]
        self.SIGPIPE, self.SIGSEGV, self.SIGALRM = by["SIGPIPE"], by["SIGSEGV"], by["SIGALRM"]
        self.stops = {self.by_name[n] for n in _STOP}
        #: rt_sigprocmask's SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK (MIPS's are 1, 2, 3)
        self.how = sigframes.sigprocmask_how(arch)

    def default(self, sig: int) -> str:
        """"terminate", "core", "ignore", "stop" or "continue"."""
        name = self.names.get(sig, "SIGRT")
        if name == "SIGCONT":
            return "continue"
        if name in _IGNORE:
            return "ignore"
        if name in _STOP:
            return "stop"
        if name in _CORE:
            return "core"
        return "terminate"

    def name(self, sig: int) -> str:
        return self.names.get(sig, f"SIGRT{sig - self.by_name['SIGRTMIN']}")


def bit(sig: int) -> int:
    return 1 << (sig - 1)


def numbers(kernel: LinuxKernel) -> Numbers:
    found = getattr(kernel, "_signal_numbers", None)
    if found is None:
        found = Numbers(kernel.arch.name)
        kernel._signal_numbers = found  # type: ignore[attr-defined]
    return found


def unblockable(kernel: LinuxKernel) -> int:
    nums = numbers(kernel)
    return bit(nums.SIGKILL) | bit(nums.SIGSTOP)


# -- sending -------------------------------------------------------------------------------------

def _ignored(process: LinuxProcess, task: Task | None, sig: int, nums: Numbers) -> bool:
    """Whether a signal sent now would be thrown away (sig_ignored): its action ignores it and
    it is not blocked (a blocked one stays pending: the action may change)."""
    action = process.sighand.get(sig)
    ignored = action.handler == SIG_IGN or action.handler == SIG_DFL and nums.default(sig) == "ignore"
    if not ignored:
        return False
    blocked = task.sigmask if task is not None else min((t.sigmask for t in process.threads), default=0)
    return not blocked & bit(sig)


def send_to_task(kernel: LinuxKernel, task: Task, sig: int, info: bytes) -> None:
    """Queue ``sig`` for ``task`` alone (tgkill, tkill, a fault) and wake it if it waits."""
    nums = numbers(kernel)
    process = task.process
    if task.state == DEAD or _prepare(kernel, process, sig, nums) or _ignored(process, task, sig, nums):
        return
    if sig >= nums.by_name["SIGRTMIN"]:
        task.rt_queue.append((sig, info))
    else:
        task.pending.setdefault(sig, info)
    process.sighand.signalfd.wake()  # a signalfd reading it may go on (signalfd_notify)
    _notify(kernel, task, sig)


def send_to_process(kernel: LinuxKernel, process: LinuxProcess, sig: int, info: bytes) -> None:
    """Queue ``sig`` for ``process`` (kill): any of its tasks that does not block it takes it."""
    nums = numbers(kernel)
    if process.exit_status is not None or _prepare(kernel, process, sig, nums) or _ignored(process, None, sig, nums):
        return
    if sig >= nums.by_name["SIGRTMIN"]:
        process.shared_rt.append((sig, info))
    else:
        process.shared_pending.setdefault(sig, info)
    process.sighand.signalfd.wake()
    chosen = next((t for t in process.threads if t is kernel.current and not t.sigmask & bit(sig)), None) or \
        next((t for t in process.threads if not t.sigmask & bit(sig)), None)
    if chosen is not None:
        _notify(kernel, chosen, sig)


def _prepare(kernel: LinuxKernel, process: LinuxProcess, sig: int, nums: Numbers) -> bool:
    """What a signal does as it is sent (prepare_signal): SIGKILL ends the process at once,
    SIGCONT continues it and drops pending stops, a stop drops a pending SIGCONT.  True when
    the signal needs no queueing."""
    from kpsdk.targets.unicorn.linux.lifecycle import continue_process

    if sig == nums.SIGKILL:
        kernel.exit_group(process, sig)
        return True
    if sig == nums.SIGCONT:
        for pending in (process.shared_pending, *(t.pending for t in process.threads)):
            for stop in nums.stops:
                pending.pop(stop, None)
        continue_process(kernel, process)
    elif sig in nums.stops:
        for pending in (process.shared_pending, *(t.pending for t in process.threads)):
            pending.pop(nums.SIGCONT, None)
    return False


def _notify(kernel: LinuxKernel, task: Task, sig: int) -> None:
    """``task`` has a signal it may take: a waiting task wakes (its call may be interrupted),
    the running one stops at its next system call's end."""
    if task.sigmask & bit(sig) and sig not in (numbers(kernel).SIGKILL, numbers(kernel).SIGSTOP):
        return
    if task.state == BLOCKED and task.block is not None and task.block.interruptible:
        kernel.wake(task)
    elif task is kernel.current:
        kernel.after_syscall()


def kill_info(kernel: LinuxKernel, sig: int, thread: bool) -> bytes:
    """The siginfo of a signal a task sends (kill: SI_USER, tgkill/tkill: SI_TKILL)."""
    sender = kernel.current
    pid = sender.pid if sender is not None else 0
    return siginfo_kill(kernel.arch.name, sig, pid=pid, uid=os.getuid(), code=SI_TKILL if thread else SI_USER)


def broken_pipe(kernel: LinuxKernel, task: Task) -> None:
    """A write found no reader: SIGPIPE for the writer (its call returns EPIPE)."""
    sig = numbers(kernel).SIGPIPE
    send_to_task(kernel, task, sig, kill_info(kernel, sig, True))


def ignores_children(parent: LinuxProcess, sig: int) -> bool:
    """Whether ``parent`` reaps its children itself at their end (SIGCHLD ignored, SA_NOCLDWAIT)."""
    action = parent.sighand.get(sig)
    return action.handler == SIG_IGN or bool(action.flags & SA_NOCLDWAIT) and sig == 17


def child_ended(kernel: LinuxKernel, parent: LinuxProcess, child: LinuxProcess, status: int) -> None:
    """``child`` ended with wait status ``status``: its exit signal (SIGCHLD) for the parent."""
    if status & 0x7F:
        code, what = CLD_KILLED, status & 0x7F
    else:
        code, what = CLD_EXITED, status >> 8 & 0xFF
    info = siginfo_chld(kernel.arch.name, code=code, pid=child.pid, uid=os.getuid(), status=what)
    send_to_process(kernel, parent, child.exit_signal, info)


def child_stopped(kernel: LinuxKernel, parent: LinuxProcess, child: LinuxProcess, sig: int) -> None:
    """``child`` stopped: SIGCHLD for the parent unless it asked not to hear of stops."""
    nums = numbers(kernel)
    if parent.sighand.get(nums.SIGCHLD).flags & SA_NOCLDSTOP:
        return
    info = siginfo_chld(kernel.arch.name, code=CLD_STOPPED, pid=child.pid, uid=os.getuid(), status=sig)
    send_to_process(kernel, parent, nums.SIGCHLD, info)


def fault(kernel: LinuxKernel, task: Task, name: str, code: int, addr: int) -> None:
    """A synchronous signal from what the task's instruction did (force_sig_fault): a blocked
    or ignored one is unblocked and its action reset, so the task dies of it unless it
    handles it."""
    nums = numbers(kernel)
    sig = nums.by_name[name]
    action = task.process.sighand.get(sig)
    if task.sigmask & bit(sig) or action.handler == SIG_IGN:
        task.sigmask &= ~bit(sig)
        if action.handler == SIG_IGN:
            task.process.sighand.actions[sig] = SigAction()
    task.pending[sig] = siginfo_fault(kernel.arch.name, sig, code=code, addr=addr)


# -- delivering -------------------------------------------------------------------------------------

def _take(task: Task, kernel: LinuxKernel) -> tuple[int, bytes] | None:
    """The next signal ``task`` takes (the lowest pending, its own before its process's), or None."""
    nums = numbers(kernel)
    mask = task.sigmask & ~unblockable(kernel)
    process = task.process
    for pending, rt in ((task.pending, task.rt_queue), (process.shared_pending, process.shared_rt)):
        ready = [sig for sig in pending if not mask & bit(sig)]
        if ready:
            sig = min(ready)
            return sig, pending.pop(sig)
        for i, (sig, info) in enumerate(rt):
            if not mask & bit(sig):
                del rt[i]
                return sig, info
    del nums
    return None


def deliver(kernel: LinuxKernel, task: Task) -> None:
    """Deliver what ``task`` (the current task, its registers the engine's) may take now."""
    from kpsdk.targets.unicorn.linux.lifecycle import stop_process

    nums = numbers(kernel)
    while task.state == RUNNABLE and task is kernel.current:
        taken = _take(task, kernel)
        if taken is None:
            if task.saved_mask is not None:  # sigsuspend returns only after a handler ran
                task.sigmask, task.saved_mask = task.saved_mask, None
            return
        sig, info = taken
        action = task.process.sighand.get(sig)
        if action.handler == SIG_IGN:
            continue
        if action.handler == SIG_DFL:
            what = nums.default(sig)
            if what in ("ignore", "continue"):
                continue
            if what == "stop":
                stop_process(kernel, task.process, sig)
                return
            kernel.exit_group(task.process, sig)  # no core file is written: no 0x80 in the status
            return
        _call_handler(kernel, task, sig, info, action)


def _call_handler(kernel: LinuxKernel, task: Task, sig: int, info: bytes, action: SigAction) -> None:
    arch = kernel.arch
    cpu = UnicornFrameCpu(kernel.uc, arch.name)
    blocked = task.saved_mask if task.saved_mask is not None else task.sigmask
    task.saved_mask = None
    sp, size, flags = task.altstack
    altstack = None if flags & SS_DISABLE else (sp, size, flags)
    try:
        sigframes.push_frame(arch.name, cpu, sig=sig, info=info, handler=action.handler, flags=action.flags,
                             restorer=action.restorer, blocked=blocked, altstack=altstack,
                             sigreturn_code_addr=trampoline(kernel))
    except TargetFault:
        # no room for the frame (a bad stack, an overflowing alternate stack): SIGSEGV, as Linux's force_sigsegv
        kernel.exit_group(task.process, numbers(kernel).SIGSEGV)
        return
    if action.flags & SA_ONSTACK and flags & SS_AUTODISARM:
        task.altstack = (0, 0, SS_DISABLE)
    task.sigmask |= action.mask
    if not action.flags & SA_NODEFER:
        task.sigmask |= bit(sig)
    task.sigmask &= ~unblockable(kernel)
    if action.flags & SA_RESETHAND:
        task.process.sighand.actions[sig] = SigAction()


def trampoline(kernel: LinuxKernel) -> int:
    """Where the arch's sigreturn code sits in kpsdk's area (placed at the first delivery)."""
    addr = getattr(kernel, "_trampoline", None)
    if addr is None:
        code = sigframes.sigreturn_trampoline(kernel.arch.name)
        addr = 0
        if code:
            host = kernel.host
            addr = host.alloc_code(-(-len(code) // 32) * 32)  # type: ignore[attr-defined]
            host.write_code(addr, code)  # type: ignore[attr-defined]
        kernel._trampoline = addr  # type: ignore[attr-defined]
    return int(addr)


def sigreturn(kernel: LinuxKernel, task: Task) -> None:
    """``rt_sigreturn``/``sigreturn`` (the task asked for it at its last call): registers, mask
    and alternate stack back from the frame; a frame Linux would refuse is SIGSEGV."""
    rt, task.sigreturn = bool(task.sigreturn), None
    cpu = UnicornFrameCpu(kernel.uc, kernel.arch.name)
    try:
        alt = sigframes.read_altstack(kernel.arch.name, cpu, rt) if rt else None
        mask = sigframes.pop_frame(kernel.arch.name, cpu, rt)
    except TargetFault:
        kernel.exit_group(task.process, numbers(kernel).SIGSEGV)
        return
    task.sigmask = mask & ~unblockable(kernel)
    if alt is not None and not task.altstack[2] & 1:  # restore_altstack, unless on the alternate stack now
        task.altstack = (alt.sp, alt.size, alt.flags)


def interrupt(kernel: LinuxKernel, task: Task, block: _Block) -> bool:
    """A signal arrived while ``task`` waited in its call: the call ends (EINTR, or the bytes a
    write got through) or is made again after the handler (SA_RESTART, or no handler at all),
    by moving the program counter back over the system-call instruction.  True: the call is
    over and ``task`` runs on (its signal is delivered next)."""
    call = task.call
    assert call is not None
    kernel.futexes.cancel(task)
    for queue in block.queues:
        queue.remove(task)
    task.call = task.block = None
    progress, task.progress = task.progress, None
    if isinstance(progress, int) and progress > 0:
        kernel.host.complete_call(call.event, progress)
        return True
    sig = _peek(task, kernel)
    action = task.process.sighand.get(sig) if sig is not None else SigAction()
    restart = block.restart == "restart" and (action.handler in (SIG_DFL, SIG_IGN) or action.flags & SA_RESTART)
    if restart:
        _restart(kernel)
    else:
        kernel.host.complete_call(call.event, -4)  # EINTR
    task.state = RUNNABLE
    return True


def _peek(task: Task, kernel: LinuxKernel) -> int | None:
    mask = task.sigmask & ~unblockable(kernel)
    ready = [s for s in (*task.pending, *task.process.shared_pending) if not mask & bit(s)]
    ready += [s for s, _ in (*task.rt_queue, *task.process.shared_rt) if not mask & bit(s)]
    return min(ready) if ready else None


def _restart(kernel: LinuxKernel) -> None:
    """Move the pc back over the system-call instruction (its registers still hold the call:
    no result was written), so the call is made again."""
    arch = kernel.arch
    fast = kernel.host.fast
    pc = arch.register(arch.pc)
    size, thumb = kernel.abi.syscall_insn_size, 0
    if arch.mode_bit is not None and kernel.host.running_iset().thumb_bit:  # type: ignore[attr-defined]
        size, thumb = 2, 1  # and the pc written with bit 0, as Unicorn's ARM pc keeps the CPU in Thumb state
    fast.write(pc, (fast.read(pc) - size) | thumb)


def alarm(kernel: LinuxKernel, process: LinuxProcess) -> None:
    """ITIMER_REAL expired: SIGALRM for the process (and the timer armed again if periodic)."""
    sig = numbers(kernel).SIGALRM
    send_to_process(kernel, process, sig, siginfo_kernel(kernel.arch.name, sig))
