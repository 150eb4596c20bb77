"""Waiting for descriptors: poll, ppoll, select, pselect6 (fs/select.c), and the epoll calls
(fs/eventpoll.c: the instance is :mod:`kpsdk.targets.unicorn.linux.epoll`).

A descriptor is ready as Linux says (:func:`~kpsdk.targets.unicorn.linux.fileobj.readiness`,
which epoll shares): a file of the sysroot, the given stdin, the console and ``/dev/null``
always; a pipe's read end when it holds bytes or has no writer left (POLLHUP), its write end
when a write of PIPE_BUF bytes would not wait, or with no reader left (POLLERR); a socket,
eventfd, timerfd, signalfd or epoll descriptor as its object says.  A call that finds
nothing ready waits on the queues of what it watches, until one changes, its timeout passes
on the kernel's clock, or a signal arrives (then EINTR, never restarted, as Linux's
``-ERESTARTNOHAND``).  ``ppoll``, ``pselect6``, ``epoll_pwait`` and ``epoll_pwait2`` swap the
signal mask for the wait, as ``sigsuspend`` does.  An ``epoll_event`` is packed (12 bytes) on
x86_64 and i386 and 16 bytes elsewhere, as each arch's uapi header lays it out.
"""

from __future__ import annotations

import errno
import struct

from kpsdk.targets.unicorn.linux import signaling
from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.epoll import EPOLL_CTL_DEL, Epoll, check_target
from kpsdk.targets.unicorn.linux.fileobj import (
    POLLERR,
    POLLHUP,
    POLLIN,
    POLLNVAL,
    POLLOUT,
    POLLPRI,
    POLLRDBAND,
    POLLRDNORM,
    POLLWRBAND,
    POLLWRNORM,
    install,
    readiness,
)
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.waits import WaitQueue, _Block

_READ = POLLIN | POLLRDNORM | POLLRDBAND | POLLPRI
_WRITE = POLLOUT | POLLWRNORM | POLLWRBAND
#: the most descriptors one poll takes (RLIMIT_NOFILE), and the largest select set
MAX_POLL = 1024
#: the most events one epoll_wait takes (EP_MAX_EVENTS: INT_MAX / sizeof(struct epoll_event))
EP_MAX_EVENTS = 0x7FFFFFFF // 12
#: the arches whose struct epoll_event is packed (__EPOLL_PACKED)
_PACKED_EPOLL = frozenset({"x86_64", "i386"})


