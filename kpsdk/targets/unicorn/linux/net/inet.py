"""What TCP and UDP sockets share on the loopback that is the guest's only network: an address
and port, the port table, the IP options (net/ipv4/af_inet.c, inet_connection_sock.c; the v6
files for AF_INET6).

No packet is made: :mod:`.tcp` hands bytes straight to the other end's receive queue,
:mod:`.udp` a datagram to the socket bound to its destination.  What a program sees of ports
and addresses is Linux's: ``bind`` with its conflict rules (SO_REUSEADDR for sockets not
listening, SO_REUSEPORT on both, IPV6_V6ONLY, the wildcard covering every address), ports
below 1024 for root alone (EACCES), ephemeral ports from 32768 up (in order: Linux picks them
at random), ``EADDRNOTAVAIL`` for an address that is not the guest's, ``ENETUNREACH`` for a
destination off the loopback, IPv4 peers of a dual-stack IPv6 socket as ``::ffff:127.0.0.1``.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

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
from kpsdk.targets.unicorn.linux.net.sock import CLOSE, LISTEN, Socket

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.net import Network


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
