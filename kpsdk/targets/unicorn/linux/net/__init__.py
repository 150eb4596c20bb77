"""Sockets between the emulated processes of a session: AF_UNIX, and TCP and UDP on a loopback.

:class:`Network` is the session's: the AF_UNIX names bound (a path's socket node in the file
system, or an abstract name), the TCP and UDP ports bound, the socket inode numbers.  Every
process of the session reaches every socket of it, and nothing else: there is no host
network.  A guest sees one interface, loopback (``127.0.0.0/8``, ``::1``); a connection to
any other address is ``ENETUNREACH``, a bind to one ``EADDRNOTAVAIL``, and no packet ever
leaves kpsdk (:mod:`.addrs`).

* :mod:`.consts`: the numbers per arch, Linux's buffer sizes and skb accounting;
* :mod:`.addrs`: socket addresses in and out;
* :mod:`.sock`: what every socket has (options, the receive queue, waiting);
* :mod:`.unix`: AF_UNIX stream, datagram and seqpacket sockets (net/unix/af_unix.c);
* :mod:`.inet`: what TCP and UDP share (addresses, ports, IP options: af_inet.c);
* :mod:`.tcp`: TCP over loopback (tcp.c, tcp_input.c); :mod:`.udp`: UDP (udp.c).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.net.inet import InetSocket
    from kpsdk.targets.unicorn.linux.net.unix import UnixSocket

#: the ports bind(0) and connect give out (net.ipv4.ip_local_port_range)
EPHEMERAL_FIRST, EPHEMERAL_LAST = 32768, 60999


class Network:
    """The session's socket namespace (see the module docstring)."""

    def __init__(self) -> None:
        #: abstract AF_UNIX names, by (name, type): Linux hashes the type in, so a stream and a
        #: datagram socket may hold the same abstract name
        self.abstract: dict[tuple[bytes, int], UnixSocket] = {}
        #: path-bound AF_UNIX sockets, by their socket node (id: the node is held)
        self.paths: dict[int, tuple[object, UnixSocket]] = {}
        #: the bound IP sockets by protocol (6, 17) and port
        self.ports: dict[int, dict[int, list[InetSocket]]] = {6: {}, 17: {}}
        self._next_port = {6: EPHEMERAL_FIRST, 17: EPHEMERAL_FIRST}
        self._inode = 10000
        self._autobind = 0

    def inode(self) -> int:
        """A socket's inode number (``socket:[N]``), given out in order."""
        self._inode += 1
        return self._inode

    def autobind_name(self) -> int:
        """The next number of an AF_UNIX autobind name (``\\0%05x``; Linux starts at a random one)."""
        self._autobind = (self._autobind + 1) & 0xFFFFF
        return self._autobind

    def free_port(self, proto: int, taken: Callable[[int], bool]) -> int | None:
        """The next ephemeral port ``taken`` says is free (None: every one is taken)."""
        span = EPHEMERAL_LAST - EPHEMERAL_FIRST + 1
        start = self._next_port[proto]
        for i in range(span):
            port = EPHEMERAL_FIRST + (start - EPHEMERAL_FIRST + i) % span
            if not taken(port):
                self._next_port[proto] = port + 1 if port < EPHEMERAL_LAST else EPHEMERAL_FIRST
                return port
        return None


def network(kernel: LinuxKernel) -> Network:
    """The session's network (made at the first socket)."""
    found = getattr(kernel, "_network", None)
    if found is None:
        found = Network()
        kernel._network = found  # type: ignore[attr-defined]
    return found
