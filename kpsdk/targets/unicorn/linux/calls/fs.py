"""Files and descriptors: opening, closing, duplicating, pipes, directories, links, the working directory.

Paths are walked in the read-only sysroot (:class:`~kpsdk.targets.unicorn.linux.files.Sysroot`),
or end in the process's own /proc (:mod:`.procself`); what would change the file system
(``mkdir``, ``unlink``, ``rename``) is ``EROFS``.  Moving bytes through a descriptor is :mod:`.rw`.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import struct
from pathlib import Path

from kpsdk.targets.unicorn.linux import structs
from kpsdk.targets.unicorn.linux.calls.core import AT_FDCWD, PID
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.procself import ProcSelf
from kpsdk.targets.unicorn.linux.files import OpenFile, Pipe, _GuestErrno, release

F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 3, 4, 1030


class FsCalls(ProcSelf):
    """The calls on paths and descriptors (not their bytes: :mod:`.rw`)."""

    # -- opening and closing ------------------------------------------------------------------

    def _open(self, dirfd: int, path_addr: int, flags: int) -> int:
        flags = self.abi.generic_flags(flags, self.abi.open_flags)  # MIPS's O_CREAT...: the generic bits
        path = self.string(path_addr)
        if path == "/dev/null":
            f = OpenFile("null", path=path)
        else:
            parts = self.root.walk(path, self.base(dirfd, path))
            own = self.root.own(parts)
            f = self.root.open(parts, flags) if own is None else self.open_own(own, path, flags)
        try:
            return self.fds.install(f)
        except _GuestErrno:
            if not f.refs:  # not a description another descriptor shares (/proc/self/fd/N)
                release(f)
            raise

    @syscall("open", "path oflags")
    def sys_open(self, path: int, flags: int, *_: int) -> int:
        return self._open(AT_FDCWD, path, flags)

    @syscall("openat", "dirfd path oflags")
    def sys_openat(self, dirfd: int, path: int, flags: int, *_: int) -> int:
        return self._open(dirfd, path, flags)

    @syscall("close", "fd")
    def sys_close(self, fd: int, *_: int) -> int:
        self.fds.close(self.sint(fd))
        return 0

    # -- descriptors ------------------------------------------------------------------------------

    @syscall("dup", "fd")
    def sys_dup(self, fd: int, *_: int) -> int:
        return self.fds.install(self.fds.get(self.sint(fd)))

    @syscall("dup2", "fd fd")
    def sys_dup2(self, old: int, new: int, *_: int) -> int:
        f = self.fds.get(self.sint(old))
        if self.sint(old) == self.sint(new):
            return self.sint(new)
        return self.fds.install(f, self.sint(new))

    @syscall("dup3", "fd fd x")
    def sys_dup3(self, old: int, new: int, flags: int, *_: int) -> int:
        if self.sint(old) == self.sint(new):
            raise _GuestErrno(errno.EINVAL)
        return self.fds.install(self.fds.get(self.sint(old)), self.sint(new))

    @syscall("fcntl", "fd d x")
    @syscall("fcntl64", "fd d x")
    def sys_fcntl(self, fd: int, cmd: int, arg: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        if cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            return self.fds.install(f, lowest=self.sint(arg))
        if cmd in (F_GETFD, F_SETFD, F_SETFL):
            return 0
        if cmd == F_GETFL:
            return 1 if f.kind in ("console", "pipe_w", "null") else f.flags & ~0o3
        raise _GuestErrno(errno.EINVAL)

    def _pipe(self, fds: int) -> int:
        pipe = Pipe()
        r = self.fds.install(OpenFile("pipe_r", pipe=pipe))
        w = self.fds.install(OpenFile("pipe_w", pipe=pipe))
        self.write(fds, struct.pack(self.order + "ii", r, w))
        return 0

    @syscall("pipe", "p")
    def sys_pipe(self, fds: int, *_: int) -> int:
        return self._pipe(fds)

    @syscall("pipe2", "p x")
    def sys_pipe2(self, fds: int, flags: int, *_: int) -> int:
        return self._pipe(fds)

    @syscall("ioctl", "fd x p")
    def sys_ioctl(self, fd: int, request: int, *_: int) -> int:
        self.fds.get(self.sint(fd))
        raise _GuestErrno(errno.ENOTTY)  # no descriptor is a terminal (TCGETS, TIOCGWINSZ...)

    @syscall("fadvise64")
    @syscall("fadvise64_64")
    @syscall("arm_fadvise64_64")
    def sys_fadvise64(self, fd: int, *_: int) -> int:
        """Advice about a file's future reads: taken, nothing to do (``ESPIPE`` on a pipe, as Linux)."""
        if self.fds.get(self.sint(fd)).kind in ("stdin", "console", "pipe_r", "pipe_w"):
            raise _GuestErrno(errno.ESPIPE)  # kpsdk's pipes (stdin and the console are pipes under qemu-user)
        return 0

    # -- directories ------------------------------------------------------------------------------

    @syscall("getdents64", "fd p u")
    def sys_getdents64(self, fd: int, dirp: int, count: int, *_: int) -> int:
        """As many ``linux_dirent64`` records as fit in ``count`` bytes (``.`` and ``..`` first,
        then the host directory's entries in its own order); 0 at the end, EINVAL when not even
        the next one fits."""
        f = self.fds.get(self.sint(fd))
        if f.kind != "host" or f.host is None or not statmod.S_ISDIR(os.fstat(f.fd).st_mode):
            raise _GuestErrno(errno.ENOTDIR)
        if f.entries is None:
            f.entries = self._list_directory(f)
        out = bytearray()
        while f.pos < len(f.entries):
            name, ino, dtype = f.entries[f.pos]
            record = structs.pack_dirent64(ino, f.pos + 1, dtype, name, self.order)
            if len(out) + len(record) > (count & 0xFFFFFFFF):
                if not out:
                    raise _GuestErrno(errno.EINVAL)
                break
            out += record
            f.pos += 1
        self.write(dirp, bytes(out))
        return len(out)

    def _list_directory(self, f: OpenFile) -> list[tuple[bytes, int, int]]:
        """The entries of directory ``f``: itself, its parent (itself at the sysroot's top), then
        what the host lists, each with its inode and type (lstat's: a link is DT_LNK)."""
        assert f.host is not None
        here = os.fstat(f.fd)
        parent = here if self.root.root is not None and Path(os.path.realpath(f.host)) == self.root.root \
            else os.stat(f.host.parent)
        entries = [(b".", here.st_ino, structs.dirent_type(here.st_mode)),
                   (b"..", parent.st_ino, structs.dirent_type(parent.st_mode))]
        try:
            with os.scandir(f.fd) as listing:
                for entry in listing:
                    try:
                        dtype = structs.dirent_type(entry.stat(follow_symlinks=False).st_mode)
                    except OSError:
                        dtype = structs.DT_UNKNOWN
                    entries.append((os.fsencode(entry.name), entry.inode(), dtype))
        except OSError as e:
            raise _GuestErrno(e.errno or errno.EIO) from None
        return entries

    # -- links ------------------------------------------------------------------------------------

    def _readlink(self, dirfd: int, path_addr: int, buf: int, size: int) -> int:
        path = self.string(path_addr)
        if self.sint(size) <= 0:
            raise _GuestErrno(errno.EINVAL)
        parts = self.root.walk(path, self.base(dirfd, path), follow=False)
        own = self.root.own(parts)
        last = path.rsplit("/", 1)[-1]  # "" after a trailing "/": the link is followed, as Linux does
        if own == "" and last in ("self", "thread-self"):  # the links to the process's own directory
            target = str(PID) if last == "self" else f"{PID}/task/{PID}"
        elif own is not None:
            if self.own_kind(own, "readlink") != "link":
                raise _GuestErrno(errno.EINVAL)  # a directory or a file, not a link
            if not last:
                raise _GuestErrno(errno.ENOTDIR)  # "exe/", "fd/2/": a file, not a directory
            target = self.own_link(own)
        else:
            host = self.root.host(parts)
            try:
                target = os.readlink(host)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EINVAL) from None
        data = os.fsencode(target)[:size]
        self.write(buf, data)
        return len(data)

    @syscall("readlink", "path rbuf u")
    def sys_readlink(self, path: int, buf: int, size: int, *_: int) -> int:
        return self._readlink(AT_FDCWD, path, buf, size)

    @syscall("readlinkat", "dirfd path rbuf u")
    def sys_readlinkat(self, dirfd: int, path: int, buf: int, size: int, *_: int) -> int:
        return self._readlink(dirfd, path, buf, size)

    # -- the working directory --------------------------------------------------------------------

    @syscall("getcwd", "p u")
    def sys_getcwd(self, buf: int, size: int, *_: int) -> int:
        data = os.fsencode(self.cwd) + b"\0"
        if len(data) > size:
            raise _GuestErrno(errno.ERANGE)
        self.write(buf, data)
        return len(data)

    @syscall("chdir", "path")
    def sys_chdir(self, path_addr: int, *_: int) -> int:
        path = self.string(path_addr)
        parts = self.root.walk(path, self.cwd)
        own = self.root.own(parts)
        if own is not None:
            is_dir = self.own_kind(own, "chdir") == "dir"
        else:
            is_dir = self.root.made_up(parts) or os.path.isdir(self.root.host(parts))
        if not is_dir:
            raise _GuestErrno(errno.ENOTDIR)
        self.cwd = "/" + "/".join(parts)  # where the walk ended (links followed), as getcwd says
        return 0

    @syscall("fchdir")
    def sys_fchdir(self, fd: int, *_: int) -> int:
        """The working directory becomes the directory open on ``fd`` (find goes back to where
        it started this way)."""
        f = self.fds.get(self.sint(fd))
        if f.kind != "host" or not statmod.S_ISDIR(os.fstat(f.fd).st_mode):
            raise _GuestErrno(errno.ENOTDIR)
        self.cwd = f.path  # where its open's walk ended
        return 0

    # -- what would change the file system ----------------------------------------------------

    @syscall("unlink")
    @syscall("unlinkat")
    @syscall("mkdir")
    @syscall("mkdirat")
    @syscall("rename")
    @syscall("renameat")
    def sys_read_only(self, *_: int) -> int:
        """The sysroot is read-only: ``EROFS``."""
        raise _GuestErrno(errno.EROFS)
