"""Moving messages through sockets: ``send``, ``sendto``, ``sendmsg``, ``sendmmsg`` and their
``recv`` forms (net/socket.c, net/core/scm.c).

The sockets themselves are :mod:`kpsdk.targets.unicorn.linux.net`'s; these calls read and
write what the program passes: addresses (at most ``sockaddr_storage``'s 128 bytes, given
back cut to the caller's length with the full length written), ``struct msghdr`` (the
arch's words), iovecs, and control messages (``cmsghdr``, aligned to a word): SCM_RIGHTS
passes open file descriptions, installed in the receiver's table as new descriptors
(MSG_CMSG_CLOEXEC marks them), cut to the room given with MSG_CTRUNC as Linux's
``scm_detach_fds``; SCM_CREDENTIALS is checked on the way out and given on the way in to a
socket with SO_PASSCRED.  ``sendmmsg`` and ``recvmmsg`` wait for their first message only:
one that would wait after it ends the call with the count so far.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from stat import S_ISSOCK

from kpsdk.targets.unicorn.linux.calls.core import AT_FDCWD
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.paths import PathCalls
from kpsdk.targets.unicorn.linux.files import OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import MAY_W
from kpsdk.targets.unicorn.linux.memory import PAGE
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.net.addrs import parse_inet, unix_name, unix_path
from kpsdk.targets.unicorn.linux.net.inet import InetSocket
from kpsdk.targets.unicorn.linux.net.sock import Received, Socket, drop
from kpsdk.targets.unicorn.linux.net.tcp import TcpSocket
from kpsdk.targets.unicorn.linux.net.unix import UnixSocket
from kpsdk.targets.unicorn.linux.waits import _Block

#: the most iovecs a message takes (UIO_MAXIOV), and messages one sendmmsg/recvmmsg takes
UIO_MAXIOV = 1024
#: the most one send moves (INT_MAX, as __sys_sendto cuts it), and the largest control buffer
#: (net.core.optmem_max: ENOBUFS beyond)
MAX_SEND, OPTMEM_MAX = 0x7FFFFFFF, 131072


class MsgCalls(PathCalls):
    """The calls that send and receive, and what the socket calls share."""

    # -- what the socket calls share -----------------------------------------------------------------

    def socket_of(self, fd: int) -> tuple[OpenFile, Socket]:
        """The description and socket of ``fd``: EBADF, ENOTSOCK."""
        f = self.fds.get(self.sint(fd))
        if not isinstance(f.obj, Socket):
            raise _GuestErrno(errno.ENOTSOCK)
        return f, f.obj

    def sockaddr_in(self, addr: int, length: int) -> bytes:
        """The address the program passes (move_addr_to_kernel: EINVAL out of 0..128)."""
        n = self.sint(length)
        if not 0 <= n <= c.SOCKADDR_MAX:
            raise _GuestErrno(errno.EINVAL)
        return self.read(addr, n) if n else b""

    def sockaddr_out(self, addr: int, lenptr: int, raw: bytes) -> None:
        """Give ``raw`` back cut to ``*lenptr``, and its whole length in ``*lenptr`` (move_addr_to_user)."""
        (room,) = struct.unpack(self.order + "i", self.read(lenptr, 4))
        if room < 0:
            raise _GuestErrno(errno.EINVAL)
        if room and raw:
            self.write(addr, raw[:room])
        self.write(lenptr, struct.pack(self.order + "i", len(raw)))

    def unix_finder(self, sock: UnixSocket, name: bytes) -> Callable[[], UnixSocket]:
        """What finds the socket bound to ``name`` when the call gets there (unix_find_other):
        ENOENT (no such path), EACCES (no write permission), ECONNREFUSED (no socket bound
        there, or not listening), EPROTOTYPE (another type)."""
        def find() -> UnixSocket:
            path = unix_path(name)
            if path is None:
                other = sock.net.abstract.get((name, sock.stype))
                if other is None:
                    raise _GuestErrno(errno.ECONNREFUSED)
                return other
            ref = self.lookup(AT_FDCWD, path)
            node = ref.node
            if node is None:
                raise _GuestErrno(errno.ENOENT)
            self.root.cred.check(node, MAY_W)
            found = sock.net.paths.get(id(node))
            if not S_ISSOCK(getattr(node, "mode", 0)) or found is None:
                raise _GuestErrno(errno.ECONNREFUSED)
            if found[1].stype != sock.stype:
                raise _GuestErrno(errno.EPROTOTYPE)
            return found[1]
        return find

    def destination(self, sock: Socket, raw: bytes) -> object:
        """Where a ``sendto``/``sendmsg`` address sends (None: no address)."""
        if not raw:
            return None
        if isinstance(sock, UnixSocket):
            if sock.stype == 1:
                return True  # a stream refuses any address (EISCONN/EOPNOTSUPP)
            return self.unix_finder(sock, unix_name(raw, self.order))
        if isinstance(sock, TcpSocket):
            return None  # TCP ignores it
        assert isinstance(sock, InetSocket)
        return parse_inet(raw, sock.family, self.order)

    # -- messages ---------------------------------------------------------------------------------

    def _user_bytes(self, addr: int, count: int) -> bytes:
        """What a send passes: ``count`` bytes (at most INT_MAX), read page by page; EFAULT at
        the first page not mapped."""
        out = bytearray()
        count = min(count, MAX_SEND)
        while len(out) < count:
            at = addr + len(out)
            out += self.read(at, min(count - len(out), PAGE - at % PAGE))
        return bytes(out)

    def _msghdr(self, addr: int) -> tuple[int, int, int, int, int, int, int]:
        """``struct msghdr``: name, namelen, iov, iovlen, control, controllen, flags."""
        w = self.word.size
        raw = self.read(addr, 7 * w)
        words = [self.word.unpack(raw[i * w:(i + 1) * w])[0] for i in range(7)]
        namelen = struct.unpack(self.order + "I", raw[w:w + 4])[0]  # a socklen_t, then padding to a word
        flags = struct.unpack(self.order + "i", raw[6 * w:6 * w + 4])[0]
        return words[0], namelen, words[2], words[3], words[4], words[5], flags

    def _vectors(self, iov: int, n: int) -> list[tuple[int, int]]:
        if n > UIO_MAXIOV:
            raise _GuestErrno(errno.EMSGSIZE)
        raw = self.read(iov, 2 * self.word.size * n) if n else b""
        words = [w for (w,) in self.word.iter_unpack(raw)]
        return list(zip(words[::2], words[1::2], strict=True))

    def _rights(self, sock: Socket, control: int, length: int) -> list[OpenFile]:
        """The descriptions an SCM_RIGHTS control message passes (EINVAL for a malformed one,
        EBADF for a closed descriptor); SCM_CREDENTIALS checked (EPERM for another's)."""
        fds: list[OpenFile] = []
        if length > OPTMEM_MAX:
            raise _GuestErrno(errno.ENOBUFS)
        w = self.word.size
        head = w + 8
        sol_socket = c.abi(self.arch.name).sol_socket
        at = 0
        while at + head <= length:
            cmsg_len = self.word.unpack(self.read(control + at, w))[0]
            level, kind = struct.unpack(self.order + "ii", self.read(control + at + w, 8))
            if cmsg_len < head or cmsg_len > length - at:
                raise _GuestErrno(errno.EINVAL)
            body = self.read(control + at + head, cmsg_len - head)
            if level != sol_socket:
                if isinstance(sock, UnixSocket):
                    raise _GuestErrno(errno.EINVAL)
            elif kind == c.SCM_RIGHTS:
                if not isinstance(sock, UnixSocket):
                    raise _GuestErrno(errno.EINVAL)
                numbers = [n for (n,) in struct.iter_unpack(self.order + "i", body[:len(body) // 4 * 4])]
                if not numbers or len(fds) + len(numbers) > c.SCM_MAX_FD:
                    raise _GuestErrno(errno.EINVAL)
                fds += [self.fds.get(n) for n in numbers]
            elif kind == c.SCM_CREDENTIALS:
                if not isinstance(sock, UnixSocket) or len(body) < 12:
                    raise _GuestErrno(errno.EINVAL)
                pid, uid, gid = struct.unpack(self.order + "iII", body[:12])
                cred = self.root.cred
                if (pid != self.pid or uid != cred.uid or gid != cred.gid) and cred.uid != 0:
                    raise _GuestErrno(errno.EPERM)
            else:
                raise _GuestErrno(errno.EINVAL)
            at += -(-cmsg_len // w) * w
        return fds

    def _send(self, fd: int, data: bytes, raw: bytes, fds: list[OpenFile], flags: int) -> int:
        f, sock = self.socket_of(fd)
        dest = self.destination(sock, raw)
        return sock.sendmsg(self, data, dest, fds, flags, bool(f.flags & self.o_nonblock))

    @syscall("sendto", "fd wbuf u x p d")
    def sys_sendto(self, fd: int, buf: int, length: int, flags: int, addr: int, alen: int, *_: int) -> int:
        data = self._user_bytes(buf, length)
        raw = self.sockaddr_in(addr, alen) if addr else b""
        return self._send(fd, data, raw, [], flags & 0xFFFFFFFF)

    @syscall("send", "fd wbuf u x")
    def sys_send(self, fd: int, buf: int, length: int, flags: int, *_: int) -> int:
        return self.sys_sendto(fd, buf, length, flags, 0, 0)

    def _sendmsg(self, fd: int, msg: int, flags: int) -> int:
        name, namelen, iov, iovlen, control, controllen, _ = self._msghdr(msg)
        data = b"".join(self._user_bytes(base, size) for base, size in self._vectors(iov, iovlen) if size)
        raw = self.sockaddr_in(name, namelen) if name else b""
        sock = self.socket_of(fd)[1]
        fds = self._rights(sock, control, controllen) if controllen else []
        return self._send(fd, data, raw, fds, flags & 0xFFFFFFFF)

    @syscall("sendmsg", "fd p x")
    def sys_sendmsg(self, fd: int, msg: int, flags: int, *_: int) -> int:
        return self._sendmsg(fd, msg, flags)

    @property
    def _mmsghdr(self) -> int:
        return 7 * self.word.size + self.word.size  # struct msghdr and msg_len, padded to a word

    @syscall("sendmmsg", "fd p u x")
    def sys_sendmmsg(self, fd: int, vec: int, vlen: int, flags: int, *_: int) -> int:
        sent = 0
        for i in range(min(vlen & 0xFFFFFFFF, UIO_MAXIOV)):
            at = vec + i * self._mmsghdr
            try:
                n = self._sendmsg(fd, at, flags | (c.MSG_DONTWAIT if sent else 0))
            except (_GuestErrno, _Block):
                if sent:
                    return sent
                raise
            self.write(at + 7 * self.word.size, struct.pack(self.order + "I", n))
            sent += 1
        return sent

    # -- receiving --------------------------------------------------------------------------------

    def _recv(self, fd: int, size: int, flags: int) -> Received:
        f, sock = self.socket_of(fd)
        if self.sint(size) < 0:
            size = 0x7FFFFFFF
        return sock.recvmsg(self, min(size, 0x7FFFF000), flags, bool(f.flags & self.o_nonblock))

    @syscall("recvfrom", "fd rbuf u x p p")
    def sys_recvfrom(self, fd: int, buf: int, length: int, flags: int, addr: int, alen: int, *_: int) -> int:
        got = self._recv(fd, length, flags & 0xFFFFFFFF)
        for passed in got.fds:
            drop(passed)
        if got.data:
            self.write(buf, got.data)
        if addr:
            self.sockaddr_out(addr, alen, got.name or b"")
        return got.length

    @syscall("recv", "fd rbuf u x")
    def sys_recv(self, fd: int, buf: int, length: int, flags: int, *_: int) -> int:
        return self.sys_recvfrom(fd, buf, length, flags, 0, 0)

    def _recvmsg(self, fd: int, msg: int, flags: int) -> int:
        name, namelen, iov, iovlen, control, controllen, _ = self._msghdr(msg)
        vectors = self._vectors(iov, iovlen)
        got = self._recv(fd, sum(size for _, size in vectors), flags)
        at = 0
        for base, size in vectors:
            if at >= len(got.data):
                break
            self.write(base, got.data[at:at + size])
            at += size
        w = self.word.size
        if name:
            raw = got.name or b""
            if raw:
                self.write(name, raw[:namelen])
            self.write(msg + w, struct.pack(self.order + "I", len(raw)))
        used, ctrunc = self._control_out(got, control, controllen, bool(flags & c.MSG_CMSG_CLOEXEC))
        self.write(msg + 5 * w, self.word.pack(used))
        self.write(msg + 6 * w, struct.pack(self.order + "i", got.flags | ctrunc))
        return got.length

    def _control_out(self, got: Received, control: int, room: int, cloexec: bool) -> tuple[int, int]:
        """Write the control messages (SCM_CREDENTIALS, then SCM_RIGHTS with the descriptors
        installed now); (bytes used, MSG_CTRUNC or 0).  Descriptors that do not fit are closed."""
        w = self.word.size
        head = w + 8
        sol_socket = c.abi(self.arch.name).sol_socket
        used, ctrunc = 0, 0
        if got.creds is not None:
            length = head + 12
            if room - used < head:
                ctrunc = c.MSG_CTRUNC
            else:
                body = struct.pack(self.order + "iII", *got.creds)
                cmsg = self.word.pack(length) + struct.pack(self.order + "ii", sol_socket, c.SCM_CREDENTIALS) + body
                fit = min(len(cmsg), room - used)
                if fit < len(cmsg):
                    ctrunc = c.MSG_CTRUNC
                self.write(control + used, cmsg[:fit])
                used += min(-(-length // w) * w, room - used)
        if got.fds:
            space = room - used
            fdmax = (space - head) // 4 if space > head else 0
            numbers: list[int] = []
            for f in got.fds[:max(fdmax, 0)]:
                try:
                    numbers.append(self.fds.install(f, cloexec=cloexec))
                except _GuestErrno:
                    break
            for f in got.fds:
                drop(f)  # the in-flight hold: installed ones keep their descriptor's
            if numbers:
                length = head + 4 * len(numbers)
                header = self.word.pack(length) + struct.pack(self.order + "ii", sol_socket, c.SCM_RIGHTS)
                self.write(control + used, header + struct.pack(self.order + f"{len(numbers)}i", *numbers))
                used += min(-(-length // w) * w, space)
            if len(numbers) < len(got.fds):
                ctrunc = c.MSG_CTRUNC
        return used, ctrunc

    @syscall("recvmsg", "fd p x")
    def sys_recvmsg(self, fd: int, msg: int, flags: int, *_: int) -> int:
        return self._recvmsg(fd, msg, flags & 0xFFFFFFFF)

    def _recvmmsg(self, fd: int, vec: int, vlen: int, flags: int) -> int:
        got = 0
        for i in range(min(vlen & 0xFFFFFFFF, UIO_MAXIOV)):
            at = vec + i * self._mmsghdr
            try:
                n = self._recvmsg(fd, at, (flags & ~c.MSG_WAITFORONE) | (c.MSG_DONTWAIT if got else 0))
            except (_GuestErrno, _Block):
                if got:
                    return got
                raise
            self.write(at + 7 * self.word.size, struct.pack(self.order + "I", n))
            got += 1
        return got

    @syscall("recvmmsg", "fd p u x p")
    def sys_recvmmsg(self, fd: int, vec: int, vlen: int, flags: int, timeout: int, *_: int) -> int:
        return self._recvmmsg(fd, vec, vlen, flags & 0xFFFFFFFF)

    @syscall("recvmmsg_time64", "fd p u x p")
    def sys_recvmmsg_time64(self, fd: int, vec: int, vlen: int, flags: int, timeout: int, *_: int) -> int:
        return self._recvmmsg(fd, vec, vlen, flags & 0xFFFFFFFF)
