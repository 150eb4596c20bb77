"""What the calls that take a path share: walking it from the right directory, the arch's
``open`` flag bits, and a descriptor's inode.

Not calls: the base of :mod:`.fs`, :mod:`.names`, :mod:`.attrs` and :mod:`.filestat`.  A path
is walked in the session's file system (:class:`~kpsdk.targets.unicorn.linux.tree.Tree`)
from the working directory, or from the directory a ``dirfd`` holds (its path now: a
directory renamed since it was opened is followed), or is the descriptor itself with
``AT_EMPTY_PATH``.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from functools import cache

from kpsdk.targets.unicorn.linux.calls.core import AT_EMPTY_PATH, AT_FDCWD
from kpsdk.targets.unicorn.linux.calls.procself import ProcSelf
from kpsdk.targets.unicorn.linux.files import OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import HostNode, Node
from kpsdk.targets.unicorn.linux.tree import Ref


@dataclass(frozen=True)
class OpenBits:
    """The ``open(2)`` flags whose bits differ between arches (arch/*/include/uapi/asm/fcntl.h)."""

    directory: int
    nofollow: int
    largefile: int
    direct: int


@cache
def open_bits(differ: tuple[tuple[str, int], ...]) -> OpenBits:
    """The arch's bits: asm-generic's unless its LinuxAbi.open_flag_bits says otherwise."""
    named = dict(differ)
    return OpenBits(named.get("O_DIRECTORY", 0o200000), named.get("O_NOFOLLOW", 0o400000),
                    named.get("O_LARGEFILE", 0o100000), named.get("O_DIRECT", 0o40000))


class PathCalls(ProcSelf):
    """Walking the paths the calls are given."""

    @property
    def oflags(self) -> OpenBits:
        return open_bits(self.abi.open_flag_bits)

    def lookup(self, dirfd: int, path: str, follow: bool = True) -> Ref:
        """Walk ``path`` from ``dirfd`` (AT_FDCWD: the working directory)."""
        return self.root.find(path, self.base(dirfd, path), follow)

    def existing(self, dirfd: int, path_addr: int, follow: bool = True, flags: int = 0) -> Ref:
        """The :class:`Ref` of an existing file (ENOENT otherwise); with ``AT_EMPTY_PATH`` and an
        empty path, the file ``dirfd`` has open."""
        path = self.string(path_addr) if path_addr or not flags & AT_EMPTY_PATH else ""
        if not path and flags & AT_EMPTY_PATH:
            return self.fd_ref(self.sint(dirfd))
        ref = self.lookup(dirfd, path, follow)
        if ref.node is None and ref.own is None:
            raise _GuestErrno(errno.ENOENT)
        return ref

    def fd_ref(self, fd: int) -> Ref:
        """A :class:`Ref` of what descriptor ``fd`` has open (no directory: its name is not
        changed through it).  AT_FDCWD: the working directory."""
        if fd == AT_FDCWD:
            return self.root.find(self.cwd, "/")
        f = self.fds.get(fd)
        node = self.node_of(f)
        if node is None:
            raise _GuestErrno(errno.EBADF if f.kind in ("stdin", "console", "pipe_r", "pipe_w") else errno.EPERM)
        if isinstance(node, HostNode) and node.bind is None:  # a sysroot file: changed by copying it up in
            ref = self.root.find(f.path, "/", follow=False)  # its directory, found again by its path
            if ref.node is not None:
                return ref
        parts = [c for c in f.path.split("/") if c]
        return Ref(parts, None, parts[-1] if parts else "", node, "norm", False)

    def node_of(self, f: OpenFile) -> Node | None:
        """The inode an open description is of (None: kpsdk's pipes, stdin, console, /proc files)."""
        return f.node
