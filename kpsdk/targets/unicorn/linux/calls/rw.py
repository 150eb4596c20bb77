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
from kpsdk.targets.unicorn.linux.files import O_APPEND, OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import MemFile, MemSpecial
from kpsdk.targets.unicorn.linux.memory import PAGE
from kpsdk.targets.unicorn.linux.pipes import _BrokenPipe
from kpsdk.targets.unicorn.linux.waits import _Block

#: the most one read or write moves at once (Linux's MAX_RW_COUNT)
MAX_RW_COUNT = 0x7FFFF000
#: what one read from a host file brings at most (a short read: programs loop)
READ_CHUNK = 1 << 24
SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE = 0, 1, 2, 3, 4
#: the kinds whose descriptors are read or written as their open flags allow
FILES = frozenset({"host", "mem", "dev", "null", "fifo", "dir", "path"})



class ReadWriteCalls(ProcessCore):
    """The calls that move bytes through a descriptor, and seek it."""

    def read_from(self, f: OpenFile, count: int, offset: int | None = None) -> bytes:
        """Up to ``count`` bytes of ``f`` (at ``offset``, or at its position, which moves)."""
        count = min(count, MAX_RW_COUNT)
        if offset is not None:
            self.checked_position(offset, count)
        kind = f.kind
        if f.obj is not None:  # a socket, eventfd, timerfd, signalfd, epoll: its own read (may wait)
            if offset is not None:
                raise _GuestErrno(errno.ESPIPE)
            return f.obj.read(self, f, count)
        if kind in FILES and not f.readable:
            raise _GuestErrno(errno.EBADF)
        if kind == "host":
            n = min(count, READ_CHUNK)
            try:
                return os.pread(f.fd, n, offset) if offset is not None else os.read(f.fd, n)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EIO) from None
        if kind == "mem":
            assert isinstance(f.node, MemFile)
            at = f.pos if offset is None else offset
            data = bytes(f.node.data[at:at + count])
            if offset is None:
                f.pos += len(data)
            return data
        if kind == "procfile":  # a file of the process's own /proc: its bytes, made at open
            at = f.pos if offset is None else offset
            data = f.data[at:at + count]
            if offset is None:
                f.pos += len(data)
            return data
        if kind == "dir":
            raise _GuestErrno(errno.EISDIR)
        if kind == "dev":
            assert isinstance(f.node, MemSpecial)
            n = min(count, READ_CHUNK)
            return os.urandom(n) if f.node.device in ("random", "urandom") else bytes(n)
        if kind == "null":
            return b""
        if offset is not None:
            raise _GuestErrno(errno.ESPIPE)
        if kind == "stdin":
            data = f.data[f.pos:f.pos + count]
            f.pos += len(data)
            return data
        if kind == "fifo" and f.fifo is not None:
            return f.fifo.read(count, bool(f.flags & self.o_nonblock))  # may wait (raises _Block)
        if kind == "pipe_r" and f.pipe is not None:
            return f.pipe.read(count, bool(f.flags & self.o_nonblock))  # may wait (raises _Block)
        raise _GuestErrno(errno.EBADF)

    def write_to(self, f: OpenFile, data: bytes, offset: int | None = None) -> int:
        """Write ``data`` to ``f`` (at ``offset``, or at its position, which moves); how many bytes went."""
        if offset is not None:
            self.checked_position(offset, len(data))
        kind = f.kind
        if f.obj is not None:  # a socket, eventfd...: its own write (may wait)
            if offset is not None:
                raise _GuestErrno(errno.ESPIPE)
            return f.obj.write(self, f, data)
        if kind in FILES and not f.writable:
            raise _GuestErrno(errno.EBADF)
        if kind == "mem":
            assert isinstance(f.node, MemFile)
            node = f.node
            at = len(node.data) if f.flags & O_APPEND else f.pos if offset is None else offset
            end = at + len(data)
            if end > len(node.data):
                self.root.counter.grow(end - len(node.data))
                node.data.extend(bytes(at - len(node.data)) if at > len(node.data) else b"")
            node.data[at:end] = data
            if offset is None:
                f.pos = end
            if data:
                node.mtime = node.ctime = self.root.counter.clock()
            return len(data)
        if kind == "host":
            try:
                return os.pwrite(f.fd, data, offset) if offset is not None and not f.flags & O_APPEND \
                    else os.write(f.fd, data)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EIO) from None
        if kind == "dir":
            raise _GuestErrno(errno.EISDIR)
        if kind == "dev":
            assert isinstance(f.node, MemSpecial)
            if f.node.device == "full":
                raise _GuestErrno(errno.ENOSPC)
            return len(data)
        if kind == "null":
            return len(data)
        if offset is not None:
            raise _GuestErrno(errno.ESPIPE)
        if kind == "console":
            try:
                self.console.write(data, f.stream)
            except OSError as e:  # the destination's own error: EPIPE (and SIGPIPE) when its reader is gone
                if e.errno == errno.EPIPE:
                    from kpsdk.targets.unicorn.linux import signaling

                    signaling.broken_pipe(self.kernel, self.task)
                raise _GuestErrno(e.errno or errno.EIO) from None
        elif kind in ("pipe_w", "fifo") and (f.pipe or f.fifo) is not None:
            pipe = f.pipe or f.fifo
            assert pipe is not None
            try:
                return pipe.write(self.task, data, bool(f.flags & self.o_nonblock))  # may wait (raises _Block)
            except _BrokenPipe:
                from kpsdk.targets.unicorn.linux import signaling

                signaling.broken_pipe(self.kernel, self.task)
                raise _GuestErrno(errno.EPIPE) from None
        else:
            raise _GuestErrno(errno.EBADF)
        return len(data)

    def user_data(self, addr: int, count: int) -> bytes:
        """What a write passes: up to ``count`` bytes, page by page to the first unmapped one."""
        out = bytearray()
        count = min(count, MAX_RW_COUNT)
        table = self.mem.table
        while len(out) < count:
            at = addr + len(out)
            take = min(count - len(out), PAGE - at % PAGE)
            if table.arenas and table.in_hole(at, take):  # unmapped, though in the engine's arena
                break
            try:
                out += self.uc.mem_read(at, take)
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

    @syscall("pread64", "fd rbuf u off64")
    def sys_pread64(self, fd: int, buf: int, count: int, *rest: int) -> int:
        offset = self.position((fd, buf, count, *rest), 3)  # Linux checks it first, before the fd
        f = self.fds.get(self.sint(fd))
        data = self.read_from(f, count, offset)
        self.write(buf, data)
        return len(data)

    @syscall("pwrite64", "fd wbuf u off64")
    def sys_pwrite64(self, fd: int, buf: int, count: int, *rest: int) -> int:
        offset = self.position((fd, buf, count, *rest), 3)
        f = self.fds.get(self.sint(fd))
        return self.write_to(f, self.user_data(buf, count), offset)

    def _vector_offset(self, lo: int, hi: int) -> int:
        """preadv's position: two words on every arch, the high one shifted out on a 64-bit one."""
        return self.sint(lo if self.bits == 64 else (hi << 32) | lo, 64)

    def _preadv(self, fd: int, iov: int, n: int, offset: int | None) -> int:
        f = self.fds.get(self.sint(fd))
        if offset is not None and offset < 0:
            raise _GuestErrno(errno.EINVAL)
        total = 0
        for base, size in self.iovecs(iov, n):
            data = self.read_from(f, size, None if offset is None else offset + total)
            self.write(base, data)
            total += len(data)
            if len(data) < size:
                break
        return total

    def _pwritev(self, fd: int, iov: int, n: int, offset: int | None) -> int:
        f = self.fds.get(self.sint(fd))
        if offset is not None and offset < 0:
            raise _GuestErrno(errno.EINVAL)
        data = b"".join(self.user_data(base, size) for base, size in self.iovecs(iov, n) if size)
        return self.write_to(f, data, offset)

    @syscall("preadv", "fd p d d")
    def sys_preadv(self, fd: int, iov: int, n: int, lo: int, hi: int, *_: int) -> int:
        return self._preadv(fd, iov, n, self._vector_offset(lo, hi))

    @syscall("pwritev", "fd p d d")
    def sys_pwritev(self, fd: int, iov: int, n: int, lo: int, hi: int, *_: int) -> int:
        return self._pwritev(fd, iov, n, self._vector_offset(lo, hi))

    @syscall("preadv2", "fd p d d d x")
    def sys_preadv2(self, fd: int, iov: int, n: int, lo: int, hi: int, flags: int, *_: int) -> int:
        """preadv with flags (RWF_*: none taken but 0) and -1 for the file's own position."""
        if flags:
            raise _GuestErrno(errno.EOPNOTSUPP)
        offset = self._vector_offset(lo, hi)
        return self._preadv(fd, iov, n, None if offset == -1 else offset)

    @syscall("pwritev2", "fd p d d d x")
    def sys_pwritev2(self, fd: int, iov: int, n: int, lo: int, hi: int, flags: int, *_: int) -> int:
        if flags:
            raise _GuestErrno(errno.EOPNOTSUPP)
        offset = self._vector_offset(lo, hi)
        return self._pwritev(fd, iov, n, None if offset == -1 else offset)

    @syscall("copy_file_range", "fd p fd p u x")
    def sys_copy_file_range(self, in_fd: int, in_off: int, out_fd: int, out_off: int, count: int,
                            flags: int, *_: int) -> int:
        """Copy between two regular files (coreutils' cp tries this first): as a read and a write,
        at the given offsets (advanced) or the files' positions."""
        src, dst = self.fds.get(self.sint(in_fd)), self.fds.get(self.sint(out_fd))
        if flags:
            raise _GuestErrno(errno.EINVAL)
        for f in (src, dst):
            if f.kind == "dir":
                raise _GuestErrno(errno.EISDIR)
            if f.kind not in ("host", "mem"):
                raise _GuestErrno(errno.EINVAL)
        if not src.readable or not dst.writable or dst.flags & O_APPEND:
            raise _GuestErrno(errno.EBADF)
        offsets = []
        for ptr in (in_off, out_off):
            at = struct.unpack(self.order + "q", self.read(ptr, 8))[0] if ptr else None
            if at is not None and at < 0:
                raise _GuestErrno(errno.EINVAL)
            offsets.append(at)
        data = self.read_from(src, min(count, READ_CHUNK), offsets[0])
        done = self.write_to(dst, data, offsets[1]) if data else 0
        for ptr, at in zip((in_off, out_off), offsets, strict=True):
            if ptr and at is not None:
                self.write(ptr, struct.pack(self.order + "q", at + done))
        if offsets[0] is None and done < len(data):
            self._seek(src, done - len(data), SEEK_CUR)  # what was read and not written is read again
        return done

    @syscall("readv", "fd p u")
    def sys_readv(self, fd: int, iov: int, n: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        vectors = self.iovecs(iov, n)
        if f.obj is not None:  # one read for them all: a datagram is one message, and a wait re-runs it whole
            data = self.read_from(f, sum(size for _, size in vectors))
            at = 0
            for base, size in vectors:
                self.write(base, data[at:at + size])
                at += size
            return len(data)
        total = 0
        for base, size in vectors:
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

    @syscall("writev", "fd p u")
    def sys_writev(self, fd: int, iov: int, n: int, *_: int) -> int:
        f = self.fds.get(self.sint(fd))
        data = b"".join(self.user_data(base, size) for base, size in self.iovecs(iov, n) if size)
        return self.write_to(f, data)

    def _sendfile(self, out_fd: int, in_fd: int, offset_ptr: int, count: int, offset_code: str) -> int:
        """Copy up to ``count`` bytes from ``in_fd`` (at ``*offset_ptr``, which is advanced, or
        at its position) to ``out_fd``: busybox ``cat`` tries this before read/write."""
        out = self.fds.get(self.sint(out_fd))
        src = self.fds.get(self.sint(in_fd))
        if src.kind not in ("host", "mem", "procfile", "dev", "null"):
            raise _GuestErrno(errno.EINVAL)
        if out.flags & O_APPEND:
            raise _GuestErrno(errno.EINVAL)
        if offset_ptr:
            fmt = self.order + offset_code
            (offset,) = struct.unpack(fmt, self.read(offset_ptr, struct.calcsize(fmt)))
            if offset < 0:
                raise _GuestErrno(errno.EINVAL)
            data = self.read_from(src, count, offset)
            done = self.write_to(out, data) if data else 0  # may wait (a full socket or pipe): nothing moved yet
            self.write(offset_ptr, struct.pack(fmt, offset + done))
            return done
        data = self.read_from(src, count)
        try:
            done = self.write_to(out, data) if data else 0
        except (_Block, _GuestErrno):
            self._seek(src, -len(data), SEEK_CUR)  # the call runs again (or fails): its input is unread
            raise
        if done < len(data):  # a short write (a non-blocking socket): what did not go is read again next time
            self._seek(src, done - len(data), SEEK_CUR)
        return done

    @syscall("sendfile", "fd fd p u")
    def sys_sendfile(self, out_fd: int, in_fd: int, offset: int, count: int, *_: int) -> int:
        return self._sendfile(out_fd, in_fd, offset, count, "q" if self.bits == 64 else "i")

    @syscall("sendfile64", "fd fd p u")
    def sys_sendfile64(self, out_fd: int, in_fd: int, offset: int, count: int, *_: int) -> int:
        return self._sendfile(out_fd, in_fd, offset, count, "q")

    def _seek(self, f: OpenFile, offset: int, whence: int) -> int:
        kind = f.kind
        if kind == "dir":  # its position is getdents64's cookie (rewinddir: 0, the listing read anew)
            if whence != SEEK_SET or offset < 0:
                raise _GuestErrno(errno.EINVAL)
            f.pos = offset
            if not offset:
                f.entries = None
            return offset
        if kind == "host":
            try:
                return os.lseek(f.fd, offset, whence)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.EINVAL) from None
        if kind in ("null", "dev"):
            return 0  # drivers/char/mem.c's null_lseek
        if kind == "path":
            raise _GuestErrno(errno.EBADF)
        if kind not in ("stdin", "procfile", "mem"):
            raise _GuestErrno(errno.ESPIPE)
        size = len(f.node.data) if kind == "mem" and isinstance(f.node, MemFile) else len(f.data)
        if whence in (SEEK_DATA, SEEK_HOLE) and kind == "mem":
            if not 0 <= offset < size:
                raise _GuestErrno(errno.ENXIO)  # the overlay's files are all data: one hole, at the end
            f.pos = offset if whence == SEEK_DATA else size
            return f.pos
        base = {SEEK_SET: 0, SEEK_CUR: f.pos, SEEK_END: size}.get(whence)
        if base is None:
            raise _GuestErrno(errno.EINVAL)
        f.pos = self.checked_position(base + offset)  # vfs_setpos: within [0, LLONG_MAX]
        return f.pos

    def _seek_fd(self, fd: int, offset: int, whence: int) -> int:
        """lseek's order of checks (ksys_lseek): the descriptor, then ``whence`` (an unsigned
        int: SEEK_SET to SEEK_HOLE), then the file's own."""
        f = self.fds.get(self.sint(fd))
        whence &= 0xFFFFFFFF
        if whence > SEEK_HOLE:
            raise _GuestErrno(errno.EINVAL)
        return self._seek(f, offset, whence)

    @syscall("lseek", "fd ld whence")
    def sys_lseek(self, fd: int, offset: int, whence: int, *_: int) -> int:
        pos = self._seek_fd(fd, self.sint(offset, self.bits), whence)
        if pos > self.arch.word_mask >> 1:
            raise _GuestErrno(errno.EOVERFLOW)  # a 32-bit arch's lseek: use _llseek past 2 GiB
        return pos

    @syscall("_llseek", "fd llseekoff loffout whence")
    def sys_llseek(self, fd: int, hi: int, lo: int, result: int, whence: int, *_: int) -> int:
        offset = self.sint(((hi & 0xFFFFFFFF) << 32) | (lo & 0xFFFFFFFF), 64)
        pos = self._seek_fd(fd, offset, whence)
        self.write(result, struct.pack(self.order + "q", pos))
        return 0
