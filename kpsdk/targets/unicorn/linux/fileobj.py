"""Descriptors that are kernel objects: sockets, epoll, eventfd, timerfd, signalfd.

Linux makes these without a file on any file system (an "anonymous inode", or sockfs for a
socket): their open file description points at the object, and ``read``, ``write``, ``poll``,
``ioctl`` and the last ``close`` go to its own operations.  kpsdk does the same with one
field: :attr:`OpenFile.obj <kpsdk.targets.unicorn.linux.files.OpenFile.obj>` holds a
:class:`FileObject`, and the generic calls (:mod:`.calls.rw`, :mod:`.calls.poll`, ``ioctl``,
``fstat``, ``close``) hand the description to it.  Everything a descriptor can be waited for
with ``poll``, ``select`` or ``epoll`` is answered here by :func:`readiness`, so the three
agree.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.files import OpenFile
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore

#: poll(2)'s bits (include/uapi/asm-generic/poll.h; the same on every arch kpsdk runs)
POLLIN, POLLPRI, POLLOUT, POLLERR, POLLHUP, POLLNVAL = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
POLLRDNORM, POLLRDBAND, POLLWRNORM, POLLWRBAND, POLLMSG, POLLRDHUP = 0x40, 0x80, 0x100, 0x200, 0x400, 0x2000
#: what a readable and a writable file reports
READABLE, WRITABLE = POLLIN | POLLRDNORM, POLLOUT | POLLWRNORM
#: the kinds of description with no ``poll`` operation in Linux (regular files, directories,
#: /dev/null, /dev/zero: ``file_can_poll`` is false): always ready for poll and select, and
#: ``EPERM`` for ``epoll_ctl``
UNPOLLABLE = frozenset({"host", "mem", "dir", "path", "null", "dev"})
#: a socket's inode mode (S_IFSOCK | 0777), an anonymous inode's (0600, no file type)
S_IFSOCK = 0o140000


class FileObject:
    """What an :class:`~kpsdk.targets.unicorn.linux.files.OpenFile` of one of these kinds
    holds in ``obj``: the operations Linux's ``file_operations`` give it.  ``proc`` is the
    calling process (its task, memory and descriptors), ``f`` the description (its flags:
    ``O_NONBLOCK``).  Every failure is a :class:`~.inodes._GuestErrno`; a call that must wait
    raises :class:`~.waits._Block` on :attr:`wait`."""

    #: the OpenFile kind it is installed as (``socket``, ``epoll``, ``eventfd``...)
    kind = "anon"
    #: what ``/proc/self/fd/N`` names it (``anon_inode:[eventfd]``, ``socket:[INO]``)
    link = "anon_inode:[anon]"

    def __init__(self) -> None:
        #: woken at every change of what :meth:`poll` says (Linux's one wait queue per file)
        self.wait = WaitQueue(self.kind)

    def read(self, proc: ProcessCore, f: OpenFile, count: int) -> bytes:
        raise _GuestErrno(errno.EINVAL)

    def write(self, proc: ProcessCore, f: OpenFile, data: bytes) -> int:
        raise _GuestErrno(errno.EINVAL)

    def poll(self) -> int:
        """What the object is ready for now (poll's bits)."""
        return 0

    def queues(self) -> tuple[WaitQueue, ...]:
        """Where a change of :meth:`poll` is announced."""
        return (self.wait,)

    def ioctl(self, proc: ProcessCore, f: OpenFile, request: int, arg: int) -> int:
        raise _GuestErrno(errno.ENOTTY)

    def stat(self) -> dict[str, int]:
        """``fstat``'s values: an anonymous inode (mode 0600, no file type), as Linux's."""
        return {"st_mode": 0o600, "st_nlink": 1, "st_uid": os.getuid(), "st_gid": os.getgid(), "st_blksize": 4096,
                "st_dev": 0xE, "st_ino": 1 + id(self) % 100000}

    def release(self) -> None:
        """The last descriptor of its description is gone."""


def readiness(f: OpenFile) -> tuple[int, tuple[WaitQueue, ...]]:
    """What ``f`` is ready for now (poll's revents, before masking with what was asked), and the
    queues whose wake announces a change: Linux's ``vfs_poll``.  A pipe's read end is readable
    with bytes in it, and hangs up (POLLHUP) with no writer left; its write end is writable
    while PIPE_BUF bytes fit, and in error as well (POLLERR) with no reader left (fs/pipe.c)."""
    obj = f.obj
    if obj is not None:
        return obj.poll(), obj.queues()
    pipe = f.pipe or f.fifo
    if pipe is None:
        return READABLE | WRITABLE, ()
    if f.kind == "fifo":
        reader, writer = f.ends
    else:
        reader, writer = f.kind == "pipe_r", f.kind == "pipe_w"
    ready = 0
    queues: list[WaitQueue] = []
    if reader:
        ready |= (READABLE if pipe.data else 0) | (POLLHUP if not pipe.writers else 0)
        queues.append(pipe.readable)
    if writer:
        ready |= (WRITABLE if pipe.ready(True) else 0) | (POLLERR if not pipe.readers else 0)
        queues.append(pipe.writable)
    return ready, tuple(queues)


def pollable(f: OpenFile) -> bool:
    """Whether ``f`` has a ``poll`` operation in Linux (``file_can_poll``): what epoll accepts.
    Of kpsdk's devices only the random ones have one (drivers/char/random.c)."""
    if f.kind == "dev":
        return getattr(f.node, "device", None) in ("random", "urandom")
    return f.kind not in UNPOLLABLE


def install(proc: ProcessCore, obj: FileObject, nonblock: bool, cloexec: bool, lowest: int = 0) -> int:
    """A new descriptor of ``proc`` for ``obj`` (an open file description of its own, read
    and write: what ``F_GETFL`` shows); ``obj`` is released if no descriptor is free."""
    f = OpenFile(obj.kind, path=obj.link, flags=os.O_RDWR | (proc.o_nonblock if nonblock else 0), obj=obj)
    try:
        return proc.fds.install(f, lowest=lowest, cloexec=cloexec)
    except _GuestErrno:
        obj.release()
        raise
