"""TCP between the processes of a session, on the loopback (net/ipv4/tcp.c, tcp_input.c, af_inet.c).

A ``connect`` to a listening socket makes the server's end at once and queues it for
``accept``; bytes written go straight to the other end's receive queue.  What a program sees
of the wire is Linux's loopback: ``ECONNREFUSED`` when nobody listens (at once, or through
SO_ERROR and POLLERR after a non-blocking connect's EINPROGRESS, a second connect then
succeeding or failing as ``inet_stream_connect`` says), end of file after the peer's close or
``shutdown(SHUT_WR)`` once its bytes are read, ECONNRESET when it closed with bytes unread
(or SO_LINGER 0), a write after the peer closed that lands on a closed socket (it succeeds,
the reset comes back, and the next write is EPIPE with SIGPIPE), the socket closed once both
sides sent their FIN (ENOTCONN for getpeername, as TIME_WAIT leaves it); poll is
``tcp_poll``'s.

A sender may have ``SO_SNDBUF`` plus the receiver's ``SO_RCVBUF`` bytes unread before it waits
(Linux's loopback grows its windows further with autotuning).  A non-blocking connect to a
listener whose backlog is full is queued anyway (Linux drops the SYN and retries).  There is
no TIME_WAIT: a port is free again at its socket's close.
"""

from __future__ import annotations

import errno
from collections import deque
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux import signaling
from kpsdk.targets.unicorn.linux.fileobj import POLLERR, POLLHUP, POLLRDHUP, READABLE, WRITABLE
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.net.addrs import ANY4, ANY6, InetAddr
from kpsdk.targets.unicorn.linux.net.inet import InetSocket
from kpsdk.targets.unicorn.linux.net.sock import CLOSE, ESTABLISHED, LISTEN, STREAM, Message, Received
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile
    from kpsdk.targets.unicorn.linux.net import Network

#: a connected socket's states as the socket layer keeps them (sock->state)
UNCONNECTED, CONNECTING, CONNECTED = "unconnected", "connecting", "connected"


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
