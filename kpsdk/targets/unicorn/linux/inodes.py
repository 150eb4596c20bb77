"""What a name in the guest's file system is: an inode kpsdk keeps in memory, or a host file.

The session's tree (:class:`~kpsdk.targets.unicorn.linux.files.Sysroot`) is made of
:class:`MemDir` directories.  A directory of the read-only sysroot gets one the first time a
path goes through it (``lower`` is its host directory, whose entries show through it unless
a *whiteout* hides them), so that a file made in it has somewhere to live; a directory the
program makes is one with no ``lower``.  Files, links, FIFOs and devices the program makes
are :class:`MemFile`, :class:`MemLink` and :class:`MemSpecial` (the overlay, in memory, gone
with the session); a file of the sysroot it has not changed is a :class:`HostNode` (its
host path and ``lstat``), as is every file of a bind (``bind=``), whose bytes stay on the
host.  Writing to a sysroot file first copies it up: its bytes and metadata become a
:class:`MemFile` that keeps the host file's device and inode numbers, as Linux's overlayfs
keeps them, so a program sees one file before and after.

Identity: files made in the overlay have their own device (:data:`OVERLAY_DEV`) and inode
numbers counted from 2 in the order they are made, so a run gives the same numbers every
time; sysroot and bind files keep the host's.
"""

from __future__ import annotations

import errno
import os
import stat as st
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.binds import Bind
    from kpsdk.targets.unicorn.linux.pipes import Pipe

#: the device the overlay's own files are on (an anonymous device, as tmpfs's: major 0)
OVERLAY_DEV = os.makedev(0, 0x2A)
#: the longest name of one directory entry (NAME_MAX)
NAME_MAX = 255
#: what the access checks ask for (MAY_EXEC, MAY_WRITE, MAY_READ)
MAY_X, MAY_W, MAY_R = 1, 2, 4


class _GuestErrno(Exception):
    """A system call fails with ``errno`` (returned to the program as ``-errno``): control flow
    inside the Linux layer, never raised to a user."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.errno = code


def host_errno(e: OSError, default: int = errno.EIO) -> _GuestErrno:
    """The guest's error for a host call that failed."""
    return _GuestErrno(e.errno or default)


class MemNode:
    """An inode of the overlay: its metadata (times in nanoseconds since the epoch)."""

    __slots__ = ("ino", "dev", "mode", "uid", "gid", "nlink", "rdev", "atime", "mtime", "ctime", "xattrs")

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now: int, dev: int = OVERLAY_DEV) -> None:
        self.ino, self.dev, self.mode, self.uid, self.gid = ino, dev, mode, uid, gid
        self.nlink = 1
        self.rdev = 0
        self.atime = self.mtime = self.ctime = now
        #: extended attributes set by the program (None: none)
        self.xattrs: dict[str, bytes] | None = None

    def size(self) -> int:
        return 0

    def stat(self) -> dict[str, int]:
        """The ``struct stat`` values (:mod:`kpsdk.targets.unicorn.linux.structs`' names)."""
        size = self.size()
        return {"st_dev": self.dev, "st_ino": self.ino, "st_mode": self.mode, "st_nlink": self.nlink,
                "st_uid": self.uid, "st_gid": self.gid, "st_rdev": self.rdev, "st_size": size,
                "st_blksize": 4096, "st_blocks": (size + 4095) // 4096 * 8,
                "st_atime": self.atime // 10**9, "st_atime_nsec": self.atime % 10**9,
                "st_mtime": self.mtime // 10**9, "st_mtime_nsec": self.mtime % 10**9,
                "st_ctime": self.ctime // 10**9, "st_ctime_nsec": self.ctime % 10**9}

    def copy_meta(self, s: os.stat_result) -> None:
        """Take a host file's metadata (a copy-up, a sysroot directory entered)."""
        self.ino, self.dev, self.mode, self.uid, self.gid = s.st_ino, s.st_dev, s.st_mode, s.st_uid, s.st_gid
        self.atime, self.mtime, self.ctime = s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns


class MemFile(MemNode):
    """A regular file's bytes in memory."""

    __slots__ = ("data",)

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now: int, data: bytes = b"") -> None:
        super().__init__(ino, st.S_IFREG | (mode & 0o7777), uid, gid, now)
        self.data = bytearray(data)

    def size(self) -> int:
        return len(self.data)


class MemLink(MemNode):
    """A symbolic link: its target, as written (read by the path walk, never resolved on the host)."""

    __slots__ = ("target",)

    def __init__(self, ino: int, uid: int, gid: int, now: int, target: str) -> None:
        super().__init__(ino, st.S_IFLNK | 0o777, uid, gid, now)
        self.target = target

    def size(self) -> int:
        return len(os.fsencode(self.target))

    def stat(self) -> dict[str, int]:
        values = super().stat()
        values["st_blocks"] = 0  # a short target lives in the inode, as tmpfs and ext4 keep it
        return values


class MemSpecial(MemNode):
    """A FIFO (its :class:`~kpsdk.targets.unicorn.linux.pipes.Pipe`, made at the first open), a
    character device kpsdk emulates (``device``: ``"null"``, ``"zero"``...) or a socket node."""

    __slots__ = ("pipe", "device")

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now: int, rdev: int = 0,
                 device: str | None = None) -> None:
        super().__init__(ino, mode, uid, gid, now)
        self.rdev = rdev
        self.pipe: Pipe | None = None
        self.device = device


