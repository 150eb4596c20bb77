"""Pipes between emulated tasks, with Linux's capacity and blocking (fs/pipe.c).

A pipe holds at most :data:`PIPE_SIZE` bytes (64 KiB, ``F_GETPIPE_SZ``; ``F_SETPIPE_SZ``
changes it within Linux's bounds): a writer that finds it full blocks until a reader makes
room (or gets EAGAIN with ``O_NONBLOCK``), so a fast producer never grows kpsdk's memory.  A
write of at most ``PIPE_BUF`` bytes is atomic (all of it or, without room, none: it waits);
a longer one writes what fits and waits for the rest, keeping what it wrote in the task's
progress so that a signal ending the wait returns the part written, as Linux does.  A read
of an empty pipe blocks while a writer exists and returns 0 (end of file) once none does;
a write with no reader left is EPIPE and raises SIGPIPE in the writer (:class:`_BrokenPipe`
tells the caller to send it).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.waits import WaitQueue, _Block

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.tasks import Task

#: a new pipe's capacity (Linux's default: 16 pages)
PIPE_SIZE = 1 << 16
#: the largest write Linux keeps whole (POSIX's PIPE_BUF)
PIPE_BUF = 4096
#: F_SETPIPE_SZ's bounds for an unprivileged user (one page; /proc/sys/fs/pipe-max-size)
PIPE_MIN, PIPE_MAX = 4096, 1 << 20


class _BrokenPipe(Exception):  # noqa: N818 - control flow: the caller sends SIGPIPE and returns EPIPE
    """A write found no reader."""


class Pipe:
    """One pipe: its bytes, its two ends' counts, the tasks waiting to read and to write."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.capacity = PIPE_SIZE
        self.readers = 0
        self.writers = 0
        #: woken when bytes arrive or the last writer goes (a read or poll may finish)
        self.readable = WaitQueue("pipe readable")
        #: woken when room is made or the last reader goes (a write or poll may finish)
        self.writable = WaitQueue("pipe writable")

    # -- the ends ----------------------------------------------------------------------------

    def open_end(self, write: bool) -> None:
        if write:
            self.writers += 1
        else:
            self.readers += 1

    def close_end(self, write: bool) -> None:
        if write:
            self.writers -= 1
            if not self.writers:
                self.readable.wake()  # readers see the end of the file
        else:
            self.readers -= 1
            if not self.readers:
                self.writable.wake()  # writers see EPIPE

    # -- reading and writing ------------------------------------------------------------------

    def read(self, count: int, nonblock: bool) -> bytes:
        """Up to ``count`` bytes; b"" at the end of the file.  Raises :class:`~.waits._Block` when it must
        wait, :class:`~.files._GuestErrno` (EAGAIN) when it may not."""
        if count <= 0:
            return b""
        if not self.data:
            if not self.writers:
                return b""
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            raise _Block([self.readable])
        out = bytes(self.data[:count])
        del self.data[:count]
        self.writable.wake()
        return out

    def write(self, task: Task, data: bytes, nonblock: bool) -> int:
        """Write ``data`` (the whole of it unless non-blocking); how many bytes went in.

        A blocking write that fills the pipe keeps its progress in ``task.progress`` and raises
        :class:`~.waits._Block`; run again (woken) with the same ``data`` it goes on where it stopped.
        Raises :class:`_BrokenPipe` without a reader (after any part written is counted: the
        caller returns that part, or EPIPE when it is nothing)."""
        done = task.progress if isinstance(task.progress, int) else 0
        while done < len(data):
            if not self.readers:
                task.progress = None
                if done:
                    return done
                raise _BrokenPipe()
            room = self.capacity - len(self.data)
            rest = len(data) - done
            if room <= 0 or (rest <= PIPE_BUF and room < rest):
                if nonblock:
                    task.progress = None
                    if done:
                        return done
                    raise _GuestErrno(errno.EAGAIN)
                task.progress = done
                raise _Block([self.writable])
            take = min(room, rest)
            self.data += data[done:done + take]
            done += take
            self.readable.wake()
            if nonblock:
                break
        task.progress = None
        return done

    def set_capacity(self, size: int) -> int:
        """``F_SETPIPE_SZ``: round up to a power of two within Linux's bounds; EBUSY when the
        pipe holds more than that, EPERM above the unprivileged limit."""
        if size > PIPE_MAX:
            raise _GuestErrno(errno.EPERM)
        size = max(size, PIPE_MIN)
        size = 1 << (size - 1).bit_length()
        if len(self.data) > size:
            raise _GuestErrno(errno.EBUSY)
        self.capacity = size
        self.writable.wake()
        return size

    # -- poll ---------------------------------------------------------------------------------

    def ready(self, write: bool) -> bool:
        """Whether a read (or write) would not block: for poll and select."""
        if write:
            return not self.readers or self.capacity - len(self.data) >= PIPE_BUF
        return bool(self.data) or not self.writers
