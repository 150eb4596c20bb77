"""Clocks and sleeping, on the kernel's clock (:class:`~kpsdk.targets.unicorn.linux.sched.Clock`).

The clocks a program reads start at the host's when the session starts and then move with the
program alone (:mod:`kpsdk.targets.unicorn.linux.sched` says how), so that a run reads the same
times whatever the host's load.  A sleep blocks its task until the clock reaches its end; with
nothing else to run the clock jumps there, so ``sleep 10`` takes no host time.  A signal ends a
sleep early with EINTR and the time left (nanosleep's ``rem``), as on Linux.
"""

from __future__ import annotations

import errno
import struct

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.sched import NSEC
from kpsdk.targets.unicorn.linux.waits import _Block

#: clock ids (include/uapi/linux/time.h): the monotonic family, the realtime family, CPU time
CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID = 0, 1, 2, 3
CLOCK_MONOTONIC_RAW, CLOCK_REALTIME_COARSE, CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME = 4, 5, 6, 7
CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM, CLOCK_TAI = 8, 9, 11
_REALTIME = (CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_REALTIME_ALARM, CLOCK_TAI)
_KNOWN = (*_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME,
          CLOCK_BOOTTIME_ALARM, CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID)
TIMER_ABSTIME = 1


class ClockCalls(ProcessCore):
    """The calls that read the clocks or sleep."""

    def _now_ns(self, clock: int) -> int:
        clock = self.sint(clock)
        if clock not in _KNOWN:
            raise _GuestErrno(errno.EINVAL)
        kernel = self.kernel
        if clock in (CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID):
            return kernel.clock.elapsed  # the program's own time: all it ran is the clock's time
        return kernel.clock.now(clock in _REALTIME)

    def _timespec(self, ns: int, wide: bool) -> bytes:
        sec, nsec = divmod(ns, NSEC)
        return struct.pack(self.order + "qq", sec, nsec) if wide else self.word.pack(sec & self.arch.word_mask) + \
            self.word.pack(nsec)

    @syscall("clock_gettime", "d p")
    def sys_clock_gettime(self, clock: int, ts: int, *_: int) -> int:
        self.write(ts, self._timespec(self._now_ns(clock), self.bits == 64))
        return 0

    @syscall("clock_gettime64", "d p")
    def sys_clock_gettime64(self, clock: int, ts: int, *_: int) -> int:
        self.write(ts, self._timespec(self._now_ns(clock), True))
        return 0

    @syscall("gettimeofday", "p p")
    def sys_gettimeofday(self, tv: int, tz: int, *_: int) -> int:
        sec, nsec = divmod(self._now_ns(CLOCK_REALTIME), NSEC)
        if tv:
            self.write(tv, self.word.pack(sec & self.arch.word_mask) + self.word.pack(nsec // 1000))
        if tz:
            self.write(tz, bytes(8))  # struct timezone: UTC, no DST
        return 0

    @syscall("time", "p")
    def sys_time(self, out: int, *_: int) -> int:
        now = self._now_ns(CLOCK_REALTIME) // NSEC
        if out:
            self.write(out, self.word.pack(now & self.arch.word_mask))
        return now

    # -- sleeping ----------------------------------------------------------------------------

    def _sleep(self, clock: int, flags: int, req: int, rem: int, wide: bool) -> int:
        """Sleep until the clock reaches the request (absolute with TIMER_ABSTIME); a signal
        ends it early: EINTR, with the time left written to ``rem`` (relative sleeps)."""
        task = self.task
        kernel = self.kernel
        if task.call is None:
            clock = self.sint(clock)
            if clock not in _KNOWN or clock in (CLOCK_THREAD_CPUTIME_ID,):
                raise _GuestErrno(errno.EINVAL)
            ns = self.timespec_ns(req, wide)
            if flags & TIMER_ABSTIME:
                base = kernel.clock.now(clock in _REALTIME) - kernel.clock.elapsed
                task.progress = (max(ns - base, kernel.clock.elapsed), rem if not flags & TIMER_ABSTIME else 0)
            else:
                task.progress = (kernel.clock.elapsed + ns, rem)
        deadline, rem = task.progress
        if task.timed_out or kernel.clock.elapsed >= deadline:
            return 0
        if task.deliverable():  # a signal cut it short
            if rem:
                self.write(rem, self._timespec(deadline - kernel.clock.elapsed, wide))
            return -errno.EINTR
        raise _Block((), deadline, restart="eintr")

    @syscall("nanosleep", "p p")
    def sys_nanosleep(self, req: int, rem: int, *_: int) -> int:
        return self._sleep(CLOCK_MONOTONIC, 0, req, rem, False)

    @syscall("clock_nanosleep", "d d p p")
    def sys_clock_nanosleep(self, clock: int, flags: int, req: int, rem: int, *_: int) -> int:
        return self._sleep(clock, flags, req, rem, False)

    @syscall("clock_nanosleep_time64", "d d p p")
    def sys_clock_nanosleep_time64(self, clock: int, flags: int, req: int, rem: int, *_: int) -> int:
        return self._sleep(clock, flags, req, rem, True)