class PollCalls(ProcessCore):
    """poll and select, with and without a signal mask."""

    def _timeout(self, addr: int, micro: bool) -> int | None:
        """A relative timeout (struct timespec, or timeval when ``micro``) as a deadline on the
        kernel's clock; None: wait for ever."""
        if not addr:
            return None
        return self.kernel.clock.elapsed + self.timespec_ns(addr, micro=micro)

    def _swap_mask(self, sigmask: int, size: int) -> None:
        """ppoll/pselect6's mask, for the wait (the old one back when the call returns)."""
        task = self.task
        if not sigmask or task.call is not None:
            return
        if size != signaling.numbers(self.kernel).nsig // 8:
            raise _GuestErrno(errno.EINVAL)
        task.saved_mask = task.sigmask
        task.sigmask = int.from_bytes(self.read(sigmask, size), self.arch.endian) & ~signaling.unblockable(self.kernel)

    def _returns(self, result: int) -> int:
        """The call returns: a swapped mask goes back (unless a handler is to run first)."""
        task = self.task
        if task.saved_mask is not None and not task.deliverable():
            task.sigmask, task.saved_mask = task.saved_mask, None
        return result

    # -- poll -------------------------------------------------------------------------------

    def _poll(self, fds: int, nfds: int, deadline: int | None) -> int:
        if nfds > MAX_POLL:
            raise _GuestErrno(errno.EINVAL)
        entries = [struct.unpack(self.order + "ihh", self.read(fds + 8 * i, 8)) for i in range(nfds)]
        queues: list[WaitQueue] = []
        count = 0
        out = []
        for fd, events, _ in entries:
            revents = 0
            if fd >= 0:
                f = self.fds.fds.get(fd)
                if f is None:
                    revents = POLLNVAL
                else:
                    ready, wait_on = readiness(f)
                    revents = ready & (events | POLLERR | POLLHUP)
                    queues.extend(wait_on)
            out.append(revents & 0xFFFF)
            count += bool(revents)
        task = self.task
        if count or deadline is not None and (task.timed_out or deadline <= self.kernel.clock.elapsed):
            for i, revents in enumerate(out):
                self.write(fds + 8 * i + 6, struct.pack(self.order + "h", revents - 0x10000 if revents & 0x8000
                                                        else revents))
            return self._returns(count)
        return self._wait(queues, deadline)

    def _wait(self, queues: list[WaitQueue], deadline: int | None) -> int:
        """Nothing ready: wait, unless a signal may be taken now (one ppoll's mask lets in while
        it was pending): then EINTR at once, its handler run with the mask swapped, as Linux's
        wait checks signal_pending before it sleeps."""
        if self.task.deliverable():
            return -errno.EINTR
        raise _Block(queues, deadline, restart="eintr")

    @syscall("poll", "p u d")
    def sys_poll(self, fds: int, nfds: int, timeout: int, *_: int) -> int:
        ms = self.sint(timeout)
        task = self.task
        if task.call is None:
            task.progress = None if ms < 0 else self.kernel.clock.elapsed + ms * 1_000_000
        return self._poll(fds, nfds, task.progress)

    @syscall("ppoll", "p u p p u")
    def sys_ppoll(self, fds: int, nfds: int, tsp: int, sigmask: int, size: int, *_: int) -> int:
        task = self.task
        if task.call is None:
            task.progress = self._timeout(tsp, False)
            self._swap_mask(sigmask, size)
        return self._poll(fds, nfds, task.progress)

    # -- select -----------------------------------------------------------------------------

    def _select(self, n: int, sets: tuple[int, int, int], deadline: int | None) -> int:
        n = self.sint(n)
        if not 0 <= n <= MAX_POLL:
            raise _GuestErrno(errno.EINVAL)
        size = (n + 8 * self.word.size - 1) // (8 * self.word.size) * self.word.size
        wanted = [int.from_bytes(self.read(addr, size), self.arch.endian) if addr else 0 for addr in sets]
        got = [0, 0, 0]
        queues: list[WaitQueue] = []
        for fd in range(n):
            asked = [w >> fd & 1 for w in wanted]
            if not any(asked):
                continue
            f = self.fds.fds.get(fd)
            if f is None:
                raise _GuestErrno(errno.EBADF)
            ready, wait_on = readiness(f)
            queues.extend(wait_on)
            if asked[0] and ready & (_READ | POLLHUP | POLLERR):
                got[0] |= 1 << fd
            if asked[1] and ready & (_WRITE | POLLERR):
                got[1] |= 1 << fd
            if asked[2] and ready & POLLPRI:
                got[2] |= 1 << fd
        count = sum(bin(g).count("1") for g in got)
        task = self.task
        if count or deadline is not None and (task.timed_out or deadline <= self.kernel.clock.elapsed):
            for addr, value in zip(sets, got, strict=True):
                if addr:
                    self.write(addr, value.to_bytes(size, self.arch.endian))
            return self._returns(count)
        return self._wait(queues, deadline)

    @syscall("select", "d p p p p")
    @syscall("_newselect", "d p p p p")
    def sys_select(self, n: int, rd: int, wr: int, ex: int, tv: int, *_: int) -> int:
        task = self.task
        if task.call is None:
            task.progress = self._timeout(tv, True)
        return self._select(n, (rd, wr, ex), task.progress)

    @syscall("pselect6", "d p p p p p")
    def sys_pselect6(self, n: int, rd: int, wr: int, ex: int, tsp: int, sig: int, *_: int) -> int:
        task = self.task
        if task.call is None:
            task.progress = self._timeout(tsp, False)
            if sig:
                mask, size = self.read_word(sig), self.read_word(sig + self.word.size)
                self._swap_mask(mask, size)
        return self._select(n, (rd, wr, ex), task.progress)

    # -- epoll ------------------------------------------------------------------------------

    @syscall("epoll_create", "d")
    def sys_epoll_create(self, size: int, *_: int) -> int:
        if self.sint(size) <= 0:
            raise _GuestErrno(errno.EINVAL)
        return install(self, Epoll(), False, False)

    @syscall("epoll_create1", "x")
    def sys_epoll_create1(self, flags: int, *_: int) -> int:
        if flags & ~self.o_cloexec:
            raise _GuestErrno(errno.EINVAL)
        return install(self, Epoll(), False, bool(flags & self.o_cloexec))

    @property
    def _epoll_event(self) -> struct.Struct:
        return struct.Struct(self.order + ("IQ" if self.arch.name in _PACKED_EPOLL else "I4xQ"))

    @syscall("epoll_ctl", "fd d fd p")
    def sys_epoll_ctl(self, epfd: int, op: int, fd: int, event: int, *_: int) -> int:
        events = data = 0
        if self.sint(op) != EPOLL_CTL_DEL:
            layout = self._epoll_event
            events, data = layout.unpack(self.read(event, layout.size))
        f = self.fds.get(self.sint(epfd))
        target = self.fds.get(self.sint(fd))
        check_target(target)
        if target is f or not isinstance(f.obj, Epoll):
            raise _GuestErrno(errno.EINVAL)
        f.obj.ctl(self.sint(op), target, self.sint(fd), events, data)
        return 0

    def _epoll_wait(self, epfd: int, events: int, maxevents: int, deadline: int | None) -> int:
        """Report what is ready, or wait until ``deadline`` (None: for ever; the clock's now or
        earlier: not at all)."""
        maxevents = self.sint(maxevents)
        if not 0 < maxevents <= EP_MAX_EVENTS:
            raise _GuestErrno(errno.EINVAL)
        f = self.fds.get(self.sint(epfd))
        if not isinstance(f.obj, Epoll):
            raise _GuestErrno(errno.EINVAL)
        ep = f.obj
        out = ep.send_events(maxevents)
        if out:
            layout = self._epoll_event
            self.write(events, b"".join(layout.pack(revents, data) for revents, data in out))
            return self._returns(len(out))
        task = self.task
        if deadline is not None and (task.timed_out or deadline <= self.kernel.clock.elapsed):
            return self._returns(0)
        return self._wait([ep.wait], deadline)

    def _ms_deadline(self, timeout: int) -> int | None:
        ms = self.sint(timeout)
        return None if ms < 0 else self.kernel.clock.elapsed + ms * 1_000_000

    @syscall("epoll_wait", "fd p d d")
    def sys_epoll_wait(self, epfd: int, events: int, maxevents: int, timeout: int, *_: int) -> int:
        task = self.task
        if task.call is None:
            task.progress = self._ms_deadline(timeout)
        return self._epoll_wait(epfd, events, maxevents, task.progress)

    @syscall("epoll_pwait", "fd p d d p u")
    def sys_epoll_pwait(self, epfd: int, events: int, maxevents: int, timeout: int, sigmask: int, size: int,
                        *_: int) -> int:
        task = self.task
        if task.call is None:
            task.progress = self._ms_deadline(timeout)
            self._swap_mask(sigmask, size)
        return self._epoll_wait(epfd, events, maxevents, task.progress)

    @syscall("epoll_pwait2", "fd p d p p u")
    def sys_epoll_pwait2(self, epfd: int, events: int, maxevents: int, tsp: int, sigmask: int, size: int,
                         *_: int) -> int:
        task = self.task
        if task.call is None:
            deadline = None
            if tsp:
                deadline = self.kernel.clock.elapsed + self.timespec_ns(tsp, True)
            task.progress = deadline
            self._swap_mask(sigmask, size)
        return self._epoll_wait(epfd, events, maxevents, task.progress)
