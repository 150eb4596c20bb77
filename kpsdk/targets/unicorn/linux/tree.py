"""The guest's file system as one tree, and Linux's path walk through it.

One tree per session, shared by every process of it (each has its own working directory):
the sysroot underneath, read-only, seen through an in-memory overlay
(:mod:`~kpsdk.targets.unicorn.linux.inodes`), host directories bound over guest directories
(:mod:`~kpsdk.targets.unicorn.linux.binds`), and what exists whatever the sysroot holds:
``/tmp`` (the sysroot's seen through the overlay, writable like any of its directories; an
empty one, writable by all and sticky, where it has none), ``/dev`` with kpsdk's devices, and
``/proc`` holding the process's own entry where the sysroot has no ``/proc``.

The walk is Linux's (fs/namei.c) with the root pinned, as a ``chroot``: ``..`` at the root
stays there, symbolic links are followed by kpsdk (an absolute target starts again at the
guest's root, never the host's), a trailing ``/`` names a directory.  Nothing of the host is
looked up but the sysroot's and the binds' own files.  The process's own ``/proc``
(``/proc/self``, ``/proc/thread-self``, ``/proc/PID``) is recognised on the way, however a
path reaches it, and never looked up on the host (with the host's root as the sysroot,
``/proc/self`` would be kpsdk's own Python process): the walk names it, the calls make it
(:mod:`~kpsdk.targets.unicorn.linux.calls.procself`).  So is every other emulated process's
``/proc/PID`` (:attr:`Tree.other_pid`; :attr:`Ref.pid` says whose); a number under ``/proc``
that is no emulated process's pid is ``ENOENT``, never a host process.
"""

from __future__ import annotations

import errno
import os
import stat as st
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from kpsdk.targets.unicorn.linux.binds import Bind, HostFds
from kpsdk.targets.unicorn.linux.inodes import (
    MAY_X,
    NAME_MAX,
    Counter,
    Cred,
    Dir,
    HostNode,
    MemDir,
    MemLink,
    MemNode,
    MemSpecial,
    Node,
    _GuestErrno,
    host_errno,
)

