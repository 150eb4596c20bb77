"""Descriptors that deliver events: eventfd, timerfd and signalfd (fs/eventfd.c, fs/timerfd.c, fs/signalfd.c).

* :class:`EventFd`: a 64-bit counter.  A write adds to it (and waits while the sum would reach
  2**64 - 1), a read takes all of it (or 1 with EFD_SEMAPHORE) and waits while it is 0.
* :class:`TimerFd`: a timer on the program's clock (:class:`~.sched.Clock`: CLOCK_MONOTONIC,
  CLOCK_BOOTTIME, CLOCK_REALTIME), one-shot or periodic, absolute or relative.  A read returns
  how many times it expired since the last read, and waits while none.  As Linux's hrtimer
  callback, an expiry wakes its readers once and the periodic timer is forwarded over the
  intervals that passed when it is next read (so an edge-triggered epoll hears one edge per
  read, however many intervals passed): the kernel's timers (:meth:`LinuxKernel.at
  <kpsdk.targets.unicorn.linux.kernel.LinuxKernel.at>`) say when.
* :class:`SignalFd`: the reading task's pending signals of a mask, as ``struct
  signalfd_siginfo`` records, taken off its pending sets (its own first, then its process's)
  so that they are never delivered.  Its readiness is the calling task's, as Linux's
  ``signalfd_poll`` looks at ``current``; a signal queued wakes it
  (:attr:`SigHand.signalfd <kpsdk.targets.unicorn.linux.tasks.SigHand.signalfd>`).
"""

from __future__ import annotations

import errno
import struct
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.fileobj import POLLERR, READABLE, WRITABLE, FileObject
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.sigframes import siginfo as si
from kpsdk.targets.unicorn.linux.waits import WaitQueue, _Block

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.tasks import Task

ULLONG_MAX = (1 << 64) - 1
EFD_SEMAPHORE = 1
#: the clocks a timerfd may use (CLOCK_REALTIME_ALARM and CLOCK_BOOTTIME_ALARM need CAP_WAKE_ALARM)
CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME, CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM = 0, 1, 7, 8, 9
TFD_TIMER_ABSTIME, TFD_TIMER_CANCEL_ON_SET = 1, 2
#: struct signalfd_siginfo's size (include/uapi/linux/signalfd.h)
SIGNALFD_SIGINFO = 128


def _nonblock(proc: ProcessCore, f: OpenFile) -> bool:
    return bool(f.flags & proc.o_nonblock)


class EventFd(FileObject):
    """A counter (see the module docstring)."""

    kind = "eventfd"
    link = "anon_inode:[eventfd]"

    def __init__(self, count: int, semaphore: bool) -> None:
        super().__init__()
        self.count = count
        self.semaphore = semaphore

    def read(self, proc: ProcessCore, f: OpenFile, count: int) -> bytes:
        if count < 8:
            raise _GuestErrno(errno.EINVAL)
        if not self.count:
            if _nonblock(proc, f):
                raise _GuestErrno(errno.EAGAIN)
            raise _Block([self.wait])
        value = 1 if self.semaphore else self.count
        self.count -= value
        self.wait.wake(key=WRITABLE)
        return struct.pack(proc.order + "Q", value)

    def write(self, proc: ProcessCore, f: OpenFile, data: bytes) -> int:
        if len(data) < 8:
            raise _GuestErrno(errno.EINVAL)
        (value,) = struct.unpack(proc.order + "Q", data[:8])
        if value == ULLONG_MAX:
            raise _GuestErrno(errno.EINVAL)
        if ULLONG_MAX - self.count <= value:
            if _nonblock(proc, f):
                raise _GuestErrno(errno.EAGAIN)
            raise _Block([self.wait])
        self.count += value
        if value:
            self.wait.wake(key=READABLE)
        return 8

    def poll(self) -> int:
        return (READABLE if self.count else 0) | (POLLERR if self.count == ULLONG_MAX else 0) | \
            (WRITABLE if ULLONG_MAX - 1 > self.count else 0)