class MemDir(MemNode):
    """A directory: the entries the overlay holds (made, changed, or a sysroot directory
    entered), over ``lower`` (the sysroot's directory, None: none or hidden) whose other entries
    show through unless ``whiteouts`` names them.  ``mount``: a bind over it.  ``parent`` and
    ``name`` place it (a directory has one name), so its path can be told after a rename."""

    __slots__ = ("entries", "whiteouts", "lower", "mount", "parent", "name", "dirty", "host_nlink", "host_size")

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now: int, parent: MemDir | None = None,
                 name: str = "", lower: Path | None = None) -> None:
        super().__init__(ino, st.S_IFDIR | (mode & 0o7777), uid, gid, now)
        self.entries: dict[str, MemNode] = {}
        self.whiteouts: set[str] = set()
        self.lower = lower
        self.mount: Bind | None = None
        self.parent = parent
        self.name = name
        #: whether an entry was made, removed or renamed here (else the host's link count holds)
        self.dirty = lower is None
        self.host_nlink = 2
        self.nlink = 2
        #: a sysroot directory's size and blocks on the host (None: the overlay's own)
        self.host_size: tuple[int, int] | None = None

    def size(self) -> int:
        if self.host_size is not None:
            return self.host_size[0]
        return 40 + 20 * len(self.entries)  # tmpfs-like: what its entries take

    def stat(self) -> dict[str, int]:
        values = super().stat()
        if self.host_size is not None:
            values["st_blocks"] = self.host_size[1]
        return values


class HostNode:
    """A host file at ``path`` as ``lstat`` found it: of the sysroot (``bind`` None: read-only,
    copied up when changed) or of a bind (``rel``: its path inside the bind)."""

    __slots__ = ("path", "st", "bind", "rel")

    def __init__(self, path: Path, s: os.stat_result, bind: Bind | None = None, rel: tuple[str, ...] = ()) -> None:
        self.path, self.st, self.bind, self.rel = path, s, bind, rel

    @property
    def mode(self) -> int:
        return self.st.st_mode

    @property
    def uid(self) -> int:
        return self.st.st_uid

    @property
    def gid(self) -> int:
        return self.st.st_gid

    @property
    def ino(self) -> int:
        return self.st.st_ino

    def stat(self) -> dict[str, int]:
        s = self.st
        return {"st_dev": s.st_dev, "st_ino": s.st_ino, "st_mode": s.st_mode, "st_nlink": s.st_nlink,
                "st_uid": s.st_uid, "st_gid": s.st_gid, "st_rdev": s.st_rdev, "st_size": s.st_size,
                "st_blksize": s.st_blksize, "st_blocks": s.st_blocks,
                "st_atime": s.st_atime_ns // 10**9, "st_atime_nsec": s.st_atime_ns % 10**9,
                "st_mtime": s.st_mtime_ns // 10**9, "st_mtime_nsec": s.st_mtime_ns % 10**9,
                "st_ctime": s.st_ctime_ns // 10**9, "st_ctime_nsec": s.st_ctime_ns % 10**9}


#: what a name can be: an inode of the overlay or a host file
Node = MemNode | HostNode
#: what a path walk goes through: an overlay directory, or a directory of a bind
Dir = MemDir | HostNode


def is_dir(node: Node | None) -> bool:
    return node is not None and st.S_ISDIR(node.mode)


def is_link(node: Node | None) -> bool:
    return node is not None and st.S_ISLNK(node.mode)


class Cred:
    """Who the program is to the file system: its user, group and groups (the host user's:
    the program runs as the one who runs kpsdk) and what it may do as them."""

    def __init__(self, uid: int | None = None, gid: int | None = None, groups: tuple[int, ...] | None = None) -> None:
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.groups = frozenset((self.gid, *(os.getgroups() if groups is None else groups)))

    def may(self, node: Node, want: int) -> bool:
        return self.may_mode(node.mode, node.uid, node.gid, want)

    def may_mode(self, mode: int, uid: int, gid: int, want: int) -> bool:
        """Linux's generic_permission: root may read and write anything and execute what has an
        execute bit (or is a directory); anyone else by the owner, group or other bits."""
        if self.uid == 0:
            return not want & MAY_X or st.S_ISDIR(mode) or bool(mode & 0o111)
        if self.uid == uid:
            bits = mode >> 6
        elif gid in self.groups:
            bits = mode >> 3
        else:
            bits = mode
        return bits & want == want

    def check(self, node: Node, want: int) -> None:
        if not self.may(node, want):
            raise _GuestErrno(errno.EACCES)

    def owns(self, node: Node) -> bool:
        """May change its mode and times (the owner, or root)."""
        return self.uid == 0 or self.uid == node.uid

    def sticky_ok(self, directory: Node, victim: Node) -> bool:
        """May remove or rename ``victim`` out of ``directory`` as far as its sticky bit says
        (``/tmp``: only the file's owner, the directory's or root)."""
        return not directory.mode & st.S_ISVTX or self.uid in (0, victim.uid, directory.uid)


class Counter:
    """The overlay's inode numbers and the bytes its files hold (ENOSPC past ``capacity``)."""

    def __init__(self, capacity: int, clock: Callable[[], int]) -> None:
        self.next_ino = 2
        self.capacity = capacity
        self.used = 0
        self.clock = clock

    def ino(self) -> int:
        self.next_ino += 1
        return self.next_ino - 1

    def grow(self, by: int) -> None:
        """Account for ``by`` more bytes (negative: freed); ENOSPC when they do not fit."""
        if by > 0 and self.used + by > self.capacity:
            raise _GuestErrno(errno.ENOSPC)
        self.used += by
