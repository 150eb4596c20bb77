"""Sockets: ``socket``, ``socketpair``, ``bind``, ``listen``, ``accept``/``accept4``, ``connect``,
``shutdown``, ``getsockname``/``getpeername``, ``setsockopt``/``getsockopt``, and i386's and
ppc64's ``socketcall`` (net/socket.c).

AF_UNIX (stream, datagram, seqpacket) and AF_INET/AF_INET6 (TCP, UDP) sockets are made
(:mod:`kpsdk.targets.unicorn.linux.net`), between the processes of the session only: a guest
never reaches the host's network nor a host's socket file.  Another family (AF_NETLINK,
AF_PACKET...) is ``EAFNOSUPPORT`` and recorded in ``syscalls_unimplemented`` as
``socket(FAMILY)``; a raw IP socket is ``EPERM`` (``ESOCKTNOSUPPORT`` for root).  An AF_UNIX
path name is a socket node made in the session's file system (``EADDRINUSE`` when the name
exists; ``unlink`` removes it), reached again through that node.  The socket type's
``SOCK_NONBLOCK`` and ``SOCK_CLOEXEC`` bits are the arch's ``O_NONBLOCK`` and ``O_CLOEXEC``,
its numbers the arch's (MIPS swaps stream and datagram).
"""

from __future__ import annotations

import errno
import stat
import struct

from kpsdk.targets.unicorn.linux.calls.core import AT_FDCWD
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.msgs import MsgCalls
from kpsdk.targets.unicorn.linux.fileobj import install
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.net import network
from kpsdk.targets.unicorn.linux.net.addrs import ANY4, InetAddr, family_of, parse_inet, unix_name, unix_path
from kpsdk.targets.unicorn.linux.net.inet import InetSocket
from kpsdk.targets.unicorn.linux.net.sock import DGRAM, SEQPACKET, STREAM, Socket
from kpsdk.targets.unicorn.linux.net.tcp import TcpSocket
from kpsdk.targets.unicorn.linux.net.udp import UdpSocket
from kpsdk.targets.unicorn.linux.net.unix import SOMAXCONN, UnixSocket

#: socketcall(2)'s call numbers (include/uapi/linux/net.h) and how many arguments each takes
SOCKETCALLS = {1: ("socket", 3), 2: ("bind", 3), 3: ("connect", 3), 4: ("listen", 2), 5: ("accept", 3),
               6: ("getsockname", 3), 7: ("getpeername", 3), 8: ("socketpair", 4), 9: ("send", 4),
               10: ("recv", 4), 11: ("sendto", 6), 12: ("recvfrom", 6), 13: ("shutdown", 2),
               14: ("setsockopt", 5), 15: ("getsockopt", 5), 16: ("sendmsg", 3), 17: ("recvmsg", 3),
               18: ("accept4", 4), 19: ("recvmmsg", 5), 20: ("sendmmsg", 4)}
#: the largest family and type numbers (NPROTO, SOCK_MAX), SOCK_RAW, and the type's own bits
NPROTO, SOCK_MAX, SOCK_RAW, SOCK_TYPE_MASK = 46, 11, 3, 0xF
_FAMILY_NAMES = {c.AF_NETLINK: "AF_NETLINK", c.AF_PACKET: "AF_PACKET"}


