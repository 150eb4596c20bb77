"""AF_UNIX sockets: stream, datagram and seqpacket, between the processes of a session (net/unix/af_unix.c).

A name is a path (a socket node the bind makes in the session's file system, found again by
that node: :class:`~kpsdk.targets.unicorn.linux.net.Network`), an abstract name, or one
``bind`` makes up (autobind: ``\\0`` and five hex digits).  ``socketpair`` joins two sockets
back to back; ``connect`` to a listening stream socket makes the server's end at once and
queues it for ``accept`` (connect waits while more than the backlog are queued).

What a program can see is Linux's:

* a stream sender charges each buffer's ``truesize`` to itself and waits when that reaches
  ``SO_SNDBUF`` (219,264 bytes of payload with the defaults); descriptors passed with
  SCM_RIGHTS travel in the first buffer of a send, and a read stops after the buffer that
  carried them;
* a datagram is one message, cut short with MSG_TRUNC; a sender waits when its own buffer is
  full, or when the receiver, not connected back to it, holds more than ``max_dgram_qlen``
  (10) datagrams;
* when one end of a stream closes, the other reads the rest, then end of file, and its writes
  fail with EPIPE and SIGPIPE; ECONNRESET first if the closed end left data unread;
* poll is ``unix_poll``'s (stream, listening) or ``unix_dgram_poll``'s (datagram, seqpacket).

Not emulated: MSG_OOB (EOPNOTSUPP), SO_PEEK_OFF, the garbage collection of descriptor cycles
in flight (they stay until the session ends).
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux import signaling
from kpsdk.targets.unicorn.linux.fileobj import POLLERR, POLLHUP, POLLRDHUP, READABLE
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.net.addrs import unix_unnamed
from kpsdk.targets.unicorn.linux.net.sock import (
    CLOSE,
    DGRAM,
    ESTABLISHED,
    LISTEN,
    SEQPACKET,
    STREAM,
    Message,
    Received,
    Socket,
    hold,
)
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile
    from kpsdk.targets.unicorn.linux.net import Network

#: the most connections a listen() queues (net.core.somaxconn)
SOMAXCONN = 4096
_WRITABLE = c.WRITE_SPACE


def creds(proc: ProcessCore) -> tuple[int, int, int]:
    """The calling process's (pid, uid, gid), as SO_PEERCRED and SCM_CREDENTIALS give them."""
    cred = proc.root.cred
    return proc.pid, cred.uid, cred.gid


