"""A task (one thread) of the Linux layer, and the state threads of a process share.

Linux's model, kept: a *task* is a thread of execution with its own registers, thread id,
signal mask, pending signals, alternate signal stack and robust list; a *process* (thread
group, :class:`~kpsdk.targets.unicorn.linux.syscalls.LinuxProcess`) is what its tasks share:
the address space, descriptors, working directory and signal handlers.  ``clone`` decides
which of those a new task shares (``CLONE_VM``, ``CLONE_FILES``, ``CLONE_FS``,
``CLONE_SIGHAND``, ``CLONE_THREAD``); :class:`SigHand` is the shareable table of actions.

A task that is not on the CPU keeps its registers in a Unicorn context
(:attr:`Task.context`); one waiting in a system call keeps the call (:attr:`Task.call`) to
run again when it is woken (:mod:`.waits`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from collections.abc import Callable

    from kpsdk.events import SyscallEvent
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore as LinuxProcess
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.waits import _Block

#: a task's states: on the CPU or waiting for it, in a call that must wait, stopped by a
#: signal (SIGSTOP and friends), or ended (its exit status kept until it is reaped)
RUNNABLE, BLOCKED, STOPPED, DEAD = "runnable", "blocked", "stopped", "dead"


@dataclass
class SigAction:
    """One signal's action: SIG_DFL (0), SIG_IGN (1) or a handler's address, its flags, its
    restorer, and the signals blocked while it runs."""

    handler: int = 0
    flags: int = 0
    restorer: int = 0
    mask: int = 0


SIG_DFL, SIG_IGN = 0, 1


class SigHand:
    """A process's signal actions (shared by the tasks of a ``CLONE_SIGHAND`` clone)."""

    def __init__(self, actions: dict[int, SigAction] | None = None) -> None:
        self.actions: dict[int, SigAction] = actions if actions is not None else {}
        #: woken whenever a signal is queued for a task sharing these actions: what a signalfd
        #: of theirs waits on (Linux's sighand_struct.signalfd_wqh)
        self.signalfd = WaitQueue("a signal queued")

    def get(self, sig: int) -> SigAction:
        return self.actions.get(sig) or SigAction()

    def copy(self) -> SigHand:
        return SigHand({sig: SigAction(a.handler, a.flags, a.restorer, a.mask) for sig, a in self.actions.items()})

    def reset_for_exec(self) -> None:
        """``execve``: handled signals go back to their default action; ignored ones stay ignored."""
        self.actions = {sig: SigAction(SIG_IGN) for sig, a in self.actions.items() if a.handler == SIG_IGN}


@dataclass
class PendingCall:
    """A system call a task waits in: run again (same handler, same arguments) when woken."""

    nr: int
    args: tuple[int, ...]
    handler: Callable[..., int | None]
    event: SyscallEvent


@dataclass(eq=False)
class Task:
    """One thread (see the module's docstring)."""

    kernel: LinuxKernel
    tid: int
    process: LinuxProcess
    #: the registers while it is off the CPU (None: on it, or never run: see ``start``)
    context: Any = None
    state: str = RUNNABLE
    #: blocked signals, bit ``n - 1`` for signal ``n``
    sigmask: int = 0
    #: signals sent to this thread alone: signal number -> its siginfo (one each, as Linux
    #: queues one standard signal; real-time ones are queued in order in ``rt_queue``)
    pending: dict[int, bytes] = field(default_factory=dict)
    rt_queue: list[tuple[int, bytes]] = field(default_factory=list)
    #: the alternate signal stack: (sp, size, flags)
    altstack: tuple[int, int, int] = (0, 0, 2)
    #: CLONE_CHILD_CLEARTID's word (set_tid_address): zeroed and woken at the thread's end
    clear_child_tid: int = 0
    #: set_robust_list's head (0: none)
    robust_list: int = 0
    #: the system call it waits in, and what it waits for
    call: PendingCall | None = None
    block: _Block | None = None
    #: the wait ended at its deadline / by a wake (what a call run again asks)
    timed_out: bool = False
    woken: bool = False
    #: a call's own record across its runs (a pipe write's bytes written so far)
    progress: Any = None
    #: the mask rt_sigsuspend replaced, put back when its handler returns
    saved_mask: int | None = None
    #: the frame rt_sigreturn (True) or sigreturn (False) asked to return from, done between runs
    sigreturn: bool | None = None
    #: the image execve checked, loaded between runs (:mod:`.execs`)
    exec_plan: Any = None
    #: things to do in the task's own address space before it first runs (CLONE_CHILD_SETTID)
    on_start: list[Callable[[], None]] = field(default_factory=list)
    #: the thread's name (PR_SET_NAME; a new process's is its program's)
    comm: str = ""
    #: its exit code (exit's argument) once ended
    exit_code: int = 0

    @property
    def pid(self) -> int:
        """The thread group's id: the process's, what getpid returns."""
        return self.process.pid

    def deliverable(self) -> bool:
        """Whether a signal not blocked is pending for it (or its process)."""
        ready = self.pending_mask() | self.process.shared_pending_mask()
        return bool(ready & ~self.sigmask)

    def pending_mask(self) -> int:
        mask = 0
        for sig in self.pending:
            mask |= 1 << (sig - 1)
        for sig, _ in self.rt_queue:
            mask |= 1 << (sig - 1)
        return mask

    def __repr__(self) -> str:
        return f"Task({self.tid}, {self.comm or self.process.comm!r}, {self.state})"
