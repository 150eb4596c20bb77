"""UDP between the processes of a session, on the loopback (net/ipv4/udp.c, datagram.c).

A datagram goes to the socket bound to its destination (the newest of several bound with
SO_REUSEADDR; one connected elsewhere does not take it), with its source address and port;
MSG_TRUNC cuts it; a connected socket whose datagram found nobody hears ECONNREFUSED at its
next call (the port unreachable ICMP, which loopback delivers at once), an unconnected one
nothing; a datagram is dropped silently when the receiver's buffer is over SO_RCVBUF.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.fileobj import POLLERR, POLLHUP, POLLRDHUP, READABLE
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.net.addrs import InetAddr, format_inet
from kpsdk.targets.unicorn.linux.net.inet import InetSocket
from kpsdk.targets.unicorn.linux.net.sock import CLOSE, ESTABLISHED, Message, Received

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile
    from kpsdk.targets.unicorn.linux.net import Network

#: the largest UDP payload over IPv4 and IPv6 (65535 less the headers)
UDP_MAX = {False: 65507, True: 65527}


class UdpSocket(InetSocket):
    """A UDP socket (see the module docstring)."""

    def __init__(self, net: Network, family: int) -> None:
        super().__init__(net, 2, family, c.IPPROTO_UDP)
        self.rmem = 0

    def connect(self, proc: ProcessCore, addr: InetAddr | None, nonblock: bool) -> None:
        if addr is None:  # AF_UNSPEC: disconnect, and an implicit bind is undone (udp_disconnect)
            self.remote, self.state = None, CLOSE
            if not self.user_bound:
                self._unhash()
                self.local = None
            return
        dest = self._route(addr)
        self._autobind(dest)
        self._source(dest)
        self.remote = self._seen_as(dest)
        self.state = ESTABLISHED

    def listen(self, proc: ProcessCore, backlog: int) -> None:
        raise _GuestErrno(errno.EOPNOTSUPP)

    def shutdown(self, how: int) -> None:
        if how not in (c.SHUT_RD, c.SHUT_WR, c.SHUT_RDWR):
            raise _GuestErrno(errno.EINVAL)
        self.shut |= how + 1
        self.wait.wake()
        if self.state != ESTABLISHED:
            raise _GuestErrno(errno.ENOTCONN)

    def close(self, embryo: bool = False) -> None:
        self._unhash()
        self.purge()

    def writable(self) -> bool:
        return True

    def poll(self) -> int:
        mask = POLLERR if self.err else 0
        if self.shut & c.RCV_SHUTDOWN:
            mask |= POLLRDHUP | READABLE
        if self.shut == c.SHUTDOWN_MASK:
            mask |= POLLHUP
        if self.queue:
            mask |= READABLE
        return mask | c.WRITE_SPACE

    def _receiver(self, dest: InetAddr, source: InetAddr) -> UdpSocket | None:
        """The socket a datagram from ``source`` to ``dest`` goes to: bound to its port and
        address, and, if connected, connected to ``source`` (the newest such first)."""
        for other in self.net.ports[c.IPPROTO_UDP].get(dest.port, ()):
            if not isinstance(other, UdpSocket) or not other.covers(dest):
                continue
            remote = other.remote
            if remote is not None and (remote.key() != source.key() or remote.port != source.port):
                continue
            return other
        return None

    def sendmsg(self, proc: ProcessCore, data: bytes, dest: object, fds: list[OpenFile], flags: int,
                nonblock: bool) -> int:
        assert dest is None or isinstance(dest, InetAddr)
        if dest is None:
            if self.remote is None:
                raise _GuestErrno(errno.EDESTADDRREQ)
            dest = self.remote
        elif not dest.port:
            raise _GuestErrno(errno.EINVAL)
        if len(data) > UDP_MAX[self.family == c.AF_INET6]:
            raise _GuestErrno(errno.EMSGSIZE)
        dest = self._route(dest)
        err = self.take_error()
        if err:
            raise _GuestErrno(err)
        if self.shut & c.SEND_SHUTDOWN:
            raise _GuestErrno(errno.EPIPE)
        self._autobind(dest)
        assert self.local is not None
        source = self._loopback(dest).with_port(self.local.port) if self.local.any() else self.local
        other = self._receiver(dest, source)
        if other is None:
            if self.remote is not None:
                self.set_error(errno.ECONNREFUSED)  # the port unreachable ICMP, to a connected socket
            return len(data)
        cost = c.truesize(len(data))
        if other.rmem > other.rcvbuf or other.shut & c.RCV_SHUTDOWN:
            return len(data)  # the receiver's buffer is full: dropped
        other.queue.append(Message(data, None, cost, source=format_inet(other._seen_as(source), other.family,
                                                                        proc.order)))
        other.rmem += cost
        other.wait.wake(key=c.DATA_READY)
        return len(data)

    def recvmsg(self, proc: ProcessCore, size: int, flags: int, nonblock: bool) -> Received:
        nonblock = nonblock or bool(flags & c.MSG_DONTWAIT)
        err = self.take_error()
        if err:
            raise _GuestErrno(err)
        if not self.queue:
            if self.shut & c.RCV_SHUTDOWN:
                return Received(b"", 0)
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            self.block(proc, (self.wait,), self.rcvtimeo)
        message = self.queue[0]
        if not flags & c.MSG_PEEK:
            self.queue.popleft()
            self.rmem -= message.cost
        data = message.data[:size]
        truncated = c.MSG_TRUNC if len(data) < len(message.data) else 0
        length = len(message.data) if flags & c.MSG_TRUNC else len(data)
        return Received(data, length, [], truncated, message.source)
