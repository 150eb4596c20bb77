"""Socket addresses as the program passes them and as Linux gives them back.

``sa_family`` is in the program's byte order; an IP port and address are in network order
(big-endian) on every arch.  AF_UNIX names are kept as Linux keeps them (``struct
unix_address``): the family and the path with its terminating NUL (a path name), or the
bytes given (an abstract name, starting with a NUL), so ``getsockname`` returns them as
they were bound.  IP addresses are :class:`InetAddr`; an IPv6 socket sees IPv4 peers as
v4-mapped addresses (``::ffff:127.0.0.1``), as Linux's dual-stack sockets do.

The network a guest sees is one loopback interface: ``127.0.0.0/8`` and ``::1`` are its
addresses (the wildcard ``0.0.0.0``/``::`` means them), and any other destination is
unreachable (``ENETUNREACH``), any other local address not there (``EADDRNOTAVAIL``).
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass

from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.net.consts import AF_INET, AF_INET6, AF_UNIX, AF_UNSPEC

#: offsetof(struct sockaddr_un, sun_path), and the largest sockaddr_un
UNIX_PATH_OFFSET, UNIX_ADDR_MAX = 2, 110
SOCKADDR_IN, SOCKADDR_IN6, SIN6_LEN_RFC2133 = 16, 28, 24
V4_MAPPED = bytes(10) + b"\xff\xff"
ANY4, ANY6, LOOPBACK4, LOOPBACK6 = bytes(4), bytes(16), bytes([127, 0, 0, 1]), bytes(15) + b"\x01"


def family_of(raw: bytes, order: str) -> int:
    """The ``sa_family`` of an address (AF_UNSPEC when too short to hold one)."""
    return struct.unpack(order + "H", raw[:2])[0] if len(raw) >= 2 else AF_UNSPEC


# -- AF_UNIX ----------------------------------------------------------------------------------------

def unix_name(raw: bytes, order: str) -> bytes:
    """The name an AF_UNIX address binds or reaches, as Linux stores it (unix_validate_addr,
    unix_mkname_bsd): EINVAL for a length out of bounds or another family."""
    if not UNIX_PATH_OFFSET < len(raw) <= UNIX_ADDR_MAX or family_of(raw, order) != AF_UNIX:
        raise _GuestErrno(errno.EINVAL)
    if raw[UNIX_PATH_OFFSET]:
        path = raw[UNIX_PATH_OFFSET:].split(b"\0", 1)[0]
        return raw[:UNIX_PATH_OFFSET] + path + b"\0"
    return raw


def unix_path(name: bytes) -> str | None:
    """The file system path of a name (None: an abstract one)."""
    if name[UNIX_PATH_OFFSET:UNIX_PATH_OFFSET + 1] in (b"", b"\0"):
        return None
    return name[UNIX_PATH_OFFSET:-1].decode("utf-8", "surrogateescape")


def unix_unnamed(order: str) -> bytes:
    """What ``getsockname`` gives for an unbound AF_UNIX socket: the family alone."""
    return struct.pack(order + "H", AF_UNIX)


# -- AF_INET and AF_INET6 -----------------------------------------------------------------------------

@dataclass(frozen=True)
class InetAddr:
    """An IP address and port; ``host`` is 4 bytes (AF_INET) or 16 (AF_INET6)."""

    host: bytes
    port: int
    flowinfo: int = 0
    scope: int = 0

    @property
    def v6(self) -> bool:
        return len(self.host) == 16

    def key(self) -> bytes:
        """The address as an IPv6 socket compares it (IPv4 as v4-mapped)."""
        return self.host if self.v6 else V4_MAPPED + self.host

    def any(self) -> bool:
        return self.host in (ANY4, ANY6)

    def with_port(self, port: int) -> InetAddr:
        return InetAddr(self.host, port, self.flowinfo, self.scope)


def v4_of(host16: bytes) -> bytes | None:
    """The IPv4 address a v4-mapped IPv6 one is (None: it is not one)."""
    return host16[12:] if host16.startswith(V4_MAPPED) else None


def is_local(host: bytes) -> bool:
    """Whether ``host`` is an address of the guest's one interface (loopback) or the wildcard."""
    if len(host) == 16:
        v4 = v4_of(host)
        return host in (ANY6, LOOPBACK6) or v4 is not None and (v4[0] == 127 or v4 == ANY4)
    return host[0] == 127 or host == ANY4


def parse_inet(raw: bytes, family: int, order: str) -> InetAddr | None:
    """An address given to a socket of ``family``; None for AF_UNSPEC (``connect``'s
    disconnect).  EINVAL when too short, EAFNOSUPPORT for another family."""
    got = family_of(raw, order)
    if family == AF_INET:
        if len(raw) < SOCKADDR_IN:
            raise _GuestErrno(errno.EINVAL)
        if got == AF_UNSPEC:
            return None
        if got != AF_INET:
            raise _GuestErrno(errno.EAFNOSUPPORT)
        port, host = struct.unpack(">H4s", raw[2:8])
        return InetAddr(host, port)
    if len(raw) < SIN6_LEN_RFC2133:
        raise _GuestErrno(errno.EINVAL)
    if got == AF_UNSPEC:
        return None
    if got != AF_INET6:
        raise _GuestErrno(errno.EAFNOSUPPORT)
    port, flowinfo, host = struct.unpack(">HI16s", raw[2:24])
    scope = struct.unpack(order + "I", raw[24:28])[0] if len(raw) >= SOCKADDR_IN6 else 0
    return InetAddr(host, port, flowinfo, scope)


def format_inet(addr: InetAddr, family: int, order: str) -> bytes:
    """``struct sockaddr_in`` (16 bytes) or ``sockaddr_in6`` (28) of ``addr`` for a socket of ``family``."""
    if family == AF_INET:
        host = addr.host if not addr.v6 else (v4_of(addr.host) or ANY4)
        return struct.pack(order + "H", AF_INET) + struct.pack(">H4s", addr.port, host) + bytes(8)
    return struct.pack(order + "H", AF_INET6) + struct.pack(">HI16s", addr.port, addr.flowinfo, addr.key()) + \
        struct.pack(order + "I", addr.scope)