class TimerFd(FileObject):
    """A timer (see the module docstring).  Times are ns on the kernel's clock (``elapsed``)."""

    kind = "timerfd"
    link = "anon_inode:[timerfd]"

    def __init__(self, kernel: LinuxKernel, clockid: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.realtime = clockid in (CLOCK_REALTIME, CLOCK_REALTIME_ALARM)
        #: the next expiry (None: disarmed), the period (0: one-shot), expiries not read yet
        self.next: int | None = None
        self.interval = 0
        self.ticks = 0
        #: which setting a scheduled expiry belongs to (a new settime makes the old one stale),
        #: and the deadline scheduled for it
        self._generation = 0
        self._scheduled: int | None = None

    def base(self) -> int:
        """The clock's value at ``elapsed`` 0: what an absolute time is counted from."""
        clock = self.kernel.clock
        return clock.now(self.realtime) - clock.elapsed

    def _expire(self) -> None:
        """Count the expiries the clock has passed; a periodic timer moves to its next one."""
        now = self.kernel.clock.elapsed
        if self.next is None or now < self.next:
            return
        if self.interval:
            passed = (now - self.next) // self.interval + 1
            self.ticks += passed
            self.next += passed * self.interval
        else:
            self.ticks += 1
            self.next = None

    def _arm(self) -> None:
        """Have the kernel call back at the next expiry (once per deadline)."""
        if self.next is None or self._scheduled == self.next:
            return
        self._scheduled = self.next
        generation = self._generation
        self.kernel.at(self.next, lambda: self._fire(generation))

    def _fire(self, generation: int) -> None:
        if generation != self._generation:
            return  # the timer was set again since
        self._scheduled = None
        self._expire()
        if self.ticks:
            self.wait.wake(key=READABLE)  # not re-armed: the next read forwards it, as Linux's

    def settime(self, absolute: bool, value: int, interval: int) -> tuple[int, int]:
        """Arm (``value`` ns, 0: disarm) with ``interval``; what :meth:`gettime` said before."""
        old = self.gettime()
        self._generation += 1
        self._scheduled = None
        self.ticks = 0
        self.interval = interval
        if not value:
            self.next = None
            return old
        now = self.kernel.clock.elapsed
        self.next = value - self.base() if absolute else now + value
        if self.next <= now:
            self._fire(self._generation)  # already past: it expires now
            self._arm()
        else:
            self._arm()
        return old

    def gettime(self) -> tuple[int, int]:
        """(ns until the next expiry, 0: disarmed; the interval)."""
        self._expire()
        self._arm()
        if self.next is None:
            return 0, self.interval
        return max(self.next - self.kernel.clock.elapsed, 1), self.interval

    def read(self, proc: ProcessCore, f: OpenFile, count: int) -> bytes:
        if count < 8:
            raise _GuestErrno(errno.EINVAL)
        self._expire()
        if not self.ticks:
            if _nonblock(proc, f):
                raise _GuestErrno(errno.EAGAIN)
            self._arm()
            raise _Block([self.wait])
        ticks, self.ticks = self.ticks, 0
        self._arm()
        return struct.pack(proc.order + "Q", ticks)

    def poll(self) -> int:
        self._expire()
        return READABLE if self.ticks else 0


# -- signalfd ---------------------------------------------------------------------------------------

#: the signals Linux takes first from a pending set (next_signal's SYNCHRONOUS_MASK)
_SYNCHRONOUS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGTRAP", "SIGFPE", "SIGSYS")
_FAULTS = ("SIGILL", "SIGFPE", "SIGSEGV", "SIGBUS", "SIGTRAP")


class SignalFd(FileObject):
    """The signals of ``mask`` (bit ``n - 1`` for signal ``n``) pending for the reading task."""

    kind = "signalfd"
    link = "anon_inode:[signalfd]"

    def __init__(self, kernel: LinuxKernel, mask: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.mask = mask

    def _task(self) -> Task | None:
        return self.kernel.current

    def queues(self) -> tuple[WaitQueue, ...]:
        task = self._task()
        return (task.process.sighand.signalfd,) if task is not None else ()

    def poll(self) -> int:
        task = self._task()
        if task is None:
            return 0
        pending = task.pending_mask() | task.process.shared_pending_mask()
        return READABLE if pending & self.mask else 0

    def read(self, proc: ProcessCore, f: OpenFile, count: int) -> bytes:
        room = count // SIGNALFD_SIGINFO
        if not room:
            raise _GuestErrno(errno.EINVAL)
        task = proc.task
        out = bytearray()
        while len(out) < room * SIGNALFD_SIGINFO:
            taken = self._dequeue(task)
            if taken is None:
                break
            out += self._record(*taken)
        if out:
            return bytes(out)
        if _nonblock(proc, f):
            raise _GuestErrno(errno.EAGAIN)
        raise _Block([task.process.sighand.signalfd])

    def _dequeue(self, task: Task) -> tuple[int, bytes] | None:
        """The next signal of the mask pending for ``task`` (its own first, then its process's),
        taken off its set: the lowest, synchronous ones first (dequeue_signal)."""
        from kpsdk.targets.unicorn.linux.signaling import numbers

        nums = numbers(self.kernel)
        first = {nums.by_name[name] for name in _SYNCHRONOUS if name in nums.by_name}
        process = task.process
        for pending, rt in ((task.pending, task.rt_queue), (process.shared_pending, process.shared_rt)):
            ready = [s for s in pending if self.mask >> (s - 1) & 1] + [s for s, _ in rt if self.mask >> (s - 1) & 1]
            if not ready:
                continue
            sync = [s for s in ready if s in first]
            sig = min(sync or ready)
            if sig in pending:
                return sig, pending.pop(sig)
            for i, (number, info) in enumerate(rt):
                if number == sig:
                    del rt[i]
                    return sig, info
        return None

    def _record(self, sig: int, info: bytes) -> bytes:
        """The ``struct signalfd_siginfo`` of a siginfo as the kernel keeps it
        (signalfd_copyinfo: which fields, by the siginfo's layout)."""
        from kpsdk.targets.unicorn.linux.signaling import numbers

        arch = self.kernel.arch.name
        lay = si.layout(arch)
        o = lay.order
        w = "Q" if lay.word == 8 else "I"
        signo, second, third = struct.unpack_from(o + "iii", info, 0)
        err, code = (third, second) if lay.swapped else (second, third)
        u = lay.union
        rec = bytearray(SIGNALFD_SIGINFO)
        struct.pack_into(o + "Iii", rec, 0, signo & 0xFFFFFFFF, err, code)
        name = numbers(self.kernel).names.get(sig, "")
        kind = "kill"
        if 0 < code < si.SI_KERNEL:
            if name in _FAULTS:
                kind = "fault"
            elif name == "SIGCHLD":
                kind = "chld"
            elif name in ("SIGPOLL", "SIGIO") or code <= 6:
                kind = "poll"
        elif code == si.SI_TIMER:
            kind = "timer"
        elif code == si.SI_SIGIO:
            kind = "poll"
        elif code < 0:
            kind = "rt"
        first, second_ = struct.unpack_from(o + "iI", info, u)
        if kind in ("kill", "rt", "chld"):
            struct.pack_into(o + "II", rec, 12, first & 0xFFFFFFFF, second_)
        if kind in ("rt", "timer"):
            (ptr,) = struct.unpack_from(o + w, info, u + 8)
            (value,) = struct.unpack_from(o + "i", info, u + 8)
            struct.pack_into(o + "iQ", rec, 44, value, ptr)
        if kind == "timer":
            struct.pack_into(o + "II", rec, 24, first & 0xFFFFFFFF, second_)  # ssi_tid, ssi_overrun
        elif kind == "chld":
            (status,) = struct.unpack_from(o + "i", info, u + 8)
            utime, stime = struct.unpack_from(o + w + w, info, u + (16 if lay.word == 8 else 12))
            struct.pack_into(o + "i", rec, 40, status)
            struct.pack_into(o + "QQ", rec, 56, utime, stime)
        elif kind == "fault":
            (addr,) = struct.unpack_from(o + w, info, u)
            struct.pack_into(o + "Q", rec, 72, addr)
        elif kind == "poll":
            (band,) = struct.unpack_from(o + w, info, u)
            (fd,) = struct.unpack_from(o + "i", info, u + lay.word)
            struct.pack_into(o + "i", rec, 20, fd)
            struct.pack_into(o + "I", rec, 28, band & 0xFFFFFFFF)
        return bytes(rec)
