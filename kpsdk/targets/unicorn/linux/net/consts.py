"""The numbers of the socket API as each architecture's headers define them, and Linux's sizes.

Most are the same everywhere (include/linux/socket.h, include/uapi/asm-generic/socket.h);
powerpc moves five ``SO_*`` options (arch/powerpc/include/uapi/asm/socket.h) and MIPS
moves the socket types, ``SOL_SOCKET`` and most options (arch/mips/include/asm/socket.h,
arch/mips/include/uapi/asm/socket.h): :func:`abi` gives one arch's set.  The buffer sizes
and the ``truesize`` that counts a buffer against them are Linux's on a 4 KiB-page machine
(net/core/sock.c, include/linux/skbuff.h), so a sender fills a socket where Linux's does:
219,264 bytes of an AF_UNIX stream, 278 one-byte datagrams.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 0, 1, 2, 10, 16, 17
IPPROTO_IP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_IPV6 = 0, 6, 17, 41
SHUT_RD, SHUT_WR, SHUT_RDWR = 0, 1, 2
#: sk_shutdown's bits
RCV_SHUTDOWN, SEND_SHUTDOWN = 1, 2
SHUTDOWN_MASK = RCV_SHUTDOWN | SEND_SHUTDOWN

MSG_OOB, MSG_PEEK, MSG_DONTROUTE, MSG_CTRUNC, MSG_TRUNC = 0x1, 0x2, 0x4, 0x8, 0x20
MSG_DONTWAIT, MSG_EOR, MSG_WAITALL, MSG_NOSIGNAL, MSG_MORE = 0x40, 0x80, 0x100, 0x4000, 0x8000
MSG_WAITFORONE, MSG_CMSG_CLOEXEC = 0x10000, 0x40000000
SCM_RIGHTS, SCM_CREDENTIALS = 1, 2
#: the most descriptors one SCM_RIGHTS message carries (SCM_MAX_FD)
SCM_MAX_FD = 253
#: sockaddr_storage's size: the longest address a call copies in
SOCKADDR_MAX = 128
#: the wake keys: data arrived (sk_data_ready), room made (sk_write_space)
DATA_READY, WRITE_SPACE = 0x1 | 0x40 | 0x80, 0x4 | 0x100 | 0x200

TCP_NODELAY, TCP_MAXSEG, TCP_CORK, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT = 1, 2, 3, 4, 5, 6
TCP_DEFER_ACCEPT, TCP_QUICKACK, TCP_USER_TIMEOUT, TCP_FASTOPEN = 9, 12, 18, 23
IPV6_V6ONLY = 26
#: the TCP and IP options kept and given back as ints (any other is ENOPROTOOPT)
TCP_INT_OPTIONS = frozenset({TCP_NODELAY, TCP_MAXSEG, TCP_CORK, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT,
                             TCP_DEFER_ACCEPT, TCP_QUICKACK, TCP_USER_TIMEOUT, TCP_FASTOPEN})
#: IP_TOS, IP_TTL, IP_RECVERR, IP_MTU_DISCOVER, IP_MULTICAST_TTL, IP_MULTICAST_LOOP, IP_BIND_ADDRESS_NO_PORT
IP_INT_OPTIONS = frozenset({1, 2, 11, 10, 33, 34, 24})
#: IPV6_UNICAST_HOPS, IPV6_MULTICAST_LOOP, IPV6_V6ONLY, IPV6_RECVERR, IPV6_MTU_DISCOVER, IPV6_TCLASS
IPV6_INT_OPTIONS = frozenset({16, 19, 26, 25, 23, 67})

#: the default and largest buffer sizes (net.core.wmem_default/rmem_default, wmem_max/rmem_max)
#: and a TCP socket's own defaults (net.ipv4.tcp_wmem[1], tcp_rmem[1])
WMEM_DEFAULT = RMEM_DEFAULT = WMEM_MAX = RMEM_MAX = 212992
TCP_WMEM_DEFAULT, TCP_RMEM_DEFAULT = 16384, 131072
#: SO_SNDBUF and SO_RCVBUF's floors (SOCK_MIN_SNDBUF, SOCK_MIN_RCVBUF: twice an skb's truesize)
SOCK_MIN_SNDBUF, SOCK_MIN_RCVBUF = 4608, 2304
#: an AF_UNIX datagram queue's length (net.unix.max_dgram_qlen)
MAX_DGRAM_QLEN = 10
#: what a page is, and the largest linear part of an skb (SKB_MAX_HEAD(0): a page less the shared info)
PAGE = 4096
_SHINFO, _SKBUFF = 320, 256
SKB_MAX_HEAD = PAGE - _SHINFO
#: the most an AF_UNIX stream puts in one skb (SKB_MAX_HEAD(0) + UNIX_SKB_FRAGS_SZ)
UNIX_STREAM_CHUNK = SKB_MAX_HEAD + 32768
#: the largest linear datagram (SKB_MAX_ALLOC: an order-2 allocation less the shared info)
SKB_MAX_ALLOC = 4 * PAGE - _SHINFO


def _kmalloc(size: int) -> int:
    """The slab a linear buffer of ``size`` bytes comes from (the powers of two kmalloc keeps)."""
    bucket = 512
    while bucket < size:
        bucket <<= 1
    return bucket


def truesize(linear: int, paged: int = 0) -> int:
    """What an skb of ``linear`` bytes in its head and ``paged`` in page fragments counts
    against a socket's buffer: the head's slab with the shared info, the ``sk_buff`` itself,
    and whole pages for the fragments (__alloc_skb, alloc_skb_with_frags)."""
    head = _kmalloc(-(-linear // 64) * 64 + _SHINFO) + _SKBUFF
    return head + -(-paged // PAGE) * PAGE


def stream_skb(size: int) -> tuple[int, int]:
    """(linear, paged) of an AF_UNIX stream skb carrying ``size`` bytes (unix_stream_sendmsg)."""
    paged = max(0, size - SKB_MAX_HEAD)
    paged = min(size, -(-paged // PAGE) * PAGE)
    return size - paged, paged


def dgram_skb(size: int) -> tuple[int, int]:
    """(linear, paged) of an AF_UNIX datagram of ``size`` bytes (unix_dgram_sendmsg)."""
    if size <= SKB_MAX_ALLOC:
        return size, 0
    paged = -(-min(size - SKB_MAX_ALLOC, 17 * PAGE) // PAGE) * PAGE
    return size - paged, paged


@dataclass(frozen=True)
class SocketAbi:
    """One arch's socket numbers: the types, ``SOL_SOCKET`` and the ``SO_*`` options by name,
    and the ioctls a socket answers."""

    sock_stream: int
    sock_dgram: int
    sock_seqpacket: int
    sol_socket: int
    options: dict[str, int]
    fionread: int
    fionbio: int

    def option(self, number: int) -> str | None:
        """The name of ``SO_*`` option ``number`` (None: not one kpsdk knows)."""
        for name, value in self.options.items():
            if value == number:
                return name
        return None


_GENERIC = {
    "SO_DEBUG": 1, "SO_REUSEADDR": 2, "SO_TYPE": 3, "SO_ERROR": 4, "SO_DONTROUTE": 5, "SO_BROADCAST": 6,
    "SO_SNDBUF": 7, "SO_RCVBUF": 8, "SO_KEEPALIVE": 9, "SO_OOBINLINE": 10, "SO_NO_CHECK": 11, "SO_PRIORITY": 12,
    "SO_LINGER": 13, "SO_BSDCOMPAT": 14, "SO_REUSEPORT": 15, "SO_PASSCRED": 16, "SO_PEERCRED": 17,
    "SO_RCVLOWAT": 18, "SO_SNDLOWAT": 19, "SO_RCVTIMEO_OLD": 20, "SO_SNDTIMEO_OLD": 21, "SO_TIMESTAMP_OLD": 29,
    "SO_ACCEPTCONN": 30, "SO_PEERSEC": 31, "SO_SNDBUFFORCE": 32, "SO_RCVBUFFORCE": 33, "SO_PASSSEC": 34,
    "SO_MARK": 36, "SO_PROTOCOL": 38, "SO_DOMAIN": 39, "SO_RXQ_OVFL": 40, "SO_PEEK_OFF": 42,
    "SO_BUSY_POLL": 46, "SO_INCOMING_CPU": 49, "SO_ZEROCOPY": 60, "SO_RCVTIMEO_NEW": 66, "SO_SNDTIMEO_NEW": 67,
}
_POWERPC = {**_GENERIC, "SO_RCVLOWAT": 16, "SO_SNDLOWAT": 17, "SO_RCVTIMEO_OLD": 18, "SO_SNDTIMEO_OLD": 19,
            "SO_PASSCRED": 20, "SO_PEERCRED": 21}
_MIPS = {**_GENERIC, "SO_REUSEADDR": 0x4, "SO_KEEPALIVE": 0x8, "SO_DONTROUTE": 0x10, "SO_BROADCAST": 0x20,
         "SO_LINGER": 0x80, "SO_OOBINLINE": 0x100, "SO_REUSEPORT": 0x200, "SO_TYPE": 0x1008, "SO_ERROR": 0x1007,
         "SO_SNDBUF": 0x1001, "SO_RCVBUF": 0x1002, "SO_SNDLOWAT": 0x1003, "SO_RCVLOWAT": 0x1004,
         "SO_SNDTIMEO_OLD": 0x1005, "SO_RCVTIMEO_OLD": 0x1006, "SO_ACCEPTCONN": 0x1009, "SO_PROTOCOL": 0x1028,
         "SO_DOMAIN": 0x1029, "SO_PASSCRED": 17, "SO_PEERCRED": 18}


@cache
def abi(arch: str) -> SocketAbi:
    """The socket numbers of ``arch`` (a kpsdk architecture name)."""
    if arch.startswith("ppc") or arch.startswith("powerpc"):
        return SocketAbi(1, 2, 5, 1, _POWERPC, 0x4004667F, 0x8004667E)
    if arch.startswith("mips"):
        return SocketAbi(2, 1, 5, 0xFFFF, _MIPS, 0x467F, 0x667E)
    return SocketAbi(1, 2, 5, 1, _GENERIC, 0x541B, 0x5421)


#: SIOCINQ is FIONREAD; SIOCOUTQ is TIOCOUTQ (0x5411; powerpc's 0x40047473, MIPS's 0x7472)
def siocoutq(arch: str) -> int:
    if arch.startswith("ppc") or arch.startswith("powerpc"):
        return 0x40047473
    if arch.startswith("mips"):
        return 0x7472
    return 0x5411
