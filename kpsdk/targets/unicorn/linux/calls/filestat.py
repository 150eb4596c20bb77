"""File status: the ``stat`` family, ``statx``, ``statfs`` and ``access``.

The values are the host file's (``os.lstat`` of what the walk found in the sysroot), laid
out as each arch's kernel lays out ``struct stat``/``stat64`` (:class:`kpsdk.arch.LinuxAbi`
data, packed by :mod:`kpsdk.targets.unicorn.linux.structs`); what has no host file
(``/dev/null``, the process's own /proc, kpsdk's pipes) gets what Linux says of its kind.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import struct

from kpsdk.targets.unicorn.linux import structs
from kpsdk.targets.unicorn.linux.calls.core import AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.procself import ProcSelf, own_fd
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.memory import PAGE

#: what ``stat`` says of what has no host file: /dev/null, a link, a directory and a file of
#: the process's own /proc (size 0, as /proc's); read, never changed, by the stat calls
NULL_STAT = {"st_mode": statmod.S_IFCHR | 0o666, "st_rdev": os.makedev(1, 3), "st_nlink": 1}
LINK_STAT = {"st_mode": statmod.S_IFLNK | 0o777, "st_nlink": 1}
DIR_STAT = {"st_mode": statmod.S_IFDIR | 0o555, "st_nlink": 2}
PROCFILE_STAT = {"st_mode": statmod.S_IFREG | 0o444, "st_nlink": 1}


def pseudo_statfs(magic: int) -> dict[str, int]:
    """``statfs`` of a file system with no host side: kpsdk's pipes, the process's own /proc."""
    return {"f_type": magic, "f_bsize": PAGE, "f_namelen": 255, "f_frsize": PAGE}


class StatCalls(ProcSelf):
    """The calls that tell what a file or its file system is."""

    def stat_of(self, dirfd: int, path_addr: int, flags: int) -> dict[str, int]:
        """The ``struct stat`` values of a path (``AT_EMPTY_PATH``: of ``dirfd`` itself)."""
        path = self.string(path_addr) if path_addr else ""
        if not path and flags & AT_EMPTY_PATH:
            return self.fstat_values(self.sint(dirfd))
        if path == "/dev/null":
            return NULL_STAT
        follow = not flags & AT_SYMLINK_NOFOLLOW
        parts = self.root.walk(path, self.base(dirfd, path), follow)
        own = self.root.own(parts)
        if own is not None:
            return self._own_stat(own, path, follow)
        if self.root.made_up(parts):
            return DIR_STAT
        host = self.root.host(parts)
        try:
            return structs.stat_values(os.lstat(host))
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOENT) from None

    def _own_stat(self, entry: str, path: str, follow: bool) -> dict[str, int]:
        """``stat`` of ``/proc/self/ENTRY``: a directory (itself, ``fd``; ``/proc/self`` not followed
        is the link to it), a link (``exe``, ``fd/N``: followed, the file's own), a file (size 0,
        as /proc's)."""
        kind = self.own_kind(entry, "stat")
        if not follow and entry == "" and path.rsplit("/", 1)[-1] in ("self", "thread-self"):  # not "self/"
            return LINK_STAT
        if kind == "dir":
            return DIR_STAT
        if path.endswith("/"):
            raise _GuestErrno(errno.ENOTDIR)
        if kind == "file":
            return PROCFILE_STAT
        if not follow:
            return LINK_STAT
        if entry != "exe":
            return self.fstat_values(own_fd(entry))
        try:
            return structs.stat_values(os.stat(self.exe))
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOENT) from None

    def fstat_values(self, fd: int) -> dict[str, int]:
        """The ``struct stat`` values of an open descriptor."""
        f = self.fds.get(fd)
        if f.kind == "host":
            return structs.stat_values(os.fstat(f.fd))
        if f.kind == "null":
            return NULL_STAT
        if f.kind == "procfile":
            return PROCFILE_STAT
        return structs.stat_values(None)

    def _put_stat(self, buf: int, values: dict[str, int], wide: bool) -> int:
        layout = self.abi.stat64 if wide else self.abi.stat
        if layout is None:
            raise _GuestErrno(errno.ENOSYS)
        self.write(buf, structs.pack_stat(layout, values, self.order))
        return 0

    @syscall("fstat", "fd p")
    def sys_fstat(self, fd: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.fstat_values(self.sint(fd)), False)

    @syscall("fstat64", "fd p")
    def sys_fstat64(self, fd: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.fstat_values(self.sint(fd)), True)

    @syscall("newfstatat", "dirfd path p x")
    def sys_newfstatat(self, dirfd: int, path: int, buf: int, flags: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(dirfd, path, flags), False)

    @syscall("fstatat64", "dirfd path p x")
    def sys_fstatat64(self, dirfd: int, path: int, buf: int, flags: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(dirfd, path, flags), True)

    @syscall("stat", "path p")
    def sys_stat(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, 0), False)

    @syscall("lstat", "path p")
    def sys_lstat(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW), False)

    @syscall("stat64", "path p")
    def sys_stat64(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, 0), True)

    @syscall("lstat64", "path p")
    def sys_lstat64(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW), True)

    @syscall("statx", "dirfd path x x p")
    def sys_statx(self, dirfd: int, path: int, flags: int, mask: int, buf: int, *_: int) -> int:
        self.write(buf, structs.pack_statx(self.stat_of(dirfd, path, flags), self.order))
        return 0

    # -- file systems -----------------------------------------------------------------------------

    def _statfs_of(self, where: str | int) -> dict[str, int]:
        """``statfs`` of a guest path (the sysroot file's file system; the process's own /proc
        is a proc file system) or of a descriptor (a pipe's for kpsdk's pipes and console)."""
        if isinstance(where, str):
            parts = self.root.walk(where, self.cwd)
            if self.root.own(parts) is not None:
                return pseudo_statfs(structs.PROC_SUPER_MAGIC)
            host: str | int = str(self.root.host(parts))
        else:
            f = self.fds.get(self.sint(where))
            if f.kind != "host":
                return pseudo_statfs(structs.PROC_SUPER_MAGIC if f.kind == "procfile" else structs.PIPEFS_MAGIC)
            host = f.fd
        try:
            return structs.host_statfs(host)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.EIO) from None

    def _put_statfs(self, buf: int, values: dict[str, int], size: int | None = None) -> int:
        """Write ``struct statfs`` (64-bit arches) or ``struct statfs64`` of ``size`` bytes
        (32-bit arches, ppc64: the size the program passes, which the kernel checks)."""
        own = self.abi.statfs  # an arch's own layout (MIPS)
        data = structs.pack_statfs(values, self.arch.word_size, self.order) if own is None else \
            struct.pack(self.order + own[0], *(values.get(name, 0) for name in own[1]))
        if size is not None and size != len(data) and not (self.arch.name == "arm" and size == 88):
            raise _GuestErrno(errno.EINVAL)  # ARM's kernel takes EABI glibc's 88 for its packed 84
        self.write(buf, data)
        return 0

    @syscall("statfs")
    def sys_statfs(self, path: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(self.string(path)))

    @syscall("fstatfs")
    def sys_fstatfs(self, fd: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(fd))

    @syscall("statfs64")
    def sys_statfs64(self, path: int, size: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(self.string(path)), size)

    @syscall("fstatfs64")
    def sys_fstatfs64(self, fd: int, size: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(fd), size)

    # -- access -----------------------------------------------------------------------------------

    def _access(self, dirfd: int, path_addr: int, mode: int, flags: int = 0) -> int:
        values = self.stat_of(dirfd, path_addr, flags & AT_SYMLINK_NOFOLLOW)
        if mode & 2:
            raise _GuestErrno(errno.EROFS)
        if mode & 1 and not values["st_mode"] & 0o111:
            raise _GuestErrno(errno.EACCES)
        return 0

    @syscall("access", "path mode")
    def sys_access(self, path: int, mode: int, *_: int) -> int:
        return self._access(AT_FDCWD, path, mode)

    @syscall("faccessat", "dirfd path mode")
    def sys_faccessat(self, dirfd: int, path: int, mode: int, *_: int) -> int:
        return self._access(dirfd, path, mode)

    @syscall("faccessat2", "dirfd path mode x")
    def sys_faccessat2(self, dirfd: int, path: int, mode: int, flags: int, *_: int) -> int:
        return self._access(dirfd, path, mode, flags)
