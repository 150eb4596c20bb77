"""Changing the guest's file system: what ``creat``, ``mkdir``, ``unlink``, ``rename``, ``link``,
``chmod``... do to the tree of :mod:`~kpsdk.targets.unicorn.linux.tree`.

One module, because every change to the tree (make, remove, rename, link, chmod) keeps
the same invariants together: copy-up, inode numbers, directory entries.

In the overlay every change is in memory and the host never sees it: a name made goes into
its directory's :class:`~kpsdk.targets.unicorn.linux.inodes.MemDir`, a sysroot name removed
leaves a whiteout, a sysroot file changed is copied up first (its bytes and metadata,
keeping its inode number), a sysroot directory renamed takes its host directory along.  In
a ``"rw"`` bind the change is the host's own (:class:`~kpsdk.targets.unicorn.linux.binds.Bind`);
in a ``"ro"`` one it is ``EROFS``, the only place that errno comes from.  A name never moves
between the overlay and a bind, nor between two binds (``EXDEV``: ``mv`` then copies).

The checks are Linux's, in Linux's order where a program can tell (fs/namei.c): ``EEXIST``,
``ENOENT``, ``ENOTDIR``, ``EISDIR``, ``ENOTEMPTY``, ``EBUSY`` for a mount point, ``EINVAL``
for a directory moved into itself, and the permission bits for a user other than root
(directory write and search, the sticky bit, the owner for ``chmod`` and times).
"""

from __future__ import annotations

import errno
import os
import stat as st
from pathlib import Path

from kpsdk.targets.unicorn.linux.binds import Bind
from kpsdk.targets.unicorn.linux.inodes import (
    MAY_R,
    MAY_W,
    MAY_X,
    Dir,
    HostNode,
    MemDir,
    MemFile,
    MemLink,
    MemNode,
    MemSpecial,
    Node,
    _GuestErrno,
    host_errno,
)
from kpsdk.targets.unicorn.linux.tree import DEVICES, Ref, Tree

#: utimensat's special nanoseconds (include/uapi/linux/stat.h)
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
#: renameat2's flags
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4


def bind_of(d: Dir | None) -> Bind | None:
    """The bind a directory is in (None: the overlay)."""
    return d.bind if isinstance(d, HostNode) else None


def mount_root(node: Node | None) -> bool:
    """Whether ``node`` is a bind's root (a mount point: EBUSY to remove or move)."""
    return isinstance(node, HostNode) and node.bind is not None and not node.rel


