"""TCP and UDP between the processes of a session, on a loopback that is the guest's only network.

No packet is made: a ``connect`` to a listening TCP socket makes the server's end at once and
queues it for ``accept``; bytes written go straight to the other end's receive queue; a UDP
datagram goes to the socket bound to its destination.  What a program sees of the wire is
Linux's loopback (net/ipv4/af_inet.c, tcp.c, tcp_input.c, udp.c; the v6 files for AF_INET6):

* ports: ``bind`` with Linux's conflict rules (SO_REUSEADDR for sockets not listening,
  SO_REUSEPORT on both, IPV6_V6ONLY, the wildcard covering every address), ports below 1024
  for root alone (EACCES), ephemeral ports from 32768 up (in order: Linux picks them at
  random), ``EADDRNOTAVAIL`` for an address that is not the guest's;
* TCP: ``ECONNREFUSED`` when nobody listens (at once, or through SO_ERROR and POLLERR after
  a non-blocking connect's EINPROGRESS), end of file after the peer's close or
  ``shutdown(SHUT_WR)`` once its bytes are read, ECONNRESET when it closed with bytes unread
  (or SO_LINGER 0), and a write after the peer closed lands on a closed socket: it succeeds,
  the reset comes back, and the next write is EPIPE with SIGPIPE; poll is ``tcp_poll``'s;
* UDP: datagrams with their source address, MSG_TRUNC, ECONNREFUSED reported to a connected
  socket whose datagram found nobody (the ICMP error, at its next call), dropped silently
  otherwise or when the receiver's buffer is full.

A TCP sender may have ``SO_SNDBUF`` plus the receiver's ``SO_RCVBUF`` bytes unread before it
waits (Linux's loopback grows its windows further with autotuning).  A non-blocking connect
to a listener whose backlog is full is queued anyway (Linux drops the SYN and retries).
"""

from __future__ import annotations

import errno
from collections import deque
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux import signaling
from kpsdk.targets.unicorn.linux.fileobj import POLLERR, POLLHUP, POLLRDHUP, READABLE, WRITABLE
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.net.addrs import (
    ANY4,
    ANY6,
    LOOPBACK4,
    LOOPBACK6,
    V4_MAPPED,
    InetAddr,
    format_inet,
    is_local,
    v4_of,
)
from kpsdk.targets.unicorn.linux.net.sock import CLOSE, ESTABLISHED, LISTEN, STREAM, Message, Received, Socket
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile
    from kpsdk.targets.unicorn.linux.net import Network

#: the largest UDP payload over IPv4 and IPv6 (65535 less the headers)
UDP_MAX = {False: 65507, True: 65527}
SOMAXCONN = 4096
#: a connected socket's states as the socket layer keeps them (sock->state)
UNCONNECTED, CONNECTING, CONNECTED = "unconnected", "connecting", "connected"