class SocketCalls(MsgCalls):
    """The socket calls but the ones that move messages (:mod:`.msgs`)."""

    def _type(self, stype: int) -> tuple[int | None, int, bool, bool]:
        """(the generic type, None for another; the arch's number; non-blocking; close-on-exec)
        of socket()'s type argument (EINVAL for another flag bit)."""
        extra = stype & ~SOCK_TYPE_MASK
        if extra & ~(self.o_nonblock | self.o_cloexec):
            raise _GuestErrno(errno.EINVAL)
        kind = stype & SOCK_TYPE_MASK
        numbers = c.abi(self.arch.name)
        generic = {numbers.sock_stream: STREAM, numbers.sock_dgram: DGRAM, numbers.sock_seqpacket: SEQPACKET}
        return generic.get(kind), kind, bool(extra & self.o_nonblock), bool(extra & self.o_cloexec)

    def _make(self, family: int, stype: int | None, kind: int, protocol: int) -> Socket:
        """A new socket (__sock_create's checks, then the family's create)."""
        if not 0 <= family < NPROTO:
            raise _GuestErrno(errno.EAFNOSUPPORT)
        if kind >= SOCK_MAX:
            raise _GuestErrno(errno.EINVAL)
        net = network(self.kernel)
        if family == c.AF_UNIX:
            if protocol not in (0, c.AF_UNIX):
                raise _GuestErrno(errno.EPROTONOSUPPORT)
            if kind == SOCK_RAW:
                stype = DGRAM  # BSD's AF_UNIX SOCK_RAW, as Linux takes it
            if stype is None:
                raise _GuestErrno(errno.ESOCKTNOSUPPORT)
            return UnixSocket(net, stype)
        if family in (c.AF_INET, c.AF_INET6):
            if kind == SOCK_RAW:
                raise _GuestErrno(errno.ESOCKTNOSUPPORT if self.root.cred.uid == 0 else errno.EPERM)
            wanted = {STREAM: c.IPPROTO_TCP, DGRAM: c.IPPROTO_UDP}.get(stype or 0)
            if wanted is None:
                raise _GuestErrno(errno.ESOCKTNOSUPPORT)
            if protocol not in (0, wanted):
                raise _GuestErrno(errno.EPROTONOSUPPORT)
            return TcpSocket(net, family) if stype == STREAM else UdpSocket(net, family)
        if family != c.AF_UNSPEC:  # a family Linux has and kpsdk does not make
            self.unimplemented[f"socket({_FAMILY_NAMES.get(family, family)})"] += 1
        raise _GuestErrno(errno.EAFNOSUPPORT)

    @syscall("socket", "sockfamily socktype sockproto")
    def sys_socket(self, family: int, stype: int, protocol: int, *_: int) -> int:
        generic, kind, nonblock, cloexec = self._type(stype)
        sock = self._make(self.sint(family), generic, kind, self.sint(protocol))
        return install(self, sock, nonblock, cloexec)

    @syscall("socketpair", "sockfamily socktype sockproto p")
    def sys_socketpair(self, family: int, stype: int, protocol: int, sv: int, *_: int) -> int:
        generic, kind, nonblock, cloexec = self._type(stype)
        a = self._make(self.sint(family), generic, kind, self.sint(protocol))
        if not isinstance(a, UnixSocket):
            raise _GuestErrno(errno.EOPNOTSUPP)
        b = UnixSocket(a.net, a.stype)
        a.pair(b, self)
        first = install(self, a, nonblock, cloexec)
        try:
            second = install(self, b, nonblock, cloexec)
        except _GuestErrno:
            self.fds.close(first)
            raise
        try:
            self.write(sv, struct.pack(self.order + "ii", first, second))
        except _GuestErrno:
            self.fds.close(first)
            self.fds.close(second)
            raise
        return 0

    # -- names ------------------------------------------------------------------------------------

    def _inet_addr(self, sock: InetSocket, raw: bytes, bind: bool) -> InetAddr | None:
        if bind and sock.family == c.AF_INET and len(raw) >= 16 and family_of(raw, self.order) == c.AF_UNSPEC:
            if raw[4:8] != ANY4:
                raise _GuestErrno(errno.EAFNOSUPPORT)
            return InetAddr(ANY4, struct.unpack(">H", raw[2:4])[0])  # AF_UNSPEC with INADDR_ANY: compatibility
        addr = parse_inet(raw, sock.family, self.order)
        if addr is None and bind:
            raise _GuestErrno(errno.EAFNOSUPPORT)
        return addr

    @syscall("bind", "fd p d")
    def sys_bind(self, fd: int, addr: int, length: int, *_: int) -> int:
        raw = self.sockaddr_in(addr, length)
        sock = self.socket_of(fd)[1]
        if isinstance(sock, UnixSocket):
            if len(raw) == 2 and family_of(raw, self.order) == c.AF_UNIX:
                sock.autobind(self.order)
                return 0
            name = unix_name(raw, self.order)
            path = unix_path(name)
            if path is None:
                sock.bind_name(name, None)
                return 0
            self._bind_path(sock, name, path)
            return 0
        assert isinstance(sock, InetSocket)
        inet = self._inet_addr(sock, raw, True)
        assert inet is not None
        sock.bind(self, inet)
        return 0

    def _bind_path(self, sock: UnixSocket, name: bytes, path: str) -> None:
        """Make the socket node at ``path`` (EADDRINUSE if the name exists), then bind to it
        (EINVAL, the node removed again, if the socket has a name: unix_bind_bsd)."""
        ref = self.lookup(AT_FDCWD, path, follow=False)
        try:
            self.root.mknod(ref, stat.S_IFSOCK | (0o777 & ~self.umask), 0)
        except _GuestErrno as e:
            raise _GuestErrno(errno.EADDRINUSE if e.errno == errno.EEXIST else e.errno) from None
        made = self.lookup(AT_FDCWD, path, follow=False)
        if sock.addr is not None:
            self.root.unlink(made)
            raise _GuestErrno(errno.EINVAL)
        sock.bind_name(name, made.node)

    @syscall("listen", "fd d")
    def sys_listen(self, fd: int, backlog: int, *_: int) -> int:
        sock = self.socket_of(fd)[1]
        sock.listen(self, min(backlog & 0xFFFFFFFF, SOMAXCONN))
        return 0

    @syscall("connect", "fd p d")
    def sys_connect(self, fd: int, addr: int, length: int, *_: int) -> int:
        raw = self.sockaddr_in(addr, length)
        f, sock = self.socket_of(fd)
        nonblock = bool(f.flags & self.o_nonblock)
        if isinstance(sock, UnixSocket):
            if len(raw) < 2:
                raise _GuestErrno(errno.EINVAL)
            if sock.stype == DGRAM and family_of(raw, self.order) == c.AF_UNSPEC:
                sock.connect(self, None, nonblock)
                return 0
            sock.connect(self, self.unix_finder(sock, unix_name(raw, self.order)), nonblock)
            return 0
        assert isinstance(sock, (TcpSocket, UdpSocket))
        if len(raw) >= 2 and family_of(raw, self.order) == c.AF_UNSPEC:
            sock.connect(self, None, nonblock)
            return 0
        sock.connect(self, self._inet_addr(sock, raw, False), nonblock)
        return 0

    def _accept(self, fd: int, addr: int, lenptr: int, flags: int) -> int:
        if flags & ~(self.o_nonblock | self.o_cloexec):
            raise _GuestErrno(errno.EINVAL)
        f, sock = self.socket_of(fd)
        if not isinstance(sock, (UnixSocket, TcpSocket)):
            raise _GuestErrno(errno.EOPNOTSUPP)
        new = sock.accept(self, bool(f.flags & self.o_nonblock))
        if addr:
            try:
                self.sockaddr_out(addr, lenptr, new.peername(self.order))
            except _GuestErrno:
                new.release()
                raise
        return install(self, new, bool(flags & self.o_nonblock), bool(flags & self.o_cloexec))

    @syscall("accept", "fd p p")
    def sys_accept(self, fd: int, addr: int, lenptr: int, *_: int) -> int:
        return self._accept(fd, addr, lenptr, 0)

    @syscall("accept4", "fd p p x")
    def sys_accept4(self, fd: int, addr: int, lenptr: int, flags: int, *_: int) -> int:
        return self._accept(fd, addr, lenptr, flags)

    @syscall("getsockname", "fd p inoutint")
    def sys_getsockname(self, fd: int, addr: int, lenptr: int, *_: int) -> int:
        sock = self.socket_of(fd)[1]
        self.sockaddr_out(addr, lenptr, sock.name(self.order))
        return 0

    @syscall("getpeername", "fd p inoutint")
    def sys_getpeername(self, fd: int, addr: int, lenptr: int, *_: int) -> int:
        """Bash asks ``getpeername(0)`` at start-up: ENOTSOCK for its input (a file or a pipe)
        keeps it from taking that for a network connection and running ``~/.bashrc``."""
        sock = self.socket_of(fd)[1]
        self.sockaddr_out(addr, lenptr, sock.peername(self.order))
        return 0

    @syscall("shutdown", "fd d")
    def sys_shutdown(self, fd: int, how: int, *_: int) -> int:
        sock = self.socket_of(fd)[1]
        sock.shutdown(self.sint(how))
        return 0

    # -- options ----------------------------------------------------------------------------------

    @syscall("setsockopt", "fd socklevel sockopt p d")
    def sys_setsockopt(self, fd: int, level: int, name: int, value: int, length: int, *_: int) -> int:
        n = self.sint(length)
        if n < 0:
            raise _GuestErrno(errno.EINVAL)
        sock = self.socket_of(fd)[1]
        data = self.read(value, min(n, 256)) if n else b""
        sock.setsockopt(self, self.sint(level), self.sint(name), data)
        return 0

    @syscall("getsockopt", "fd socklevel sockopt p inoutint")
    def sys_getsockopt(self, fd: int, level: int, name: int, value: int, lenptr: int, *_: int) -> int:
        sock = self.socket_of(fd)[1]
        (room,) = struct.unpack(self.order + "i", self.read(lenptr, 4))
        if room < 0:
            raise _GuestErrno(errno.EINVAL)
        data = sock.getsockopt(self, self.sint(level), self.sint(name))[:room]
        if data:
            self.write(value, data)
        self.write(lenptr, struct.pack(self.order + "i", len(data)))
        return 0

    # -- one entry for them all -------------------------------------------------------------------

    @syscall("socketcall", "d p")
    def sys_socketcall(self, call: int, args: int, *_: int) -> int | None:
        """i386's and ppc64's one entry for the socket calls (glibc built for kernels before 4.3
        uses it): ``call`` is the call's number (include/uapi/linux/net.h), ``args`` points at
        its arguments, a word each (as many as that call takes are read)."""
        found = SOCKETCALLS.get(call)
        if found is None:
            raise _GuestErrno(errno.EINVAL)  # no such call, as Linux
        name, count = found
        words = [self.word.unpack(self.read(args + i * self.word.size, self.word.size))[0] for i in range(count)]
        handler = getattr(self, f"sys_{name}")
        result: int | None = handler(*words, *([0] * (6 - count)))
        return result
