"""A run's time limit without Unicorn's timer thread, and Ctrl-C during a run.

``uc_emu_start``'s own timeout starts a thread that sleeps 2 us at a time
(``TIMEOUT_STEP`` in Unicorn 2.1.4's ``uc.c``) until the time is up: tens of thousands of
wake-ups a second, each a context switch the process pays for in CPU.  Measured on
``sha512sum`` of 10 MB (load 10+): 0.39-0.47 s of CPU with a timeout against 0.20-0.31 s
without.  So kpsdk runs the engine without Unicorn's timeout and stops it itself: one
watchdog thread per process sleeps until the earliest armed deadline and then calls
``uc_emu_stop``, which is what Unicorn's own timer does when its time is up.

Ctrl-C: CPython raises ``KeyboardInterrupt`` only when the main thread runs Python code,
which a run without probes, system calls or TLB misses never does (the C TLB fill calls into
Python every 64K misses, but a TLB grown to the program's working set stops missing).  So
while the main thread runs the engine, CPython's signal wake-up fd (``signal.set_wakeup_fd``,
written by its C signal handler whatever the thread is doing) is a pipe that a second thread
reads: at a SIGINT it stops the running engines, ``emu_start`` returns, and the pending
``KeyboardInterrupt`` is raised at the next Python instruction.  Only where SIGINT has
Python's default handler and nobody else holds the wake-up fd (an asyncio loop keeps its own).

The stop is made under the watchdog's lock and :func:`emu_start` disarms under it too, so a
stop can only reach the run it was armed for, or an engine whose run has just ended (where
``uc_emu_stop`` does nothing: the next ``uc_emu_start`` clears the request).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import unicorn
from unicorn.unicorn_py3.unicorn import uclib

from kpsdk.targets.unicorn.tlb import forget_fault, run_error

#: the longest the watchdog sleeps at once (seconds): it wakes and looks again
MAX_WAIT = 3600.0


class _Watchdog:
    """The process's one timer thread and the deadlines armed on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: token -> (deadline on time.monotonic(), the engine to stop)
        self._armed: dict[int, tuple[float, unicorn.Uc]] = {}
        self._next = 0
        self._pid = 0  # the process the thread runs in (a fork's child starts its own)
        self._thread: threading.Thread | None = None
        #: stops made (the tests read it)
        self.stops = 0

    def after_fork(self) -> None:
        """In a fork's child: no thread yet, nothing armed, a lock nobody holds."""
        self._cond = threading.Condition()
        self._armed.clear()
        self._pid = 0
        self._thread = None

    def arm(self, uc: unicorn.Uc, seconds: float) -> int:
        with self._cond:
            token = self._next
            self._next += 1
            self._armed[token] = (time.monotonic() + seconds, uc)
            if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._loop, name="kpsdk-unicorn-timeout", daemon=True)
                self._thread.start()
            self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _loop(self) -> None:
        with self._cond:
            while True:
                if not self._armed:
                    self._cond.wait()
                    continue
                token, deadline = min(((t, d) for t, (d, _) in self._armed.items()), key=lambda item: item[1])
                left = deadline - time.monotonic()
                if left > 0:
                    # at most an hour a wait: a limit of 1e20 s is more than a wait may be (OverflowError),
                    # and a dead thread would leave every later time limit unkept
                    self._cond.wait(min(left, MAX_WAIT))
                    continue
                self._stop(self._armed.pop(token)[1])

    def _stop(self, uc: unicorn.Uc) -> None:
        """Stop ``uc``; no local of the thread's loop keeps it (nor its session) alive after."""
        if uc._uch is not None:
            uclib.uc_emu_stop(uc._uch)
            self.stops += 1


class _Interrupts:
    """The engines the main thread runs now, stopped at a SIGINT (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, unicorn.Uc] = {}
        self._next = 0
        self._pipe: tuple[int, int] | None = None
        self._pid = 0
        #: engines stopped for a SIGINT (the tests read it)
        self.stops = 0

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self._running.clear()
        self._pipe = None
        self._pid = 0

    def enter(self, uc: unicorn.Uc) -> int | None:
        """``uc`` is about to run in the main thread: a token for :meth:`leave`, or None where
        the wake-up fd is not kpsdk's to take."""
        if threading.current_thread() is not threading.main_thread() \
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None
        if self._pid != os.getpid():
            self._pid = os.getpid()
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._pipe = (read, write)
            threading.Thread(target=self._loop, args=(read,), name="kpsdk-unicorn-sigint", daemon=True).start()
        assert self._pipe is not None
        previous = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        if previous not in (-1, self._pipe[1]):  # someone else's: theirs again
            signal.set_wakeup_fd(previous)
            return None
        with self._lock:
            token = self._next
            self._next += 1
            self._running[token] = uc
        return token if previous == -1 else -token - 1  # negative: a nested run, the fd stays

    def leave(self, token: int) -> None:
        with self._lock:
            self._running.pop(token if token >= 0 else -token - 1, None)
        if token >= 0:
            signal.set_wakeup_fd(-1)

    def _loop(self, read: int) -> None:
        while True:
            try:
                data = os.read(read, 64)
            except InterruptedError:
                continue
            if not data:
                return
            if signal.SIGINT in data:
                self._stop_running()

    def _stop_running(self) -> None:
        """Stop the engines running now; no local of the thread's loop keeps one (nor its
        session) alive while it waits for the next signal."""
        with self._lock:
            for uc in self._running.values():
                if uc._uch is not None:
                    uclib.uc_emu_stop(uc._uch)
                    self.stops += 1


WATCHDOG = _Watchdog()
INTERRUPTS = _Interrupts()
os.register_at_fork(after_in_child=WATCHDOG.after_fork)
os.register_at_fork(after_in_child=INTERRUPTS.after_fork)


def emu_start(uc: unicorn.Uc, begin: int, until: int, timeout_usec: int) -> None:
    """``uc.emu_start(begin, until, timeout=timeout_usec)`` (0: no limit), the time limit kept
    by the watchdog instead of Unicorn's polling thread, Ctrl-C heard (see the module
    docstring), and an access the TLB fill refused named as Unicorn's own checks name it
    (:func:`.tlb.run_error`)."""
    forget_fault(uc)
    token = WATCHDOG.arm(uc, timeout_usec / 1e6) if timeout_usec else None
    interrupts = INTERRUPTS.enter(uc)
    try:
        uc.emu_start(begin, until)
    except unicorn.UcError as error:
        named = run_error(uc, error)
        if named is error:
            raise
        raise named from error
    finally:
        if interrupts is not None:
            INTERRUPTS.leave(interrupts)
        if token is not None:
            WATCHDOG.disarm(token)
