"""A run's time limit without Unicorn's timer thread.

``uc_emu_start``'s own timeout starts a thread that sleeps 2 us at a time
(``TIMEOUT_STEP`` in Unicorn 2.1.4's ``uc.c``) until the time is up: tens of thousands of
wake-ups a second, each a context switch the process pays for in CPU.  Measured on
``sha512sum`` of 10 MB (load 10+): 0.39-0.47 s of CPU with a timeout against 0.20-0.31 s
without.  So kpsdk runs the engine without Unicorn's timeout and stops it itself: one
watchdog thread per process sleeps until the earliest armed deadline and then calls
``uc_emu_stop``, which is what Unicorn's own timer does when its time is up.

The stop is made under the watchdog's lock and :func:`emu_start` disarms under it too, so a
stop can only reach the run it was armed for, or an engine whose run has just ended (where
``uc_emu_stop`` does nothing: the next ``uc_emu_start`` clears the request).
"""

from __future__ import annotations

import os
import threading
import time

import unicorn
from unicorn.unicorn_py3.unicorn import uclib


class _Watchdog:
    """The process's one timer thread and the deadlines armed on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: token -> (deadline on time.monotonic(), the engine to stop)
        self._armed: dict[int, tuple[float, unicorn.Uc]] = {}
        self._next = 0
        self._pid = 0  # the process the thread runs in (a fork's child starts its own)
        #: stops made (the tests read it)
        self.stops = 0

    def after_fork(self) -> None:
        """In a fork's child: no thread yet, nothing armed, a lock nobody holds."""
        self._cond = threading.Condition()
        self._armed.clear()
        self._pid = 0

    def arm(self, uc: unicorn.Uc, seconds: float) -> int:
        with self._cond:
            token = self._next
            self._next += 1
            self._armed[token] = (time.monotonic() + seconds, uc)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="kpsdk-unicorn-timeout", daemon=True).start()
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
                token, (deadline, uc) = min(self._armed.items(), key=lambda item: item[1][0])
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                del self._armed[token]
                if uc._uch is not None:
                    uclib.uc_emu_stop(uc._uch)
                    self.stops += 1


WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=WATCHDOG.after_fork)


def emu_start(uc: unicorn.Uc, begin: int, until: int, timeout_usec: int) -> None:
    """``uc.emu_start(begin, until, timeout=timeout_usec)`` (0: no limit), the time limit kept
    by the watchdog instead of Unicorn's polling thread (see the module docstring)."""
    if not timeout_usec:
        uc.emu_start(begin, until)
        return
    token = WATCHDOG.arm(uc, timeout_usec / 1e6)
    try:
        uc.emu_start(begin, until)
    finally:
        WATCHDOG.disarm(token)
