"""Changing what a file is rather than its name: mode, owner, times and size.

``chmod``, the ``chown`` family (the change is recorded: the overlay is kpsdk's), ``utimensat``
and the older ``utime``/``utimes``/``futimesat``, ``truncate``/``ftruncate`` and
``fallocate``.  By path (following the last link unless told not to) or by descriptor; a
sysroot file is copied up first, a bind's is changed on the host, a read-only bind's is
``EROFS``.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import struct

from kpsdk.targets.unicorn.linux.calls.core import AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.paths import PathCalls
from kpsdk.targets.unicorn.linux.files import OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import MemFile
from kpsdk.targets.unicorn.linux.overlay import UTIME_NOW, UTIME_OMIT
from kpsdk.targets.unicorn.linux.tree import Ref

#: fallocate's modes kpsdk takes: 0 (allocate, growing the file) and FALLOC_FL_KEEP_SIZE
FALLOC_FL_KEEP_SIZE = 1


class AttrCalls(PathCalls):
    """The calls that change a file's mode, owner, times or size."""

    def _target(self, dirfd: int, path_addr: int, flags: int, allowed: int) -> Ref:
        if flags & ~allowed:
            raise _GuestErrno(errno.EINVAL)
        return self.existing(dirfd, path_addr, not flags & AT_SYMLINK_NOFOLLOW, flags)

    # -- mode ---------------------------------------------------------------------------------

    @syscall("chmod", "path mode")
    def sys_chmod(self, path: int, mode: int, *_: int) -> int:
        self.root.chmod(self.existing(AT_FDCWD, path), mode)
        return 0

    @syscall("fchmod", "fd mode")
    def sys_fchmod(self, fd: int, mode: int, *_: int) -> int:
        self.root.chmod(self._fd_target(fd), mode)
        return 0

    @syscall("fchmodat", "dirfd path mode")
    def sys_fchmodat(self, dirfd: int, path: int, mode: int, *_: int) -> int:
        self.root.chmod(self.existing(dirfd, path), mode)  # no flags: glibc handles AT_SYMLINK_NOFOLLOW
        return 0

    def _fd_target(self, fd: int) -> Ref:
        f = self.fds.get(self.sint(fd))
        if f.kind == "path":
            raise _GuestErrno(errno.EBADF)
        return self.fd_ref(self.sint(fd))

    # -- owner --------------------------------------------------------------------------------

    def _ids(self, uid: int, gid: int, wide: bool) -> tuple[int, int]:
        """The ids as the call passed them (-1: unchanged), 16-bit ones for the old calls."""
        if not wide:
            uid, gid = (-1 if x & 0xFFFF == 0xFFFF else x & 0xFFFF for x in (uid, gid))
        return self.sint(uid), self.sint(gid)

    @syscall("chown", "path d d")
    @syscall("chown32", "path d d")
    def sys_chown(self, path: int, uid: int, gid: int, *_: int) -> int:
        self.root.chown(self.existing(AT_FDCWD, path), *self._ids(uid, gid, True))
        return 0

    @syscall("lchown", "path d d")
    @syscall("lchown32", "path d d")
    def sys_lchown(self, path: int, uid: int, gid: int, *_: int) -> int:
        self.root.chown(self.existing(AT_FDCWD, path, follow=False), *self._ids(uid, gid, True))
        return 0

    @syscall("fchown", "fd d d")
    @syscall("fchown32", "fd d d")
    def sys_fchown(self, fd: int, uid: int, gid: int, *_: int) -> int:
        self.root.chown(self._fd_target(fd), *self._ids(uid, gid, True))
        return 0

    @syscall("fchownat", "dirfd path d d x")
    def sys_fchownat(self, dirfd: int, path: int, uid: int, gid: int, flags: int, *_: int) -> int:
        ref = self._target(dirfd, path, flags, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)
        self.root.chown(ref, *self._ids(uid, gid, True))
        return 0

    # -- times --------------------------------------------------------------------------------

    def _utimens(self, ref: Ref, times: list[tuple[int, int]] | None) -> int:
        """Set the times (seconds and nanoseconds, or UTIME_NOW/UTIME_OMIT in the latter);
        None: both now."""
        if times is None:
            self.root.utimes(ref, UTIME_NOW, UTIME_NOW, explicit=False)
            return 0
        ns = []
        for sec, nsec in times:
            if nsec in (UTIME_NOW, UTIME_OMIT):
                ns.append(nsec)
            elif not 0 <= nsec < 10**9:
                raise _GuestErrno(errno.EINVAL)
            else:
                ns.append(sec * 10**9 + nsec)
        if ns == [UTIME_OMIT, UTIME_OMIT]:
            return 0
        explicit = any(t not in (UTIME_NOW, UTIME_OMIT) for t in ns)
        self.root.utimes(ref, ns[0], ns[1], explicit)
        return 0

    def _timespecs(self, addr: int, wide: bool) -> list[tuple[int, int]] | None:
        """Two ``struct timespec`` (``__kernel_timespec`` when ``wide``: 64-bit seconds)."""
        if not addr:
            return None
        if wide or self.bits == 64:
            a, an, b, bn = struct.unpack(self.order + "qqqq", self.read(addr, 32))
            return [(a, an), (b, bn)]
        a, an, b, bn = struct.unpack(self.order + "iiii", self.read(addr, 16))
        return [(a, an), (b, bn)]

    def _utimensat(self, dirfd: int, path: int, times: int, flags: int, wide: bool) -> int:
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            raise _GuestErrno(errno.EINVAL)
        spec = self._timespecs(times, wide)
        if not path:  # futimens: the descriptor itself (glibc passes a NULL path)
            ref = self._fd_target(dirfd)
        else:
            ref = self._target(dirfd, path, flags, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)
        return self._utimens(ref, spec)

    @syscall("utimensat", "dirfd path p x")
    def sys_utimensat(self, dirfd: int, path: int, times: int, flags: int, *_: int) -> int:
        return self._utimensat(dirfd, path, times, flags, False)

    @syscall("utimensat_time64", "dirfd path p x")
    def sys_utimensat_time64(self, dirfd: int, path: int, times: int, flags: int, *_: int) -> int:
        return self._utimensat(dirfd, path, times, flags, True)

    def _timevals(self, addr: int) -> list[tuple[int, int]] | None:
        """Two ``struct timeval`` (words), as timespecs."""
        if not addr:
            return None
        a, au, b, bu = (self.read_word(addr + i * self.word.size) for i in range(4))
        out = []
        for sec, usec in ((a, au), (b, bu)):
            usec = self.sint(usec, self.bits)
            if not 0 <= usec < 10**6:
                raise _GuestErrno(errno.EINVAL)
            out.append((self.sint(sec, self.bits), usec * 1000))
        return out

    @syscall("utimes", "path p")
    def sys_utimes(self, path: int, times: int, *_: int) -> int:
        return self._utimens(self.existing(AT_FDCWD, path), self._timevals(times))

    @syscall("futimesat", "dirfd path p")
    def sys_futimesat(self, dirfd: int, path: int, times: int, *_: int) -> int:
        return self._utimens(self.existing(dirfd, path), self._timevals(times))

    @syscall("utime", "path p")
    def sys_utime(self, path: int, times: int, *_: int) -> int:
        """``struct utimbuf``: two words, the access and modification seconds."""
        spec = None if not times else [(self.sint(self.read_word(times + i * self.word.size), self.bits), 0)
                                       for i in range(2)]
        return self._utimens(self.existing(AT_FDCWD, path), spec)

    # -- size ---------------------------------------------------------------------------------

    def _truncate_path(self, path: int, size: int) -> int:
        ref = self.existing(AT_FDCWD, path)
        if ref.own is not None:
            raise _GuestErrno(errno.EACCES)
        self.root.truncate(ref, size)
        return 0

    def truncate_fd(self, f: OpenFile, size: int) -> None:
        """ftruncate: the file must be open for writing (EINVAL otherwise, as Linux)."""
        if size < 0:
            raise _GuestErrno(errno.EINVAL)
        if f.kind == "path":
            raise _GuestErrno(errno.EBADF)
        if not f.writable or f.kind not in ("mem", "host") or f.node is None or not statmod.S_ISREG(f.node.mode):
            raise _GuestErrno(errno.EINVAL)
        if f.kind == "host":
            try:
                os.ftruncate(f.fd, size)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EIO) from None
            return
        assert isinstance(f.node, MemFile)
        self.root.resize(f.node, size)

    @syscall("truncate", "path d")
    def sys_truncate(self, path: int, size: int, *_: int) -> int:
        return self._truncate_path(path, self.sint(size, self.bits))

    @syscall("truncate64", "path d")
    def sys_truncate64(self, path: int, *rest: int) -> int:
        return self._truncate_path(path, self.sint(self.pair((path, *rest), 1), 64))

    @syscall("ftruncate", "fd d")
    def sys_ftruncate(self, fd: int, size: int, *_: int) -> int:
        self.truncate_fd(self.fds.get(self.sint(fd)), self.sint(size, self.bits))
        return 0

    @syscall("ftruncate64", "fd d")
    def sys_ftruncate64(self, fd: int, *rest: int) -> int:
        self.truncate_fd(self.fds.get(self.sint(fd)), self.sint(self.pair((fd, *rest), 1), 64))
        return 0

    @syscall("fallocate", "fd d d d")
    def sys_fallocate(self, fd: int, mode: int, *rest: int) -> int:
        """Reserve space: a file of the overlay grows to ``offset + len`` (unless KEEP_SIZE); a
        bind's file is the host's posix_fallocate; other modes (holes, ranges) EOPNOTSUPP."""
        args = (fd, mode, *rest)
        offset = self.sint(self.pair(args, 2), 64)
        length = self.sint(self.pair(args, 4 if self.bits == 32 else 3), 64)
        f = self.fds.get(self.sint(fd))
        if offset < 0 or length <= 0:
            raise _GuestErrno(errno.EINVAL)
        if mode & ~FALLOC_FL_KEEP_SIZE:
            raise _GuestErrno(errno.EOPNOTSUPP)
        if not f.writable:
            raise _GuestErrno(errno.EBADF)
        if f.kind == "host":
            if not mode:
                try:
                    os.posix_fallocate(f.fd, offset, length)
                except OSError as e:
                    raise _GuestErrno(e.errno or errno.EIO) from None
            return 0
        if f.kind != "mem" or not isinstance(f.node, MemFile):
            raise _GuestErrno(errno.ENODEV if f.kind != "dir" else errno.EISDIR)
        if not mode and offset + length > len(f.node.data):
            self.root.resize(f.node, offset + length)
        return 0