class InetSocket(Socket):
    """What TCP and UDP sockets share: an address and port, the port table, the IP options."""

    def __init__(self, net: Network, stype: int, family: int, protocol: int) -> None:
        super().__init__(net, stype)
        self.family = family
        self.protocol = protocol
        self.local: InetAddr | None = None
        self.remote: InetAddr | None = None
        #: whether bind chose the address and the port (connect's implicit ones can be undone)
        self.user_bound = False

    # -- addresses --------------------------------------------------------------------------------

    @property
    def v6only(self) -> bool:
        return bool(self.ints.get((c.IPPROTO_IPV6, c.IPV6_V6ONLY), 0))

    def covers(self, dest: InetAddr) -> bool:
        """Whether this bound socket's address takes packets for ``dest`` (same port assumed)."""
        assert self.local is not None
        mine = self.local
        if self.family == c.AF_INET:
            v4 = dest.host if not dest.v6 else v4_of(dest.host)
            return v4 is not None and mine.host in (ANY4, v4)
        if mine.host == ANY6:
            return not (self.v6only and (not dest.v6 or v4_of(dest.host) is not None))
        return mine.key() == dest.key()

    def overlaps(self, other: InetSocket) -> bool:
        """Whether two bindings of one port take some address in common."""
        assert self.local is not None and other.local is not None
        a, b = self, other
        if a.family == c.AF_INET6 and b.family == c.AF_INET:
            a, b = b, a
        assert a.local is not None and b.local is not None
        if a.family == b.family:
            return a.local.any() or b.local.any() or a.local.key() == b.local.key()
        if b.local.host == ANY6:  # a is IPv4, b IPv6
            return not b.v6only
        mapped = v4_of(b.local.host)
        return mapped is not None and (a.local.any() or mapped in (a.local.host, ANY4))

    def _sockets(self, port: int) -> list[InetSocket]:
        return self.net.ports[self.protocol].setdefault(port, [])

    def _conflicts(self, port: int, candidate: InetAddr, proc: ProcessCore | None = None) -> bool:
        previous, self.local = self.local, candidate
        try:
            for other in self._sockets(port):
                if other is self or other.local is None or not self.overlaps(other):
                    continue
                reuse = self.options.get("SO_REUSEADDR") and other.options.get("SO_REUSEADDR")
                reuseport = self.options.get("SO_REUSEPORT") and other.options.get("SO_REUSEPORT")
                if self.protocol == c.IPPROTO_TCP:
                    if reuseport or reuse and other.state != LISTEN and self.state != LISTEN:
                        continue
                elif reuse or reuseport:
                    continue
                return True
            return False
        finally:
            self.local = previous

    def _hash(self, addr: InetAddr) -> None:
        self.local = addr
        sockets = self._sockets(addr.port)
        if self not in sockets:
            sockets.insert(0, self)  # Linux adds at the head: the newest first

    def _unhash(self) -> None:
        if self.local is None:
            return
        sockets = self.net.ports[self.protocol].get(self.local.port)
        if sockets is not None and self in sockets:
            sockets.remove(self)
            if not sockets:
                del self.net.ports[self.protocol][self.local.port]

    def bind(self, proc: ProcessCore, addr: InetAddr) -> None:
        """``bind`` (inet_bind: EADDRNOTAVAIL, EACCES, EINVAL when bound, EADDRINUSE)."""
        if not is_local(addr.host):
            raise _GuestErrno(errno.EADDRNOTAVAIL)
        if self.family == c.AF_INET6 and v4_of(addr.host) is not None and self.v6only:
            raise _GuestErrno(errno.EINVAL)
        if addr.port and addr.port < 1024 and proc.root.cred.uid != 0:
            raise _GuestErrno(errno.EACCES)
        if self.state != CLOSE or self.local is not None:
            raise _GuestErrno(errno.EINVAL)
        port = addr.port
        if not port:
            found = self.net.free_port(self.protocol, lambda p: self._conflicts(p, addr.with_port(p)))
            if found is None:
                raise _GuestErrno(errno.EADDRINUSE)
            port = found
        elif self._conflicts(port, addr):
            raise _GuestErrno(errno.EADDRINUSE)
        self._hash(addr.with_port(port))
        self.user_bound = True

    def _loopback(self, dest: InetAddr) -> InetAddr:
        """The address a packet to ``dest`` leaves from, and where it goes (the wildcard is loopback)."""
        if dest.v6:
            v4 = v4_of(dest.host)
            if v4 is not None:
                return InetAddr(V4_MAPPED + LOOPBACK4, 0)
            return InetAddr(LOOPBACK6, 0)
        return InetAddr(LOOPBACK4, 0)

    def _autobind(self, dest: InetAddr) -> None:
        """A port (and, for the source, an address) before the first packet (inet_autobind)."""
        if self.local is not None and self.local.port:
            return
        source = self._loopback(dest)
        port = self.net.free_port(self.protocol, lambda p: self._conflicts(p, source.with_port(p)))
        if port is None:
            raise _GuestErrno(errno.EAGAIN)
        self._hash(source.with_port(port) if self.local is None else self.local.with_port(port))

    def _route(self, dest: InetAddr) -> InetAddr:
        """Where a packet for ``dest`` goes: ENETUNREACH off the loopback."""
        if not is_local(dest.host) or self.family == c.AF_INET6 and self.v6only and v4_of(dest.host) is not None:
            raise _GuestErrno(errno.ENETUNREACH)
        if dest.any():
            return InetAddr(LOOPBACK4 if not dest.v6 else LOOPBACK6, dest.port)
        if dest.v6 and v4_of(dest.host) == ANY4:
            return InetAddr(V4_MAPPED + LOOPBACK4, dest.port)
        return dest

    def _seen_as(self, addr: InetAddr) -> InetAddr:
        """``addr`` as this socket's family shows it (v4-mapped in an IPv6 socket)."""
        if self.family == c.AF_INET6 and not addr.v6:
            return InetAddr(V4_MAPPED + addr.host, addr.port)
        if self.family == c.AF_INET and addr.v6:
            return InetAddr(v4_of(addr.host) or ANY4, addr.port)
        return addr

    def name(self, order: str) -> bytes:
        return format_inet(self.local or InetAddr(ANY4 if self.family == c.AF_INET else ANY6, 0), self.family, order)

    def peername(self, order: str) -> bytes:
        if self.remote is None or self.protocol == c.IPPROTO_TCP and self.state == CLOSE:
            raise _GuestErrno(errno.ENOTCONN)
        return format_inet(self.remote, self.family, order)

    def _source(self, dest: InetAddr) -> None:
        """A socket bound to the wildcard sends from the loopback address (the route's source)."""
        assert self.local is not None
        if self.local.any():
            self.local = self._loopback(dest).with_port(self.local.port)

    # -- options ----------------------------------------------------------------------------------

    def set_protocol_option(self, proc: ProcessCore, level: int, number: int, value: bytes) -> None:
        known = {c.IPPROTO_TCP: c.TCP_INT_OPTIONS, c.IPPROTO_IP: c.IP_INT_OPTIONS,
                 c.IPPROTO_IPV6: c.IPV6_INT_OPTIONS}.get(level)
        if level == c.IPPROTO_TCP and self.protocol != c.IPPROTO_TCP or \
                level == c.IPPROTO_IPV6 and self.family != c.AF_INET6:
            raise _GuestErrno(errno.ENOPROTOOPT if level == c.IPPROTO_IPV6 else errno.EOPNOTSUPP)
        if known is None or number not in known:
            raise _GuestErrno(errno.ENOPROTOOPT)
        if len(value) < 4:
            raise _GuestErrno(errno.EINVAL)
        if (level, number) == (c.IPPROTO_IPV6, c.IPV6_V6ONLY) and self.local is not None:
            raise _GuestErrno(errno.EINVAL)
        self.ints[(level, number)] = int.from_bytes(value[:4], "little" if proc.order == "<" else "big", signed=True)

    def get_protocol_option(self, proc: ProcessCore, level: int, number: int) -> bytes:
        known = {c.IPPROTO_TCP: c.TCP_INT_OPTIONS, c.IPPROTO_IP: c.IP_INT_OPTIONS,
                 c.IPPROTO_IPV6: c.IPV6_INT_OPTIONS}.get(level)
        if level == c.IPPROTO_TCP and self.protocol != c.IPPROTO_TCP:
            raise _GuestErrno(errno.EOPNOTSUPP)
        if known is None or number not in known:
            raise _GuestErrno(errno.ENOPROTOOPT)
        defaults = {(c.IPPROTO_TCP, c.TCP_MAXSEG): 536, (c.IPPROTO_TCP, c.TCP_KEEPIDLE): 7200,
                    (c.IPPROTO_TCP, c.TCP_KEEPINTVL): 75, (c.IPPROTO_TCP, c.TCP_KEEPCNT): 9,
                    (c.IPPROTO_IP, 2): 64, (c.IPPROTO_IPV6, 16): 64}
        value = self.ints.get((level, number), defaults.get((level, number), 0))
        return value.to_bytes(4, "little" if proc.order == "<" else "big", signed=True)


