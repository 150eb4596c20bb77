"""What every socket has: its state, its options, its receive queue, and how its calls wait (net/core/sock.c).

A socket (:class:`Socket`) is a :class:`~kpsdk.targets.unicorn.linux.fileobj.FileObject`: a
``read`` is a ``recvmsg`` without flags, a ``write`` a ``sendmsg``.  Its receive queue holds
:class:`Message` objects, Linux's skbs: the bytes, any descriptors passed with them, the
socket that sent them, and their ``truesize``, charged to the sender's ``wmem`` until they
are read, which is what makes a sender wait when its buffer is full (the sizes are Linux's:
:mod:`.consts`).  The protocol classes (:mod:`.unix`, :mod:`.inet`) give the operations
Linux's ``proto_ops`` give: bind, listen, connect, accept, sendmsg, recvmsg, shutdown, poll.

A call that must wait raises :class:`~kpsdk.targets.unicorn.linux.waits._Block` on the queues
that will announce the change, and runs again when woken (so the protocol code checks, then
acts); ``SO_RCVTIMEO``/``SO_SNDTIMEO`` put a deadline on the wait (then ``EAGAIN``).
"""

from __future__ import annotations

import errno
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.fileobj import S_IFSOCK, FileObject
from kpsdk.targets.unicorn.linux.files import release
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.net import consts as c
from kpsdk.targets.unicorn.linux.sched import NSEC
from kpsdk.targets.unicorn.linux.waits import WaitQueue, _Block

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile
    from kpsdk.targets.unicorn.linux.net import Network

#: the generic socket types (the arch's numbers are translated at the calls)
STREAM, DGRAM, SEQPACKET = 1, 2, 5
#: a socket's states (Linux's sk_state: TCP_CLOSE, TCP_LISTEN, TCP_ESTABLISHED)
CLOSE, LISTEN, ESTABLISHED = "close", "listen", "established"
#: the boolean SOL_SOCKET options a socket keeps
_FLAGS = ("SO_DEBUG", "SO_REUSEADDR", "SO_REUSEPORT", "SO_KEEPALIVE", "SO_DONTROUTE", "SO_BROADCAST",
          "SO_OOBINLINE", "SO_NO_CHECK", "SO_PASSCRED", "SO_PASSSEC", "SO_RXQ_OVFL", "SO_TIMESTAMP_OLD",
          "SO_ZEROCOPY", "SO_BSDCOMPAT")


@dataclass(eq=False)
class Message:
    """One buffer on a receive queue: its unread ``data``, the descriptions passed with it
    (held in flight), the socket that sent it and what it costs that socket's buffer."""

    data: bytes
    sender: Socket | None = None
    cost: int = 0
    fds: list[OpenFile] | None = None
    #: where it came from, as ``recvfrom`` gives it (a datagram of an IP socket)
    source: bytes | None = None
    #: the sender's (pid, uid, gid), for SCM_CREDENTIALS
    creds: tuple[int, int, int] = (0, 0, 0)


@dataclass(eq=False)
class Received:
    """What a ``recvmsg`` took: the bytes, the descriptions passed (each held once for the
    receiver), MSG_TRUNC, the source address (None: none), the call's result."""

    data: bytes
    length: int
    fds: list[OpenFile] = field(default_factory=list)
    flags: int = 0
    name: bytes | None = None
    creds: tuple[int, int, int] | None = None


def hold(f: OpenFile) -> None:
    """A description passed in a message stays open while in flight."""
    f.refs += 1


def drop(f: OpenFile) -> None:
    """A description in flight is delivered or thrown away: its in-flight hold goes."""
    f.refs -= 1
    if f.refs <= 0:
        release(f)


