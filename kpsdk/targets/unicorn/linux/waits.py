"""Waiting in the Linux layer: a call that cannot finish yet blocks its task, and is run again.

One host thread runs every emulated task, so a call never sleeps: a handler that must wait
(a read of an empty pipe, ``futex(WAIT)``, ``wait4`` with live children, ``nanosleep``)
raises :class:`_Block` naming the :class:`WaitQueue` objects whose change could let it finish
and, for a timed wait, a deadline on the scheduler's clock.  The kernel
(:mod:`.kernel`) then parks the task with its call pending, its registers as they were at
the system call instruction's end (no result written: the arguments are still in their
registers), and runs another task.  When a queue is woken, or the deadline passes, or a
signal arrives, the task becomes runnable and its handler runs *again* with the same
arguments: handlers are written so that everything they do before raising ``_Block`` can
be done twice (they check, then act).  A handler that made progress before blocking (a
pipe write that filled the pipe half way) keeps it in :attr:`Task.progress
<kpsdk.targets.unicorn.linux.tasks.Task.progress>`.

This is Linux's own model turned inside out: where Linux sleeps in the middle of the call and
restarts it after a signal handler by moving the program counter back over the ``syscall``
instruction (``-ERESTARTSYS``), kpsdk keeps the call pending and, for a restart, moves the
program counter back the same way (:func:`.signaling.interrupt`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.tasks import Task


class _Block(Exception):  # noqa: N818 - control flow, not an error (private: kpsdk/errors.py holds the errors)
    """Raised by a call handler that must wait: the task sleeps on ``queues`` until one is
    woken, ``deadline`` (ns on the scheduler clock, None: no time limit) passes, or a signal
    interrupts it (unless ``interruptible`` is False: futex waits of robust-list cleanup,
    vfork's parent).  ``restart`` says what a handled signal does to the call: ``"restart"``
    (re-run after the handler when SA_RESTART is set, else EINTR: most calls), ``"eintr"``
    (always EINTR: poll, nanosleep, pause, sigsuspend, epoll_wait, futex with a timeout), or
    ``"never"`` (the call finishes whatever arrives)."""

    def __init__(self, queues: Iterable[WaitQueue] = (), deadline: int | None = None, *,
                 interruptible: bool = True, restart: str = "restart") -> None:
        super().__init__()
        self.queues = tuple(queues)
        self.deadline = deadline
        self.interruptible = interruptible
        self.restart = restart


class WaitQueue:
    """Tasks waiting for one thing to change (a pipe's contents, a futex word, a child's exit).

    Waking is a hint, never a promise: a woken task runs its call again and may block again.
    That makes a spurious wake harmless and lets every change simply wake all its waiters,
    in the order they started waiting (which keeps runs deterministic).

    Besides tasks, a queue holds *watchers*: callbacks that stay on it and hear every wake,
    with the wake's ``key`` (the poll bits the change concerns, 0: any).  An epoll instance
    watches the queues of the files it monitors this way, as Linux's ``ep_poll_callback``
    sits on their wait queues: that is what makes edge-triggered events (:mod:`.epoll`).
    """

    __slots__ = ("name", "_tasks", "_watchers")

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._tasks: list[Task] = []
        self._watchers: list[Callable[[int], None]] = []

    def add(self, task: Task) -> None:
        if task not in self._tasks:
            self._tasks.append(task)

    def remove(self, task: Task) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    def watch(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(key)`` at every wake from now on (until :meth:`unwatch`)."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[int], None]) -> None:
        if callback in self._watchers:
            self._watchers.remove(callback)

    def wake(self, limit: int | None = None, key: int = 0) -> int:
        """Make up to ``limit`` waiters (all by default) runnable, oldest first; how many.
        Every watcher hears ``key`` (what changed, in poll bits; 0: anything)."""
        woken = self._tasks if limit is None else self._tasks[:limit]
        self._tasks = [] if limit is None else self._tasks[limit:]
        for task in woken:
            task.kernel.wake(task)
        for callback in list(self._watchers):
            callback(key)
        return len(woken)

    def __len__(self) -> int:
        return len(self._tasks)

    def __bool__(self) -> bool:
        return True  # a queue is a thing, even when nobody waits on it

    def __repr__(self) -> str:
        return f"WaitQueue({self.name!r}, {len(self._tasks)} waiting)"