class Sysroot(Tree):
    """The session's file system with the calls that change it."""

    # -- the calls' shared checks -------------------------------------------------------------

    def may_change(self, parent: Dir | None) -> None:
        """May a name be made in or removed from ``parent``: EROFS in a read-only bind, EACCES
        without write and search permission."""
        if parent is None:
            raise _GuestErrno(errno.EACCES)  # the process's own /proc, an inode without a directory
        b = bind_of(parent)
        if b is not None and not b.writable:
            raise _GuestErrno(errno.EROFS)
        self.cred.check(parent, MAY_W | MAY_X)

    def may_remove(self, parent: Dir, victim: Node) -> None:
        self.may_change(parent)
        if not self.cred.sticky_ok(parent, victim):
            raise _GuestErrno(errno.EPERM)

    def touch(self, *nodes: Node | None, data: bool = True) -> None:
        """A change: ctime (and mtime, ``data``) of the overlay's ``nodes`` become now."""
        now = self.counter.clock()
        for node in nodes:
            if isinstance(node, MemNode):
                node.ctime = now
                if data:
                    node.mtime = now

    @staticmethod
    def _name_made(ref: Ref) -> None:
        """The checks of a call that makes ``ref``'s name (Linux's filename_create)."""
        if ref.own is not None:
            raise _GuestErrno(errno.EACCES if ref.node is not None or ref.own else errno.EEXIST)
        if ref.last != "norm" or ref.node is not None:
            raise _GuestErrno(errno.EEXIST)

    def _add(self, parent: MemDir, name: str, node: MemNode) -> None:
        parent.entries[name] = node
        parent.whiteouts.discard(name)
        parent.dirty = True
        if isinstance(node, MemDir):
            node.parent, node.name = parent, name
        self.touch(parent)

    def _drop(self, parent: MemDir, name: str) -> None:
        """``name`` leaves ``parent``: a whiteout hides the sysroot's entry of that name."""
        parent.entries.pop(name, None)
        if parent.lower is not None:
            parent.whiteouts.add(name)
        parent.dirty = True
        self.touch(parent)

    def _owner(self, parent: Dir) -> tuple[int, int]:
        """Who owns a new file: the process's user, and its group, or the directory's when the
        directory is set-group-ID."""
        gid = parent.gid if parent.mode & st.S_ISGID else self.cred.gid
        return self.cred.uid, gid

    # -- copy-up -------------------------------------------------------------------------------

    def copy_up(self, parent: Dir | None, name: str, node: Node) -> Node:
        """The overlay's own copy of sysroot file ``node`` (named ``name`` in ``parent``), made
        before its first change: its bytes, target or kind, its metadata and inode number.  A
        bind's file and a file of the overlay are themselves."""
        if not isinstance(node, HostNode) or node.bind is not None:
            return node
        if not isinstance(parent, MemDir):
            raise _GuestErrno(errno.EROFS)  # never: a sysroot file is reached through its directory
        mode, now = node.mode, self.counter.clock()
        copy: MemNode
        if st.S_ISREG(mode):
            data = self._host_bytes(node.path)
            self.counter.grow(len(data))
            copy = MemFile(0, mode, 0, 0, now, data)
        elif st.S_ISLNK(mode):
            copy = MemLink(0, 0, 0, now, self.readlink(node))
        else:
            copy = MemSpecial(0, mode, 0, 0, now, node.st.st_rdev)
        copy.copy_meta(node.st)
        parent.entries[name] = copy
        return copy

    def _host_bytes(self, host: Path) -> bytes:
        """A sysroot file's bytes, read without following a link, checked to lie in the sysroot."""
        if self.root is None or not self.inside(host):
            raise _GuestErrno(errno.EACCES)
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise host_errno(e) from None
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as e:
            raise host_errno(e) from None
        finally:
            os.close(fd)

    # -- making names ----------------------------------------------------------------------------

    def create(self, ref: Ref, mode: int) -> MemNode | HostNode:
        """``open(O_CREAT)`` of a missing name: a new empty regular file of ``mode`` (umask
        applied by the caller).  A bind's file is made on the host."""
        parent = ref.parent
        if ref.slash:
            raise _GuestErrno(errno.EISDIR)
        self.may_change(parent)
        assert parent is not None
        if isinstance(parent, HostNode):
            assert parent.bind is not None
            os.close(parent.bind.create(parent.rel, ref.name, mode & 0o7777, os.O_WRONLY | os.O_EXCL))
            made = parent.bind.lookup(parent.rel, ref.name)
            if made is None:
                raise _GuestErrno(errno.ENOENT)
            return made
        uid, gid = self._owner(parent)
        node = MemFile(self.counter.ino(), mode, uid, gid, self.counter.clock())
        self._add(parent, ref.name, node)
        return node

    def unnamed(self, d: Dir, mode: int) -> MemFile:
        """``O_TMPFILE``: a file in directory ``d``'s file system with no name (yet)."""
        if isinstance(d, HostNode):
            raise _GuestErrno(errno.EOPNOTSUPP if d.bind is not None and d.bind.writable else errno.EROFS)
        self.cred.check(d, MAY_W | MAY_X)
        uid, gid = self._owner(d)
        node = MemFile(self.counter.ino(), mode, uid, gid, self.counter.clock())
        node.nlink = 0
        return node

    def mkdir(self, ref: Ref, mode: int) -> None:
        self._name_made(ref)
        parent = ref.parent
        self.may_change(parent)
        if isinstance(parent, HostNode):
            assert parent.bind is not None
            parent.bind.mkdir(parent.rel, ref.name, mode & 0o7777)
            return
        assert parent is not None
        uid, gid = self._owner(parent)
        mode &= 0o1777
        if parent.mode & st.S_ISGID:
            mode |= st.S_ISGID
        self._add(parent, ref.name, MemDir(self.counter.ino(), mode, uid, gid, self.counter.clock()))

    def mknod(self, ref: Ref, mode: int, rdev: int) -> None:
        """A FIFO, a regular file, a socket's name, or (root only, as CAP_MKNOD) a device."""
        kind = st.S_IFMT(mode) or st.S_IFREG
        if kind not in (st.S_IFREG, st.S_IFIFO, st.S_IFSOCK, st.S_IFCHR, st.S_IFBLK):
            raise _GuestErrno(errno.EINVAL)
        self._name_made(ref)
        if ref.slash:
            raise _GuestErrno(errno.ENOENT)
        if kind in (st.S_IFCHR, st.S_IFBLK) and self.cred.uid != 0:
            raise _GuestErrno(errno.EPERM)
        parent = ref.parent
        self.may_change(parent)
        if isinstance(parent, HostNode):
            assert parent.bind is not None
            if kind in (st.S_IFCHR, st.S_IFBLK, st.S_IFSOCK):
                raise _GuestErrno(errno.EPERM)  # no device or socket node is made on the host
            parent.bind.mknod(parent.rel, ref.name, kind | (mode & 0o7777))
            return
        assert parent is not None
        uid, gid = self._owner(parent)
        now = self.counter.clock()
        node: MemNode
        if kind == st.S_IFREG:
            node = MemFile(self.counter.ino(), mode, uid, gid, now)
        else:
            device = next((name for name, major, minor in DEVICES if os.makedev(major, minor) == rdev), None)
            node = MemSpecial(self.counter.ino(), kind | (mode & 0o7777), uid, gid, now,
                              rdev if kind in (st.S_IFCHR, st.S_IFBLK) else 0, device if kind == st.S_IFCHR else None)
        self._add(parent, ref.name, node)

    def symlink(self, ref: Ref, target: str) -> None:
        self._name_made(ref)
        if not target:
            raise _GuestErrno(errno.ENOENT)
        if ref.slash:
            raise _GuestErrno(errno.ENOENT)
        parent = ref.parent
        self.may_change(parent)
        if isinstance(parent, HostNode):
            assert parent.bind is not None
            parent.bind.symlink(parent.rel, ref.name, target)
            return
        assert parent is not None
        uid, gid = self._owner(parent)
        self._add(parent, ref.name, MemLink(self.counter.ino(), uid, gid, self.counter.clock(), target))

    def link(self, old: Ref, new: Ref, old_parent_known: bool = True) -> None:
        """A second name ``new`` for ``old``'s inode (the same inode: its link count grows)."""
        node = old.node
        if node is None:
            raise _GuestErrno(errno.ENOENT)
        if st.S_ISDIR(node.mode):
            raise _GuestErrno(errno.EPERM)
        self._name_made(new)
        if new.slash:
            raise _GuestErrno(errno.ENOENT)
        if bind_of(old.parent) is not bind_of(new.parent) or (isinstance(node, HostNode) and node.bind is not None
                                                              and bind_of(new.parent) is not node.bind):
            raise _GuestErrno(errno.EXDEV)
        self.may_change(new.parent)
        cred = self.cred
        if cred.uid and cred.uid != node.uid and not (st.S_ISREG(node.mode) and cred.may(node, MAY_R | MAY_W)):
            raise _GuestErrno(errno.EPERM)  # fs.protected_hardlinks, on in Debian
        parent = new.parent
        if isinstance(parent, HostNode):
            assert parent.bind is not None and isinstance(node, HostNode)
            parent.bind.link(node.rel, (*parent.rel, new.name))
            return
        assert parent is not None
        mem = self.copy_up(old.parent, old.name, node)
        assert isinstance(mem, MemNode)
        if mem.nlink == 0 and isinstance(mem, MemFile) and not old_parent_known:
            self.counter.grow(len(mem.data))  # an O_TMPFILE file given a name: its bytes count again
        mem.nlink += 1
        self._add(parent, new.name, mem)
        self.touch(mem, data=False)

    # -- removing names ----------------------------------------------------------------------------

    def unlink(self, ref: Ref) -> None:
        if ref.own is not None:
            raise _GuestErrno(errno.EACCES)
        node = ref.node
        if ref.last != "norm":
            raise _GuestErrno(errno.EISDIR)
        if node is None:
            raise _GuestErrno(errno.ENOENT)
        if st.S_ISDIR(node.mode):
            raise _GuestErrno(errno.EISDIR)
        parent = ref.parent
        if parent is None:
            raise _GuestErrno(errno.EBUSY)  # never: only the top has no directory, and it is no file
        self.may_remove(parent, node)
        if isinstance(parent, HostNode):
            assert parent.bind is not None
            parent.bind.remove(parent.rel, ref.name, False)
            return
        self._drop(parent, ref.name)
        if isinstance(node, MemNode):
            node.nlink -= 1
            self.touch(node, data=False)
            if not node.nlink and isinstance(node, MemFile):
                self.counter.grow(-len(node.data))

    def rmdir(self, ref: Ref) -> None:
        if ref.own is not None:
            raise _GuestErrno(errno.EACCES)
        if ref.last == "dot":
            raise _GuestErrno(errno.EINVAL)
        if ref.last == "dotdot":
            raise _GuestErrno(errno.ENOTEMPTY)
        node = ref.node
        if ref.last == "root" or mount_root(node) or node is self.top:
            raise _GuestErrno(errno.EBUSY)
        if node is None:
            raise _GuestErrno(errno.ENOENT)
        if not st.S_ISDIR(node.mode):
            raise _GuestErrno(errno.ENOTDIR)
        parent = ref.parent
        if parent is None:
            raise _GuestErrno(errno.EBUSY)
        self.may_remove(parent, node)
        if isinstance(parent, HostNode):
            assert parent.bind is not None
            parent.bind.remove(parent.rel, ref.name, True)
            return
        assert isinstance(node, MemDir)
        if self.listing(node):
            raise _GuestErrno(errno.ENOTEMPTY)
        self._drop(parent, ref.name)
        node.nlink = 0
        node.parent = None

    # -- renaming ----------------------------------------------------------------------------------

    def rename(self, old: Ref, new: Ref, flags: int = 0) -> None:
        """``renameat2``: ``old``'s name becomes ``new``'s (replacing what is there unless
        RENAME_NOREPLACE; the two swapped with RENAME_EXCHANGE)."""
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) or \
                flags & RENAME_EXCHANGE and flags & (RENAME_NOREPLACE | RENAME_WHITEOUT):
            raise _GuestErrno(errno.EINVAL)
        if flags & RENAME_WHITEOUT:
            raise _GuestErrno(errno.EPERM)  # a whiteout device node: CAP_MKNOD, and no use to a program
        if old.own is not None or new.own is not None:
            raise _GuestErrno(errno.EACCES if old.own is not None and old.own else errno.EXDEV)
        if old.last != "norm":
            raise _GuestErrno(errno.EBUSY)
        if new.last != "norm":
            raise _GuestErrno(errno.EEXIST if flags & RENAME_NOREPLACE else errno.EBUSY)
        node, there = old.node, new.node
        if node is None:
            raise _GuestErrno(errno.ENOENT)
        if flags & RENAME_NOREPLACE and there is not None:
            raise _GuestErrno(errno.EEXIST)
        if flags & RENAME_EXCHANGE and there is None:
            raise _GuestErrno(errno.ENOENT)
        a, b = old.parent, new.parent
        if a is None or b is None:
            raise _GuestErrno(errno.EBUSY)
        if bind_of(a) is not bind_of(b):
            raise _GuestErrno(errno.EXDEV)
        if old.slash and not st.S_ISDIR(node.mode) or new.slash and there is None and not st.S_ISDIR(node.mode):
            raise _GuestErrno(errno.ENOTDIR)
        if there is node or (isinstance(node, HostNode) and isinstance(there, HostNode)
                             and (node.st.st_dev, node.st.st_ino) == (there.st.st_dev, there.st.st_ino)):
            return  # the same inode: nothing to do, as Linux
        if mount_root(node) or mount_root(there):
            raise _GuestErrno(errno.EBUSY)
        if st.S_ISDIR(node.mode):
            self._not_inside(node, b)
            if there is not None and not flags & RENAME_EXCHANGE:
                if not st.S_ISDIR(there.mode):
                    raise _GuestErrno(errno.ENOTDIR)
                if self._has_entries(there):
                    raise _GuestErrno(errno.ENOTEMPTY)
        elif there is not None and st.S_ISDIR(there.mode) and not flags & RENAME_EXCHANGE:
            raise _GuestErrno(errno.EISDIR)
        if there is not None and st.S_ISDIR(there.mode) and flags & RENAME_EXCHANGE:
            self._not_inside(there, a)
        self.may_remove(a, node)
        if there is not None:
            self.may_remove(b, there)
        else:
            self.may_change(b)
        if isinstance(a, HostNode):
            assert a.bind is not None and isinstance(b, HostNode)
            a.bind.rename((*a.rel, old.name), (*b.rel, new.name), exchange=bool(flags & RENAME_EXCHANGE),
                          noreplace=bool(flags & RENAME_NOREPLACE))
            return
        assert isinstance(a, MemDir) and isinstance(b, MemDir)
        moved = self.copy_up(a, old.name, node)
        assert isinstance(moved, MemNode)
        if flags & RENAME_EXCHANGE:
            assert there is not None
            other = self.copy_up(b, new.name, there)
            assert isinstance(other, MemNode)
            self._add(b, new.name, moved)
            self._add(a, old.name, other)
            self.touch(moved, other, data=False)
            return
        if there is not None:
            if isinstance(there, MemNode):
                there.nlink = 0 if isinstance(there, MemDir) else there.nlink - 1
                if isinstance(there, MemFile) and not there.nlink:
                    self.counter.grow(-len(there.data))
                if isinstance(there, MemDir):
                    there.parent = None
        self._drop(a, old.name)
        self._add(b, new.name, moved)
        self.touch(moved, data=False)

    def _not_inside(self, d: Node, target: Dir) -> None:
        """EINVAL when directory ``target`` is ``d`` or under it (a directory moved into itself)."""
        if isinstance(d, HostNode) and isinstance(target, HostNode):  # in one bind: by their paths in it
            if target.rel[:len(d.rel)] == d.rel:
                raise _GuestErrno(errno.EINVAL)
            return
        at: Node | None = target
        while isinstance(at, MemDir):
            if at is d:
                raise _GuestErrno(errno.EINVAL)
            at = at.parent

    def _has_entries(self, d: Node) -> bool:
        if isinstance(d, MemDir):
            return bool(self.listing(d))
        return isinstance(d, HostNode) and bool(self.listing(d))

    # -- attributes --------------------------------------------------------------------------------

    def _changeable(self, ref: Ref) -> Node:
        """The node a chmod, chown, utimes or truncate changes: copied up when of the sysroot;
        EROFS in a read-only bind."""
        if ref.own is not None:
            raise _GuestErrno(errno.EPERM)
        node = ref.node
        if node is None:
            raise _GuestErrno(errno.ENOENT)
        if isinstance(node, HostNode) and node.bind is not None and not node.bind.writable:
            raise _GuestErrno(errno.EROFS)
        return node

    def chmod(self, ref: Ref, mode: int) -> None:
        node = self._changeable(ref)
        if not self.cred.owns(node):
            raise _GuestErrno(errno.EPERM)
        if st.S_ISLNK(node.mode):
            raise _GuestErrno(errno.EOPNOTSUPP)  # fchmodat(AT_SYMLINK_NOFOLLOW) of a link
        mode &= 0o7777
        if self.cred.uid and node.gid not in self.cred.groups:
            mode &= ~st.S_ISGID  # Linux drops set-group-ID for a group the user is not in
        if isinstance(node, HostNode) and node.bind is not None:
            node.bind.setattr(node, mode=mode)
            return
        mem = self.copy_up(ref.parent, ref.name, node)
        assert isinstance(mem, MemNode)
        mem.mode = st.S_IFMT(mem.mode) | mode
        self.touch(mem, data=False)

    def chown(self, ref: Ref, uid: int, gid: int) -> None:
        """chown (-1: unchanged).  Root may give anything to anyone; a user may only give a file
        it owns to a group it is in (Linux's chown_ok/chgrp_ok)."""
        node = self._changeable(ref)
        cred = self.cred
        new_uid = node.uid if uid in (-1, 0xFFFFFFFF) else uid
        new_gid = node.gid if gid in (-1, 0xFFFFFFFF) else gid
        if cred.uid and (new_uid != node.uid or cred.uid != node.uid or
                         (new_gid != node.gid and new_gid not in cred.groups)):
            raise _GuestErrno(errno.EPERM)
        if isinstance(node, HostNode) and node.bind is not None:
            node.bind.setattr(node, owner=(uid, gid))
            return
        mem = self.copy_up(ref.parent, ref.name, node)
        assert isinstance(mem, MemNode)
        mem.uid, mem.gid = new_uid, new_gid
        if not st.S_ISDIR(mem.mode):
            if mem.mode & (st.S_ISUID | st.S_ISGID) and (uid not in (-1, 0xFFFFFFFF) or gid not in (-1, 0xFFFFFFFF)):
                mem.mode &= ~st.S_ISUID
                if mem.mode & st.S_IXGRP:
                    mem.mode &= ~st.S_ISGID
        self.touch(mem, data=False)

    def utimes(self, ref: Ref, atime: int, mtime: int, explicit: bool) -> None:
        """utimensat: times in nanoseconds or UTIME_NOW/UTIME_OMIT; ``explicit``: the program gave
        times (only the owner may), else now (anyone who may write it)."""
        node = self._changeable(ref)
        cred = self.cred
        if not cred.owns(node) and (explicit or not cred.may(node, MAY_W)):
            raise _GuestErrno(errno.EPERM if explicit else errno.EACCES)
        now = self.counter.clock()
        if isinstance(node, HostNode) and node.bind is not None and node.rel:  # the host's times now, not at open
            node = node.bind.lookup(node.rel[:-1], node.rel[-1]) or node
        old = node.stat()
        a = old["st_atime"] * 10**9 + old["st_atime_nsec"] if atime == UTIME_OMIT else now if atime == UTIME_NOW \
            else atime
        m = old["st_mtime"] * 10**9 + old["st_mtime_nsec"] if mtime == UTIME_OMIT else now if mtime == UTIME_NOW \
            else mtime
        if isinstance(node, HostNode) and node.bind is not None:
            node.bind.setattr(node, times=(a, m))
            return
        mem = self.copy_up(ref.parent, ref.name, node)
        assert isinstance(mem, MemNode)
        mem.atime, mem.mtime, mem.ctime = a, m, now

    def truncate(self, ref: Ref, size: int) -> MemFile | HostNode:
        """truncate(2) by path."""
        node = self._changeable(ref)
        if st.S_ISDIR(node.mode):
            raise _GuestErrno(errno.EISDIR)
        if not st.S_ISREG(node.mode):
            raise _GuestErrno(errno.EINVAL)
        self.cred.check(node, MAY_W)
        if size < 0:
            raise _GuestErrno(errno.EINVAL)
        if isinstance(node, HostNode) and node.bind is not None:
            node.bind.setattr(node, size=size)
            return node
        mem = self.copy_up(ref.parent, ref.name, node)
        assert isinstance(mem, MemFile)
        self.resize(mem, size)
        return mem

    def resize(self, f: MemFile, size: int) -> None:
        """A file of the overlay becomes ``size`` bytes long (zeros added)."""
        grow = size - len(f.data)
        self.counter.grow(grow)
        if grow > 0:
            f.data.extend(bytes(grow))
        else:
            del f.data[size:]
        self.touch(f)

    # -- the older API: host paths of sysroot files ---------------------------------------------

    def walk(self, path: str, cwd: str, follow: bool = True) -> list[str]:
        """The components of ``path`` once its links are followed (ENOENT when it is missing)."""
        ref = self.find(path, cwd, follow)
        if ref.node is None and ref.own is None:
            raise _GuestErrno(errno.ENOENT)
        return ref.parts

    def own(self, parts: list[str]) -> str | None:
        """What follows ``/proc/self/`` where ``parts`` are the process's own ``/proc`` entry."""
        if self.own_pid is not None and parts[:2] == ["proc", self.own_pid]:
            return "/".join(parts[2:])
        return None

    def resolve(self, path: str, cwd: str, follow: bool = True) -> Path:
        """The host file behind guest ``path``: a sysroot or bind file (ld.so, the loader kpsdk
        maps); ENOENT for what has no host file (the overlay's own, the process's /proc)."""
        ref = self.find(path, cwd, follow)
        if isinstance(ref.node, HostNode):
            return ref.node.path
        if isinstance(ref.node, MemDir) and ref.node.lower is not None:
            return ref.node.lower  # a sysroot directory
        raise _GuestErrno(errno.ENOENT)

    def host(self, parts: list[str]) -> Path:
        """A host file holding what ``parts`` (a walk's) names, for what must read it by path
        (``execve`` loads a program and reads a script's ``#!`` line): a sysroot or bind file
        itself; a file of the overlay written to a session-private host directory (mode 0700,
        removed at the session's end; the guest never sees it), with its mode; ENOENT for what
        has no bytes (the process's own /proc, a directory of the overlay)."""
        if self.own(parts) is not None:
            raise _GuestErrno(errno.ENOENT)
        node = self.find("/" + "/".join(parts), "/").node
        if isinstance(node, HostNode):
            return node.path
        if isinstance(node, MemDir) and node.lower is not None:
            return node.lower
        if not isinstance(node, MemFile):
            raise _GuestErrno(errno.ENOENT if node is None else errno.EACCES)
        return self._materialized(node)

    def _materialized(self, node: MemFile) -> Path:
        import tempfile

        if self.private is None:
            import shutil
            import weakref

            self.private = Path(tempfile.mkdtemp(prefix="kpsdk-overlay-"))
            weakref.finalize(self, shutil.rmtree, self.private, True)  # a session never closed, too
        path = self.private / f"{node.ino}-{node.mtime}-{len(node.data)}"
        if not path.exists():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    view = memoryview(bytes(node.data))
                    while view:
                        view = view[os.write(fd, view):]
                    os.fchmod(fd, node.mode & 0o777)
                finally:
                    os.close(fd)
            except OSError as e:
                raise host_errno(e) from None
        return path

    def close(self) -> None:
        super().close()
        if self.private is not None:
            import shutil

            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None

    def inside(self, host: Path) -> bool:
        """``host`` (already resolved) is the sysroot or under it: defence in depth against
        a link changed between the walk and the open."""
        if self.root is None:
            return False
        real = Path(os.path.realpath(host))
        return real == self.root or self.root in real.parents