class Socket(FileObject):
    """What the protocols share (see the module docstring)."""

    kind = "socket"
    family = c.AF_UNSPEC
    protocol = 0

    def __init__(self, net: Network, stype: int) -> None:
        super().__init__()
        self.net = net
        self.stype = stype
        self.ino = net.inode()
        self.link = f"socket:[{self.ino}]"
        self.state = CLOSE
        #: RCV_SHUTDOWN | SEND_SHUTDOWN; the pending error SO_ERROR and the next call report
        self.shut = 0
        self.err = 0
        self.options: dict[str, bool] = {}
        self.sndbuf, self.rcvbuf = c.WMEM_DEFAULT, c.RMEM_DEFAULT
        self.rcvtimeo = self.sndtimeo = 0
        self.rcvlowat = 1
        self.priority = 0
        self.linger = (0, 0)
        #: protocol-level options kept as ints, by (level, name)
        self.ints: dict[tuple[int, int], int] = {}
        self.queue: deque[Message] = deque()
        #: what this socket's unread messages cost (sk_wmem_alloc)
        self.wmem = 0
        #: whether its last descriptor was closed
        self.dead = False
        self._deadlines: dict[int, int] = {}

    # -- errors and waiting -----------------------------------------------------------------------

    def take_error(self) -> int:
        """The pending error, cleared (sock_error)."""
        err, self.err = self.err, 0
        return err

    def set_error(self, err: int) -> None:
        self.err = err
        self.wait.wake()  # sk_error_report

    def block(self, proc: ProcessCore, queues: tuple[WaitQueue, ...], timeout_ns: int) -> None:
        """Wait on ``queues`` (raises :class:`_Block`), at most ``timeout_ns`` (0: for ever;
        the deadline is set at the call's first run): EAGAIN once it passed."""
        task = proc.task
        if not timeout_ns:
            raise _Block(queues)
        now = proc.kernel.clock.elapsed
        if task.call is None or task.tid not in self._deadlines:
            self._deadlines[task.tid] = now + timeout_ns
        deadline = self._deadlines[task.tid]
        if task.timed_out or now >= deadline:
            self._deadlines.pop(task.tid, None)
            raise _GuestErrno(errno.EAGAIN)
        raise _Block(queues, deadline)

    # -- buffers ----------------------------------------------------------------------------------

    def charge(self, cost: int) -> None:
        self.wmem += cost

    def credit(self, cost: int) -> None:
        """A message it sent was read or dropped: room again (sock_wfree, sk_write_space)."""
        self.wmem = max(0, self.wmem - cost)
        self.wait.wake(key=c.WRITE_SPACE)

    def purge(self) -> None:
        """Throw away every unread message (their senders get the room back, descriptors in
        flight are closed)."""
        while self.queue:
            self.discard(self.queue.popleft())

    @staticmethod
    def discard(msg: Message) -> None:
        if msg.sender is not None:
            msg.sender.credit(msg.cost)
        for f in msg.fds or ():
            drop(f)

    # -- as a file --------------------------------------------------------------------------------

    def read(self, proc: ProcessCore, f: OpenFile, count: int) -> bytes:
        got = self.recvmsg(proc, count, 0, bool(f.flags & proc.o_nonblock))
        for passed in got.fds:  # no room for them: closed (scm_destroy)
            drop(passed)
        return got.data

    def write(self, proc: ProcessCore, f: OpenFile, data: bytes) -> int:
        return self.sendmsg(proc, data, None, [], 0, bool(f.flags & proc.o_nonblock))

    def stat(self) -> dict[str, int]:
        return {"st_mode": S_IFSOCK | 0o777, "st_nlink": 1, "st_uid": os.getuid(), "st_gid": os.getgid(),
                "st_blksize": 4096, "st_dev": 0x8, "st_ino": self.ino}

    def ioctl(self, proc: ProcessCore, f: OpenFile, request: int, arg: int) -> int:
        numbers = c.abi(proc.arch.name)
        if request == numbers.fionbio:
            on = struct.unpack(proc.order + "i", proc.read(arg, 4))[0]
            f.flags = f.flags | proc.o_nonblock if on else f.flags & ~proc.o_nonblock
            return 0
        if request == numbers.fionread:
            proc.write(arg, struct.pack(proc.order + "i", self.inq()))
            return 0
        if request == c.siocoutq(proc.arch.name):
            proc.write(arg, struct.pack(proc.order + "i", self.wmem))
            return 0
        raise _GuestErrno(errno.ENOTTY)

    def inq(self) -> int:
        """SIOCINQ: the bytes a read would find (the first datagram's for a datagram socket)."""
        if self.state == LISTEN:
            raise _GuestErrno(errno.EINVAL)
        if self.stype == DGRAM:
            return len(self.queue[0].data) if self.queue else 0
        return sum(len(m.data) for m in self.queue)

    def release(self) -> None:
        self.dead = True
        self.close()

    # -- the protocol's (overridden) --------------------------------------------------------------

    def close(self, embryo: bool = False) -> None:
        self.purge()

    def recvmsg(self, proc: ProcessCore, size: int, flags: int, nonblock: bool) -> Received:
        raise _GuestErrno(errno.EOPNOTSUPP)

    def sendmsg(self, proc: ProcessCore, data: bytes, dest: object, fds: list[OpenFile], flags: int,
                nonblock: bool) -> int:
        raise _GuestErrno(errno.EOPNOTSUPP)

    def listen(self, proc: ProcessCore, backlog: int) -> None:
        raise _GuestErrno(errno.EOPNOTSUPP)

    def shutdown(self, how: int) -> None:
        raise _GuestErrno(errno.ENOTCONN)

    def name(self, order: str) -> bytes:
        raise NotImplementedError

    def peername(self, order: str) -> bytes:
        raise _GuestErrno(errno.ENOTCONN)

    def peer_cred(self) -> tuple[int, int, int]:
        """SO_PEERCRED: the peer's (pid, uid, gid) as it was at connect (none: 0, -1, -1)."""
        return 0, 0xFFFFFFFF, 0xFFFFFFFF

    # -- options ----------------------------------------------------------------------------------

    def setsockopt(self, proc: ProcessCore, level: int, number: int, value: bytes) -> None:
        numbers = c.abi(proc.arch.name)
        if level != numbers.sol_socket:
            self.set_protocol_option(proc, level, number, value)
            return
        if len(value) < 4:
            raise _GuestErrno(errno.EINVAL)
        name = numbers.option(number)
        (val,) = struct.unpack(proc.order + "i", value[:4])
        root = proc.root.cred.uid == 0
        if name in _FLAGS:
            if name == "SO_DEBUG" and val and not root:
                raise _GuestErrno(errno.EACCES)
            if name == "SO_REUSEPORT" and val and self.family == c.AF_UNIX:
                raise _GuestErrno(errno.EOPNOTSUPP)
            self.options[name] = bool(val)
        elif name in ("SO_SNDBUF", "SO_SNDBUFFORCE"):
            self.sndbuf = max(min(val & 0xFFFFFFFF, c.WMEM_MAX) * 2, c.SOCK_MIN_SNDBUF)
            self.wait.wake(key=c.WRITE_SPACE)
        elif name in ("SO_RCVBUF", "SO_RCVBUFFORCE"):
            self.rcvbuf = max(min(val & 0xFFFFFFFF, c.RMEM_MAX) * 2, c.SOCK_MIN_RCVBUF)
        elif name == "SO_LINGER":
            if len(value) < 8:
                raise _GuestErrno(errno.EINVAL)
            onoff, secs = struct.unpack(proc.order + "ii", value[:8])
            self.linger = (int(bool(onoff)), secs if onoff else self.linger[1])
        elif name == "SO_PRIORITY":
            if not 0 <= val <= 6 and not root:
                raise _GuestErrno(errno.EPERM)
            self.priority = val
        elif name == "SO_RCVLOWAT":
            self.rcvlowat = (val if val >= 0 else 0x7FFFFFFF) or 1
        elif name in ("SO_RCVTIMEO_OLD", "SO_RCVTIMEO_NEW", "SO_SNDTIMEO_OLD", "SO_SNDTIMEO_NEW"):
            ns = self._read_timeout(proc, value, name.endswith("NEW"))
            if name.startswith("SO_RCV"):
                self.rcvtimeo = ns
            else:
                self.sndtimeo = ns
        elif name == "SO_MARK":
            if not root:
                raise _GuestErrno(errno.EPERM)
        else:
            raise _GuestErrno(errno.ENOPROTOOPT)

    def _read_timeout(self, proc: ProcessCore, value: bytes, new: bool) -> int:
        """A ``struct timeval`` (``__kernel_sock_timeval``, 64-bit fields, for the _NEW options):
        ns, 0 for none (sock_set_timeout)."""
        fmt = proc.order + ("qq" if new or proc.bits == 64 else "ii")
        if len(value) < struct.calcsize(fmt):
            raise _GuestErrno(errno.EINVAL)
        sec, usec = struct.unpack(fmt, value[:struct.calcsize(fmt)])
        if not 0 <= usec < 1_000_000:
            raise _GuestErrno(errno.EDOM)
        if sec < 0:
            return 1  # a negative time: do not wait (Linux warns and takes 0 jiffies)
        return sec * NSEC + usec * 1000

    def getsockopt(self, proc: ProcessCore, level: int, number: int) -> bytes:
        """The option's value, whole (the caller cuts it to the length asked)."""
        numbers = c.abi(proc.arch.name)
        if level != numbers.sol_socket:
            return self.get_protocol_option(proc, level, number)
        name = numbers.option(number)
        as_int: dict[str, int] = {
            "SO_TYPE": {STREAM: numbers.sock_stream, DGRAM: numbers.sock_dgram,
                        SEQPACKET: numbers.sock_seqpacket}[self.stype],
            "SO_PROTOCOL": self.protocol, "SO_DOMAIN": self.family, "SO_SNDBUF": self.sndbuf,
            "SO_RCVBUF": self.rcvbuf, "SO_ACCEPTCONN": int(self.state == LISTEN), "SO_PRIORITY": self.priority,
            "SO_RCVLOWAT": self.rcvlowat, "SO_SNDLOWAT": 1, "SO_MARK": 0, "SO_PEEK_OFF": -1,
            "SO_INCOMING_CPU": 0, "SO_BUSY_POLL": 0,
        }
        if name in _FLAGS:
            value = int(self.options.get(str(name), False))
        elif name == "SO_ERROR":
            value = self.take_error()
        elif name is not None and name in as_int:
            value = as_int[name]
        elif name == "SO_LINGER":
            return struct.pack(proc.order + "ii", *self.linger)
        elif name in ("SO_RCVTIMEO_OLD", "SO_RCVTIMEO_NEW", "SO_SNDTIMEO_OLD", "SO_SNDTIMEO_NEW"):
            ns = self.rcvtimeo if name.startswith("SO_RCV") else self.sndtimeo
            fmt = proc.order + ("qq" if name.endswith("NEW") or proc.bits == 64 else "ii")
            return struct.pack(fmt, ns // NSEC, ns % NSEC // 1000)
        elif name == "SO_PEERCRED":
            return struct.pack(proc.order + "iII", *self.peer_cred())
        else:
            raise _GuestErrno(errno.ENOPROTOOPT)
        return struct.pack(proc.order + "i", value)

    def set_protocol_option(self, proc: ProcessCore, level: int, number: int, value: bytes) -> None:
        raise _GuestErrno(errno.EOPNOTSUPP)

    def get_protocol_option(self, proc: ProcessCore, level: int, number: int) -> bytes:
        raise _GuestErrno(errno.EOPNOTSUPP)
