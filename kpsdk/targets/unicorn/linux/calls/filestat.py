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
from kpsdk.targets.unicorn.linux.calls.paths import PathCalls
from kpsdk.targets.unicorn.linux.calls.procself import own_fd
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import HostNode, MemDir
from kpsdk.targets.unicorn.linux.memory import PAGE

#: what ``stat`` says of what has no host file: /dev/null, a link, a directory and a file of
#: the process's own /proc (size 0, as /proc's); read, never changed, by the stat calls
LINK_STAT = {"st_mode": statmod.S_IFLNK | 0o777, "st_nlink": 1}
DIR_STAT = {"st_mode": statmod.S_IFDIR | 0o555, "st_nlink": 2}
PROCFILE_STAT = {"st_mode": statmod.S_IFREG | 0o444, "st_nlink": 1}
#: statfs's f_flags (include/linux/statfs.h): read-only, the flags are valid, nosuid, nodev
ST_RDONLY, ST_NOSUID, ST_NODEV, ST_VALID = 1, 2, 4, 0x20
#: faccessat2's: check with the effective ids (the same ids here)
AT_EACCESS = 0x200


def pseudo_statfs(magic: int) -> dict[str, int]:
    """``statfs`` of a file system with no host side: kpsdk's pipes, the process's own /proc."""
    return {"f_type": magic, "f_bsize": PAGE, "f_namelen": 255, "f_frsize": PAGE}


