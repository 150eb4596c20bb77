"""The descriptors that deliver events: ``eventfd``/``eventfd2``, ``timerfd_create``/``settime``/
``gettime`` (and their ``*64`` forms on 32-bit arches), ``signalfd``/``signalfd4``.

The objects are :mod:`kpsdk.targets.unicorn.linux.eventfds`'; these calls check their
arguments in Linux's order and read and write ``struct itimerspec`` (two ``timespec``: a
word each field, or two 64-bit fields in the ``*64`` calls) and the ``sigset_t`` of the arch.
The flags are the arch's ``O_NONBLOCK`` and ``O_CLOEXEC`` (EFD_*, TFD_*, SFD_* are defined
as them).
"""

from __future__ import annotations

import errno
import struct

from kpsdk.targets.unicorn.linux import signaling
from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.eventfds import (
    CLOCK_BOOTTIME,
    CLOCK_BOOTTIME_ALARM,
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    CLOCK_REALTIME_ALARM,
    EFD_SEMAPHORE,
    TFD_TIMER_ABSTIME,
    TFD_TIMER_CANCEL_ON_SET,
    EventFd,
    SignalFd,
    TimerFd,
)
from kpsdk.targets.unicorn.linux.fileobj import install
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.sched import NSEC


class EventCalls(ProcessCore):
    """eventfd, timerfd and signalfd."""

    def _flags(self, flags: int, extra: int = 0) -> tuple[bool, bool]:
        """(non-blocking, close-on-exec) of a create call's flags; EINVAL for any other bit."""
        if flags & ~(self.o_nonblock | self.o_cloexec | extra):
            raise _GuestErrno(errno.EINVAL)
        return bool(flags & self.o_nonblock), bool(flags & self.o_cloexec)

    # -- eventfd ----------------------------------------------------------------------------------

    @syscall("eventfd2", "u x")
    def sys_eventfd2(self, initval: int, flags: int, *_: int) -> int:
        nonblock, cloexec = self._flags(flags, EFD_SEMAPHORE)
        return install(self, EventFd(initval & 0xFFFFFFFF, bool(flags & EFD_SEMAPHORE)), nonblock, cloexec)

    @syscall("eventfd", "u")
    def sys_eventfd(self, initval: int, *_: int) -> int:
        return self.sys_eventfd2(initval, 0)

    # -- timerfd ----------------------------------------------------------------------------------

    @syscall("timerfd_create", "d x")
    def sys_timerfd_create(self, clockid: int, flags: int, *_: int) -> int:
        nonblock, cloexec = self._flags(flags)
        clockid = self.sint(clockid)
        if clockid not in (CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_BOOTTIME, CLOCK_REALTIME_ALARM,
                           CLOCK_BOOTTIME_ALARM):
            raise _GuestErrno(errno.EINVAL)
        if clockid in (CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM) and self.root.cred.uid != 0:
            raise _GuestErrno(errno.EPERM)  # CAP_WAKE_ALARM
        return install(self, TimerFd(self.kernel, clockid), nonblock, cloexec)

    def _timer(self, fd: int) -> TimerFd:
        f = self.fds.get(self.sint(fd))
        if not isinstance(f.obj, TimerFd):
            raise _GuestErrno(errno.EINVAL)
        return f.obj

    def _read_itimerspec(self, addr: int, wide: bool) -> tuple[int, int]:
        """(interval, value) in ns; EINVAL for a negative or unnormalized one."""
        size = 16 if wide else self.bits // 4
        return self.timespec_ns(addr, wide), self.timespec_ns(addr + size, wide)

    def _write_itimerspec(self, addr: int, value: int, interval: int, wide: bool) -> None:
        fmt = self.order + ("qqqq" if wide else "iiii")
        self.write(addr, struct.pack(fmt, *divmod(interval, NSEC), *divmod(value, NSEC)))

    def _settime(self, fd: int, flags: int, new: int, old: int, wide: bool) -> int:
        interval, value = self._read_itimerspec(new, wide)
        if flags & ~(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET):
            raise _GuestErrno(errno.EINVAL)
        timer = self._timer(fd)
        left, was = timer.settime(bool(flags & TFD_TIMER_ABSTIME), value, interval)
        if old:
            self._write_itimerspec(old, left, was, wide)
        return 0

    def _gettime(self, fd: int, out: int, wide: bool) -> int:
        value, interval = self._timer(fd).gettime()
        self._write_itimerspec(out, value, interval, wide)
        return 0

    @syscall("timerfd_settime", "fd x p p")
    def sys_timerfd_settime(self, fd: int, flags: int, new: int, old: int, *_: int) -> int:
        return self._settime(fd, flags, new, old, self.bits == 64)

    @syscall("timerfd_settime64", "fd x p p")
    def sys_timerfd_settime64(self, fd: int, flags: int, new: int, old: int, *_: int) -> int:
        return self._settime(fd, flags, new, old, True)

    @syscall("timerfd_gettime", "fd p")
    def sys_timerfd_gettime(self, fd: int, out: int, *_: int) -> int:
        return self._gettime(fd, out, self.bits == 64)

    @syscall("timerfd_gettime64", "fd p")
    def sys_timerfd_gettime64(self, fd: int, out: int, *_: int) -> int:
        return self._gettime(fd, out, True)

    # -- signalfd ---------------------------------------------------------------------------------

    @syscall("signalfd4", "fd p u x")
    def sys_signalfd4(self, fd: int, mask: int, size: int, flags: int, *_: int) -> int:
        nonblock, cloexec = self._flags(flags)
        nums = signaling.numbers(self.kernel)
        if size != nums.nsig // 8:
            raise _GuestErrno(errno.EINVAL)
        wanted = int.from_bytes(self.read(mask, size), self.arch.endian) & ~signaling.unblockable(self.kernel)
        fd = self.sint(fd)
        if fd == -1:
            return install(self, SignalFd(self.kernel, wanted), nonblock, cloexec)
        f = self.fds.get(fd)
        if not isinstance(f.obj, SignalFd):
            raise _GuestErrno(errno.EINVAL)
        f.obj.mask = wanted
        self.sighand.signalfd.wake()  # readers and pollers look again
        return fd

    @syscall("signalfd", "fd p u")
    def sys_signalfd(self, fd: int, mask: int, size: int, *_: int) -> int:
        return self.sys_signalfd4(fd, mask, size, 0)
