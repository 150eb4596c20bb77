"""Files and descriptors: opening, closing, duplicating, pipes, directories, links, the working directory.

Paths are walked in the session's file system (:mod:`kpsdk.targets.unicorn.linux.tree`), or
end in the process's own /proc (:mod:`.procself`).  ``open`` makes a file where ``O_CREAT``
asks, copies a sysroot file up into the overlay when it is opened for writing, and gives an
:class:`~kpsdk.targets.unicorn.linux.files.OpenFile` of the right kind: a host descriptor for
a sysroot file read or a bind's file, the inode itself for the overlay's files, directories,
devices and FIFOs.  Making and removing names is :mod:`.names`; moving bytes, :mod:`.rw`.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import struct

from kpsdk.targets.unicorn.linux import structs
from kpsdk.targets.unicorn.linux.calls.core import AT_FDCWD
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.paths import PathCalls
from kpsdk.targets.unicorn.linux.files import (
    O_ACCMODE,
    O_APPEND,
    O_CLOEXEC,
    O_CREAT,
    O_EXCL,
    O_NOCTTY,
    O_PATH,
    O_TMPFILE_BIT,
    O_TRUNC,
    OpenFile,
    _GuestErrno,
    release,
)
from kpsdk.targets.unicorn.linux.inodes import MAY_R, MAY_W, MAY_X, HostNode, MemDir, MemFile, MemSpecial, Node
from kpsdk.targets.unicorn.linux.pipes import Pipe
from kpsdk.targets.unicorn.linux.tree import Ref
from kpsdk.targets.unicorn.linux.waits import _Block

F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 3, 4, 1030
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
FD_CLOEXEC = 1
#: pipe2's O_DIRECT (packet mode): accepted, the pipe stays a byte stream
O_DIRECT_PIPE = 0o40000
#: record locks: F_GETLK, F_SETLK, F_SETLKW, their 64-bit forms on 32-bit arches, and the OFD ones
F_GETLKS, F_SETLKS = frozenset({5, 12, 36}), frozenset({6, 7, 13, 14, 37, 38})
F_UNLCK = 2
#: the kinds that are kpsdk's pipes (stdin and the console are pipes under qemu-user too)
PIPES = ("stdin", "console", "pipe_r", "pipe_w", "fifo")


class FsCalls(PathCalls):
    """The calls on paths and descriptors (not their bytes: :mod:`.rw`)."""

    # -- opening and closing ------------------------------------------------------------------

    def _open(self, dirfd: int, path_addr: int, flags: int, mode: int = 0) -> int:
        flags = self.abi.generic_flags(flags, self.abi.open_flags)  # MIPS's bits: the generic ones
        path = self.string(path_addr)
        bits = self.oflags
        if flags & O_TMPFILE_BIT:
            f = self._open_tmpfile(dirfd, path, flags, mode)
        else:
            nofollow = bool(flags & bits.nofollow) or flags & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL
            ref = self.lookup(dirfd, path, follow=not nofollow)
            f = self.proc_of(ref).open_own(ref.own, path, flags) if ref.own is not None \
                else self.open_ref(ref, flags, mode)
        try:
            return self.fds.install(f, cloexec=bool(flags & self.o_cloexec))
        except _GuestErrno:
            if not f.refs:  # not a description another descriptor shares (/proc/self/fd/N)
                release(f)
            raise

    def _open_tmpfile(self, dirfd: int, path: str, flags: int, mode: int) -> OpenFile:
        """``O_TMPFILE``: an unnamed file in the directory ``path`` (linkat gives it a name)."""
        if not flags & self.oflags.directory or flags & O_ACCMODE not in (os.O_WRONLY, os.O_RDWR):
            raise _GuestErrno(errno.EINVAL)
        ref = self.lookup(dirfd, path)
        if ref.node is None or ref.own is not None:
            raise _GuestErrno(errno.ENOENT)
        if not isinstance(ref.node, MemDir | HostNode) or not statmod.S_ISDIR(ref.node.mode):
            raise _GuestErrno(errno.ENOTDIR)
        node = self.root.unnamed(ref.node, mode & ~self.umask & 0o7777)
        where = ref.path.rstrip("/")
        return OpenFile("mem", path=f"{where}/#{node.ino}", node=node, flags=self._kept(flags))

    def _kept(self, flags: int) -> int:
        """What F_GETFL shows of the open flags: not the ones open alone uses; O_LARGEFILE always
        (64-bit kernels force it, 32-bit glibc asks for it)."""
        bits = self.oflags
        return (flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | O_CLOEXEC | O_TMPFILE_BIT | bits.directory
                          | bits.nofollow)) | bits.largefile

    def open_ref(self, ref: Ref, flags: int, mode: int) -> OpenFile:
        """Open what ``ref`` names (made with ``O_CREAT`` where missing): Linux's checks, in its
        order (do_last, may_open)."""
        bits = self.oflags
        acc = flags & O_ACCMODE
        write = acc in (os.O_WRONLY, os.O_RDWR)
        node: Node | None = ref.node
        if flags & O_PATH:
            if node is None:
                raise _GuestErrno(errno.ENOENT)
            if flags & bits.directory and not statmod.S_ISDIR(node.mode):
                raise _GuestErrno(errno.ENOTDIR)
            return OpenFile("path", path=ref.path, node=node, flags=flags & (O_PATH | bits.largefile))
        if node is None:
            if not flags & O_CREAT:
                raise _GuestErrno(errno.ENOENT)
            if flags & bits.directory:
                raise _GuestErrno(errno.EINVAL if not ref.slash else errno.EISDIR)
            node = self.root.create(ref, mode & ~self.umask & 0o7777)
            return self._opened(ref, node, flags, write)
        if flags & O_CREAT and flags & O_EXCL:
            raise _GuestErrno(errno.EEXIST)
        if statmod.S_ISLNK(node.mode):
            raise _GuestErrno(errno.ELOOP)
        if statmod.S_ISDIR(node.mode):
            if flags & O_CREAT or write or acc == O_ACCMODE:
                raise _GuestErrno(errno.EISDIR)
        elif flags & bits.directory:
            raise _GuestErrno(errno.ENOTDIR)
        if acc == O_ACCMODE and not statmod.S_ISDIR(node.mode):
            raise _GuestErrno(errno.EINVAL)
        cred = self.root.cred
        if acc != os.O_WRONLY:
            cred.check(node, MAY_R)
        if write or flags & O_TRUNC and statmod.S_ISREG(node.mode):
            cred.check(node, MAY_W)
            if isinstance(node, HostNode) and node.bind is not None and not node.bind.writable:
                raise _GuestErrno(errno.EROFS)
        if statmod.S_ISREG(node.mode) and (write or flags & O_TRUNC):
            node = self.root.copy_up(ref.parent, ref.name, node)
            if flags & O_TRUNC and isinstance(node, MemFile):
                self.root.resize(node, 0)
        return self._opened(ref, node, flags, write)

    def _opened(self, ref: Ref, node: Node, flags: int, write: bool) -> OpenFile:
        """The description of ``node``, opened: a host descriptor for a host file, the inode
        for the overlay's."""
        kept = self._kept(flags)
        path = ref.path
        mode = node.mode
        if statmod.S_ISDIR(mode):
            return OpenFile("dir", path=path, node=node, flags=kept)
        if isinstance(node, HostNode):
            host_flags = flags & O_ACCMODE
            if node.bind is not None:
                if write:
                    host_flags |= flags & (O_APPEND | O_TRUNC)
                fd = node.bind.open(node, host_flags)
            else:
                if not self.root.inside(node.path):
                    raise _GuestErrno(errno.EACCES)
                try:
                    fd = os.open(node.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
                except OSError as e:
                    raise _GuestErrno(e.errno or errno.EACCES) from None
            return OpenFile("host", path=path, fd=self.root.host_fds.add(fd), flags=kept, host=node.path, node=node,
                            host_fds=self.root.host_fds)
        if isinstance(node, MemFile):
            return OpenFile("mem", path=path, node=node, flags=kept)
        if isinstance(node, MemSpecial):
            if statmod.S_ISFIFO(mode):
                return self._open_fifo(node, path, kept)
            if statmod.S_ISCHR(mode) and node.device == "null":
                return OpenFile("null", path=path, node=node, flags=kept)
            if statmod.S_ISCHR(mode) and node.device not in (None, "tty"):
                return OpenFile("dev", path=path, node=node, flags=kept)
        raise _GuestErrno(errno.ENXIO)  # /dev/tty without a terminal, a socket's name, a device kpsdk lacks

    def _open_fifo(self, node: MemSpecial, path: str, flags: int) -> OpenFile:
        """A named pipe: O_RDWR holds both ends and never waits; O_RDONLY waits for a writer and
        O_WRONLY for a reader (O_NONBLOCK: a reader goes on, a writer gets ENXIO).  A waiting
        open sleeps on the pipe's queues, which an end opened elsewhere wakes; run again, it
        checks again before it takes its end."""
        if node.pipe is None:
            node.pipe = Pipe()
        fifo = node.pipe
        acc = flags & O_ACCMODE
        reader, writer = acc in (os.O_RDONLY, os.O_RDWR), acc in (os.O_WRONLY, os.O_RDWR)
        if acc == os.O_WRONLY and not fifo.readers:
            if flags & self.o_nonblock:
                raise _GuestErrno(errno.ENXIO)
            raise _Block([fifo.writable])
        if acc == os.O_RDONLY and not fifo.writers and not flags & self.o_nonblock:
            raise _Block([fifo.readable])
        if reader:
            fifo.open_end(False)
            fifo.writable.wake()  # a writer waiting in open may go on
        if writer:
            fifo.open_end(True)
            fifo.readable.wake()  # a reader waiting in open may go on
        return OpenFile("fifo", path=path, node=node, flags=flags, fifo=fifo, ends=(reader, writer))

    @syscall("open", "path oflags")
    def sys_open(self, path: int, flags: int, mode: int, *_: int) -> int:
        return self._open(AT_FDCWD, path, flags, mode)

    @syscall("openat", "dirfd path oflags")
    def sys_openat(self, dirfd: int, path: int, flags: int, mode: int, *_: int) -> int:
        return self._open(dirfd, path, flags, mode)

    @syscall("creat", "path mode")
    def sys_creat(self, path: int, mode: int, *_: int) -> int:
        return self._open(AT_FDCWD, path, O_CREAT | os.O_WRONLY | O_TRUNC, mode)

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

    @syscall("dup3", "fd fd oflagsonly")
    def sys_dup3(self, old: int, new: int, flags: int, *_: int) -> int:
        if self.sint(old) == self.sint(new) or flags & ~self.o_cloexec:
            raise _GuestErrno(errno.EINVAL)
        return self.fds.install(self.fds.get(self.sint(old)), self.sint(new), cloexec=bool(flags & self.o_cloexec))

    @syscall("fcntl", "fd fcntlcmd fcntlarg")
    @syscall("fcntl64", "fd fcntlcmd fcntlarg")
    def sys_fcntl(self, fd: int, cmd: int, arg: int, *_: int) -> int:
        fd = self.sint(fd)
        f = self.fds.get(fd)
        if cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            if not 0 <= self.sint(arg) < self.fds.LIMIT:
                raise _GuestErrno(errno.EINVAL)
            return self.fds.install(f, lowest=self.sint(arg), cloexec=cmd == F_DUPFD_CLOEXEC)
        if cmd == F_GETFD:
            return FD_CLOEXEC if fd in self.fds.cloexec else 0
        if cmd == F_SETFD:
            if arg & FD_CLOEXEC:
                self.fds.cloexec.add(fd)
            else:
                self.fds.cloexec.discard(fd)
            return 0
        if cmd == F_GETFL:
            return self.abi.arch_flags(f.flags, self.abi.open_flags)
        if cmd == F_SETFL:  # of what F_SETFL may change (fs/fcntl.c SETFL_MASK), what kpsdk's files use
            arg = self.abi.generic_flags(arg, self.abi.open_flags)
            settable = O_APPEND | self.o_nonblock
            f.flags = (f.flags & ~settable) | (arg & settable)
            return 0
        if cmd in F_GETLKS | F_SETLKS:
            return self._lock(f, cmd, arg)
        if cmd in (F_GETPIPE_SZ, F_SETPIPE_SZ):
            pipe = f.pipe or f.fifo
            if pipe is None:
                raise _GuestErrno(errno.EBADF)
            return pipe.capacity if cmd == F_GETPIPE_SZ else pipe.set_capacity(self.sint(arg))
        raise _GuestErrno(errno.EINVAL)

    def _lock(self, f: OpenFile, cmd: int, arg: int) -> int:
        """Record locks: one process holds them all, so every lock is granted and F_GETLK finds
        none in the way (l_type F_UNLCK).  Only files take them."""
        if f.kind in PIPES or f.kind == "path":
            raise _GuestErrno(errno.EBADF if f.kind == "path" else errno.EINVAL)
        if cmd in F_GETLKS:
            self.write(arg, struct.pack(self.order + "h", F_UNLCK))
        return 0

    @syscall("flock", "fd d")
    def sys_flock(self, fd: int, op: int, *_: int) -> int:
        """Whole-file locks: granted (one process holds every lock there is)."""
        f = self.fds.get(self.sint(fd))
        if op & ~(1 | 2 | 4 | 8) or not op & (1 | 2 | 8) or f.kind == "path":
            raise _GuestErrno(errno.EINVAL if f.kind != "path" else errno.EBADF)
        return 0

    def _pipe(self, fds: int, flags: int = 0) -> int:
        flags = self.abi.generic_flags(flags, self.abi.open_flags)
        if flags & ~(self.o_nonblock | self.o_cloexec | O_DIRECT_PIPE):
            raise _GuestErrno(errno.EINVAL)
        pipe = Pipe()
        nonblock, cloexec = flags & self.o_nonblock, bool(flags & self.o_cloexec)
        r = self.fds.install(OpenFile("pipe_r", pipe=pipe, flags=nonblock), cloexec=cloexec)
        try:
            w = self.fds.install(OpenFile("pipe_w", pipe=pipe, flags=1 | nonblock), cloexec=cloexec)
        except _GuestErrno:
            self.fds.close(r)
            raise
        try:
            self.write(fds, struct.pack(self.order + "ii", r, w))
        except _GuestErrno:
            self.fds.close(r)
            self.fds.close(w)
            raise
        return 0

    @syscall("pipe", "fdpair")
    def sys_pipe(self, fds: int, *_: int) -> int:
        return self._pipe(fds)

    @syscall("pipe2", "fdpair oflagsonly")
    def sys_pipe2(self, fds: int, flags: int, *_: int) -> int:
        return self._pipe(fds, flags)

    @syscall("ioctl", "fd ioreq ioarg")
    def sys_ioctl(self, fd: int, request: int, arg: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        if f.obj is not None:  # a socket's FIONBIO, FIONREAD, SIOCOUTQ...
            return f.obj.ioctl(self, f, request & 0xFFFFFFFF, arg)
        raise _GuestErrno(errno.ENOTTY)  # no descriptor is a terminal (TCGETS, TIOCGWINSZ...); no FICLONE

    @syscall("fadvise64", "fd off64 off64 fadvice")
    @syscall("fadvise64_64", "fd off64 off64 fadvice")
    @syscall("arm_fadvise64_64", "fd fadvice off64 off64")
    def sys_fadvise64(self, fd: int, *_: int) -> int:
        """Advice about a file's future reads: taken, nothing to do (``ESPIPE`` on a pipe, as Linux)."""
        f = self.fds.get(self.sint(fd))
        if f.kind in PIPES:
            raise _GuestErrno(errno.ESPIPE)
        if f.kind == "path":
            raise _GuestErrno(errno.EBADF)
        return 0

    # -- directories ------------------------------------------------------------------------------

    def _dirents(self, fd: int, dirp: int, count: int, pack: structs.DirentPacker) -> int:
        """As many directory records as fit in ``count`` bytes (``.`` and ``..`` first, then the
        names sorted); 0 at the end, EINVAL when not even the next one fits."""
        f = self.fds.get(self.sint(fd))
        if f.kind == "path":
            raise _GuestErrno(errno.EBADF)
        if f.kind != "dir" or f.node is None:
            raise _GuestErrno(errno.ENOTDIR)
        if f.entries is None:
            f.entries = self._list_directory(f)
        out = bytearray()
        while f.pos < len(f.entries):
            name, ino, dtype = f.entries[f.pos]
            try:
                record = pack(ino, f.pos + 1, dtype, name, self.order)
            except OverflowError:
                raise _GuestErrno(errno.EOVERFLOW) from None
            if len(out) + len(record) > (count & 0xFFFFFFFF):
                if not out:
                    raise _GuestErrno(errno.EINVAL)
                break
            out += record
            f.pos += 1
        self.write(dirp, bytes(out))
        return len(out)

    @syscall("getdents64", "fd dirents u")
    def sys_getdents64(self, fd: int, dirp: int, count: int, *_: int) -> int:
        return self._dirents(fd, dirp, count, structs.pack_dirent64)

    @syscall("getdents", "fd p u")
    def sys_getdents(self, fd: int, dirp: int, count: int, *_: int) -> int:
        """The older ``struct linux_dirent`` (words for the inode and offset, d_type last)."""
        return self._dirents(fd, dirp, count, structs.dirent_packer(self.arch.word_size))

    def _list_directory(self, f: OpenFile) -> list[tuple[bytes, int, int]]:
        """The entries of directory ``f``: itself, its parent (itself at the top), then its names."""
        node = f.node
        assert node is not None
        fs = self.root
        here = fs.path_of(node, f.path)
        try:
            up = fs.find(here.rstrip("/") + "/..", "/").node if here != "/" else node
        except _GuestErrno:
            up = None
        up = up if up is not None else node
        entries = [(b".", node.ino, structs.dirent_type(node.mode)), (b"..", up.ino, structs.dirent_type(up.mode))]
        if not isinstance(node, MemDir | HostNode):
            raise _GuestErrno(errno.ENOTDIR)
        for name, ino, kind in fs.listing(node):
            entries.append((os.fsencode(name), ino, kind >> 12))
        return entries

    # -- links ------------------------------------------------------------------------------------

    def _readlink(self, dirfd: int, path_addr: int, buf: int, size: int) -> int:
        path = self.string(path_addr)
        if self.sint(size) <= 0:
            raise _GuestErrno(errno.EINVAL)
        ref = self.lookup(dirfd, path, follow=False)
        own = ref.own
        last = path.rsplit("/", 1)[-1]  # "" after a trailing "/": the link is followed, as Linux does
        if own == "" and last in ("self", "thread-self"):  # the links to the process's own directory
            target = str(self.pid) if last == "self" else f"{self.pid}/task/{self.task.tid}"
        elif own is not None:
            proc = self.proc_of(ref)
            if proc.own_kind(own, "readlink") != "link":
                raise _GuestErrno(errno.EINVAL)  # a directory or a file, not a link
            if not last:
                raise _GuestErrno(errno.ENOTDIR)  # "exe/", "fd/2/": a file, not a directory
            target = proc.own_link(own)
        elif ref.node is None:
            raise _GuestErrno(errno.ENOENT)
        else:
            target = self.root.readlink(ref.node)
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

    @syscall("getcwd", "opath u")
    def sys_getcwd(self, buf: int, size: int, *_: int) -> int:
        data = os.fsencode(self.cwd) + b"\0"
        if len(data) > size:
            raise _GuestErrno(errno.ERANGE)
        self.write(buf, data)
        return len(data)

    @syscall("chdir", "path")
    def sys_chdir(self, path_addr: int, *_: int) -> int:
        path = self.string(path_addr)
        ref = self.root.find(path, self.cwd)
        if ref.own is not None:
            if self.proc_of(ref).own_kind(ref.own, "chdir") != "dir":
                raise _GuestErrno(errno.ENOTDIR)
        elif ref.node is None:
            raise _GuestErrno(errno.ENOENT)
        elif not statmod.S_ISDIR(ref.node.mode):
            raise _GuestErrno(errno.ENOTDIR)
        else:
            self.root.cred.check(ref.node, MAY_X)
        self.cwd = ref.path  # where the walk ended (links followed), as getcwd says
        return 0

    @syscall("fchdir", "fd")
    def sys_fchdir(self, fd: int, *_: int) -> int:
        """The working directory becomes the directory open on ``fd`` (find goes back to where
        it started this way)."""
        f = self.fds.get(self.sint(fd))
        if f.kind not in ("dir", "path") or f.node is None or not statmod.S_ISDIR(f.node.mode):
            raise _GuestErrno(errno.ENOTDIR)
        self.root.cred.check(f.node, MAY_X)
        self.cwd = self.root.path_of(f.node, f.path)
        return 0

    # -- syncing: the overlay is memory, a bind's files the host's --------------------------------

    @syscall("fsync", "fd")
    @syscall("fdatasync", "fd")
    @syscall("syncfs", "fd")
    def sys_fsync(self, fd: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        if f.kind == "path":
            raise _GuestErrno(errno.EBADF)
        if f.kind in PIPES:
            raise _GuestErrno(errno.EINVAL)
        return 0

    @syscall("sync", "")
    def sys_sync(self, *_: int) -> int:
        return 0