class UnixSocket(Socket):
    """One AF_UNIX socket (see the module docstring)."""

    family = c.AF_UNIX

    def __init__(self, net: Network, stype: int) -> None:
        super().__init__(net, stype)
        #: its name as bound (None: unbound), and the socket node of a path name
        self.addr: bytes | None = None
        self.node: object | None = None
        self.peer: UnixSocket | None = None
        #: sk_max_ack_backlog: the listen backlog, or the datagram queue's length
        self.backlog = c.MAX_DGRAM_QLEN
        #: a listener's connections not accepted yet (their server ends)
        self.pending: deque[UnixSocket] = deque()
        #: where a connect or a datagram sender waits for room in this socket's queue
        self.peer_wait = WaitQueue("unix peer_wait")
        #: the peer's (pid, uid, gid) as of the connection (SO_PEERCRED)
        self.peercred: tuple[int, int, int] | None = None

    # -- names -------------------------------------------------------------------------------------

    def bind_name(self, name: bytes, node: object | None) -> None:
        """Bound to ``name`` (an abstract one when ``node`` is None: EADDRINUSE if taken)."""
        if self.addr is not None:
            raise _GuestErrno(errno.EINVAL)
        if node is None:
            if (name, self.stype) in self.net.abstract:
                raise _GuestErrno(errno.EADDRINUSE)
            self.net.abstract[(name, self.stype)] = self
        else:
            self.net.paths[id(node)] = (node, self)
        self.addr, self.node = name, node

    def autobind(self, order: str) -> None:
        """A name of its own (``\\0`` and five hex digits), unless it has one (unix_autobind)."""
        if self.addr is not None:
            return
        family = unix_unnamed(order)
        while True:
            name = family + b"\0" + b"%05x" % self.net.autobind_name()
            if (name, self.stype) not in self.net.abstract:
                break
        self.bind_name(name, None)

    def name(self, order: str) -> bytes:
        return self.addr if self.addr is not None else unix_unnamed(order)

    def peername(self, order: str) -> bytes:
        if self.peer is None:
            raise _GuestErrno(errno.ENOTCONN)
        return self.peer.name(order)

    def peer_cred(self) -> tuple[int, int, int]:
        return self.peercred if self.peercred is not None else super().peer_cred()

    def _passcred(self) -> bool:
        return self.options.get("SO_PASSCRED", False)

    # -- connections ----------------------------------------------------------------------------

    def pair(self, other: UnixSocket, proc: ProcessCore) -> None:
        """``socketpair``: joined back to back."""
        self.peer, other.peer = other, self
        self.state = other.state = ESTABLISHED
        self.peercred = other.peercred = creds(proc)

    def listen(self, proc: ProcessCore, backlog: int) -> None:
        if self.stype not in (STREAM, SEQPACKET):
            raise _GuestErrno(errno.EOPNOTSUPP)
        if self.addr is None:
            raise _GuestErrno(errno.EINVAL)
        if self.state not in (CLOSE, LISTEN):
            raise _GuestErrno(errno.EINVAL)
        if backlog > self.backlog:
            self.peer_wait.wake()
        self.backlog = backlog
        self.state = LISTEN
        self.peercred = creds(proc)
        self.wait.wake()

    def connect(self, proc: ProcessCore, find: Callable[[], UnixSocket] | None, nonblock: bool) -> None:
        """Connect to the socket ``find`` names (it raises Linux's lookup errors); None: the
        datagram ``AF_UNSPEC`` disconnect."""
        if self._passcred():
            self.autobind(proc.order)
        if self.stype == DGRAM:
            self._connect_dgram(find() if find is not None else None)
            return
        if find is None:
            raise _GuestErrno(errno.EINVAL)
        other = find()
        if other.state != LISTEN or other.shut & c.RCV_SHUTDOWN:
            raise _GuestErrno(errno.ECONNREFUSED)
        if len(other.pending) > other.backlog:
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            self.block(proc, (other.peer_wait,), self.sndtimeo)
        if self.state != CLOSE:
            raise _GuestErrno(errno.EISCONN if self.state == ESTABLISHED else errno.EINVAL)
        server = UnixSocket(self.net, self.stype)
        server.state = ESTABLISHED
        server.peer, self.peer = self, server
        server.peercred = creds(proc)
        server.addr = other.addr
        server.options = dict(other.options)
        self.peercred = other.peercred
        self.state = ESTABLISHED
        other.pending.append(server)
        other.wait.wake(key=c.DATA_READY)

    def _connect_dgram(self, other: UnixSocket | None) -> None:
        if other is not None:
            if other.peer is not None and other.peer is not self:
                raise _GuestErrno(errno.EPERM)
            self.state = other.state = ESTABLISHED
        old, self.peer = self.peer, other
        if other is None:
            self.state = CLOSE
        if old is not None and old is not other:
            self._disconnected(old)
            if old.peer is None:
                old.state = CLOSE
        self.wait.wake(key=_WRITABLE)

    def _disconnected(self, old: UnixSocket) -> None:
        """A datagram socket's peer changed: what came from the old one goes (unix_dgram_disconnected)."""
        if self.queue:
            self.purge()
            self.peer_wait.wake()
            if not old.dead and old.peer is self:
                old.set_error(errno.ECONNRESET)

    def accept(self, proc: ProcessCore, nonblock: bool) -> UnixSocket:
        if self.stype not in (STREAM, SEQPACKET):
            raise _GuestErrno(errno.EOPNOTSUPP)
        if self.state != LISTEN:
            raise _GuestErrno(errno.EINVAL)
        if not self.pending:
            if self.shut & c.RCV_SHUTDOWN:
                raise _GuestErrno(errno.EINVAL)
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            self.block(proc, (self.wait,), self.rcvtimeo)
        server = self.pending.popleft()
        self.peer_wait.wake()
        return server

    def shutdown(self, how: int) -> None:
        if how not in (c.SHUT_RD, c.SHUT_WR, c.SHUT_RDWR):
            raise _GuestErrno(errno.EINVAL)
        mode = how + 1
        self.shut |= mode
        self.wait.wake()
        other = self.peer
        if other is not None and self.stype in (STREAM, SEQPACKET):
            other.shut |= (c.SEND_SHUTDOWN if mode & c.RCV_SHUTDOWN else 0) | \
                (c.RCV_SHUTDOWN if mode & c.SEND_SHUTDOWN else 0)
            other.wait.wake()

    def close(self, embryo: bool = False) -> None:
        """The last descriptor went (unix_release_sock); an ``embryo`` is a connection never
        accepted, going with its listener: its client is reset."""
        self._unhash()
        state, self.state = self.state, CLOSE
        self.shut = c.SHUTDOWN_MASK
        other, self.peer = self.peer, None
        self.peer_wait.wake()
        self.wait.wake()
        if other is not None and self.stype in (STREAM, SEQPACKET):
            other.shut = c.SHUTDOWN_MASK
            if self.queue or embryo:
                other.err = errno.ECONNRESET
            other.wait.wake()
        self.purge()
        if state == LISTEN:
            while self.pending:
                server = self.pending.popleft()
                server.dead = True
                server.close(embryo=True)

    def _unhash(self) -> None:
        net = self.net
        if self.node is not None:
            found = net.paths.get(id(self.node))
            if found is not None and found[1] is self:
                del net.paths[id(self.node)]
        elif self.addr is not None and net.abstract.get((self.addr, self.stype)) is self:
            del net.abstract[(self.addr, self.stype)]

    # -- poll -------------------------------------------------------------------------------------

    def writable(self) -> bool:
        return self.state != LISTEN and self.wmem * 4 <= self.sndbuf

    def credit(self, cost: int) -> None:
        self.wmem = max(0, self.wmem - cost)
        if self.writable():  # unix_write_space wakes only once a quarter of the buffer is used
            self.wait.wake(key=_WRITABLE)

    def poll(self) -> int:
        mask = POLLERR if self.err else 0
        if self.stype == STREAM or self.state == LISTEN:
            if self.shut == c.SHUTDOWN_MASK:
                mask |= POLLHUP
            if self.shut & c.RCV_SHUTDOWN:
                mask |= POLLRDHUP | READABLE
            if self.queue or self.pending:
                mask |= READABLE
            if self.state == CLOSE:
                mask |= POLLHUP
            if self.writable():
                mask |= _WRITABLE
            return mask
        if self.shut & c.RCV_SHUTDOWN:
            mask |= POLLRDHUP | READABLE
        if self.shut == c.SHUTDOWN_MASK:
            mask |= POLLHUP
        if self.queue:
            mask |= READABLE
        if self.stype == SEQPACKET and self.state == CLOSE:
            mask |= POLLHUP
        other = self.peer
        writable = self.writable() and not (other is not None and other.peer is not self and other.full())
        return mask | (_WRITABLE if writable else 0)

    def full(self) -> bool:
        """Whether its datagram queue is over its length (unix_recvq_full)."""
        return len(self.queue) > self.backlog

    # -- sending ----------------------------------------------------------------------------------

    def sendmsg(self, proc: ProcessCore, data: bytes, dest: object, fds: list[OpenFile], flags: int,
                nonblock: bool) -> int:
        """Send ``data`` (and ``fds``) to the peer or, for a datagram, to what ``dest`` finds
        (a callable raising the lookup's errors)."""
        nonblock = nonblock or bool(flags & c.MSG_DONTWAIT)
        if self.stype == STREAM:
            if flags & c.MSG_OOB:
                raise _GuestErrno(errno.EOPNOTSUPP)
            if dest is not None:
                raise _GuestErrno(errno.EISCONN if self.state == ESTABLISHED else errno.EOPNOTSUPP)
            return self._send_stream(proc, data, fds, flags, nonblock)
        if self.stype == SEQPACKET:
            err = self.take_error()
            if err:
                raise _GuestErrno(err)
            if self.state != ESTABLISHED:
                raise _GuestErrno(errno.ENOTCONN)
            dest = None
        if flags & c.MSG_OOB:
            raise _GuestErrno(errno.EOPNOTSUPP)
        assert dest is None or callable(dest)
        return self._send_dgram(proc, data, dest, fds, nonblock)

    def _pipe(self, proc: ProcessCore, done: int, flags: int) -> int:
        proc.task.progress = None
        if done:
            return done
        if not flags & c.MSG_NOSIGNAL:
            signaling.broken_pipe(proc.kernel, proc.task)
        raise _GuestErrno(errno.EPIPE)

    def _send_stream(self, proc: ProcessCore, data: bytes, fds: list[OpenFile], flags: int, nonblock: bool) -> int:
        task = proc.task
        other = self.peer
        if other is None:
            raise _GuestErrno(errno.ENOTCONN)
        done = task.progress if isinstance(task.progress, int) else 0
        if self.shut & c.SEND_SHUTDOWN:
            return self._pipe(proc, done, flags)
        while done < len(data):
            size = min(len(data) - done, (self.sndbuf >> 1) - 64, c.UNIX_STREAM_CHUNK)
            if self.wmem >= self.sndbuf:  # sock_alloc_send_pskb: no room
                err = self.take_error()
                if err:
                    task.progress = None
                    if done:
                        return done
                    raise _GuestErrno(err)
                if nonblock:
                    task.progress = None
                    if done:
                        return done
                    raise _GuestErrno(errno.EAGAIN)
                task.progress = done
                self.block(proc, (self.wait,), self.sndtimeo)
            if other.dead or other.shut & c.RCV_SHUTDOWN:
                return self._pipe(proc, done, flags)
            message = Message(data[done:done + size], self, c.truesize(*c.stream_skb(size)),
                              list(fds) if fds and not done else None, creds=creds(proc))
            for f in message.fds or ():
                hold(f)
            other.queue.append(message)
            self.charge(message.cost)
            other.wait.wake(key=c.DATA_READY)
            done += size
        task.progress = None
        return done

    def _send_dgram(self, proc: ProcessCore, data: bytes, dest: Callable[[], UnixSocket] | None,
                    fds: list[OpenFile], nonblock: bool) -> int:
        if self._passcred():
            self.autobind(proc.order)
        if len(data) > self.sndbuf - 32:
            raise _GuestErrno(errno.EMSGSIZE)
        err = self.take_error()
        if err:
            raise _GuestErrno(err)
        if self.shut & c.SEND_SHUTDOWN:
            raise _GuestErrno(errno.EPIPE)
        if self.wmem >= self.sndbuf:
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            self.block(proc, (self.wait,), self.sndtimeo)
        other = dest() if dest is not None else self.peer
        if other is None:
            raise _GuestErrno(errno.ENOTCONN)
        if other.peer is not None and other.peer is not self:
            raise _GuestErrno(errno.EPERM)
        if other.dead:
            if self.stype == SEQPACKET:
                raise _GuestErrno(errno.EPIPE)
            if self.peer is other:
                self.peer, self.state = None, CLOSE
                self._disconnected(other)
                raise _GuestErrno(errno.ECONNREFUSED)
            raise _GuestErrno(errno.ECONNRESET if dest is None else errno.ECONNREFUSED)
        if other.shut & c.RCV_SHUTDOWN:
            raise _GuestErrno(errno.EPIPE)
        if other is not self and other.peer is not self and other.full():
            if nonblock:
                raise _GuestErrno(errno.EAGAIN)
            self.block(proc, (other.peer_wait,), self.sndtimeo)
        message = Message(data, self, c.truesize(*c.dgram_skb(len(data))), list(fds) or None, creds=creds(proc))
        for f in fds:
            hold(f)
        other.queue.append(message)
        self.charge(message.cost)
        other.wait.wake(key=c.DATA_READY)
        return len(data)

    # -- receiving --------------------------------------------------------------------------------

    def recvmsg(self, proc: ProcessCore, size: int, flags: int, nonblock: bool) -> Received:
        nonblock = nonblock or bool(flags & c.MSG_DONTWAIT)
        if self.stype == STREAM:
            return self._recv_stream(proc, size, flags, nonblock)
        if flags & c.MSG_OOB:
            raise _GuestErrno(errno.EOPNOTSUPP)
        if self.stype == SEQPACKET and self.state != ESTABLISHED:
            raise _GuestErrno(errno.ENOTCONN)
        return self._recv_dgram(proc, size, flags, nonblock)

    def _creds_for(self, message: Message) -> tuple[int, int, int] | None:
        return message.creds if self._passcred() else None

    def _recv_stream(self, proc: ProcessCore, size: int, flags: int, nonblock: bool) -> Received:
        if self.state != ESTABLISHED:
            raise _GuestErrno(errno.EINVAL)
        if flags & c.MSG_OOB:
            raise _GuestErrno(errno.EINVAL)  # no out-of-band byte waits (unix_stream_recv_urg)
        target = size if flags & c.MSG_WAITALL else min(self.rcvlowat, size)
        target = max(target, 1)
        available = 0
        for message in self.queue:
            available += min(len(message.data), size - available)
            if message.fds or available >= size:
                break
        if available < target and size:
            err = self.err
            ended = self.shut & c.RCV_SHUTDOWN
            if not available:
                if err:
                    raise _GuestErrno(self.take_error())
                if ended:
                    return Received(b"", 0)
                if nonblock:
                    raise _GuestErrno(errno.EAGAIN)
                self.block(proc, (self.wait,), self.rcvtimeo)  # EAGAIN once SO_RCVTIMEO passed
            elif not (err or ended or nonblock or proc.task.timed_out):
                self.block(proc, (self.wait,), self.rcvtimeo)  # MSG_WAITALL: the rest
        return self._take_stream(size, bool(flags & c.MSG_PEEK))

    def _take_stream(self, size: int, peek: bool) -> Received:
        out = bytearray()
        fds: list[OpenFile] = []
        name: bytes | None = None
        passed: tuple[int, int, int] | None = None
        for message in list(self.queue):
            if len(out) >= size:
                break
            sender = message.sender
            if name is None and isinstance(sender, UnixSocket) and sender.addr is not None:
                name = sender.addr
            if passed is None:
                passed = self._creds_for(message)
            take = min(len(message.data), size - len(out))
            out += message.data[:take]
            if peek:
                if message.fds:
                    for f in message.fds:
                        hold(f)
                    fds = list(message.fds)
                    break
                continue
            message.data = message.data[take:]
            if message.fds:
                fds, message.fds = message.fds, None
            if message.data:
                break
            self.queue.popleft()
            if message.sender is not None:
                message.sender.credit(message.cost)
            if fds:
                break
        return Received(bytes(out), len(out), fds, 0, name, passed)

    def _recv_dgram(self, proc: ProcessCore, size: int, flags: int, nonblock: bool) -> Received:
        if not self.queue:
            if nonblock:
                if self.stype == SEQPACKET and self.shut & c.RCV_SHUTDOWN:
                    return Received(b"", 0)
                raise _GuestErrno(errno.EAGAIN)
            err = self.take_error()
            if err:
                raise _GuestErrno(err)
            if self.shut & c.RCV_SHUTDOWN:
                return Received(b"", 0)
            self.block(proc, (self.wait,), self.rcvtimeo)
        message = self.queue[0]
        peek = bool(flags & c.MSG_PEEK)
        fds: list[OpenFile] = []
        if peek:
            for f in message.fds or ():
                hold(f)
            fds = list(message.fds or ())
        else:
            self.queue.popleft()
            fds, message.fds = list(message.fds or ()), None
            if message.sender is not None:
                message.sender.credit(message.cost)
            self.peer_wait.wake(key=_WRITABLE)
        data = message.data[:size]
        truncated = c.MSG_TRUNC if len(data) < len(message.data) else 0
        length = len(message.data) if flags & c.MSG_TRUNC else len(data)
        sender = message.sender
        name = sender.addr if isinstance(sender, UnixSocket) and sender.addr is not None else None
        return Received(data, length, fds, truncated, name, self._creds_for(message))
