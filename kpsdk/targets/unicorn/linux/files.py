"""The files a program on the Unicorn target sees: a read-only sysroot, and its descriptors.

A guest program must never escape: every path it names is resolved inside the
sysroot as a ``chroot`` would (``..`` at the root stays at the root, symbolic
links are followed by kpsdk itself, an absolute link target starts again at
the sysroot: Linux's path walk, fs/namei.c, with the root pinned), and the file
found is opened ``O_RDONLY | O_NOFOLLOW``, then checked to lie under the
sysroot once more.  Nothing is ever written to the host: standard output and
error go to the session's console; opening a file for writing is ``EROFS``.
Without a sysroot the program sees an empty file system.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.pipes import Pipe

#: symbolic links followed in one path walk before ELOOP (Linux's MAXSYMLINKS, fs/namei.c)
MAX_SYMLINKS = 40
#: the longest path a call takes (PATH_MAX, including the NUL)
PATH_MAX = 4096
#: open(2) flags (include/uapi/asm-generic/fcntl.h; the same on every arch kpsdk runs
#: on Unicorn except O_DIRECTORY/O_NOFOLLOW on ARM/ppc64, which the layer never needs)
O_ACCMODE, O_CREAT, O_TRUNC, O_APPEND = 3, 0o100, 0o1000, 0o2000


class _GuestErrno(Exception):
    """A system call fails with ``errno`` (returned to the program as ``-errno``): control flow
    inside the Linux layer, never raised to a user (hence private, and not in kpsdk.errors)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.errno = code