#: symbolic links followed in one path walk before ELOOP (Linux's MAXSYMLINKS, fs/namei.c)
MAX_SYMLINKS = 40
#: the longest path a call takes (PATH_MAX, including the NUL)
PATH_MAX = 4096
#: kpsdk's devices: name, major, minor (Linux's drivers/char/mem.c numbers; tty is 5, 0)
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))
#: the links of /dev every Linux system has (made by udev from /proc/self)
DEV_LINKS = (("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
             ("fd", "/proc/self/fd"))
#: what a target of /proc/self/fd/N is: its guest path, and the overlay inode itself when it is one
#: (reached through the link even once it has no name, as Linux's magic links are)
FdTarget = tuple[str, MemNode | None]


#: the inode numbers /proc's listing gives the emulated processes' directories (plus the pid)
PROC_PID_INO = 0x7F000000


class _Own:
    """Where a walk is inside the process's own /proc (no inode: the calls make its entries)."""


OWN = _Own()


class Ref:
    """What a path walk found: ``parts`` (the path with links followed), the directory
    ``parent`` holding its last name ``name``, and ``node``, what is there (None: nothing, for
    a call that makes it).  ``own``: what follows ``/proc/self/`` when the path is the
    process's own /proc.  ``last``: the path's last component as written, ``"norm"`` (a
    name), ``"dot"``, ``"dotdot"`` or ``"root"``, which Linux's calls that make or remove a
    name check; ``slash``: the path ended with ``/``.  ``pid``: with ``own``, the other
    emulated process whose ``/proc/PID`` it is (None: the process's own)."""

    __slots__ = ("parts", "parent", "name", "node", "own", "last", "slash", "pid")

    def __init__(self, parts: list[str], parent: Dir | None, name: str, node: Node | None, last: str,
                 slash: bool, own: str | None = None, pid: int | None = None) -> None:
        self.parts, self.parent, self.name, self.node = parts, parent, name, node
        self.own, self.last, self.slash, self.pid = own, last, slash, pid

    @property
    def path(self) -> str:
        return "/" + "/".join(self.parts)


def proc_fd_number(name: str) -> int | None:
    """The descriptor ``/proc/self/fd/NAME`` names, as Linux's ``name_to_int`` reads it: ASCII
    digits only (``²``, ``٣`` and ``+3`` are no number), no leading zero but in ``0`` itself,
    below 2**32; None for any other name (ENOENT)."""
    if not name or not name.isascii() or not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        return None
    n = int(name)
    return n if n < 1 << 32 else None


class Tree:
    """The session's file system: ``root`` (the sysroot, None: an empty tree) read-only under
    an overlay, the binds over it, kpsdk's ``/tmp``, ``/dev`` and ``/proc``."""

    def __init__(self, root: Path | None, own_pid: int | None = None,
                 binds: Sequence[tuple[Path, str, bool]] = (), cred: Cred | None = None,
                 clock: Callable[[], int] | None = None, capacity: int | None = None) -> None:
        self.root = Path(os.path.realpath(root)) if root is not None else None
        #: the process's pid: ``/proc/self``, ``/proc/thread-self`` and ``/proc/PID`` are its own
        self.own_pid = str(own_pid) if own_pid is not None else None
        #: where the link ``/proc/self/fd/N`` leads (set by the process): a file's guest path and,
        #: for a file of the overlay, the inode itself; None for kpsdk's pipes and a closed N
        self.fd_target: Callable[[int], FdTarget | None] = lambda fd: None
        #: whether a name under /proc is the pid of another emulated process (set by the kernel):
        #: its ``/proc/PID`` is made from that process, as the running one's is
        self.other_pid: Callable[[str], bool] = lambda name: False
        #: every emulated process's pid (set by the kernel): /proc's listing shows them
        self.pids: Callable[[], Iterable[int]] = lambda: [int(self.own_pid)] if self.own_pid is not None else []
        self.cred = cred if cred is not None else Cred()
        if capacity is None:  # as tmpfs: half the machine's memory
            capacity = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        self.counter = Counter(capacity, clock if clock is not None else time.time_ns)
        now = self.counter.clock()
        self.top = MemDir(self.counter.ino(), 0o755, 0, 0, now, lower=self.root)
        if self.root is not None:
            self._take_host(self.top, self.root)
        self.binds: list[Bind] = []
        #: the host descriptors the session's guest holds (its binds', its open host files')
        self.host_fds = HostFds()
        #: a host directory of kpsdk's own where overlay files are written for what must read
        #: them by path (execve), made when first needed (:meth:`.overlay.Sysroot.host`)
        self.private: Path | None = None
        if own_pid is not None and (self.root is None or not os.path.lexists(self.root / "proc")):
            self.top.entries["proc"] = MemDir(self.counter.ino(), 0o555, 0, 0, now, self.top, "proc")
        tmp = self.child(self.top, "tmp")  # the sysroot's, seen through the overlay (the caller's with "/")
        if not isinstance(tmp, MemDir):  # none (or a file, a link): an empty one, writable by all
            self.top.entries["tmp"] = MemDir(self.counter.ino(), 0o1777, 0, 0, now, self.top, "tmp")
        dev = MemDir(self.counter.ino(), 0o755, 0, 0, now, self.top, "dev")
        self.top.entries["dev"] = dev
        for name, major, minor in DEVICES:
            dev.entries[name] = MemSpecial(self.counter.ino(), st.S_IFCHR | 0o666, 0, 5 if name == "tty" else 0, now,
                                           os.makedev(major, minor), name)
        for name, target in DEV_LINKS:
            dev.entries[name] = MemLink(self.counter.ino(), 0, 0, now, target)
        dev.entries["shm"] = MemDir(self.counter.ino(), 0o1777, 0, 0, now, dev, "shm")
        self._count_subdirs(self.top)
        self._count_subdirs(dev)
        for host, guest, writable in binds:
            self.bind(host, guest, writable)

    def close(self) -> None:
        """Let go of the binds' host directories and any host file still open (the session ends)."""
        for b in self.binds:
            b.close()
        self.host_fds.close_all()

    # -- building --------------------------------------------------------------------------------

    def _take_host(self, d: MemDir, host: Path) -> None:
        """``d`` is the sysroot's directory ``host``: its metadata and link count."""
        try:
            s = os.lstat(host)
        except OSError as e:
            raise host_errno(e) from None
        d.copy_meta(s)
        d.host_nlink = d.nlink = s.st_nlink
        d.host_size = s.st_size, s.st_blocks
        d.dirty = False

    def _count_subdirs(self, d: MemDir) -> None:
        d.dirty = True
        d.nlink = self.dir_nlink(d)

    def bind(self, host: Path, guest: str, writable: bool) -> None:
        """Map host directory ``host`` at guest path ``guest``: its directories are made in the
        overlay where the sysroot lacks them, and links on the way followed, as ``mount``
        follows them.  Raises :class:`_GuestErrno` where it cannot be (a file on the way,
        another bind's directory)."""
        path = ""
        for name in [c for c in guest.split("/") if c not in ("", ".")]:
            if name == "..":
                raise _GuestErrno(errno.EINVAL)
            path += "/" + name
            ref = self.find(path, "/")
            if ref.node is None:
                parent = ref.parent
                if not isinstance(parent, MemDir):
                    raise _GuestErrno(errno.ENOTDIR)
                parent.entries[ref.name] = MemDir(self.counter.ino(), 0o755, 0, 0, self.counter.clock(), parent,
                                                  ref.name)
                parent.whiteouts.discard(ref.name)
                parent.dirty = True
                path = ref.path
            elif not isinstance(ref.node, MemDir):
                raise _GuestErrno(errno.ENOTDIR)  # a file, or another bind's directory
            else:
                path = ref.path
        d = self.top if not path else self.find(path, "/").node
        if not isinstance(d, MemDir) or d.mount is not None:
            raise _GuestErrno(errno.EBUSY)
        try:
            b = Bind(host, path or "/", writable, self.host_fds)
        except OSError as e:
            raise host_errno(e) from None
        d.mount = b
        self.binds.append(b)

    # -- looking up ------------------------------------------------------------------------------

    def enter(self, d: Node) -> Node:
        """What a directory is to a walk: the bind's root where one is mounted on it."""
        if isinstance(d, MemDir) and d.mount is not None:
            return d.mount.root()
        return d

    def child(self, d: Dir, name: str) -> Node | None:
        """The entry ``name`` of directory ``d`` (None: none).  A sysroot directory met for the
        first time gets its overlay directory, kept in ``d``; a sysroot file is its host file."""
        if len(os.fsencode(name)) > NAME_MAX:
            raise _GuestErrno(errno.ENAMETOOLONG)
        if isinstance(d, HostNode):
            assert d.bind is not None
            return d.bind.lookup(d.rel, name)
        node = d.entries.get(name)
        if node is not None or d.lower is None or name in d.whiteouts:
            return node
        host = d.lower / name
        try:
            s = os.lstat(host)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise host_errno(e) from None
        if not st.S_ISDIR(s.st_mode):
            return HostNode(host, s)
        sub = MemDir(0, 0, 0, 0, 0, d, name, lower=host)
        sub.copy_meta(s)
        sub.host_nlink = sub.nlink = s.st_nlink
        sub.host_size = s.st_size, s.st_blocks
        sub.dirty = False
        d.entries[name] = sub
        return sub

    def readlink(self, node: Node) -> str:
        """A link's target, as written."""
        if isinstance(node, MemLink):
            return node.target
        if isinstance(node, HostNode) and st.S_ISLNK(node.mode):
            if node.bind is not None:
                return node.bind.readlink(node)
            try:
                return os.readlink(node.path)
            except OSError as e:
                raise host_errno(e, errno.EINVAL) from None
        raise _GuestErrno(errno.EINVAL)

    def find(self, path: str, cwd: str, follow: bool = True) -> Ref:
        """Walk guest ``path`` (relative to guest directory ``cwd``), following every link on
        the way and the last one when ``follow``.  A missing last name is a :class:`Ref` whose
        node is None (its parent is where a call would make it); anything else missing is
        ENOENT.  Raises :class:`_GuestErrno` (ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, EACCES)."""
        if not path:
            raise _GuestErrno(errno.ENOENT)
        if len(path) >= PATH_MAX:
            raise _GuestErrno(errno.ENAMETOOLONG)
        written = [c for c in path.split("/") if c]
        tail = written[-1] if written else ""
        last = {".": "dot", "..": "dotdot", "": "root"}.get(tail, "norm")
        slash = path.endswith("/")
        directory = slash or last != "norm"
        follow = follow or directory
        todo = [c for c in (path if path.startswith("/") else f"{cwd}/{path}").split("/") if c]
        todo.reverse()
        done: list[str] = []
        stack: list[Node | _Own] = [self.enter(self.top)]
        links = 0
        own = self.own_pid
        cred = self.cred
        while todo:
            part = todo.pop()
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                    stack.pop()
                continue
            if own is not None and done == ["proc"] and part != own and part.isascii() and part.isdigit():
                if not self.other_pid(part):
                    raise _GuestErrno(errno.ENOENT)  # no such emulated process (the host's are not seen)
                done.append(part)  # another process's own /proc: made from it too, never the host's
                stack.append(OWN)
                continue
            if own is not None and (done == ["proc"] and part in ("self", "thread-self", own)
                                    or done[:2] == ["proc", own]):
                if done[2:] == ["task"] and part == own:  # /proc/PID/task/PID: the one thread is the process
                    done.pop()
                    stack.pop()
                    continue
                done.append(own if len(done) == 1 else part)  # the process's own: made, not the host's
                stack.append(OWN)
                number = proc_fd_number(part) if len(done) == 4 and done[2] == "fd" else None
                if number is not None and (todo or follow):
                    target = self.fd_target(number)
                    if target is not None:
                        links += 1
                        if links > MAX_SYMLINKS:
                            raise _GuestErrno(errno.ELOOP)
                        where, inode = target
                        if inode is not None and not todo:  # the open file itself, named or not
                            parts = [c for c in where.split("/") if c]
                            return Ref(parts, None, parts[-1] if parts else "", inode, last, slash)
                        done = []
                        stack = [self.enter(self.top)]
                        todo.extend(reversed([c for c in where.split("/") if c]))
                    elif todo:
                        raise _GuestErrno(errno.ENOTDIR)  # a pipe or the console: no directory
                continue
            d = stack[-1]
            if isinstance(d, _Own):
                done.append(part)
                stack.append(OWN)
                continue
            if not isinstance(d, MemDir | HostNode) or not st.S_ISDIR(d.mode):
                raise _GuestErrno(errno.ENOTDIR)
            if cred.uid and not cred.may(d, MAY_X):
                raise _GuestErrno(errno.EACCES)
            node = self.child(d, part)
            if node is None:
                if todo:
                    raise _GuestErrno(errno.ENOENT)
                return Ref([*done, part], d, part, None, last, slash)
            if st.S_ISLNK(node.mode) and (todo or follow):
                links += 1
                if links > MAX_SYMLINKS:
                    raise _GuestErrno(errno.ELOOP)
                dest = self.readlink(node)
                if not dest:
                    raise _GuestErrno(errno.ENOENT)
                if dest.startswith("/"):
                    done = []
                    stack = [self.enter(self.top)]
                todo.extend(reversed([c for c in dest.split("/") if c]))
                continue
            if (todo or directory) and not st.S_ISDIR(node.mode):
                raise _GuestErrno(errno.ENOTDIR)
            done.append(part)
            stack.append(self.enter(node))
        end = stack[-1]
        parent = stack[-2] if len(stack) > 1 else None
        name = done[-1] if done else ""
        if isinstance(end, _Own):
            return Ref(done, None, name, None, last, slash, own="/".join(done[2:]),
                       pid=int(done[1]) if done[1] != own else None)
        if own is not None and done[:2] == ["proc", own]:  # never: every step there is OWN
            raise _GuestErrno(errno.ENOENT)
        return Ref(done, parent if isinstance(parent, MemDir | HostNode) else None, name, end, last, slash)

    # -- what the calls ask of a directory ------------------------------------------------------

    def path_of(self, d: Node, fallback: str) -> str:
        """The guest path of directory ``d`` now (it may have been renamed since it was
        opened); ``fallback`` when it has none (removed, or not a directory of the overlay)."""
        if isinstance(d, HostNode) and d.bind is not None:
            return "/" + "/".join([*(c for c in d.bind.guest.split("/") if c), *d.rel])
        if not isinstance(d, MemDir):
            return fallback
        names = []
        at: MemDir | None = d
        while at is not None and at is not self.top:
            parent = at.parent
            if parent is None or parent.entries.get(at.name) is not at:
                return fallback
            names.append(at.name)
            at = parent
        return "/" + "/".join(reversed(names))

    def listing(self, d: Dir) -> list[tuple[str, int, int]]:
        """The names in directory ``d`` (``.`` and ``..`` not among them), each with its inode
        number and ``S_IFMT`` type: the overlay's over the sysroot's, whiteouts hidden, sorted
        by name so that every run lists them alike."""
        if isinstance(d, HostNode):
            assert d.bind is not None
            return sorted(d.bind.listing(d))
        names: dict[str, tuple[int, int]] = {}
        if d.lower is not None:
            try:
                with os.scandir(d.lower) as it:
                    for entry in it:
                        if entry.name in d.whiteouts:
                            continue
                        try:
                            kind = st.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
                        except OSError:
                            kind = 0
                        names[entry.name] = (entry.inode(), kind)
            except OSError as e:
                raise host_errno(e) from None
        for name, node in d.entries.items():
            names[name] = (node.ino, st.S_IFMT(node.mode))
        if self.own_pid is not None and isinstance(d, MemDir) and d.name == "proc" and d.parent is self.top:
            # /proc: the emulated processes' directories, never the host's (ps, pgrep, pidof list them)
            for name in [n for n in names if n.isascii() and n.isdigit()]:
                del names[name]
            for pid in self.pids():
                names[str(pid)] = (PROC_PID_INO + pid, st.S_IFDIR)
        return sorted((name, ino, kind) for name, (ino, kind) in names.items())

    def dir_nlink(self, d: MemDir) -> int:
        """A directory's link count: its name, its ``.`` and each subdirectory's ``..`` (the
        host's count for a sysroot directory nothing was changed in)."""
        if not d.dirty:
            return d.host_nlink
        return 2 + sum(1 for _, _, kind in self.listing(d) if kind == st.S_IFDIR)

    def stat(self, node: Node) -> dict[str, int]:
        """``struct stat`` values of ``node``."""
        values = node.stat()
        if isinstance(node, MemDir):
            values["st_nlink"] = self.dir_nlink(node)
        return values
