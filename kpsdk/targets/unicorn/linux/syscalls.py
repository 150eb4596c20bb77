"""The system calls of a Linux process on Unicorn, by name.

:class:`LinuxProcess` holds the process's state (descriptors, address space,
working directory, signal actions recorded) and one ``sys_NAME`` method per
call it emulates; the architecture's table (:mod:`kpsdk.arch_backends.syscall_tables`)
maps numbers to names, so nothing here depends on the architecture except
through :class:`kpsdk.arch.LinuxAbi` data.  A call it does not know returns
``-ENOSYS`` and is recorded in :attr:`LinuxProcess.unimplemented`.  What would need a
second thread, a second process or a signal delivered raises
:class:`~kpsdk.errors.NotEmulatedError` (an honest "not yet").
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import unicorn

from kpsdk.errors import NotEmulatedError
from kpsdk.targets.unicorn.linux import procfs, structs
from kpsdk.targets.unicorn.linux.files import O_ACCMODE, FdTable, OpenFile, Pipe, Sysroot, _GuestErrno, release
from kpsdk.targets.unicorn.linux.memory import MAP_ANONYMOUS, PAGE, AddressSpace, page_up

if TYPE_CHECKING:
    from kpsdk.arch import Arch, LinuxAbi

#: the process's ids (there is one process; it has no parent kpsdk shows)
PID, PPID = 1000, 1
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = 0x100, 0x1000
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 3, 4, 1030
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2
ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS = 0x1001, 0x1002, 0x1003
PR_SET_NAME, PR_GET_NAME = 15, 16
FUTEX_WAIT, FUTEX_WAKE = 0, 1
RLIMIT_STACK, RLIMIT_NOFILE = 3, 7
#: the most one read or write moves at once (Linux's MAX_RW_COUNT)
MAX_RW_COUNT = 0x7FFFF000
#: what one read from a host file brings at most (a short read: programs loop)
READ_CHUNK = 1 << 24
SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
#: what ``stat`` says of what has no host file: /dev/null, a link, a directory and a file of
#: the process's own /proc (size 0, as /proc's); read, never changed, by the stat calls
NULL_STAT = {"st_mode": statmod.S_IFCHR | 0o666, "st_rdev": os.makedev(1, 3), "st_nlink": 1}
LINK_STAT = {"st_mode": statmod.S_IFLNK | 0o777, "st_nlink": 1}
DIR_STAT = {"st_mode": statmod.S_IFDIR | 0o555, "st_nlink": 2}
PROCFILE_STAT = {"st_mode": statmod.S_IFREG | 0o444, "st_nlink": 1}
#: socketcall(2)'s call numbers (include/uapi/linux/net.h)
SOCKETCALLS = {1: "socket", 2: "bind", 3: "connect", 4: "listen", 5: "accept", 6: "getsockname",
               7: "getpeername", 8: "socketpair", 9: "send", 10: "recv", 11: "sendto", 12: "recvfrom",
               13: "shutdown", 14: "setsockopt", 15: "getsockopt", 16: "sendmsg", 17: "recvmsg", 18: "accept4",
               19: "recvmmsg", 20: "sendmmsg"}


class LinuxProcess:
    """One single-threaded Linux process's kernel side, over a Unicorn engine."""

    def __init__(self, arch: Arch, uc: unicorn.Uc, console: bytearray, space: AddressSpace, sysroot: Sysroot,
                 stdin: bytes, cwd: str, exe: str) -> None:
        assert arch.syscalls is not None and arch.syscalls.linux is not None
        self.arch, self.uc, self.console, self.mem, self.root = arch, uc, console, space, sysroot
        self.abi: LinuxAbi = arch.syscalls.linux
        self.order = "<" if arch.endian == "little" else ">"
        self.word = struct.Struct(self.order + ("Q" if arch.word_size == 8 else "I"))
        self.bits = 8 * arch.word_size
        self.fds = FdTable(stdin)
        self.cwd = cwd
        self.exe = exe
        #: calls the layer does not emulate, by name, with how often the program made them; also the
        #: files of its own /proc it does not make (``open /proc/self/status``: ENOENT, :mod:`.procfs`)
        self.unimplemented: Counter[str] = Counter()
        #: what ``/proc/self`` shows (set by ``start_process``): the arguments and environment
        #: strings, the auxiliary vector as the stack holds it, the stack's range
        self.argv: list[bytes] = []
        self.envp: list[bytes] = []
        self.auxv = b""
        self.stack: tuple[int, int] | None = None
        #: signal actions the program installed (handler word by signal): recorded, never delivered
        self.sigactions: dict[int, bytes] = {}
        self.clock_skew = 0.0  #: seconds nanosleep "slept" (the clocks move on, nothing waits)
        self._gdt = 0
        #: called as ``(host path, address, file offset)`` after a file is mapped (ld.so mapping a library)
        self.on_file_map: Callable[[Path, int, int], None] | None = None
        #: called as ``(start, end)`` before ``munmap`` removes that range (ld.so unmapping a
        #: library at dlclose): while its pages are still there to take probes out of
        self.on_unmap: Callable[[int, int], None] | None = None
        sysroot.fd_target = self._fd_target
        names = {nr: name for name, nr in arch.syscalls.calls.items()}
        self.handlers: dict[int, tuple[str, Callable[..., int] | None]] = {
            nr: (name, getattr(self, "sys_" + name.lstrip("_"), None)) for nr, name in names.items()}

    # -- dispatch ---------------------------------------------------------------------------

    def syscall(self, nr: int, args: tuple[int, ...]) -> int:
        """Run call ``nr``; its result (``-errno`` on failure)."""
        name, handler = self.handlers.get(nr, (f"syscall_{nr}", None))
        if handler is None:
            self.unimplemented[name] += 1
            return -errno.ENOSYS
        try:
            return handler(*args)
        except _GuestErrno as e:
            return -e.errno

    def close(self) -> None:
        self.fds.close_all()

    # -- guest memory --------------------------------------------------------------------------

    def sint(self, x: int, bits: int | None = None) -> int:
        """A register's value as the signed C ``int`` (32 bits) or ``long`` it holds."""
        bits = bits or 32
        x &= (1 << bits) - 1
        return x - (1 << bits) if x >> (bits - 1) else x

    def read(self, addr: int, size: int) -> bytes:
        try:
            return bytes(self.uc.mem_read(addr, size))
        except unicorn.UcError:
            raise _GuestErrno(errno.EFAULT) from None

    def write(self, addr: int, data: bytes) -> None:
        try:
            self.uc.mem_write(addr, data)
        except unicorn.UcError:
            raise _GuestErrno(errno.EFAULT) from None

    def read_word(self, addr: int) -> int:
        return int(self.word.unpack(self.read(addr, self.word.size))[0])

    def string(self, addr: int, limit: int = 4096) -> str:
        """A NUL-terminated string the program passed (a path), read page by page."""
        if not addr:
            raise _GuestErrno(errno.EFAULT)
        out = bytearray()
        while len(out) < limit:
            chunk = self.read(addr + len(out), min(limit - len(out), PAGE - (addr + len(out)) % PAGE))
            end = chunk.find(b"\0")
            if end >= 0:
                return (out + chunk[:end]).decode("utf-8", "surrogateescape")
            out += chunk
        raise _GuestErrno(errno.ENAMETOOLONG)

    def pair(self, args: tuple[int, ...], i: int) -> int:
        """A 64-bit argument from ``args[i]`` (two registers on a 32-bit arch: low word first in a
        little-endian one, and starting at an even register where the ABI says so)."""
        if self.bits == 64:
            return args[i]
        if self.abi.pair_aligned and i % 2:
            i += 1
        lo, hi = (args[i], args[i + 1]) if self.order == "<" else (args[i + 1], args[i])
        return (hi << 32) | lo

    # -- files ----------------------------------------------------------------------------------

    def _read_from(self, f: OpenFile, count: int, offset: int | None = None) -> bytes:
        count = min(count, MAX_RW_COUNT)
        if f.kind == "host":
            n = min(count, READ_CHUNK)
            try:
                return os.pread(f.fd, n, offset) if offset is not None else os.read(f.fd, n)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EIO) from None
        if f.kind == "procfile":  # a file of the process's own /proc: its bytes, made at open
            at = f.pos if offset is None else offset
            data = f.data[at:at + count]
            if offset is None:
                f.pos += len(data)
            return data
        if offset is not None:
            raise _GuestErrno(errno.ESPIPE)
        if f.kind == "stdin":
            data = f.data[f.pos:f.pos + count]
            f.pos += len(data)
            return data
        if f.kind == "pipe_r" and f.pipe is not None:
            if not f.pipe.data and f.pipe.writers:
                raise NotEmulatedError("the program reads an empty pipe whose write end is open: it would wait "
                                       "for another process, and the Unicorn target runs one (not yet emulated)")
            data = bytes(f.pipe.data[:count])
            del f.pipe.data[:count]
            return data
        if f.kind == "null":
            return b""
        raise _GuestErrno(errno.EBADF)

    def _write_to(self, f: OpenFile, data: bytes) -> int:
        if f.kind == "console":
            self.console += data
        elif f.kind == "pipe_w" and f.pipe is not None:
            f.pipe.data += data
        elif f.kind != "null":
            raise _GuestErrno(errno.EBADF)
        return len(data)

    def sys_read(self, fd: int, buf: int, count: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        data = self._read_from(f, count)
        self.write(buf, data)
        return len(data)

    def sys_pread64(self, fd: int, buf: int, count: int, *rest: int) -> int:
        f = self.fds.get(self.sint(fd))
        offset = self.pair((fd, buf, count, *rest), 3)
        data = self._read_from(f, count, offset)
        self.write(buf, data)
        return len(data)

    def _sendfile(self, out_fd: int, in_fd: int, offset_ptr: int, count: int, offset_code: str) -> int:
        """Copy up to ``count`` bytes from ``in_fd`` (at ``*offset_ptr``, which is advanced, or
        at its position) to ``out_fd``: busybox ``cat`` tries this before read/write."""
        out = self.fds.get(self.sint(out_fd))
        src = self.fds.get(self.sint(in_fd))
        if src.kind != "host":
            raise _GuestErrno(errno.EINVAL)
        if offset_ptr:
            fmt = self.order + offset_code
            (offset,) = struct.unpack(fmt, self.read(offset_ptr, struct.calcsize(fmt)))
            if offset < 0:
                raise _GuestErrno(errno.EINVAL)
            data = self._read_from(src, count, offset)
            self.write(offset_ptr, struct.pack(fmt, offset + len(data)))
        else:
            data = self._read_from(src, count)
        return self._write_to(out, data)

    def sys_sendfile(self, out_fd: int, in_fd: int, offset: int, count: int, *_: int) -> int:
        return self._sendfile(out_fd, in_fd, offset, count, "q" if self.bits == 64 else "i")

    def sys_sendfile64(self, out_fd: int, in_fd: int, offset: int, count: int, *_: int) -> int:
        return self._sendfile(out_fd, in_fd, offset, count, "q")

    def _user_data(self, addr: int, count: int) -> bytes:
        """What a write passes: up to ``count`` bytes, page by page to the first unmapped one."""
        out = bytearray()
        count = min(count, MAX_RW_COUNT)
        while len(out) < count:
            at = addr + len(out)
            try:
                out += self.uc.mem_read(at, min(count - len(out), PAGE - at % PAGE))
            except unicorn.UcError:
                break
        if count and not out:
            raise _GuestErrno(errno.EFAULT)
        return bytes(out)

    def sys_write(self, fd: int, buf: int, count: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        return self._write_to(f, self._user_data(buf, count))

    def _iovecs(self, iov: int, n: int) -> list[tuple[int, int]]:
        if self.sint(n) < 0 or n > 1024:
            raise _GuestErrno(errno.EINVAL)
        raw = self.read(iov, 2 * self.word.size * n) if n else b""
        words = [w for (w,) in self.word.iter_unpack(raw)]
        return list(zip(words[::2], words[1::2], strict=True))

    def sys_writev(self, fd: int, iov: int, n: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        data = b"".join(self._user_data(base, size) for base, size in self._iovecs(iov, n) if size)
        return self._write_to(f, data)

    def sys_readv(self, fd: int, iov: int, n: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        total = 0
        for base, size in self._iovecs(iov, n):
            data = self._read_from(f, size)
            self.write(base, data)
            total += len(data)
            if len(data) < size:
                break
        return total

    def _open(self, dirfd: int, path_addr: int, flags: int) -> int:
        path = self.string(path_addr)
        if path == "/dev/null":
            f = OpenFile("null", path=path)
        else:
            parts = self.root.walk(path, self._base(dirfd, path))
            own = self.root.own(parts)
            f = self.root.open(parts, flags) if own is None else self._open_own(own, path, flags)
        try:
            return self.fds.install(f)
        except _GuestErrno:
            if not f.refs:  # not a description another descriptor shares (/proc/self/fd/N)
                release(f)
            raise

    #: the files of its own /proc/self kpsdk makes (:mod:`.procfs`)
    OWN_FILES = ("maps", "cmdline", "environ", "auxv")

    def _own_kind(self, entry: str, verb: str) -> str:
        """What ``/proc/self/ENTRY`` is: ``dir`` (itself, ``fd``), ``link`` (``exe``, ``fd/N`` of an
        open descriptor) or ``file``; ENOENT, recorded under ``verb``, for what kpsdk does not make.
        A trailing ``/`` has gone with the walk; the callers check it."""
        if entry in ("", "fd"):
            return "dir"
        if entry == "exe":
            return "link"
        if entry in self.OWN_FILES:
            return "file"
        head, _, fd = entry.partition("/")
        if head == "fd" and fd.isdigit():
            if int(fd) in self.fds.fds:
                return "link"
            raise _GuestErrno(errno.ENOENT)  # a closed descriptor: ENOENT on Linux too, nothing missing
        self.unimplemented[f"{verb} /proc/self/{entry}"] += 1
        raise _GuestErrno(errno.ENOENT)

    def _own_bytes(self, entry: str) -> bytes:
        """The bytes of ``/proc/self/ENTRY`` (one of OWN_FILES), made now from the process."""
        if entry == "maps":
            names = dict(self.mem.names)
            if self.mem.brk_end > self.mem.brk_base:
                names[(self.mem.brk_base, page_up(self.mem.brk_end))] = ("[heap]", 0)
            if self.stack is not None:
                names[self.stack] = ("[stack]", 0)
            return procfs.maps(((lo, hi + 1, perms) for lo, hi, perms in self.uc.mem_regions()), names,
                               self.arch.word_size)
        if entry == "cmdline":
            return procfs.nul_separated(self.argv)
        if entry == "environ":
            return procfs.nul_separated(self.envp)
        return self.auxv

    def _own_link(self, entry: str) -> str:
        """Where the link ``/proc/self/ENTRY`` points: the program, or an open descriptor's file."""
        if entry == "exe":
            return self.exe
        f = self.fds.get(_own_fd(entry))
        if f.kind in ("host", "null", "procfile"):
            return f.path
        return f"pipe:[{id(f) % 1000000}]"  # kpsdk's stdin, console and pipes

    def _open_own(self, entry: str, path: str, flags: int) -> OpenFile:
        """Open ``/proc/self/ENTRY`` (:mod:`.procfs`): a file of bytes made now (read-only); the
        program (``exe``); ``fd/N`` of kpsdk's stdin, console and pipes, or of ``/dev/null``:
        that description itself, for reading or writing as it allows (``/dev/stderr`` is
        ``fd/2``).  ``fd/N`` of a file the walk can reach does not come here: it followed it."""
        kind = self._own_kind(entry, "open")
        if kind == "dir":
            self.unimplemented[f"open /proc/self/{entry}".rstrip("/")] += 1  # its listing is not made
            raise _GuestErrno(errno.ENOENT)
        if path.endswith("/"):
            raise _GuestErrno(errno.ENOTDIR)
        if entry.startswith("fd/"):
            return self.fds.get(_own_fd(entry))
        if flags & O_ACCMODE:  # Linux: the running program is ETXTBSY, its /proc files mode 0444
            raise _GuestErrno(errno.ETXTBSY if entry == "exe" else errno.EACCES)
        if kind == "file":
            return OpenFile("procfile", path=f"/proc/{PID}/{entry}", data=self._own_bytes(entry), flags=flags)
        try:
            fd = os.open(self.exe, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOENT) from None
        return OpenFile("host", path=f"/proc/{PID}/exe", fd=fd, flags=flags, host=Path(self.exe))

    def _fd_target(self, fd: int) -> str | None:
        """Where ``/proc/self/fd/N`` leads the path walk: the guest path of a file of the sysroot
        or of the process's own /proc open on it (opened anew there, as Linux does), else None."""
        f = self.fds.fds.get(fd)
        return f.path if f is not None and f.kind in ("host", "procfile") and f.path.startswith("/") else None

    def _base(self, dirfd: int, path: str) -> str:
        """The directory a relative ``path`` starts from: the cwd, or ``dirfd``'s own path."""
        dirfd = self.sint(dirfd)
        if path.startswith("/") or dirfd == AT_FDCWD:
            return self.cwd
        f = self.fds.get(dirfd)
        if f.kind != "host":
            raise _GuestErrno(errno.ENOTDIR)
        return str(PurePosixPath(self.cwd, f.path))

    def sys_open(self, path: int, flags: int, *_: int) -> int:
        return self._open(AT_FDCWD, path, flags)

    def sys_openat(self, dirfd: int, path: int, flags: int, *_: int) -> int:
        return self._open(dirfd, path, flags)

    def sys_close(self, fd: int, *_: int) -> int:
        self.fds.close(self.sint(fd))
        return 0

    def _seek(self, f: OpenFile, offset: int, whence: int) -> int:
        if f.entries is not None:  # a directory: its position is getdents64's cookie (rewinddir: 0)
            if whence != SEEK_SET or offset < 0:
                raise _GuestErrno(errno.EINVAL)
            f.pos = offset
            if not offset:
                f.entries = None
            return offset
        if f.kind == "host":
            try:
                return os.lseek(f.fd, offset, whence)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EINVAL) from None
        if f.kind not in ("stdin", "procfile"):
            raise _GuestErrno(errno.ESPIPE)
        base = {SEEK_SET: 0, SEEK_CUR: f.pos, SEEK_END: len(f.data)}.get(whence)
        if base is None or base + offset < 0:
            raise _GuestErrno(errno.EINVAL)
        f.pos = base + offset
        return f.pos

    def sys_lseek(self, fd: int, offset: int, whence: int, *_: int) -> int:
        return self._seek(self.fds.get(self.sint(fd)), self.sint(offset, self.bits), whence)

    def sys_llseek(self, fd: int, hi: int, lo: int, result: int, whence: int, *_: int) -> int:
        offset = self.sint((hi << 32) | lo, 64)
        pos = self._seek(self.fds.get(self.sint(fd)), offset, whence)
        self.write(result, struct.pack(self.order + "q", pos))
        return 0

    def sys_dup(self, fd: int, *_: int) -> int:
        return self.fds.install(self.fds.get(self.sint(fd)))

    def sys_dup2(self, old: int, new: int, *_: int) -> int:
        f = self.fds.get(self.sint(old))
        if self.sint(old) == self.sint(new):
            return self.sint(new)
        return self.fds.install(f, self.sint(new))

    def sys_dup3(self, old: int, new: int, flags: int, *_: int) -> int:
        if self.sint(old) == self.sint(new):
            raise _GuestErrno(errno.EINVAL)
        return self.fds.install(self.fds.get(self.sint(old)), self.sint(new))

    def sys_fcntl(self, fd: int, cmd: int, arg: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        if cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            return self.fds.install(f, lowest=self.sint(arg))
        if cmd in (F_GETFD, F_SETFD, F_SETFL):
            return 0
        if cmd == F_GETFL:
            return 1 if f.kind in ("console", "pipe_w", "null") else f.flags & ~0o3
        raise _GuestErrno(errno.EINVAL)

    sys_fcntl64 = sys_fcntl

    def _pipe(self, fds: int) -> int:
        pipe = Pipe()
        r = self.fds.install(OpenFile("pipe_r", pipe=pipe))
        w = self.fds.install(OpenFile("pipe_w", pipe=pipe))
        self.write(fds, struct.pack(self.order + "ii", r, w))
        return 0

    def sys_pipe(self, fds: int, *_: int) -> int:
        return self._pipe(fds)

    def sys_pipe2(self, fds: int, flags: int, *_: int) -> int:
        return self._pipe(fds)

    def sys_ioctl(self, fd: int, request: int, *_: int) -> int:
        self.fds.get(self.sint(fd))
        raise _GuestErrno(errno.ENOTTY)  # no descriptor is a terminal (TCGETS, TIOCGWINSZ...)

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

    # -- extended attributes: read from the sysroot's files (``ls -l`` asks for ACLs) -------------

    def _xattr_target(self, path_addr: int, follow: bool) -> Path | int:
        path = self.string(path_addr)
        return self.root.resolve(path, self.cwd, follow=follow)

    def _xattr_fd(self, fd: int) -> int:
        f = self.fds.get(self.sint(fd))
        if f.kind != "host":
            raise _GuestErrno(errno.ENODATA)  # kpsdk's pipes and console carry no attributes
        return f.fd

    def _getxattr(self, where: Path | int, name_addr: int, value: int, size: int, follow: bool = True) -> int:
        try:
            data = os.getxattr(where, self.string(name_addr, 256), follow_symlinks=follow)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENODATA) from None
        return self._put_sized(value, size, data)

    def _listxattr(self, where: Path | int, out: int, size: int, follow: bool = True) -> int:
        try:
            data = b"".join(os.fsencode(n) + b"\0" for n in os.listxattr(where, follow_symlinks=follow))
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOTSUP) from None
        return self._put_sized(out, size, data)

    def _put_sized(self, buf: int, size: int, data: bytes) -> int:
        """The xattr calls' contract: size 0 asks only how big ``data`` is; a buffer too small is
        ERANGE; else ``data`` is copied out.  Returns its length."""
        if size:
            if len(data) > size:
                raise _GuestErrno(errno.ERANGE)
            self.write(buf, data)
        return len(data)

    def sys_getxattr(self, path: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_target(path, True), name, value, size)

    def sys_lgetxattr(self, path: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_target(path, False), name, value, size, follow=False)

    def sys_fgetxattr(self, fd: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_fd(fd), name, value, size)

    def sys_listxattr(self, path: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_target(path, True), out, size)

    def sys_llistxattr(self, path: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_target(path, False), out, size, follow=False)

    def sys_flistxattr(self, fd: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_fd(fd), out, size)

    # -- file status --------------------------------------------------------------------------

    def _stat_of(self, dirfd: int, path_addr: int, flags: int) -> dict[str, int]:
        path = self.string(path_addr) if path_addr else ""
        if not path and flags & AT_EMPTY_PATH:
            return self._fstat_values(self.sint(dirfd))
        if path == "/dev/null":
            return NULL_STAT
        follow = not flags & AT_SYMLINK_NOFOLLOW
        parts = self.root.walk(path, self._base(dirfd, path), follow)
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
        kind = self._own_kind(entry, "stat")
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
            return self._fstat_values(_own_fd(entry))
        try:
            return structs.stat_values(os.stat(self.exe))
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOENT) from None

    def _fstat_values(self, fd: int) -> dict[str, int]:
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

    def sys_fstat(self, fd: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self._fstat_values(self.sint(fd)), False)

    def sys_fstat64(self, fd: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self._fstat_values(self.sint(fd)), True)

    def sys_newfstatat(self, dirfd: int, path: int, buf: int, flags: int, *_: int) -> int:
        return self._put_stat(buf, self._stat_of(dirfd, path, flags), False)

    def sys_fstatat64(self, dirfd: int, path: int, buf: int, flags: int, *_: int) -> int:
        return self._put_stat(buf, self._stat_of(dirfd, path, flags), True)

    def sys_stat(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self._stat_of(AT_FDCWD, path, 0), False)

    def sys_lstat(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self._stat_of(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW), False)

    def sys_stat64(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self._stat_of(AT_FDCWD, path, 0), True)

    def sys_lstat64(self, path: int, buf: int, *_: int) -> int:
        return self._put_stat(buf, self._stat_of(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW), True)

    def _statfs_of(self, where: str | int) -> dict[str, int]:
        """``statfs`` of a guest path (the sysroot file's file system; the process's own /proc
        is a proc file system) or of a descriptor (a pipe's for kpsdk's pipes and console)."""
        if isinstance(where, str):
            parts = self.root.walk(where, self.cwd)
            if self.root.own(parts) is not None:
                return _pseudo_statfs(structs.PROC_SUPER_MAGIC)
            host: str | int = str(self.root.host(parts))
        else:
            f = self.fds.get(self.sint(where))
            if f.kind != "host":
                return _pseudo_statfs(structs.PROC_SUPER_MAGIC if f.kind == "procfile" else structs.PIPEFS_MAGIC)
            host = f.fd
        try:
            return structs.host_statfs(host)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.EIO) from None

    def _put_statfs(self, buf: int, values: dict[str, int], size: int | None = None) -> int:
        """Write ``struct statfs`` (64-bit arches) or ``struct statfs64`` of ``size`` bytes
        (32-bit arches, ppc64: the size the program passes, which the kernel checks)."""
        data = structs.pack_statfs(values, self.arch.word_size, self.order)
        if size is not None and size != len(data) and not (self.arch.name == "arm" and size == 88):
            raise _GuestErrno(errno.EINVAL)  # ARM's kernel takes EABI glibc's 88 for its packed 84
        self.write(buf, data)
        return 0

    def sys_statfs(self, path: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(self.string(path)))

    def sys_fstatfs(self, fd: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(fd))

    def sys_statfs64(self, path: int, size: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(self.string(path)), size)

    def sys_fstatfs64(self, fd: int, size: int, buf: int, *_: int) -> int:
        return self._put_statfs(buf, self._statfs_of(fd), size)

    def sys_statx(self, dirfd: int, path: int, flags: int, mask: int, buf: int, *_: int) -> int:
        self.write(buf, structs.pack_statx(self._stat_of(dirfd, path, flags), self.order))
        return 0

    def _access(self, dirfd: int, path_addr: int, mode: int, flags: int = 0) -> int:
        values = self._stat_of(dirfd, path_addr, flags & AT_SYMLINK_NOFOLLOW)
        if mode & 2:
            raise _GuestErrno(errno.EROFS)
        if mode & 1 and not values["st_mode"] & 0o111:
            raise _GuestErrno(errno.EACCES)
        return 0

    def sys_access(self, path: int, mode: int, *_: int) -> int:
        return self._access(AT_FDCWD, path, mode)

    def sys_faccessat(self, dirfd: int, path: int, mode: int, *_: int) -> int:
        return self._access(dirfd, path, mode)

    def sys_faccessat2(self, dirfd: int, path: int, mode: int, flags: int, *_: int) -> int:
        return self._access(dirfd, path, mode, flags)

    def _readlink(self, dirfd: int, path_addr: int, buf: int, size: int) -> int:
        path = self.string(path_addr)
        if self.sint(size) <= 0:
            raise _GuestErrno(errno.EINVAL)
        parts = self.root.walk(path, self._base(dirfd, path), follow=False)
        own = self.root.own(parts)
        last = path.rsplit("/", 1)[-1]  # "" after a trailing "/": the link is followed, as Linux does
        if own == "" and last in ("self", "thread-self"):  # the links to the process's own directory
            target = str(PID) if last == "self" else f"{PID}/task/{PID}"
        elif own is not None:
            if self._own_kind(own, "readlink") != "link":
                raise _GuestErrno(errno.EINVAL)  # a directory or a file, not a link
            if not last:
                raise _GuestErrno(errno.ENOTDIR)  # "exe/", "fd/2/": a file, not a directory
            target = self._own_link(own)
        else:
            host = self.root.host(parts)
            try:
                target = os.readlink(host)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EINVAL) from None
        data = os.fsencode(target)[:size]
        self.write(buf, data)
        return len(data)

    def sys_readlink(self, path: int, buf: int, size: int, *_: int) -> int:
        return self._readlink(AT_FDCWD, path, buf, size)

    def sys_readlinkat(self, dirfd: int, path: int, buf: int, size: int, *_: int) -> int:
        return self._readlink(dirfd, path, buf, size)

    def sys_getcwd(self, buf: int, size: int, *_: int) -> int:
        data = os.fsencode(self.cwd) + b"\0"
        if len(data) > size:
            raise _GuestErrno(errno.ERANGE)
        self.write(buf, data)
        return len(data)

    def sys_chdir(self, path_addr: int, *_: int) -> int:
        path = self.string(path_addr)
        parts = self.root.walk(path, self.cwd)
        own = self.root.own(parts)
        if own is not None:
            is_dir = self._own_kind(own, "chdir") == "dir"
        else:
            is_dir = self.root.made_up(parts) or os.path.isdir(self.root.host(parts))
        if not is_dir:
            raise _GuestErrno(errno.ENOTDIR)
        self.cwd = "/" + "/".join(parts)  # where the walk ended (links followed), as getcwd says
        return 0

    def sys_fchdir(self, fd: int, *_: int) -> int:
        """The working directory becomes the directory open on ``fd`` (find goes back to where
        it started this way)."""
        f = self.fds.get(self.sint(fd))
        if f.kind != "host" or not statmod.S_ISDIR(os.fstat(f.fd).st_mode):
            raise _GuestErrno(errno.ENOTDIR)
        self.cwd = f.path  # where its open's walk ended
        return 0

    def sys_fadvise64(self, fd: int, *_: int) -> int:
        """Advice about a file's future reads: taken, nothing to do (``ESPIPE`` on a pipe, as Linux)."""
        if self.fds.get(self.sint(fd)).kind in ("stdin", "console", "pipe_r", "pipe_w"):
            raise _GuestErrno(errno.ESPIPE)  # kpsdk's pipes (stdin and the console are pipes under qemu-user)
        return 0

    sys_fadvise64_64 = sys_arm_fadvise64_64 = sys_fadvise64

    def _read_only(self, *_: int) -> int:
        raise _GuestErrno(errno.EROFS)

    sys_unlink = sys_unlinkat = sys_mkdir = sys_mkdirat = sys_rename = sys_renameat = _read_only

    # -- memory -----------------------------------------------------------------------------------

    def sys_brk(self, addr: int, *_: int) -> int:
        return self.mem.brk(addr)

    def _mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
        f = None if flags & MAP_ANONYMOUS else self.fds.get(self.sint(fd))
        if f is not None and f.kind != "host":
            raise _GuestErrno(errno.ENODEV)
        if offset % PAGE:
            raise _GuestErrno(errno.EINVAL)
        at = self.mem.mmap(addr, length, prot, flags)
        if f is not None:
            try:  # the file's bytes up to the end of the last page, as Linux maps them
                data = os.pread(f.fd, page_up(length), offset)
            except OSError as e:
                self.mem.unmap(at, at + length)
                raise _GuestErrno(e.errno or errno.EACCES) from None
            self.write(at, data)
            self.mem.name(at, at + page_up(length), f.path, offset, f.host)
            if self.on_file_map is not None and f.host is not None:
                self.on_file_map(f.host, at, offset)
        return at

    def sys_mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int, *_: int) -> int:
        return self._mmap(addr, length, prot, flags, fd, offset)

    def sys_mmap2(self, addr: int, length: int, prot: int, flags: int, fd: int, pgoff: int, *_: int) -> int:
        return self._mmap(addr, length, prot, flags, fd, pgoff * PAGE)  # mmap2's offset is in 4096-byte units

    def sys_munmap(self, addr: int, length: int, *_: int) -> int:
        if self.on_unmap is not None and not addr % PAGE and length:
            self.on_unmap(addr, addr + length)
        self.mem.unmap(addr, addr + length)
        return 0

    def sys_mprotect(self, addr: int, length: int, prot: int, *_: int) -> int:
        self.mem.protect(addr, length, prot)
        return 0

    def sys_mremap(self, old: int, old_size: int, new_size: int, flags: int, *_: int) -> int:
        return self.mem.remap(old, old_size, new_size, flags)

    def sys_madvise(self, *_: int) -> int:
        return 0

    def sys_mlock(self, *_: int) -> int:
        """Locking pages in memory: every page of the emulated process is in kpsdk's memory
        already, and none is ever swapped (gpg locks its secrets)."""
        return 0

    sys_munlock = sys_mlockall = sys_munlockall = sys_mlock

    def sys_mincore(self, addr: int, length: int, vec: int, *_: int) -> int:
        """Every page of the range is resident (one byte per page, 1); ``ENOMEM`` where one is
        not mapped, as Linux.  GNU grep's stack-overflow guard asks, walking down its stack."""
        if addr % PAGE:
            raise _GuestErrno(errno.EINVAL)
        end = page_up(addr + length)
        if end > self.mem.space or sum(hi - lo for lo, hi, _ in self.mem.regions(addr, end)) != end - addr:
            raise _GuestErrno(errno.ENOMEM)
        self.write(vec, b"\1" * ((end - addr) // PAGE))
        return 0

    # -- the thread and its TLS -------------------------------------------------------------------

    def sys_arch_prctl(self, code: int, addr: int, *_: int) -> int:
        reg = self.abi.tls_register
        if reg is None:
            raise _GuestErrno(errno.EINVAL)
        if code == ARCH_SET_FS:
            self.uc.reg_write(reg, addr)
            return 0
        if code == ARCH_GET_FS:
            self.write(addr, self.word.pack(self.uc.reg_read(reg)))
            return 0
        raise _GuestErrno(errno.EINVAL)

    def sys_set_tls(self, addr: int, *_: int) -> int:
        if self.abi.tls_register is None:
            raise _GuestErrno(errno.ENOSYS)
        self.uc.reg_write(self.abi.tls_register, addr)
        return 0

    def sys_set_thread_area(self, desc: int, *_: int) -> int:
        setter = self.abi.set_thread_area
        if setter is None:
            raise _GuestErrno(errno.ENOSYS)
        entry, base, limit, flags = struct.unpack(self.order + "iIII", self.read(desc, 16))
        if not self._gdt:
            self._gdt = self.mem.mmap(0, PAGE, 3, 0)
        got = setter(self.uc, self._gdt, base, limit, bool(flags & 0x10))  # bit 4: limit_in_pages
        if entry == -1:
            self.write(desc, struct.pack(self.order + "i", got))
        return 0

    def sys_cacheflush(self, *_: int) -> int:
        return 0  # ARM's: Unicorn sees written code anyway (kpsdk drops its translations)

    def sys_set_tid_address(self, *_: int) -> int:
        return PID

    def sys_set_robust_list(self, *_: int) -> int:
        return 0

    def sys_rseq(self, *_: int) -> int:
        return -errno.ENOSYS  # glibc runs without restartable sequences (it asks, then does without)

    def sys_riscv_hwprobe(self, *_: int) -> int:
        return -errno.ENOSYS  # a kernel before 6.4's answer: Debian 13's glibc then assumes the base ISA

    def sys_futex(self, addr: int, op: int, val: int, *_: int) -> int:
        if op & 0x7F == FUTEX_WAKE:
            return 0
        if op & 0x7F == FUTEX_WAIT and self.read_word(addr) & 0xFFFFFFFF != val & 0xFFFFFFFF:
            return -errno.EAGAIN
        raise NotEmulatedError("the program waits on a futex: only another thread could wake it, and "
                               "threads are not emulated yet on the Unicorn target")

    # -- ids, limits, time -----------------------------------------------------------------------

    def sys_getpid(self, *_: int) -> int:
        return PID

    sys_gettid = sys_getpgrp = sys_getpid

    def sys_getppid(self, *_: int) -> int:
        return PPID

    def sys_getpgid(self, *_: int) -> int:
        return PID

    sys_getsid = sys_getpgid

    def sys_setpgid(self, *_: int) -> int:
        return 0

    def sys_getuid(self, *_: int) -> int:
        return os.getuid()

    sys_geteuid = sys_getuid32 = sys_geteuid32 = sys_getuid

    def sys_getgid(self, *_: int) -> int:
        return os.getgid()

    sys_getegid = sys_getgid32 = sys_getegid32 = sys_getgid

    def sys_umask(self, *_: int) -> int:
        return 0o022

    def sys_sysinfo(self, buf: int, *_: int) -> int:
        """The machine's uptime, loads and memory (the host's: the program runs on it), one
        process (this one), no swap.  sort sizes its buffers from it; Python and bash ask too."""
        page = os.sysconf("SC_PAGE_SIZE")
        uptime = int(time.clock_gettime(time.CLOCK_BOOTTIME) + self.clock_skew)
        self.write(buf, structs.pack_sysinfo(self.arch.word_size, self.order, uptime, os.getloadavg(),
                                             os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page,
                                             1))
        return 0

    def sys_uname(self, buf: int, *_: int) -> int:
        self.write(buf, structs.pack_utsname(self.abi.machine, self.order))
        return 0

    def _limit(self, resource: int) -> tuple[int, int]:
        inf = (1 << 64) - 1
        return {RLIMIT_STACK: (8 << 20, inf), RLIMIT_NOFILE: (FdTable.LIMIT, FdTable.LIMIT)}.get(resource, (inf, inf))

    def sys_prlimit64(self, pid: int, resource: int, new: int, old: int, *_: int) -> int:
        if old:
            self.write(old, struct.pack(self.order + "QQ", *self._limit(resource)))
        return 0

    def sys_getrlimit(self, resource: int, buf: int, *_: int) -> int:
        mask = (1 << self.bits) - 1
        cur, top = self._limit(resource)
        self.write(buf, self.word.pack(min(cur, mask)) + self.word.pack(min(top, mask)))
        return 0

    sys_ugetrlimit = sys_getrlimit

    def sys_getrandom(self, buf: int, size: int, *_: int) -> int:
        size = min(size, 1 << 20)
        self.write(buf, os.urandom(size))
        return size

    def sys_sched_getaffinity(self, pid: int, size: int, mask: int, *_: int) -> int:
        if size < self.word.size:
            raise _GuestErrno(errno.EINVAL)
        self.write(mask, self.word.pack(1))  # one CPU: the one Unicorn emulates
        return self.word.size

    def _now(self, clock: int) -> float:
        now = time.monotonic() if clock in (1, 4, 7) else time.time()  # MONOTONIC, MONOTONIC_RAW, BOOTTIME
        return now + self.clock_skew

    def sys_clock_gettime(self, clock: int, ts: int, *_: int) -> int:
        now = self._now(clock)
        self.write(ts, self.word.pack(int(now)) + self.word.pack(int(now % 1 * 1e9)))
        return 0

    def sys_clock_gettime64(self, clock: int, ts: int, *_: int) -> int:
        now = self._now(clock)
        self.write(ts, struct.pack(self.order + "qq", int(now), int(now % 1 * 1e9)))
        return 0

    def sys_gettimeofday(self, tv: int, tz: int, *_: int) -> int:
        now = self._now(0)
        if tv:
            self.write(tv, self.word.pack(int(now)) + self.word.pack(int(now % 1 * 1e6)))
        return 0

    def sys_time(self, out: int, *_: int) -> int:
        now = int(self._now(0))
        if out:
            self.write(out, self.word.pack(now))
        return now

    def _sleep(self, req: int, wide: bool) -> int:
        sec, nsec = struct.unpack(self.order + "qq", self.read(req, 16)) if wide else \
            (self.read_word(req), self.read_word(req + self.word.size))
        self.clock_skew += sec + nsec / 1e9  # the clocks move on; nothing waits
        return 0

    def sys_nanosleep(self, req: int, *_: int) -> int:
        return self._sleep(req, self.bits == 64)

    def sys_clock_nanosleep(self, clock: int, flags: int, req: int, *_: int) -> int:
        return self._sleep(req, self.bits == 64)

    def sys_clock_nanosleep_time64(self, clock: int, flags: int, req: int, *_: int) -> int:
        return self._sleep(req, True)

    # -- signals: recorded, never delivered --------------------------------------------------------

    def sys_rt_sigaction(self, sig: int, act: int, oact: int, *_: int) -> int:
        if not 1 <= sig <= 64 or sig in (9, 19):  # SIGKILL and SIGSTOP cannot be caught
            raise _GuestErrno(errno.EINVAL)
        two = 2 * self.word.size  # the handler and the flags: the first two words on every arch
        old = self.sigactions.get(sig, bytes(two))
        if act:
            self.sigactions[sig] = self.read(act, two)
        if oact:
            self.write(oact, old)
        return 0

    def sys_rt_sigprocmask(self, how: int, new: int, old: int, size: int, *_: int) -> int:
        if old:
            self.write(old, bytes(min(size, 128)))
        return 0

    def sys_sigaltstack(self, new: int, old: int, *_: int) -> int:
        if old:
            self.write(old, self.word.pack(0) + self.word.pack(2) + self.word.pack(0))  # SS_DISABLE
        return 0

    def _signal(self, sig: int) -> int:
        if not sig:
            return 0
        name = SIGNALS.get(sig, f"signal {sig}")
        raise NotEmulatedError(f"the program sent itself {name}: signal delivery is not emulated yet on the "
                               "Unicorn target (run it with --target qemu-user)")

    def sys_kill(self, pid: int, sig: int, *_: int) -> int:
        return self._signal(sig)

    def sys_tgkill(self, tgid: int, tid: int, sig: int, *_: int) -> int:
        return self._signal(sig)

    def sys_tkill(self, tid: int, sig: int, *_: int) -> int:
        return self._signal(sig)

    def sys_prctl(self, option: int, arg: int, *_: int) -> int:
        if option == PR_SET_NAME:
            return 0
        if option == PR_GET_NAME:
            self.write(arg, os.fsencode(PurePosixPath(self.exe).name)[:15].ljust(16, b"\0"))
            return 0
        raise _GuestErrno(errno.EINVAL)

    def sys_wait4(self, *_: int) -> int:
        raise _GuestErrno(errno.ECHILD)

    # -- sockets: the layer makes none (socket() is not emulated) ---------------------------------

    def _not_a_socket(self, fd: int, *_: int) -> int:
        """``getsockname``, ``getpeername``, ``getsockopt`` of a descriptor: ``ENOTSOCK`` (``EBADF``
        when it is not open), as Linux answers for a file or a pipe.  Bash asks
        ``getpeername(0)`` at start-up: on any other answer it takes its input for a network
        connection and reads ``~/.bashrc``, whose commands start processes."""
        self.fds.get(self.sint(fd))
        raise _GuestErrno(errno.ENOTSOCK)

    sys_getsockname = sys_getpeername = sys_getsockopt = _not_a_socket

    def sys_socketcall(self, call: int, args: int, *_: int) -> int:
        """i386's and ppc64's one entry for the socket calls (glibc built for kernels before 4.3
        uses it): ``call`` is the call's number (include/uapi/linux/net.h), ``args`` its arguments."""
        name = SOCKETCALLS.get(call)
        if name is None:
            raise _GuestErrno(errno.EINVAL)  # no such call, as Linux
        if name in ("getsockname", "getpeername", "getsockopt"):
            return self._not_a_socket(self.read_word(args))
        self.unimplemented[name] += 1
        return -errno.ENOSYS

    # -- what needs another thread or process ---------------------------------------------------

    def _no_process(self, *_: int) -> int:
        raise NotEmulatedError("the program starts a thread or process (clone/fork/execve): threads, fork and "
                               "exec are not emulated yet on the Unicorn target (run it with --target qemu-user)")

    sys_clone = sys_clone3 = sys_fork = sys_vfork = sys_execve = _no_process


def _own_fd(entry: str) -> int:
    """N of the /proc/self entry ``fd/N`` (checked digits by ``_own_kind``)."""
    return int(entry.partition("/")[2])


def _pseudo_statfs(magic: int) -> dict[str, int]:
    """``statfs`` of a file system with no host side: kpsdk's pipes, the process's own /proc."""
    return {"f_type": magic, "f_bsize": PAGE, "f_namelen": 255, "f_frsize": PAGE}