class TcpSocket(InetSocket):
    """A TCP socket (see the module docstring)."""

    def __init__(self, net: Network, family: int) -> None:
        super().__init__(net, STREAM, family, c.IPPROTO_TCP)
        self.sndbuf, self.rcvbuf = c.TCP_WMEM_DEFAULT, c.TCP_RMEM_DEFAULT
        self.sock_state = UNCONNECTED
        self.peer: TcpSocket | None = None
        self.pending: deque[TcpSocket] = deque()
        self.backlog = 0
        self.peer_wait = WaitQueue("tcp accept queue")
        #: the peer's FIN arrived (SOCK_DONE); this side sent its own (shutdown(SHUT_WR))
        self.fin = False
        self.fin_sent = False

    # -- connections ------------------------------------------------------------------------------

    def listen(self, proc: ProcessCore, backlog: int) -> None:
        if self.sock_state != UNCONNECTED or self.state not in (CLOSE, LISTEN):
            raise _GuestErrno(errno.EINVAL)
        if self.local is None:
            self._autobind(InetAddr(ANY4 if self.family == c.AF_INET else ANY6, 0))
            assert self.local is not None
            self.local = InetAddr(ANY4 if self.family == c.AF_INET else ANY6, self.local.port)
        elif self.state != LISTEN:
            self.state = LISTEN
            busy = self._conflicts(self.local.port, self.local)
            self.state = CLOSE
            if busy:
                raise _GuestErrno(errno.EADDRINUSE)
        if backlog > self.backlog:
            self.peer_wait.wake()
        self.backlog = backlog
        self.state = LISTEN

    def _listener(self, dest: InetAddr) -> TcpSocket | None:
        best: TcpSocket | None = None
        for other in self.net.ports[c.IPPROTO_TCP].get(dest.port, ()):
            if isinstance(other, TcpSocket) and other.state == LISTEN and other.covers(dest):
                if best is None or other.local is not None and not other.local.any():
                    best = other
        return best

    def connect(self, proc: ProcessCore, addr: InetAddr | None, nonblock: bool) -> None:
        if addr is None:
            self._disconnect()
            return
        if self.sock_state == CONNECTED:
            raise _GuestErrno(errno.EISCONN)
        if self.sock_state == CONNECTING:
            if self.state == ESTABLISHED:
                self.sock_state = CONNECTED
                return
            err = self.take_error() or errno.ECONNABORTED
            self.sock_state, self.shut = UNCONNECTED, 0  # tcp_disconnect: it may connect again
            raise _GuestErrno(err)
        if self.state != CLOSE:
            raise _GuestErrno(errno.EISCONN)
        dest = self._route(addr)
        listener = self._listener(dest)
        if listener is not None and len(listener.pending) > listener.backlog and not nonblock:
            self.block(proc, (listener.peer_wait,), self.sndtimeo)
        self._autobind(dest)
        self._source(dest)
        assert self.local is not None
        if listener is None:  # the SYN finds no socket: the reset comes back
            if nonblock:
                self.err, self.shut = errno.ECONNREFUSED, c.SHUTDOWN_MASK
                self.sock_state = CONNECTING
                self.wait.wake()
                raise _GuestErrno(errno.EINPROGRESS)
            raise _GuestErrno(errno.ECONNREFUSED)
        self.remote = self._seen_as(dest)
        server = TcpSocket(self.net, listener.family)
        server.options, server.ints = dict(listener.options), dict(listener.ints)
        server.sndbuf, server.rcvbuf, server.linger = listener.sndbuf, listener.rcvbuf, listener.linger
        server._hash(listener._seen_as(dest))
        server.remote = listener._seen_as(self.local)
        server.state = ESTABLISHED
        server.peer, self.peer = self, server
        self.state = ESTABLISHED
        listener.pending.append(server)
        listener.wait.wake(key=c.DATA_READY)
        self.wait.wake(key=WRITABLE)
        if nonblock:
            self.sock_state = CONNECTING
            raise _GuestErrno(errno.EINPROGRESS)
        self.sock_state = CONNECTED

    def _disconnect(self) -> None:
        """``connect(AF_UNSPEC)``: the connection is reset (tcp_disconnect)."""
        if self.state == ESTABLISHED and self.peer is not None and not self.peer.dead:
            self.peer.reset(errno.ECONNRESET)
        self.peer, self.remote = None, None
        self.state, self.sock_state, self.shut, self.fin = CLOSE, UNCONNECTED, 0, False
        self.purge()

    def accept(self, proc: ProcessCore, nonblock: bool) -> TcpSocket:
        if self.state != LISTEN:
            raise _GuestErrno(errno.EINVAL)
        if not self.pending:
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            self.block(proc, (self.wait,), self.rcvtimeo)
        server = self.pending.popleft()
        server.sock_state = CONNECTED
        self.peer_wait.wake()
        return server

    def reset(self, err: int) -> None:
        """An RST arrived (tcp_reset): EPIPE after the peer's FIN, ECONNRESET otherwise."""
        if self.state == CLOSE:
            return
        self.err = errno.EPIPE if self.fin else err
        self.shut = c.SHUTDOWN_MASK
        self.state = CLOSE
        self.wait.wake()

    def _fin(self) -> None:
        """The peer will send no more (its close or shutdown(SHUT_WR))."""
        self.fin = True
        self.shut |= c.RCV_SHUTDOWN
        self._closed_both_ways()
        self.wait.wake()

    def _closed_both_ways(self) -> None:
        """Both FINs went: the connection is over (TIME_WAIT or LAST_ACK done: the socket is
        TCP_CLOSE, so getpeername is ENOTCONN and poll says POLLHUP)."""
        if self.fin and self.fin_sent and self.state == ESTABLISHED:
            self.state = CLOSE
            self.shut = c.SHUTDOWN_MASK

    def shutdown(self, how: int) -> None:
        if how not in (c.SHUT_RD, c.SHUT_WR, c.SHUT_RDWR):
            raise _GuestErrno(errno.EINVAL)
        mode = how + 1
        if self.state == LISTEN:
            if mode & c.RCV_SHUTDOWN:
                self._close_listener()
                self.state, self.sock_state = CLOSE, UNCONNECTED
            self.wait.wake()
            return
        was_closed = self.state == CLOSE
        if mode & c.SEND_SHUTDOWN and not self.shut & c.SEND_SHUTDOWN and self.peer is not None \
                and self.state == ESTABLISHED and not self.peer.dead:
            self.peer._fin()
        self.shut |= mode
        if mode & c.SEND_SHUTDOWN and self.state == ESTABLISHED:
            self.fin_sent = True
            self._closed_both_ways()
        self.wait.wake()
        if was_closed:
            raise _GuestErrno(errno.ENOTCONN)

    def _close_listener(self) -> None:
        while self.pending:
            server = self.pending.popleft()
            server.dead = True
            if server.peer is not None:
                server.peer.reset(errno.ECONNRESET)
            server._unhash()

    def close(self, embryo: bool = False) -> None:
        if self.state == LISTEN:
            self._close_listener()
        elif self.state == ESTABLISHED and self.peer is not None and not self.peer.dead:
            if self.queue or self.linger == (1, 0):
                self.peer.reset(errno.ECONNRESET)
            elif not self.shut & c.SEND_SHUTDOWN:
                self.peer._fin()
        self._unhash()
        self.state = CLOSE
        self.purge()

    # -- poll -------------------------------------------------------------------------------------

    def capacity(self) -> int:
        peer = self.peer
        return self.sndbuf + (peer.rcvbuf if peer is not None else c.TCP_RMEM_DEFAULT)

    def writable(self) -> bool:
        return self.capacity() - self.wmem >= self.capacity() // 2

    def credit(self, cost: int) -> None:
        self.wmem = max(0, self.wmem - cost)
        if self.writable():
            self.wait.wake(key=c.WRITE_SPACE)

    def poll(self) -> int:
        if self.state == LISTEN:
            return READABLE if self.pending else 0
        mask = 0
        if self.shut == c.SHUTDOWN_MASK or self.state == CLOSE:
            mask |= POLLHUP
        if self.shut & c.RCV_SHUTDOWN:
            mask |= READABLE | POLLRDHUP
        if any(m.data for m in self.queue):
            mask |= READABLE
        if self.shut & c.SEND_SHUTDOWN or self.writable():
            mask |= WRITABLE
        if self.err:
            mask |= POLLERR
        return mask

    # -- bytes ------------------------------------------------------------------------------------

    def _epipe(self, proc: ProcessCore, flags: int) -> int:
        err = self.take_error() or errno.EPIPE
        if err == errno.EPIPE and not flags & c.MSG_NOSIGNAL:
            signaling.broken_pipe(proc.kernel, proc.task)
        raise _GuestErrno(err)

    def sendmsg(self, proc: ProcessCore, data: bytes, dest: object, fds: list[OpenFile], flags: int,
                nonblock: bool) -> int:
        nonblock = nonblock or bool(flags & c.MSG_DONTWAIT)
        task = proc.task
        done = task.progress if isinstance(task.progress, int) else 0
        if self.err or self.shut & c.SEND_SHUTDOWN or self.state != ESTABLISHED or self.peer is None:
            task.progress = None
            if done:
                return done
            return self._epipe(proc, flags)
        peer = self.peer
        if peer.dead:  # a closed socket answers with a reset: these bytes are lost, the next write fails
            task.progress = None
            self.reset(errno.ECONNRESET)
            return len(data)
        while done < len(data):
            room = self.capacity() - self.wmem
            if room <= 0:
                if nonblock:
                    task.progress = None
                    if done:
                        return done
                    raise _GuestErrno(errno.EAGAIN)
                task.progress = done
                self.block(proc, (self.wait,), self.sndtimeo)
            take = min(room, len(data) - done)
            peer.queue.append(Message(data[done:done + take], self, take))
            self.charge(take)
            peer.wait.wake(key=c.DATA_READY)
            done += take
        task.progress = None
        return done

    def recvmsg(self, proc: ProcessCore, size: int, flags: int, nonblock: bool) -> Received:
        nonblock = nonblock or bool(flags & c.MSG_DONTWAIT)
        if self.state == LISTEN:
            raise _GuestErrno(errno.ENOTCONN)
        if flags & c.MSG_OOB:
            raise _GuestErrno(errno.EINVAL)
        target = max(size if flags & c.MSG_WAITALL else min(self.rcvlowat, size), 1)
        available = min(sum(len(m.data) for m in self.queue), size)
        if available < target and size:
            if not available:
                if self.fin:
                    return Received(b"", 0)
                if self.err:
                    raise _GuestErrno(self.take_error())
                if self.shut & c.RCV_SHUTDOWN:
                    return Received(b"", 0)
                if self.state == CLOSE:
                    raise _GuestErrno(errno.ENOTCONN)
                if nonblock:
                    raise _GuestErrno(errno.EAGAIN)
                self.block(proc, (self.wait,), self.rcvtimeo)  # EAGAIN once SO_RCVTIMEO passed
            elif not (self.fin or self.err or self.shut & c.RCV_SHUTDOWN or nonblock or proc.task.timed_out):
                self.block(proc, (self.wait,), self.rcvtimeo)  # MSG_WAITALL: the rest
        out = bytearray()
        peek = bool(flags & c.MSG_PEEK)
        for message in list(self.queue):
            if len(out) >= size:
                break
            take = min(len(message.data), size - len(out))
            out += message.data[:take]
            if peek:
                continue
            message.data = message.data[take:]
            if message.sender is not None:
                message.sender.credit(take)
            if not message.data:
                self.queue.popleft()
        if flags & c.MSG_TRUNC and not peek:
            return Received(b"", len(out))
        return Received(bytes(out), len(out))


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
