"""Host directories mapped into the guest's tree (``bind=[(HOST_DIR, GUEST_DIR, "ro"|"rw")]``).

A bind is the one way a guest program reaches the host: ``"ro"`` reads a host directory,
``"rw"`` also writes through to it.  It must never lead outside that directory, whatever the
program names and whatever the host's tree does meanwhile.  So kpsdk holds the bind's root
open (``O_PATH``) and reaches any file under it one name at a time, each ``openat`` relative
to the directory before with ``O_NOFOLLOW``: a symbolic link is never followed by the host
(the guest's path walk reads it and follows it itself, in the guest's tree, where ``..`` of
the bind's root is the guest directory above it), ``..`` never reaches the host, and a
directory swapped for a link between two calls makes the open fail instead of escaping.
Every change (create, write, rename, remove, chmod...) is then a ``*at`` call on a directory
descriptor found that way, on one name.
"""

from __future__ import annotations

import errno
import os
import stat as st
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kpsdk.targets.unicorn.linux.inodes import HostNode, _GuestErrno, host_errno

#: how a directory on the way is opened: a handle for *at calls, never following a link
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HostFds:
    """The host descriptors a session holds for its guest: its files' (an open sysroot or bind
    file) and its binds' directories.  Each is closed when the guest lets it go; what is left
    when the session ends, or is garbage collected without ``close()`` (a ``weakref.finalize``
    of its kernel, which also runs at interpreter exit), is closed by :meth:`close_all`."""

    def __init__(self) -> None:
        self.open: set[int] = set()

    def add(self, fd: int) -> int:
        self.open.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.open.discard(fd)
        os.close(fd)

    def close_all(self) -> None:
        while self.open:
            os.close(self.open.pop())


