"""Reading, writing and seeking open descriptors: ``read``, ``write``, their vector and
positioned forms, ``sendfile``, ``lseek``.

What a description is (a sysroot file, the given stdin, the console, a pipe end, ``/dev/null``,
a file of the process's own /proc) is :class:`~kpsdk.targets.unicorn.linux.files.OpenFile`;
this moves the bytes, as Linux's read_write.c does: at most ``MAX_RW_COUNT`` at once, a
write stopping at the first unmapped page of its buffer.
"""

from __future__ import annotations

import errno
import os
import struct

import unicorn

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.memory import PAGE
from kpsdk.targets.unicorn.linux.pipes import _BrokenPipe

#: the most one read or write moves at once (Linux's MAX_RW_COUNT)
MAX_RW_COUNT = 0x7FFFF000
#: what one read from a host file brings at most (a short read: programs loop)
READ_CHUNK = 1 << 24
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2


class ReadWriteCalls(ProcessCore):
    """The calls that move bytes through a descriptor, and seek it."""

    def read_from(self, f: OpenFile, count: int, offset: int | None = None) -> bytes:
        """Up to ``count`` bytes of ``f`` (at ``offset``, or at its position, which moves)."""
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
            return f.pipe.read(count, bool(f.flags & self.o_nonblock))  # may wait (raises _Block)
        if f.kind == "null":
            return b""
        raise _GuestErrno(errno.EBADF)

    def write_to(self, f: OpenFile, data: bytes) -> int:
        """Write ``data`` to ``f``; how many bytes went."""
        if f.kind == "console":
            self.console += data
        elif f.kind == "pipe_w" and f.pipe is not None:
            try:
                return f.pipe.write(self.task, data, bool(f.flags & self.o_nonblock))  # may wait (raises _Block)
            except _BrokenPipe:
                from kpsdk.targets.unicorn.linux import signaling

                signaling.broken_pipe(self.kernel, self.task)
                raise _GuestErrno(errno.EPIPE) from None
        elif f.kind != "null":
            raise _GuestErrno(errno.EBADF)
        return len(data)

    def user_data(self, addr: int, count: int) -> bytes:
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

    def iovecs(self, iov: int, n: int) -> list[tuple[int, int]]:
        """The ``(base, length)`` pairs of an iovec array of ``n`` entries."""
        if self.sint(n) < 0 or n > 1024:
            raise _GuestErrno(errno.EINVAL)
        raw = self.read(iov, 2 * self.word.size * n) if n else b""
        words = [w for (w,) in self.word.iter_unpack(raw)]
        return list(zip(words[::2], words[1::2], strict=True))

    @syscall("read", "fd rbuf u")
    def sys_read(self, fd: int, buf: int, count: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        data = self.read_from(f, count)
        self.write(buf, data)
        return len(data)

    @syscall("pread64", "fd rbuf u d")
    def sys_pread64(self, fd: int, buf: int, count: int, *rest: int) -> int:
        f = self.fds.get(self.sint(fd))
        offset = self.pair((fd, buf, count, *rest), 3)
        data = self.read_from(f, count, offset)
        self.write(buf, data)
        return len(data)

    @syscall("readv")
    def sys_readv(self, fd: int, iov: int, n: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        total = 0
        for base, size in self.iovecs(iov, n):
            data = self.read_from(f, size)
            self.write(base, data)
            total += len(data)
            if len(data) < size:
                break
        return total

    @syscall("write", "fd wbuf u")
    def sys_write(self, fd: int, buf: int, count: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        return self.write_to(f, self.user_data(buf, count))

    @syscall("writev")
    def sys_writev(self, fd: int, iov: int, n: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        data = b"".join(self.user_data(base, size) for base, size in self.iovecs(iov, n) if size)
        return self.write_to(f, data)

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
            data = self.read_from(src, count, offset)
            self.write(offset_ptr, struct.pack(fmt, offset + len(data)))
        else:
            data = self.read_from(src, count)
        return self.write_to(out, data)

    @syscall("sendfile", "fd fd p u")
    def sys_sendfile(self, out_fd: int, in_fd: int, offset: int, count: int, *_: int) -> int:
        return self._sendfile(out_fd, in_fd, offset, count, "q" if self.bits == 64 else "i")

    @syscall("sendfile64", "fd fd p u")
    def sys_sendfile64(self, out_fd: int, in_fd: int, offset: int, count: int, *_: int) -> int:
        return self._sendfile(out_fd, in_fd, offset, count, "q")

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

    @syscall("lseek", "fd d whence")
    def sys_lseek(self, fd: int, offset: int, whence: int, *_: int) -> int:
        return self._seek(self.fds.get(self.sint(fd)), self.sint(offset, self.bits), whence)

    @syscall("_llseek")
    def sys_llseek(self, fd: int, hi: int, lo: int, result: int, whence: int, *_: int) -> int:
        offset = self.sint((hi << 32) | lo, 64)
        pos = self._seek(self.fds.get(self.sint(fd)), offset, whence)
        self.write(result, struct.pack(self.order + "q", pos))
        return 0
