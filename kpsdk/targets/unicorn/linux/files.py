"""The program's open files and descriptors; the file system they come from is :mod:`.tree`.

The session's file system (:class:`Sysroot`: the read-only sysroot under an in-memory
overlay, binds, kpsdk's ``/tmp``, ``/dev`` and ``/proc``; :mod:`.tree` walks it,
:mod:`.overlay` changes it) is shared by every process of the session.  What a process holds
is a :class:`FdTable`: its descriptors, each pointing at an :class:`OpenFile`, the open file
description that ``dup`` and ``fork`` share (its position, its flags).  Nothing the program
does reaches the host but through a ``"rw"`` bind: standard output and error go to the
session's console.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.inodes import Node, _GuestErrno
from kpsdk.targets.unicorn.linux.overlay import Sysroot
from kpsdk.targets.unicorn.linux.tree import MAX_SYMLINKS, PATH_MAX

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.binds import HostFds
    from kpsdk.targets.unicorn.linux.fileobj import FileObject
    from kpsdk.targets.unicorn.linux.pipes import Pipe

__all__ = ["MAX_SYMLINKS", "PATH_MAX", "FdTable", "OpenFile", "Sysroot", "_GuestErrno", "release"]

#: open(2) flags the same on every arch kpsdk runs on Unicorn (include/uapi/asm-generic/fcntl.h);
#: O_DIRECTORY, O_NOFOLLOW, O_LARGEFILE and O_TMPFILE differ on ARM and powerpc (LinuxAbi.open_flag_bits)
O_ACCMODE, O_CREAT, O_EXCL, O_NOCTTY, O_TRUNC, O_APPEND, O_NONBLOCK = 3, 0o100, 0o200, 0o400, 0o1000, 0o2000, 0o4000
O_CLOEXEC, O_PATH, O_TMPFILE_BIT = 0o2000000, 0o10000000, 0o20000000


@dataclass
class OpenFile:
    """One open file description, shared by the descriptors ``dup`` (and ``fork``) made of it.

    ``kind``: ``host`` (a host file: of the sysroot, read-only, or of a bind; ``fd`` is the
    host's), ``mem`` (a regular file of the overlay: ``node``), ``dir`` (a directory: ``node``),
    ``dev`` (one of kpsdk's devices: ``node.device``), ``null`` (``/dev/null``), ``fifo`` (a
    named pipe: ``fifo``, read and/or written as ``flags`` say), ``path`` (``O_PATH``: a place,
    no bytes), ``stdin`` (the bytes given as ``stdin=``), ``console`` (output to the session's
    console), ``pipe_r``/``pipe_w`` (an end of a :class:`~.pipes.Pipe`), ``procfile`` (a file of the
    process's own /proc: ``data``); ``socket``, ``epoll``, ``eventfd``, ``timerfd``, ``signalfd``:
    a kernel object, ``obj`` (:mod:`~kpsdk.targets.unicorn.linux.fileobj`), which reads, writes,
    polls and closes it.
    """

    kind: str
    path: str = ""
    fd: int = -1
    data: bytes = b""
    pos: int = 0
    flags: int = 0
    pipe: Pipe | None = None
    refs: int = 0
    tty: bool = False
    #: the host file behind a ``host`` description (what a mapping of it reports)
    host: Path | None = None
    #: a directory's entries as getdents64 hands them out: (name, inode, d_type), ``pos`` the
    #: next one's index; read at the first getdents64 and again after a rewind
    entries: list[tuple[bytes, int, int]] | None = None
    #: the inode (``mem``, ``dir``, ``dev``, ``fifo``, ``path``; a ``host`` file's stand-in)
    node: Node | None = None
    #: a ``fifo``'s pipe, and which of its ends this description holds
    fifo: Pipe | None = None
    ends: tuple[bool, bool] = field(default=(False, False))
    #: the kernel object a socket, epoll, eventfd, timerfd or signalfd description is
    obj: FileObject | None = None
    #: the session's record of its host descriptors, which a ``host`` description's ``fd`` is in
    host_fds: HostFds | None = None
    #: a ``console`` description's stream: 1 (standard output) or 2 (standard error)
    stream: int = 1

    @property
    def readable(self) -> bool:
        return self.flags & O_ACCMODE in (os.O_RDONLY, os.O_RDWR) and not self.flags & O_PATH

    @property
    def writable(self) -> bool:
        return self.flags & O_ACCMODE in (os.O_WRONLY, os.O_RDWR) and not self.flags & O_PATH


class FdTable:
    """A process's file descriptors (shared by the tasks of a CLONE_FILES clone): 0 its stdin
    bytes, 1 and 2 the console, at first (one description, as a shell's ``2>&1`` makes, unless
    ``split``: standard output and error go to different places).  Each points at an :class:`OpenFile`."""

    #: the most descriptors open at once (RLIMIT_NOFILE's usual soft limit)
    LIMIT = 1024

    def __init__(self, stdin: bytes | None, split: bool = False) -> None:
        self.fds: dict[int, OpenFile] = {}
        #: the descriptors execve closes (FD_CLOEXEC: a descriptor's own flag, not its description's)
        self.cloexec: set[int] = set()
        #: the processes using this table (CLONE_FILES): the last one's end closes it
        self.users = 1
        if stdin is not None:
            self.install(OpenFile("stdin", data=stdin), 0)
            console = OpenFile("console", flags=os.O_WRONLY)
            self.install(console, 1)
            self.install(OpenFile("console", flags=os.O_WRONLY, stream=2) if split else console, 2)

    def fork(self) -> FdTable:
        """A copy for a new process: the same open file descriptions, one more reference each."""
        child = FdTable(None)
        for fd, f in self.fds.items():
            child.install(f, fd)
        child.cloexec = set(self.cloexec)
        return child

    def close_on_exec(self) -> None:
        """``execve``: the descriptors marked FD_CLOEXEC are closed."""
        for fd in sorted(self.cloexec):
            if fd in self.fds:
                self.close(fd)
        self.cloexec.clear()

    def get(self, fd: int) -> OpenFile:
        f = self.fds.get(fd)
        if f is None:
            raise _GuestErrno(errno.EBADF)
        return f

    def install(self, f: OpenFile, fd: int | None = None, lowest: int = 0, cloexec: bool = False) -> int:
        """Give ``f`` descriptor ``fd`` (closing what it was), or the lowest free one from
        ``lowest``; ``cloexec``: the descriptor's FD_CLOEXEC flag."""
        if fd is None:
            fd = lowest
            while fd in self.fds:
                fd += 1
            if fd >= self.LIMIT:
                raise _GuestErrno(errno.EMFILE)
        elif not 0 <= fd < self.LIMIT:
            raise _GuestErrno(errno.EBADF)
        elif fd in self.fds:
            self.close(fd)
        f.refs += 1
        if f.pipe is not None and f.refs == 1:
            f.pipe.open_end(f.kind == "pipe_w")
        self.fds[fd] = f
        if cloexec:
            self.cloexec.add(fd)
        else:
            self.cloexec.discard(fd)
        return fd

    def close(self, fd: int) -> None:
        f = self.fds.pop(fd, None)
        if f is None:
            raise _GuestErrno(errno.EBADF)
        self.cloexec.discard(fd)
        f.refs -= 1
        if f.refs == 0:
            release(f)

    def close_all(self) -> None:
        """Close every descriptor (the process ends)."""
        for fd in list(self.fds):
            self.close(fd)


def release(f: OpenFile) -> None:
    """The last descriptor of ``f`` is gone: close the host file, close a pipe's or FIFO's ends."""
    if f.kind == "host" and f.fd >= 0:
        if f.host_fds is not None:
            f.host_fds.close(f.fd)
        else:
            os.close(f.fd)
        f.fd = -1
    elif f.obj is not None:
        f.obj.release()
    elif f.pipe is not None:
        f.pipe.close_end(f.kind == "pipe_w")
    elif f.kind == "fifo" and f.fifo is not None:
        reader, writer = f.ends
        f.ends = (False, False)
        if reader:
            f.fifo.close_end(False)
        if writer:
            f.fifo.close_end(True)