class StatCalls(PathCalls):
    """The calls that tell what a file or its file system is."""

    def stat_of(self, dirfd: int, path_addr: int, flags: int) -> dict[str, int]:
        """The ``struct stat`` values of a path (``AT_EMPTY_PATH``: of ``dirfd`` itself)."""
        path = self.string(path_addr) if path_addr or not flags & AT_EMPTY_PATH else ""
        if not path and flags & AT_EMPTY_PATH:
            return self.fstat_values(self.sint(dirfd))
        follow = not flags & AT_SYMLINK_NOFOLLOW
        ref = self.lookup(dirfd, path, follow)
        if ref.own is not None:
            return self.proc_of(ref)._own_stat(ref.own, path, follow)
        if ref.node is None:
            raise _GuestErrno(errno.ENOENT)
        return self.root.stat(ref.node)

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
            try:
                return structs.stat_values(os.fstat(f.fd))
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EIO) from None
        if f.node is not None:
            return self.root.stat(f.node)
        if f.kind == "procfile":
            return PROCFILE_STAT
        if f.obj is not None:  # a socket (S_IFSOCK), an anonymous inode (eventfd, epoll...)
            return f.obj.stat()
        return structs.stat_values(None)

    def _put_stat(self, buf: int, values: dict[str, int], wide: bool) -> int:
        layout = self.abi.stat64 if wide else self.abi.stat
        if layout is None:
            raise _GuestErrno(errno.ENOSYS)
        self.write(buf, structs.pack_stat(layout, values, self.order))
        return 0

    @syscall("fstat", "fd stat")
    def sys_fstat(self, fd: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.fstat_values(self.sint(fd)), False)

    @syscall("fstat64", "fd stat64")
    def sys_fstat64(self, fd: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.fstat_values(self.sint(fd)), True)

    @syscall("newfstatat", "dirfd path stat atflags")
    def sys_newfstatat(self, dirfd: int, path: int, buf: int, flags: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(dirfd, path, flags), False)

    @syscall("fstatat64", "dirfd path stat64 atflags")
    def sys_fstatat64(self, dirfd: int, path: int, buf: int, flags: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(dirfd, path, flags), True)

    @syscall("stat", "path stat")
    def sys_stat(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, 0), False)

    @syscall("lstat", "path stat")
    def sys_lstat(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW), False)

    @syscall("stat64", "path stat64")
    def sys_stat64(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, 0), True)

    @syscall("lstat64", "path stat64")
    def sys_lstat64(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self.stat_of(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW), True)

    @syscall("statx", "dirfd path statxflags statxmask statx")
    def sys_statx(self, dirfd: int, path: int, flags: int, mask: int, buf: int, *_: int) -> int:
        self.write(buf, structs.pack_statx(self.stat_of(dirfd, path, flags), self.order))
        return 0

    # -- file systems -----------------------------------------------------------------------------

    def _statfs_of(self, where: str | int) -> dict[str, int]:
        """``statfs`` of a guest path or a descriptor: the host's numbers for a sysroot or bind
        file's file system (read-only for a ``"ro"`` bind), a tmpfs of the overlay's size for
        the overlay's own files, a proc file system for the process's own /proc, a pipe's for
        kpsdk's pipes."""
        if isinstance(where, str):
            ref = self.root.find(where, self.cwd)
            if ref.own is not None:
                return pseudo_statfs(structs.PROC_SUPER_MAGIC)
            node = ref.node
            if node is None:
                raise _GuestErrno(errno.ENOENT)
        else:
            f = self.fds.get(self.sint(where))
            node = f.node
            if node is None:
                return pseudo_statfs(structs.PROC_SUPER_MAGIC if f.kind == "procfile" else structs.PIPEFS_MAGIC)
        if isinstance(node, HostNode) and node.bind is not None:
            values = self._host_statfs(node.bind.fd)
            if not node.bind.writable:
                values["f_flags"] = values.get("f_flags", 0) | ST_RDONLY
            return values
        if isinstance(node, HostNode) or (isinstance(node, MemDir) and node.lower is not None):
            path = node.path if isinstance(node, HostNode) else node.lower
            assert path is not None
            return self._host_statfs(str(path))
        counter = self.root.counter
        total, free = counter.capacity // PAGE, max(0, counter.capacity - counter.used) // PAGE
        return {"f_type": structs.TMPFS_MAGIC, "f_bsize": PAGE, "f_blocks": total, "f_bfree": free,
                "f_bavail": free, "f_files": total, "f_ffree": total - counter.next_ino, "f_namelen": 255,
                "f_frsize": PAGE, "f_flags": ST_VALID | ST_NOSUID | ST_NODEV}

    @staticmethod
    def _host_statfs(where: str | int) -> dict[str, int]:
        try:
            return structs.host_statfs(where)
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

    @syscall("statfs", "path p")
    def sys_statfs(self, path: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(self.string(path)))

    @syscall("fstatfs", "fd p")
    def sys_fstatfs(self, fd: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(fd))

    @syscall("statfs64", "path u p")
    def sys_statfs64(self, path: int, size: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(self.string(path)), size)

    @syscall("fstatfs64", "fd u p")
    def sys_fstatfs64(self, fd: int, size: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(fd), size)

    # -- access -----------------------------------------------------------------------------------

    def _access(self, dirfd: int, path_addr: int, mode: int, flags: int = 0) -> int:
        """access(2): EROFS for writing in a read-only bind, else the permission bits as the
        user's (root: anything but executing a file with no execute bit)."""
        if mode & ~7 or flags & ~(AT_SYMLINK_NOFOLLOW | AT_EACCESS | AT_EMPTY_PATH):
            raise _GuestErrno(errno.EINVAL)
        follow = not flags & AT_SYMLINK_NOFOLLOW
        ref = self.existing(dirfd, path_addr, follow, flags)
        node = ref.node
        if ref.own is not None:
            values = self.proc_of(ref)._own_stat(ref.own, self.string(path_addr) if path_addr else "", follow)
        else:
            assert node is not None
            values = node.stat()
        if mode & 2 and isinstance(node, HostNode) and node.bind is not None and not node.bind.writable:
            raise _GuestErrno(errno.EROFS)
        if not self.root.cred.may_mode(values["st_mode"], values.get("st_uid", 0), values.get("st_gid", 0), mode):
            raise _GuestErrno(errno.EACCES)
        return 0

    @syscall("access", "path amode")
    def sys_access(self, path: int, mode: int, *_: int) -> int:
        return self._access(AT_FDCWD, path, mode)

    @syscall("faccessat", "dirfd path amode")
    def sys_faccessat(self, dirfd: int, path: int, mode: int, *_: int) -> int:
        return self._access(dirfd, path, mode)

    @syscall("faccessat2", "dirfd path amode faflags")
    def sys_faccessat2(self, dirfd: int, path: int, mode: int, flags: int, *_: int) -> int:
        return self._access(dirfd, path, mode, flags)