class Bind:
    """One host directory at guest path ``guest``; ``writable`` for ``"rw"``."""

    def __init__(self, host: Path, guest: str, writable: bool, fds: HostFds | None = None) -> None:
        self.host = Path(os.path.realpath(host))
        self.guest = guest
        self.writable = writable
        self.fds = fds if fds is not None else HostFds()
        self.fd = self.fds.add(os.open(self.host, _DIR_FLAGS))

    def close(self) -> None:
        if self.fd >= 0:
            self.fds.close(self.fd)
            self.fd = -1

    def root(self) -> HostNode:
        """The bind's root directory, as the guest sees it at ``guest``."""
        try:
            return HostNode(self.host, os.fstat(self.fd), self, ())
        except OSError as e:
            raise host_errno(e) from None

    @contextmanager
    def at(self, rel: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the directory ``rel`` (names under the root, none ``..``), opened one
        name at a time without following a link; closed after the ``with``."""
        fd = os.open(".", _DIR_FLAGS, dir_fd=self.fd) if self.fd >= 0 else -1
        if fd < 0:
            raise _GuestErrno(errno.EIO)
        try:
            for name in rel:
                if name in ("", ".", "..") or "/" in name:
                    raise _GuestErrno(errno.EACCES)  # never: the guest's walk hands out plain names
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    raise _GuestErrno(errno.ENOTDIR if e.errno == errno.ELOOP else e.errno or errno.EIO) from None
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def lookup(self, rel: tuple[str, ...], name: str) -> HostNode | None:
        """``name`` in the bind's directory ``rel`` (not following a link), None when absent."""
        with self.at(rel) as fd:
            try:
                s = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise host_errno(e) from None
        return HostNode(self.host.joinpath(*rel, name), s, self, (*rel, name))

    def readlink(self, node: HostNode) -> str:
        with self.at(node.rel[:-1]) as fd:
            try:
                return os.readlink(node.rel[-1], dir_fd=fd)
            except OSError as e:
                raise host_errno(e, errno.EINVAL) from None

    def open(self, node: HostNode, flags: int) -> int:
        """A host descriptor of the file ``node`` (``flags``: the host's; never following a
        link, never blocking on a FIFO).  The bind's root opens as ``.``."""
        if not self.writable and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            raise _GuestErrno(errno.EROFS)
        rel = node.rel
        with self.at(rel[:-1]) as fd:
            try:
                return os.open(rel[-1] if rel else ".", flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                               0o666, dir_fd=fd)
            except OSError as e:
                raise host_errno(e) from None

    def listing(self, node: HostNode) -> list[tuple[str, int, int]]:
        """The entries of directory ``node``: name, inode and ``S_IFMT`` type (0: unknown)."""
        out = []
        fd = self.open(node, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(fd) as listing:
                for entry in listing:
                    try:
                        kind = st.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
                    except OSError:
                        kind = 0
                    out.append((entry.name, entry.inode(), kind))
        except OSError as e:
            raise host_errno(e) from None
        finally:
            os.close(fd)
        return out

    # -- changes: each an *at call on one name ------------------------------------------------

    def _writable(self) -> None:
        if not self.writable:
            raise _GuestErrno(errno.EROFS)

    def create(self, rel: tuple[str, ...], name: str, mode: int, flags: int) -> int:
        """Make file ``name`` in directory ``rel`` (``O_EXCL``: it must not exist); its host descriptor."""
        self._writable()
        with self.at(rel) as fd:
            try:
                return os.open(name, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
            except OSError as e:
                raise host_errno(e) from None

    def mkdir(self, rel: tuple[str, ...], name: str, mode: int) -> None:
        self._writable()
        with self.at(rel) as fd:
            try:
                os.mkdir(name, mode, dir_fd=fd)
            except OSError as e:
                raise host_errno(e) from None

    def mknod(self, rel: tuple[str, ...], name: str, mode: int) -> None:
        """A FIFO or a regular file (what an unprivileged host user may make)."""
        self._writable()
        with self.at(rel) as fd:
            try:
                os.mknod(name, mode, 0, dir_fd=fd)
            except OSError as e:
                raise host_errno(e) from None

    def symlink(self, rel: tuple[str, ...], name: str, target: str) -> None:
        self._writable()
        with self.at(rel) as fd:
            try:
                os.symlink(target, name, dir_fd=fd)
            except OSError as e:
                raise host_errno(e) from None

    def remove(self, rel: tuple[str, ...], name: str, directory: bool) -> None:
        self._writable()
        with self.at(rel) as fd:
            try:
                if directory:
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except OSError as e:
                raise host_errno(e) from None

    def rename(self, src: tuple[str, ...], dst: tuple[str, ...], exchange: bool = False,
               noreplace: bool = False) -> None:
        """Rename ``src`` to ``dst`` (paths in this bind, the last element the name)."""
        self._writable()
        with self.at(src[:-1]) as a, self.at(dst[:-1]) as b:
            try:
                if exchange or noreplace:
                    _renameat2(a, src[-1], b, dst[-1], 2 if exchange else 1)
                else:
                    os.rename(src[-1], dst[-1], src_dir_fd=a, dst_dir_fd=b)
            except OSError as e:
                raise host_errno(e) from None

    def link(self, src: tuple[str, ...], dst: tuple[str, ...]) -> None:
        self._writable()
        with self.at(src[:-1]) as a, self.at(dst[:-1]) as b:
            try:
                os.link(src[-1], dst[-1], src_dir_fd=a, dst_dir_fd=b, follow_symlinks=False)
            except OSError as e:
                raise host_errno(e) from None

    def setattr(self, node: HostNode, mode: int | None = None, owner: tuple[int, int] | None = None,
                times: tuple[int, int] | None = None, size: int | None = None) -> None:
        """chmod, chown, utimensat (nanoseconds) or truncate of ``node`` itself: a link by its
        name with AT_SYMLINK_NOFOLLOW (chmod of a link is EOPNOTSUPP, as Linux), anything else
        through ``/proc/self/fd`` of an ``O_PATH`` descriptor of it, which is that inode and
        never a path that could lead elsewhere."""
        self._writable()
        rel = node.rel
        name = rel[-1] if rel else "."
        with self.at(rel[:-1]) as parent:
            try:
                if st.S_ISLNK(node.mode):
                    if mode is not None:
                        raise _GuestErrno(errno.EOPNOTSUPP)
                    if owner is not None:
                        os.chown(name, owner[0], owner[1], dir_fd=parent, follow_symlinks=False)
                    if times is not None:
                        os.utime(name, ns=times, dir_fd=parent, follow_symlinks=False)
                    return
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except OSError as e:
                raise host_errno(e) from None
            except (OverflowError, ValueError):
                raise _GuestErrno(errno.EINVAL) from None  # an id or a time the host's types cannot hold
        try:
            proc = f"/proc/self/fd/{fd}"
            if mode is not None:
                os.chmod(proc, mode)
            if owner is not None:
                os.chown(proc, owner[0], owner[1])
            if times is not None:
                os.utime(proc, ns=times)
            if size is not None:
                wfd = os.open(proc, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
                try:
                    os.ftruncate(wfd, size)
                finally:
                    os.close(wfd)
        except OSError as e:
            raise host_errno(e) from None
        except (OverflowError, ValueError):
            raise _GuestErrno(errno.EINVAL) from None  # an id or a time the host's types cannot hold
        finally:
            os.close(fd)


def _renameat2(olddirfd: int, old: str, newdirfd: int, new: str, flags: int) -> None:
    """renameat2(2) with RENAME_NOREPLACE (1) or RENAME_EXCHANGE (2): not in Python's os."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(olddirfd, os.fsencode(old), newdirfd, os.fsencode(new), ctypes.c_uint(flags)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