@dataclass
class OpenFile:
    """One open file description, shared by the descriptors ``dup`` made of it.

    ``kind``: ``host`` (a read-only file of the sysroot, ``fd`` is the host's),
    ``stdin`` (the bytes given as ``stdin=``), ``console`` (output to the
    session's console), ``pipe_r``/``pipe_w`` (an end of a :class:`~.pipes.Pipe`),
    ``null`` (``/dev/null``).
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


class Sysroot:
    """Paths of the guest resolved to host files inside ``root`` (None: an empty tree)."""

    def __init__(self, root: Path | None, own_pid: int | None = None) -> None:
        self.root = Path(os.path.realpath(root)) if root is not None else None
        #: the process's pid: ``/proc/self``, ``/proc/thread-self`` and ``/proc/PID`` are its own
        #: entries (:mod:`.procfs`), never the host's (which would be kpsdk's Python process)
        self.own_pid = str(own_pid) if own_pid is not None else None
        #: where the link ``/proc/self/fd/N`` points when it names a file of the sysroot (its guest
        #: path), else None (kpsdk's stdin, console and pipes; a closed N): set by the process
        self.fd_target: Callable[[int], str | None] = lambda fd: None

    def walk(self, path: str, cwd: str, follow: bool = True) -> list[str]:
        """The components of guest ``path`` (relative to guest ``cwd``) once every symbolic link
        on the way is followed inside the sysroot (the last one only if ``follow``): Linux's
        path walk with the root pinned.  The process's own ``/proc`` entry is
        ``["proc", PID, ...]``, reached however it is named (``/proc/self``, a link such as
        ``/dev/stdin`` to ``/proc/self/fd/0``, a ``chdir`` into it) and never looked up on the
        host.  A trailing ``/`` (or ``/.``) names a directory, as on Linux: the last link is
        followed whatever ``follow`` says, and anything else there is ENOTDIR.  Raises
        :class:`_GuestErrno` (ENOENT, ELOOP, ENAMETOOLONG, ENOTDIR)."""
        if not path:
            raise _GuestErrno(errno.ENOENT)
        if len(path) >= PATH_MAX:
            raise _GuestErrno(errno.ENAMETOOLONG)
        directory = path.endswith("/") or path.endswith("/.")
        follow = follow or directory
        todo = [c for c in (path if path.startswith("/") else f"{cwd}/{path}").split("/") if c]
        todo.reverse()
        done: list[str] = []
        links = 0
        own = self.own_pid
        while todo:
            part = todo.pop()
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            if own is not None and (done == ["proc"] and part in ("self", "thread-self", own)
                                    or done[:2] == ["proc", own]):
                if done[2:] == ["task"] and part == own:  # /proc/PID/task/PID: the one thread is the process
                    done.pop()
                    continue
                done.append(own if len(done) == 1 else part)  # the process's own: made, not the host's
                if len(done) == 4 and done[2] == "fd" and part.isdigit() and (todo or follow):
                    target = self.fd_target(int(part))  # a link to a file of the sysroot: follow it there
                    if target is not None:
                        links += 1
                        if links > MAX_SYMLINKS:
                            raise _GuestErrno(errno.ELOOP)
                        done = []
                        todo.extend(reversed([c for c in target.split("/") if c]))
                    elif todo:
                        raise _GuestErrno(errno.ENOTDIR)  # a pipe or the console: no directory
                continue
            if own is not None and not done and part == "proc" and self._no_proc():
                done.append(part)  # /proc itself is there even in a sysroot without one
                continue
            if self.root is None:
                raise _GuestErrno(errno.ENOENT)
            host = self.root.joinpath(*done, part)
            try:
                st = os.lstat(host)
            except FileNotFoundError:
                raise _GuestErrno(errno.ENOENT) from None
            except NotADirectoryError:
                raise _GuestErrno(errno.ENOTDIR) from None
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EACCES) from None
            if stat.S_ISLNK(st.st_mode) and (todo or follow):
                links += 1
                if links > MAX_SYMLINKS:
                    raise _GuestErrno(errno.ELOOP)
                target = os.readlink(host)
                if target.startswith("/"):
                    done = []
                todo.extend(reversed([c for c in target.split("/") if c]))
                continue
            if (todo or directory) and not stat.S_ISDIR(st.st_mode):
                raise _GuestErrno(errno.ENOTDIR)
            done.append(part)
        return done

    def _no_proc(self) -> bool:
        """Whether the sysroot has no ``/proc``: then it is kpsdk's, a directory holding the
        process's own entry.  Where it has one, the walk goes through it as through any
        directory, so a ``proc`` that is a link is followed inside the sysroot, never on the host."""
        return self.root is None or not os.path.lexists(self.root / "proc")

    def made_up(self, parts: list[str]) -> bool:
        """Whether :meth:`walk`'s ``parts`` are kpsdk's ``/proc`` of a sysroot without one (a
        directory to ``stat`` and ``chdir`` into; no host file is it)."""
        return self.own_pid is not None and parts == ["proc"] and self._no_proc()

    def own(self, parts: list[str]) -> str | None:
        """What follows ``/proc/self/`` where :meth:`walk`'s ``parts`` are the process's own
        ``/proc`` entry (``"maps"``; ``""`` for the directory itself), else None."""
        if self.own_pid is not None and parts[:2] == ["proc", self.own_pid]:
            return "/".join(parts[2:])
        return None

    def host(self, parts: list[str]) -> Path:
        """The host path of :meth:`walk`'s ``parts``: ENOENT for the process's own ``/proc``
        (no host file is it) or without a sysroot."""
        if self.root is None or self.own(parts) is not None:
            raise _GuestErrno(errno.ENOENT)
        return self.root.joinpath(*parts)

    def resolve(self, path: str, cwd: str, follow: bool = True) -> Path:
        """The host path of guest ``path``: :meth:`walk`, then :meth:`host`."""
        return self.host(self.walk(path, cwd, follow))

    def inside(self, host: Path) -> bool:
        """``host`` (already resolved) is the sysroot or under it: defence in depth against
        a link changed between the walk and the open."""
        assert self.root is not None
        real = Path(os.path.realpath(host))
        return real == self.root or self.root in real.parents

    def open(self, parts: list[str], flags: int) -> OpenFile:
        """Open the file at :meth:`walk`'s ``parts`` read-only (``EROFS`` for any write or create);
        its ``path`` is where the walk found it (links followed), as Linux names it."""
        host = self.host(parts)  # a missing file is ENOENT first, as Linux
        if flags & O_ACCMODE or flags & (O_CREAT | O_TRUNC | O_APPEND):
            raise _GuestErrno(errno.EROFS)
        path = "/" + "/".join(parts)
        if not self.inside(host):
            raise _GuestErrno(errno.EACCES)
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.EACCES) from None
        return OpenFile("host", path=path, fd=fd, flags=flags, host=host)


class FdTable:
    """A process's file descriptors (shared by the tasks of a CLONE_FILES clone): 0 its stdin
    bytes, 1 and 2 the console, at first."""

    #: the most descriptors open at once (RLIMIT_NOFILE's usual soft limit)
    LIMIT = 1024

    def __init__(self, stdin: bytes | None) -> None:
        self.fds: dict[int, OpenFile] = {}
        #: the descriptors execve closes (FD_CLOEXEC: a descriptor's own flag, not its description's)
        self.cloexec: set[int] = set()
        #: the processes using this table (CLONE_FILES): the last one's end closes it
        self.users = 1
        if stdin is not None:
            self.install(OpenFile("stdin", data=stdin), 0)
            console = OpenFile("console")
            self.install(console, 1)
            self.install(console, 2)

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
        """Close every host file (the session ends)."""
        for fd in list(self.fds):
            self.close(fd)


def release(f: OpenFile) -> None:
    """The last descriptor of ``f`` is gone: close the host file, close a pipe's end."""
    if f.kind == "host" and f.fd >= 0:
        os.close(f.fd)
        f.fd = -1
    elif f.pipe is not None:
        f.pipe.close_end(f.kind == "pipe_w")
