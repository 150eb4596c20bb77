"""An ``strace``-like printer of a Unicorn Linux program's system calls: a plugin like any other.

One module, because strace's decoding tables (flags, structures, commands, signals) are
most of it, and they are data the printer beside them reads.

It listens to :func:`~kpsdk.hookspecs.kpsdk_syscall_entry` and
:func:`~kpsdk.hookspecs.kpsdk_syscall_exit` (fired by the Unicorn target's Linux
layer) and writes one line per call of the program's first thread, as strace(1)
does with its defaults (no ``-f``, ``-s 32``, abbreviated structures):
``openat(AT_FDCWD, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 3``,
``newfstatat(3, "", {st_mode=S_IFREG|0644, st_size=1221, ...}, AT_EMPTY_PATH) = 0``,
``rt_sigprocmask(SIG_BLOCK, [INT TERM], NULL, 8) = 0``, failures as
``= -1 ENOENT (No such file or directory)``, the result column at 40 and the exit
as ``+++ exited with 42 +++``.

How each call's arguments print is declared where the call is emulated, next to its
handler (``@syscall("read", "fd rbuf u")``:
:mod:`kpsdk.targets.unicorn.linux.calls.declare`, which lists the kinds).  Each kind
is formatted here as strace formats that argument: flags by name (open, access, mmap,
mprotect, ``AT_*``, wait options, clone, socket types), constants by name (fcntl
commands, ioctl requests, signals, socket families and levels, ``SIG_BLOCK``), modes in
octal with a leading 0, and the structures strace prints in its default abbreviated
form (``struct stat``, ``statx``, ``struct sigaction``, signal sets, wait statuses).
What a call reads is read when it starts (paths, data written, a new signal action);
what it writes when it returned (data read, a ``struct stat``, the old action), and a
failed call's output buffer is shown as its address, as strace shows it.  A call with
no declaration (one the layer does not emulate and nobody declared) prints its six
argument registers in hex: strace would know how many it takes.

``kpsdk probe PROG --strace`` registers one for the run; from Python::

    printer = kpsdk.cli.strace.StracePrinter(sys.stderr)
    kpsdk.get_registry().pm.register(printer)   # and pm.unregister(printer) after

Only the Unicorn target has a Linux layer that fires these hooks: a live target's
system calls are run by QEMU or the guest kernel, unseen by kpsdk.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from kpsdk.errors import KpsdkError
from kpsdk.registry import hookimpl

if TYPE_CHECKING:
    from kpsdk.arch.linux import LinuxAbi
    from kpsdk.events import SyscallEvent
    from kpsdk.session import Session
    from kpsdk.target import Target

#: how many bytes of a string strace shows (its ``-s`` default)
STRING_LIMIT = 32
#: the column the ``= result`` is aligned to (strace's ``-a`` default)
RESULT_COLUMN = 40
AT_FDCWD = -100
PATH_MAX = 4096
PAGE = 4096
#: the bytes of a kernel signal set (``_NSIG / 8``: 64 signals)
SIGSET_BYTES = 8
#: the first real-time signal (strace's ASM_SIGRTMIN): 32 is ``SIGRTMIN``, 33 ``SIGRT_1``...
SIGRTMIN = 32

Flags = tuple[tuple[str, int], ...]

#: open(2) flags in strace's order (its xlat/open_mode_flags), with asm-generic's values; an
#: architecture's own bits for some of them come from :attr:`kpsdk.arch.LinuxAbi.open_flag_bits`
GENERIC_OPEN_FLAGS: Flags = (
    ("O_CREAT", 0o100), ("O_EXCL", 0o200), ("O_NOCTTY", 0o400), ("O_TRUNC", 0o1000), ("O_APPEND", 0o2000),
    ("O_NONBLOCK", 0o4000), ("O_SYNC", 0o4010000), ("O_DSYNC", 0o10000), ("O_DIRECT", 0o40000),
    ("O_LARGEFILE", 0o100000), ("O_NOFOLLOW", 0o400000), ("O_NOATIME", 0o1000000), ("O_CLOEXEC", 0o2000000),
    ("O_PATH", 0o10000000), ("O_TMPFILE", 0o20200000), ("O_DIRECTORY", 0o200000), ("FASYNC", 0o20000),
)
ACCESS_MODES = ("O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE")
PROT_FLAGS: Flags = (("PROT_READ", 1), ("PROT_WRITE", 2), ("PROT_EXEC", 4), ("PROT_SEM", 8),
                     ("PROT_GROWSDOWN", 0x01000000), ("PROT_GROWSUP", 0x02000000))
#: mmap's mapping types, then its flags in strace's order (xlat/mmap_flags), asm-generic values
MAP_TYPES = {1: "MAP_SHARED", 2: "MAP_PRIVATE", 3: "MAP_SHARED_VALIDATE"}
MAP_FLAGS: Flags = (
    ("MAP_FIXED", 0x10), ("MAP_ANONYMOUS", 0x20), ("MAP_32BIT", 0x40), ("MAP_NORESERVE", 0x4000),
    ("MAP_POPULATE", 0x8000), ("MAP_NONBLOCK", 0x10000), ("MAP_GROWSDOWN", 0x100), ("MAP_DENYWRITE", 0x800),
    ("MAP_EXECUTABLE", 0x1000), ("MAP_LOCKED", 0x2000), ("MAP_STACK", 0x20000), ("MAP_HUGETLB", 0x40000),
    ("MAP_SYNC", 0x80000), ("MAP_UNINITIALIZED", 0x4000000), ("MAP_FIXED_NOREPLACE", 0x100000),
)
WHENCE = ("SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE")
#: access(2)'s modes (F_OK is 0)
ACCESS_FLAGS: Flags = (("R_OK", 4), ("W_OK", 2), ("X_OK", 1))
#: the ``AT_*`` flags of the *at calls (xlat/at_flags), faccessat2's own, statx's sync types
AT_FLAGS: Flags = (("AT_SYMLINK_NOFOLLOW", 0x100), ("AT_REMOVEDIR", 0x200), ("AT_SYMLINK_FOLLOW", 0x400),
                   ("AT_NO_AUTOMOUNT", 0x800), ("AT_EMPTY_PATH", 0x1000), ("AT_RECURSIVE", 0x8000))
FACCESSAT_FLAGS: Flags = (("AT_SYMLINK_NOFOLLOW", 0x100), ("AT_EACCESS", 0x200), ("AT_EMPTY_PATH", 0x1000))
STATX_SYNC = {0: "AT_STATX_SYNC_AS_STAT", 0x2000: "AT_STATX_FORCE_SYNC", 0x4000: "AT_STATX_DONT_SYNC"}
STATX_MASKS: Flags = (
    ("STATX_ALL", 0xFFF), ("STATX_BASIC_STATS", 0x7FF), ("STATX_TYPE", 0x1), ("STATX_MODE", 0x2),
    ("STATX_NLINK", 0x4), ("STATX_UID", 0x8), ("STATX_GID", 0x10), ("STATX_ATIME", 0x20), ("STATX_MTIME", 0x40),
    ("STATX_CTIME", 0x80), ("STATX_INO", 0x100), ("STATX_SIZE", 0x200), ("STATX_BLOCKS", 0x400),
    ("STATX_BTIME", 0x800), ("STATX_MNT_ID", 0x1000), ("STATX_DIOALIGN", 0x2000),
)
STATX_ATTRS: Flags = (("STATX_ATTR_COMPRESSED", 0x4), ("STATX_ATTR_IMMUTABLE", 0x10), ("STATX_ATTR_APPEND", 0x20),
                      ("STATX_ATTR_NODUMP", 0x40), ("STATX_ATTR_ENCRYPTED", 0x800), ("STATX_ATTR_AUTOMOUNT", 0x1000),
                      ("STATX_ATTR_MOUNT_ROOT", 0x2000), ("STATX_ATTR_VERITY", 0x100000),
                      ("STATX_ATTR_DAX", 0x200000))
#: the file types of st_mode (S_IFMT's values), and the bits strace names before the octal rest
FILE_TYPES = {0o140000: "S_IFSOCK", 0o120000: "S_IFLNK", 0o100000: "S_IFREG", 0o60000: "S_IFBLK",
              0o40000: "S_IFDIR", 0o20000: "S_IFCHR", 0o10000: "S_IFIFO"}
S_IFMT = 0o170000
MODE_BITS: Flags = (("S_ISUID", 0o4000), ("S_ISGID", 0o2000), ("S_ISVTX", 0o1000))
#: fcntl's commands (xlat/fcntlcmds, asm-generic values), those that take no argument, and
#: those whose argument is a struct flock (printed as its address)
FCNTL_COMMANDS = {
    0: "F_DUPFD", 1: "F_GETFD", 2: "F_SETFD", 3: "F_GETFL", 4: "F_SETFL", 5: "F_GETLK", 6: "F_SETLK", 7: "F_SETLKW",
    8: "F_SETOWN", 9: "F_GETOWN", 10: "F_SETSIG", 11: "F_GETSIG", 15: "F_SETOWN_EX", 16: "F_GETOWN_EX",
    17: "F_GETOWNER_UIDS", 36: "F_OFD_GETLK", 37: "F_OFD_SETLK", 38: "F_OFD_SETLKW", 1024: "F_SETLEASE",
    1025: "F_GETLEASE", 1026: "F_NOTIFY", 1029: "F_CANCELLK", 1030: "F_DUPFD_CLOEXEC", 1031: "F_SETPIPE_SZ",
    1032: "F_GETPIPE_SZ", 1033: "F_ADD_SEALS", 1034: "F_GET_SEALS",
}
#: the 32-bit arches' own record-lock commands (fcntl64)
FCNTL64_COMMANDS = {12: "F_GETLK64", 13: "F_SETLK64", 14: "F_SETLKW64"}
FCNTL_NO_ARG = frozenset({"F_GETFD", "F_GETFL", "F_GETOWN", "F_GETSIG", "F_GETLEASE", "F_GETPIPE_SZ",
                          "F_GET_SEALS"})
FCNTL_LOCKS = frozenset({"F_GETLK", "F_SETLK", "F_SETLKW", "F_OFD_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW",
                         "F_GETLK64", "F_SETLK64", "F_SETLKW64", "F_GETOWN_EX", "F_SETOWN_EX"})
FD_FLAGS: Flags = (("FD_CLOEXEC", 1),)
#: ioctl requests by number (asm-generic's, which x86, arm and riscv use): what each argument is
#: ("int_in": ``[N]`` read at entry, "int_out": ``[N]`` read after the call, "none": no argument
#: shown, "ptr": an address)
IOCTLS: dict[int, tuple[str, str]] = {
    0x5401: ("TCGETS", "ptr"), 0x5402: ("TCSETS", "ptr"), 0x5403: ("TCSETSW", "ptr"), 0x5404: ("TCSETSF", "ptr"),
    0x5405: ("TCGETA", "ptr"), 0x5406: ("TCSETA", "ptr"), 0x5407: ("TCSETAW", "ptr"), 0x5408: ("TCSETAF", "ptr"),
    0x5409: ("TCSBRK", "hex"), 0x540A: ("TCXONC", "hex"), 0x540B: ("TCFLSH", "hex"), 0x540C: ("TIOCEXCL", "hex"),
    0x540D: ("TIOCNXCL", "hex"), 0x540E: ("TIOCSCTTY", "hex"), 0x540F: ("TIOCGPGRP", "int_out"),
    0x5410: ("TIOCSPGRP", "int_in"), 0x5411: ("TIOCOUTQ", "int_out"), 0x5412: ("TIOCSTI", "ptr"),
    0x5413: ("TIOCGWINSZ", "ptr"), 0x5414: ("TIOCSWINSZ", "ptr"), 0x541B: ("FIONREAD", "int_out"),
    0x5421: ("FIONBIO", "int_in"), 0x5422: ("TIOCNOTTY", "hex"), 0x5429: ("TIOCGSID", "int_out"),
    0x5450: ("FIONCLEX", "hex"), 0x5451: ("FIOCLEX", "hex"), 0x5452: ("FIOASYNC", "int_in"),
    0x5460: ("FIOQSIZE", "ptr"), 0x802C542A: ("TCGETS2", "ptr"), 0x402C542B: ("TCSETS2", "ptr"),
    0x80045430: ("TIOCGPTN", "int_out"), 0x40045431: ("TIOCSPTLCK", "int_in"),
}
IOC_DIRECTIONS = ("_IOC_NONE", "_IOC_WRITE", "_IOC_READ", "_IOC_READ|_IOC_WRITE")
#: the signal set commands of rt_sigprocmask
SIG_HOW = ("SIG_BLOCK", "SIG_UNBLOCK", "SIG_SETMASK")
#: sa_flags in strace's order (xlat/sigact_flags), asm-generic values (MIPS: :func:`_sa_flags`)
SA_FLAGS: Flags = (("SA_RESTORER", 0x04000000), ("SA_ONSTACK", 0x08000000), ("SA_RESTART", 0x10000000),
                   ("SA_INTERRUPT", 0x20000000), ("SA_NODEFER", 0x40000000), ("SA_RESETHAND", 0x80000000),
                   ("SA_SIGINFO", 4), ("SA_NOCLDSTOP", 1), ("SA_NOCLDWAIT", 2))
SA_HANDLERS = {0: "SIG_DFL", 1: "SIG_IGN"}
#: clone's flags (xlat/clone_flags); the low byte is the exit signal
CLONE_FLAGS: Flags = (
    ("CLONE_VM", 0x100), ("CLONE_FS", 0x200), ("CLONE_FILES", 0x400), ("CLONE_SIGHAND", 0x800),
    ("CLONE_PIDFD", 0x1000), ("CLONE_PTRACE", 0x2000), ("CLONE_VFORK", 0x4000), ("CLONE_PARENT", 0x8000),
    ("CLONE_THREAD", 0x10000), ("CLONE_NEWNS", 0x20000), ("CLONE_SYSVSEM", 0x40000), ("CLONE_SETTLS", 0x80000),
    ("CLONE_PARENT_SETTID", 0x100000), ("CLONE_CHILD_CLEARTID", 0x200000), ("CLONE_DETACHED", 0x400000),
    ("CLONE_UNTRACED", 0x800000), ("CLONE_CHILD_SETTID", 0x1000000), ("CLONE_NEWCGROUP", 0x2000000),
    ("CLONE_NEWUTS", 0x4000000), ("CLONE_NEWIPC", 0x8000000), ("CLONE_NEWUSER", 0x10000000),
    ("CLONE_NEWPID", 0x20000000), ("CLONE_NEWNET", 0x40000000), ("CLONE_IO", 0x80000000),
)
CSIGNAL = 0xFF
WAIT_OPTIONS: Flags = (("WNOHANG", 1), ("WUNTRACED", 2), ("WEXITED", 4), ("WCONTINUED", 8), ("WNOWAIT", 0x1000000),
                       ("__WCLONE", 0x80000000), ("__WALL", 0x40000000), ("__WNOTHREAD", 0x20000000))
MCL_FLAGS: Flags = (("MCL_CURRENT", 1), ("MCL_FUTURE", 2), ("MCL_ONFAULT", 4))
GRND_FLAGS: Flags = (("GRND_NONBLOCK", 1), ("GRND_RANDOM", 2), ("GRND_INSECURE", 4))
RLIMITS = ("RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_RSS", "RLIMIT_NPROC",
           "RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_AS", "RLIMIT_LOCKS", "RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE",
           "RLIMIT_NICE", "RLIMIT_RTPRIO", "RLIMIT_RTTIME")
ARCH_PRCTL = {0x1001: "ARCH_SET_GS", 0x1002: "ARCH_SET_FS", 0x1003: "ARCH_GET_FS", 0x1004: "ARCH_GET_GS",
              0x1011: "ARCH_GET_CPUID", 0x1012: "ARCH_SET_CPUID", 0x3001: "ARCH_CET_STATUS"}
FADVICE = ("POSIX_FADV_NORMAL", "POSIX_FADV_RANDOM", "POSIX_FADV_SEQUENTIAL", "POSIX_FADV_WILLNEED",
           "POSIX_FADV_DONTNEED", "POSIX_FADV_NOREUSE")
#: socket families (xlat/addrfams; strace says AF_UNIX for AF_LOCAL), types and type flags
ADDRESS_FAMILIES = {
    0: "AF_UNSPEC", 1: "AF_UNIX", 2: "AF_INET", 3: "AF_AX25", 4: "AF_IPX", 5: "AF_APPLETALK", 6: "AF_NETROM",
    7: "AF_BRIDGE", 8: "AF_ATMPVC", 9: "AF_X25", 10: "AF_INET6", 11: "AF_ROSE", 12: "AF_DECnet", 13: "AF_NETBEUI",
    14: "AF_SECURITY", 15: "AF_KEY", 16: "AF_NETLINK", 17: "AF_PACKET", 18: "AF_ASH", 19: "AF_ECONET",
    20: "AF_ATMSVC", 21: "AF_RDS", 22: "AF_SNA", 23: "AF_IRDA", 24: "AF_PPPOX", 25: "AF_WANPIPE", 26: "AF_LLC",
    27: "AF_IB", 28: "AF_MPLS", 29: "AF_CAN", 30: "AF_TIPC", 31: "AF_BLUETOOTH", 32: "AF_IUCV", 33: "AF_RXRPC",
    34: "AF_ISDN", 35: "AF_PHONET", 36: "AF_IEEE802154", 37: "AF_CAIF", 38: "AF_ALG", 39: "AF_NFC",
    40: "AF_VSOCK", 41: "AF_KCM", 42: "AF_QIPCRTR", 43: "AF_SMC", 44: "AF_XDP", 45: "AF_MCTP",
}
SOCKET_TYPES = {1: "SOCK_STREAM", 2: "SOCK_DGRAM", 3: "SOCK_RAW", 4: "SOCK_RDM", 5: "SOCK_SEQPACKET",
                6: "SOCK_DCCP", 10: "SOCK_PACKET"}
SOCKET_TYPE_FLAGS: Flags = (("SOCK_CLOEXEC", 0o2000000), ("SOCK_NONBLOCK", 0o4000))
#: the protocols of AF_INET and AF_INET6 sockets (xlat/inet_protocols), and AF_NETLINK's
INET_PROTOCOLS = {0: "IPPROTO_IP", 1: "IPPROTO_ICMP", 2: "IPPROTO_IGMP", 4: "IPPROTO_IPIP", 6: "IPPROTO_TCP",
                  8: "IPPROTO_EGP", 12: "IPPROTO_PUP", 17: "IPPROTO_UDP", 22: "IPPROTO_IDP", 29: "IPPROTO_TP",
                  33: "IPPROTO_DCCP", 41: "IPPROTO_IPV6", 46: "IPPROTO_RSVP", 47: "IPPROTO_GRE", 50: "IPPROTO_ESP",
                  51: "IPPROTO_AH", 58: "IPPROTO_ICMPV6", 92: "IPPROTO_MTP", 94: "IPPROTO_BEETPH",
                  98: "IPPROTO_ENCAP", 103: "IPPROTO_PIM", 108: "IPPROTO_COMP", 115: "IPPROTO_L2TP",
                  132: "IPPROTO_SCTP", 136: "IPPROTO_UDPLITE", 137: "IPPROTO_MPLS", 143: "IPPROTO_ETHERNET",
                  255: "IPPROTO_RAW", 262: "IPPROTO_MPTCP"}
NETLINK_PROTOCOLS = {0: "NETLINK_ROUTE", 2: "NETLINK_USERSOCK", 4: "NETLINK_SOCK_DIAG", 9: "NETLINK_AUDIT",
                     15: "NETLINK_KOBJECT_UEVENT", 16: "NETLINK_GENERIC"}
#: getsockopt's levels and SOL_SOCKET's options (asm-generic values)
SOCKET_LEVELS = {0: "SOL_IP", 1: "SOL_SOCKET", 6: "SOL_TCP", 17: "SOL_UDP", 41: "SOL_IPV6", 255: "SOL_RAW"}
SOCKET_OPTIONS = {1: "SO_DEBUG", 2: "SO_REUSEADDR", 3: "SO_TYPE", 4: "SO_ERROR", 5: "SO_DONTROUTE",
                  6: "SO_BROADCAST", 7: "SO_SNDBUF", 8: "SO_RCVBUF", 9: "SO_KEEPALIVE", 10: "SO_OOBINLINE",
                  11: "SO_NO_CHECK", 12: "SO_PRIORITY", 13: "SO_LINGER", 14: "SO_BSDCOMPAT", 15: "SO_REUSEPORT",
                  16: "SO_PASSCRED", 17: "SO_PEERCRED", 18: "SO_RCVLOWAT", 19: "SO_SNDLOWAT", 20: "SO_RCVTIMEO_OLD",
                  21: "SO_SNDTIMEO_OLD", 38: "SO_PROTOCOL", 39: "SO_DOMAIN"}
#: calls that never return (``= ?``)
NO_RETURN = frozenset({"exit", "exit_group"})
#: calls whose result is an address (printed in hex), and one whose result is a mode (octal)
ADDRESS_RESULT = frozenset({"mmap", "mmap2", "brk", "mremap"})
OCTAL_RESULT = frozenset({"umask"})


def quoted(data: bytes, limit: int = STRING_LIMIT, cut: bool | None = None) -> str:
    """``data`` as strace quotes it: C escapes for ``\\t\\n\\v\\f\\r"\\\\``, other bytes
    outside printable ASCII in the shortest octal (three digits when a digit follows),
    and ``...`` after the quote when more than ``limit`` bytes were there (or ``cut``)."""
    shown = data[:limit]
    out = []
    for i, b in enumerate(shown):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\t\n\v\f\r":
            out.append({"\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}[c])
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            following = shown[i + 1:i + 2]
            out.append(f"\\{b:03o}" if following and following in b"01234567" else f"\\{b:o}")
    more = len(data) > limit if cut is None else cut
    return '"' + "".join(out) + '"' + ("..." if more else "")


def flag_names(value: int, table: Flags) -> list[str]:
    """The names of the flags set in ``value`` (a multi-bit flag only when all its bits are),
    then what is left in hex."""
    names = []
    for name, bits in table:
        if bits and value & bits == bits:
            names.append(name)
            value &= ~bits
    if value:
        names.append(f"{value:#x}")
    return names


def flags_text(value: int, table: Flags, zero: str = "0") -> str:
    """``A|B|0x40`` as strace's printflags prints it; ``zero`` when no bit is set."""
    return "|".join(flag_names(value, table)) or zero


def hexa(value: int) -> str:
    """A number as C's ``%#x`` prints it: ``0`` for zero, ``0x1f`` otherwise."""
    return f"{value:#x}" if value else "0"


def octal(value: int) -> str:
    """A mode as strace prints it (``%#03o``): ``0644``, ``04755``, ``000``."""
    return f"0{value:o}".rjust(3, "0") if value else "000"


def errno_text(code: int) -> str:
    """``-1 ENOENT (No such file or directory)``."""
    return f"-1 {errno.errorcode.get(code, f'E{code}')} ({os.strerror(code)})"


def mode_text(mode: int) -> str:
    """A ``st_mode`` as strace prints it: ``S_IFREG|0644``, ``S_IFDIR|S_ISVTX|0777``."""
    kind = FILE_TYPES.get(mode & S_IFMT)
    parts = [kind] if kind else ([octal(mode & S_IFMT)] if mode & S_IFMT else [])
    parts += [name for name, bit in MODE_BITS if mode & bit]
    return "|".join([*parts, octal(mode & 0o777)])


def makedev(dev: int) -> str:
    """A device number as strace prints it, ``makedev(0x1, 0x3)`` (glibc's major/minor split)."""
    major = ((dev >> 8) & 0xFFF) | ((dev >> 32) & ~0xFFF)
    minor = (dev & 0xFF) | ((dev >> 12) & ~0xFF)
    return f"makedev({hexa(major)}, {hexa(minor)})"


def signal_name(sig: int, names: dict[int, str]) -> str:
    """A signal as strace prints one: ``SIGTERM``, ``SIGRTMIN``, ``SIGRT_3`` (33 and up), else the number."""
    if sig in names:
        return names[sig]
    if SIGRTMIN < sig <= 8 * SIGSET_BYTES:
        return f"SIGRT_{sig - SIGRTMIN}"
    return str(sig)


def sigset_text(mask: int, bits: int, names: dict[int, str]) -> str:
    """A signal set as strace prints it: ``[INT TERM]``, ``[]``, and the complement
    (``~[RTMIN RT_1]``) when two thirds of its ``bits`` or more are set."""
    prefix = ""
    if bin(mask).count("1") >= bits * 2 // 3:
        mask, prefix = ~mask & ((1 << bits) - 1), "~"
    out = []
    for i in range(bits):
        if mask >> i & 1:
            sig = i + 1
            name = names.get(sig)
            out.append(name[3:] if name else f"RT_{sig - SIGRTMIN}" if sig > SIGRTMIN else str(sig))
    return f"{prefix}[{' '.join(out)}]"


def wait_status(status: int, names: dict[int, str]) -> str:
    """A wait status as strace prints it: ``[{WIFEXITED(s) && WEXITSTATUS(s) == 0}]``."""
    low, high = status & 0x7F, (status >> 8) & 0xFF
    if status & 0xFF == 0x7F:
        text = f"{{WIFSTOPPED(s) && WSTOPSIG(s) == {signal_name(high & 0x7F, names)}"
        text += " | 0x80" if high & 0x80 else ""
        rest = status & ~0xFF7F
    elif low and low != 0x7F:
        text = f"{{WIFSIGNALED(s) && WTERMSIG(s) == {signal_name(low, names)}"
        text += " && WCOREDUMP(s)" if status & 0x80 else ""
        rest = status & ~0xFF
    elif status & 0xFFFF == 0xFFFF:
        text, rest = "{WIFCONTINUED(s)", status & ~0xFFFF
    elif not low:
        text, rest = f"{{WIFEXITED(s) && WEXITSTATUS(s) == {high}", status & ~0xFFFF
    else:
        return f"[{status:#x}]"
    if rest >> 16:
        text += f" | {rest >> 16:#x} << 16"
        rest &= 0xFFFF
    if rest:
        text += f" | {rest:#x}"
    return f"[{text}}}]"


def ioctl_request(request: int) -> str:
    """An ioctl request as strace prints it: its name, else ``_IOC(dir, type, nr, size)``."""
    known = IOCTLS.get(request)
    if known is not None:
        return known[0]
    direction, size = request >> 30 & 3, request >> 16 & 0x3FFF
    return f"_IOC({IOC_DIRECTIONS[direction]}, {hexa(request >> 8 & 0xFF)}, {hexa(request & 0xFF)}, {hexa(size)})"


class _Later:
    """An argument shown once the call returned (what the call writes)."""


LATER = _Later()
#: one argument as the entry left it: its kind's index (-1: none), and its text or LATER (None: not shown)
Shown = tuple[int, "str | _Later | None"]


@dataclass
class CallText:
    """One call being printed: the target, the call, its argument kinds, and what the
    formatters learned at its entry."""

    target: Target | None
    call: SyscallEvent
    kinds: tuple[str, ...]
    #: the argument register each kind starts at (a 64-bit value on a 32-bit arch takes two)
    slots: list[int] = field(default_factory=list)
    #: what a kind read at entry for its exit (``inoutint``'s first value)
    kept: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        at = 0
        for kind in self.kinds:
            if kind in ("off64", "llseekoff") and self.bits == 32:
                if kind == "off64" and self.abi is not None and self.abi.pair_aligned and at % 2:
                    at += 1
                self.slots.append(at)
                at += 2
            else:
                self.slots.append(at)
                at += 1

    # -- the architecture -----------------------------------------------------------------------

    @property
    def bits(self) -> int:
        return self.target.arch.word_size * 8 if self.target is not None else 64

    @property
    def endian(self) -> str:
        return self.target.arch.endian if self.target is not None else "little"

    @property
    def abi(self) -> LinuxAbi | None:
        syscalls = self.target.arch.syscalls if self.target is not None else None
        return syscalls.linux if syscalls is not None else None

    @property
    def arch_name(self) -> str:
        return self.target.arch.name if self.target is not None else ""

    def arg(self, i: int) -> int:
        """Argument register ``i`` (0 past the sixth)."""
        return self.call.args[i] if i < len(self.call.args) else 0

    def value(self, k: int) -> int:
        """Kind ``k``'s value: its register, or the 64-bit value of a register pair."""
        at = self.slots[k]
        if self.bits == 64 or self.kinds[k] not in ("off64", "llseekoff"):
            return self.arg(at)
        if self.kinds[k] == "llseekoff":  # _llseek(fd, offset_high, offset_low, ...)
            return self.arg(at) << 32 | self.arg(at + 1)
        lo, hi = (self.arg(at), self.arg(at + 1)) if self.endian == "little" else (self.arg(at + 1), self.arg(at))
        return hi << 32 | lo

    def signed(self, value: int, width: int = 32) -> int:
        """``value`` as a signed integer of ``width`` bits (at most the word)."""
        width = min(width, self.bits)
        value &= (1 << width) - 1
        return value - (1 << width) if value >> (width - 1) else value

    @property
    def result(self) -> int | None:
        return self.call.result

    @property
    def failed(self) -> bool:
        return self.result is None or -4096 < self.result < 0

    # -- guest memory ----------------------------------------------------------------------------

    def read(self, addr: int, size: int) -> bytes | None:
        """``size`` bytes at ``addr``; None when there is no target or they cannot be read."""
        if not addr or self.target is None:
            return None
        try:
            return bytes(self.target.read_memory(addr, size))
        except KpsdkError:
            return None

    def word_at(self, data: bytes, offset: int, size: int, signed: bool = False) -> int:
        return int.from_bytes(data[offset:offset + size], self.endian, signed=signed)  # type: ignore[arg-type]

    def int_at(self, addr: int, size: int = 4, signed: bool = True) -> int | None:
        data = self.read(addr, size)
        return None if data is None else self.word_at(data, 0, size, signed)

    # -- what strace's tables depend on ------------------------------------------------------------

    def open_flags(self) -> Flags:
        own = dict(self.abi.open_flag_bits if self.abi is not None else ())
        return tuple((name, own.get(name, bits)) for name, bits in GENERIC_OPEN_FLAGS)

    def generic_open_flags(self, value: int) -> int:
        """``value`` with the arch's own open flag bits moved to the generic ones (MIPS's
        ``LinuxAbi.open_flags``; other archs name their own bits through :meth:`open_flags`)."""
        return self.abi.generic_flags(value, self.abi.open_flags) if self.abi is not None else value

    def signal_names(self) -> dict[int, str]:
        """Signal names by number, the arch's (strace's signalent: the first name of each number)."""
        from kpsdk.targets.unicorn.linux.sigframes.siginfo import signals

        names: dict[int, str] = {}
        for name, number in signals(self.arch_name).items():
            if name != "SIGRTMAX":
                names.setdefault(number, name)
        return names

    def sigset(self, addr: int, size: int = SIGSET_BYTES) -> str:
        """The signal set at ``addr`` (``size`` bytes: the kernel's ``unsigned long`` words), or its address."""
        data = self.read(addr, size) if 0 < size <= SIGSET_BYTES and size % 4 == 0 else None
        if data is None:
            return pointer(addr)
        word = self.bits // 8 if size % (self.bits // 8) == 0 else 4
        mask = 0
        for i in range(0, size, word):
            mask |= self.word_at(data, i, word) << (8 * i)
        return sigset_text(mask, 8 * size, self.signal_names())


def pointer(value: int) -> str:
    return "NULL" if not value else f"{value:#x}"


def _string_at(c: CallText, addr: int, count: int, exact: bool) -> str:
    """``count`` bytes at ``addr`` quoted (``exact``: a buffer, at most ``-s`` shown), or a
    NUL-terminated path (shown whole up to PATH_MAX, as strace shows paths)."""
    if not addr:
        return "NULL"
    if exact:
        data = c.read(addr, min(count, STRING_LIMIT))
        return f"{addr:#x}" if data is None else quoted(data, cut=count > STRING_LIMIT)
    got = b""
    while len(got) < PATH_MAX:  # page by page: a path may end just before an unmapped page
        at = addr + len(got)
        more = c.read(at, min(PATH_MAX - len(got), PAGE - at % PAGE))
        if more is None:
            return f"{addr:#x}"  # unreadable: the address, as strace prints it
        got += more
        end = got.find(b"\0")
        if end >= 0:
            return quoted(got[:end], limit=PATH_MAX)
    return quoted(got, limit=PATH_MAX, cut=True)


# -- the kinds: read at the call's entry ------------------------------------------------------------

Entry = Callable[[CallText, int, int], "str | _Later | None"]


def _open_flags(c: CallText, value: int) -> str:
    value = c.generic_open_flags(value)
    return "|".join([ACCESS_MODES[value & 3], *flag_names(value & ~3 & 0xFFFFFFFF, c.open_flags())])


def _fcntl_arg(c: CallText, k: int, value: int) -> str | None:
    """fcntl's third argument, as its command wants it (none for the ``F_GET*`` ones)."""
    table = {**FCNTL_COMMANDS, **(FCNTL64_COMMANDS if c.call.name == "fcntl64" and c.bits == 32 else {})}
    command = table.get(c.signed(c.value(k - 1)) if k else -1)
    if command in FCNTL_NO_ARG:
        return None
    if command == "F_SETFD":
        return flags_text(value, FD_FLAGS)
    if command == "F_SETFL":
        return _open_flags(c, value)
    if command in FCNTL_LOCKS:
        return pointer(value)
    return str(c.signed(value))


def _ioctl_arg(c: CallText, k: int, value: int) -> str | _Later:
    how = IOCTLS.get(c.value(k - 1) & 0xFFFFFFFF, ("", "hex"))[1] if k else "hex"
    if how == "int_in":
        number = c.int_at(value)
        return pointer(value) if number is None else f"[{number}]"
    if how == "int_out":
        return LATER
    return pointer(value) if how == "ptr" else hexa(value)


def _sigaction(c: CallText, addr: int) -> str:
    """``struct sigaction`` at ``addr`` as strace prints it (the kernel's layout: the arch's
    field order, words, a 64-signal mask), or its address."""
    abi = c.abi
    fields = abi.sigaction if abi is not None else ("handler", "flags", "restorer", "mask")
    word = c.bits // 8
    data = c.read(addr, word * (len(fields) - 1) + SIGSET_BYTES)
    if data is None:
        return pointer(addr)
    at, got = 0, {}
    for name in fields:
        if name == "mask":
            mask = 0
            for i in range(0, SIGSET_BYTES, word):
                mask |= c.word_at(data, at + i, word) << (8 * i)
            got[name] = mask
            at += SIGSET_BYTES
        else:
            got[name] = c.word_at(data, at, word)
            at += word
    handler = SA_HANDLERS.get(got["handler"], pointer(got["handler"]))
    names = c.signal_names()
    flags = got["flags"] & 0xFFFFFFFF
    text = (f"{{sa_handler={handler}, sa_mask={sigset_text(got['mask'], 8 * SIGSET_BYTES, names)}, "
            f"sa_flags={flags_text(flags, _sa_flags(c))}")
    if "restorer" in got and flags & 0x04000000:
        text += f", sa_restorer={pointer(got['restorer'])}"
    return text + "}"


def _sa_flags(c: CallText) -> Flags:
    """The arch's sa_flags (MIPS numbers SA_SIGINFO and SA_NOCLDWAIT its own way)."""
    if not c.arch_name.startswith("mips"):
        return SA_FLAGS
    from kpsdk.targets.unicorn.linux.sigframes.siginfo import MIPS_SA

    return tuple((name, MIPS_SA.get(name, bits)) for name, bits in SA_FLAGS)


def _sigset_size(c: CallText) -> int:
    """The set size a call passes (rt_sigprocmask's fourth argument), else the kernel's."""
    sized = [k for k, kind in enumerate(c.kinds) if kind == "u"]
    return c.value(sized[-1]) if sized else SIGSET_BYTES


def _socket_protocol(c: CallText, k: int, value: int) -> str:
    family = c.value(0) if k else -1
    table = INET_PROTOCOLS if family in (2, 10) else NETLINK_PROTOCOLS if family == 16 else {}
    return table.get(value, str(c.signed(value)))


def _socket_type(value: int) -> str:
    base = SOCKET_TYPES.get(value & 0xF, hexa(value & 0xF))
    rest = flag_names(value & ~0xF & 0xFFFFFFFF, SOCKET_TYPE_FLAGS)
    return "|".join([base, *rest])


def _statx_flags(value: int) -> str:
    sync = value & 0x6000
    return "|".join([STATX_SYNC.get(sync, hexa(sync)), *flag_names(value & ~0x6000, AT_FLAGS)])


def _mmap_flags(value: int) -> str:
    kind = MAP_TYPES.get(value & 0xF, hexa(value & 0xF))
    return "|".join([kind, *flag_names(value & ~0xF & 0xFFFFFFFF, MAP_FLAGS)])


ENTRY: dict[str, Entry] = {
    "d": lambda c, k, v: str(c.signed(v, 32)),
    "ld": lambda c, k, v: str(c.signed(v, 64)),
    "u": lambda c, k, v: str(v),
    "x": lambda c, k, v: hexa(v),
    "p": lambda c, k, v: pointer(v),
    "fd": lambda c, k, v: str(c.signed(v, 32)),
    "dirfd": lambda c, k, v: "AT_FDCWD" if c.signed(v, 32) == AT_FDCWD else str(c.signed(v, 32)),
    "path": lambda c, k, v: _string_at(c, v, 0, exact=False),
    "wbuf": lambda c, k, v: _string_at(c, v, c.value(k + 1) if k + 1 < len(c.kinds) else 0, exact=True),
    "oflags": lambda c, k, v: _open_flags(c, v),
    "prot": lambda c, k, v: flags_text(v, PROT_FLAGS, "PROT_NONE"),
    "mflags": lambda c, k, v: _mmap_flags(v),
    "whence": lambda c, k, v: WHENCE[v] if v < len(WHENCE) else str(v),
    "mode": lambda c, k, v: octal(v & 0o7777),
    "off64": lambda c, k, v: str(c.signed(c.value(k), 64)),
    "llseekoff": lambda c, k, v: str(c.signed(c.value(k), 64)),
    "pgoff": lambda c, k, v: hexa(v * PAGE),
    "amode": lambda c, k, v: flags_text(v, ACCESS_FLAGS, "F_OK"),
    "atflags": lambda c, k, v: flags_text(v, AT_FLAGS),
    "faflags": lambda c, k, v: flags_text(v, FACCESSAT_FLAGS),
    "statxflags": lambda c, k, v: _statx_flags(v),
    "statxmask": lambda c, k, v: flags_text(v, STATX_MASKS),
    "fcntlcmd": lambda c, k, v: {**FCNTL_COMMANDS, **(FCNTL64_COMMANDS if c.call.name == "fcntl64" and c.bits == 32
                                                      else {})}.get(c.signed(v), str(c.signed(v))),
    "fcntlarg": _fcntl_arg,
    "ioreq": lambda c, k, v: ioctl_request(v & 0xFFFFFFFF),
    "ioarg": _ioctl_arg,
    "signo": lambda c, k, v: signal_name(c.signed(v), c.signal_names()) if c.signed(v) else "0",
    "sighow": lambda c, k, v: SIG_HOW[v] if v < len(SIG_HOW) else hexa(v),
    "sigset": lambda c, k, v: c.sigset(v, _sigset_size(c)),
    "sigaction": lambda c, k, v: _sigaction(c, v),
    "waitopts": lambda c, k, v: flags_text(v & 0xFFFFFFFF, WAIT_OPTIONS),
    "mclflags": lambda c, k, v: flags_text(v, MCL_FLAGS),
    "fadvice": lambda c, k, v: FADVICE[v] if v < len(FADVICE) else str(c.signed(v)),
    "sockfamily": lambda c, k, v: ADDRESS_FAMILIES.get(v, str(c.signed(v))),
    "socktype": lambda c, k, v: _socket_type(v),
    "sockproto": _socket_protocol,
    "socklevel": lambda c, k, v: SOCKET_LEVELS.get(v, str(c.signed(v))),
    "sockopt": lambda c, k, v: (SOCKET_OPTIONS if c.value(k - 1) == 1 else {}).get(v, str(c.signed(v))),
    "clone": lambda c, k, v: LATER,
    "oflagsonly": lambda c, k, v: flags_text(c.generic_open_flags(v) & 0xFFFFFFFF, c.open_flags()),
    "archprctl": lambda c, k, v: ARCH_PRCTL.get(v, hexa(v)),
    "rlimit": lambda c, k, v: RLIMITS[v] if v < len(RLIMITS) else str(c.signed(v)),
    "grndflags": lambda c, k, v: flags_text(v, GRND_FLAGS),
}


def _keep_int(c: CallText, k: int, v: int) -> _Later:
    number = c.int_at(v)
    if number is not None:
        c.kept[k] = number
    return LATER


ENTRY["inoutint"] = _keep_int
for _kind in ("rbuf", "stat", "stat64", "statx", "osigaction", "osigset", "wstatus", "intout", "fdpair", "dirents",
              "opath", "loffout"):
    ENTRY[_kind] = lambda c, k, v: LATER


# -- the kinds: read once the call returned --------------------------------------------------------

Exit = Callable[[CallText, int, int], "str | None"]


def _read_buffer(c: CallText, k: int, addr: int) -> str:
    if c.failed:
        return pointer(addr)
    return _string_at(c, addr, c.result or 0, exact=True)


def _stat(c: CallText, k: int, addr: int, wide: bool) -> str:
    """``struct stat`` (``stat64``) as strace abbreviates it: the mode, then the device of a
    device file or the size of any other."""
    abi = c.abi
    layout = (abi.stat64 if wide else abi.stat) if abi is not None else None
    data = None if c.failed or layout is None else c.read(addr, layout.size)
    if data is None or layout is None:
        return pointer(addr)
    import struct

    order = "<" if c.endian == "little" else ">"
    got = {name: struct.unpack_from(order + code, data, offset)[0] for name, offset, code in layout.fields}
    mode = got.get("st_mode", 0)
    tail = (f"st_rdev={makedev(got.get('st_rdev', 0))}" if mode & S_IFMT in (0o20000, 0o60000)
            else f"st_size={got.get('st_size', 0)}")
    return f"{{st_mode={mode_text(mode)}, {tail}, ...}}"


def _statx(c: CallText, k: int, addr: int) -> str:
    """``struct statx`` (include/uapi/linux/stat.h, the same on every arch) as strace abbreviates it."""
    data = None if c.failed else c.read(addr, 48)
    if data is None:
        return pointer(addr)
    mask, attributes = c.word_at(data, 0, 4), c.word_at(data, 8, 8)
    mode, size = c.word_at(data, 28, 2), c.word_at(data, 40, 8)
    return (f"{{stx_mask={flags_text(mask, STATX_MASKS)}, stx_attributes={flags_text(attributes, STATX_ATTRS)}, "
            f"stx_mode={mode_text(mode)}, stx_size={size}, ...}}")


def _wait_status(c: CallText, k: int, addr: int) -> str:
    if c.failed or not c.result:
        return pointer(addr)
    status = c.int_at(addr, 4, signed=False)
    return pointer(addr) if status is None else wait_status(status, c.signal_names())


def _int_out(c: CallText, k: int, addr: int) -> str:
    number = None if c.failed else c.int_at(addr)
    return pointer(addr) if number is None else f"[{number}]"


def _fd_pair(c: CallText, k: int, addr: int) -> str:
    """pipe's two descriptors, ``[3, 4]``."""
    data = None if c.failed else c.read(addr, 8)
    if data is None:
        return pointer(addr)
    return f"[{c.word_at(data, 0, 4, True)}, {c.word_at(data, 4, 4, True)}]"


def _dirents(c: CallText, k: int, addr: int) -> str:
    """getdents64's buffer as strace abbreviates it: ``0x55... /* 5 entries */``."""
    size = 0 if c.failed else c.result or 0
    data = c.read(addr, size) if size else None
    if data is None:
        return pointer(addr)
    count, at = 0, 0
    while at + 19 <= len(data):
        reclen = c.word_at(data, at + 16, 2)
        if not reclen:
            break
        count, at = count + 1, at + reclen
    return f"{pointer(addr)} /* {count} entries */"


def _out_path(c: CallText, k: int, addr: int) -> str:
    """A path the call wrote (getcwd's)."""
    return pointer(addr) if c.failed else _string_at(c, addr, 0, exact=False)


def _in_out_int(c: CallText, k: int, addr: int) -> str:
    before = c.kept.get(k)
    after = None if c.failed else c.int_at(addr)
    if before is None:
        return pointer(addr) if after is None else f"[{after}]"
    return f"[{before}]" if after is None or after == before else f"[{before} => {after}]"


EXIT: dict[str, Exit] = {
    "rbuf": _read_buffer,
    "stat": lambda c, k, v: _stat(c, k, v, wide=False),
    "stat64": lambda c, k, v: _stat(c, k, v, wide=True),
    "statx": _statx,
    "osigaction": lambda c, k, v: pointer(v) if c.failed else _sigaction(c, v),
    "osigset": lambda c, k, v: pointer(v) if c.failed else c.sigset(v, _sigset_size(c)),
    "wstatus": _wait_status,
    "intout": _int_out,
    "inoutint": _in_out_int,
    "ioarg": lambda c, k, v: _int_out(c, k, v),
    "fdpair": _fd_pair,
    "dirents": _dirents,
    "opath": _out_path,
    "loffout": lambda c, k, v: pointer(v) if c.failed or c.int_at(v, 8) is None else f"[{c.int_at(v, 8)}]",
}
#: every kind the printer formats (:data:`kpsdk.targets.unicorn.linux.calls.declare.KINDS` must be these)
KINDS = frozenset(ENTRY)


def _clone_args(c: CallText) -> list[str]:
    """clone's arguments as strace names them: the stack, the flags (the exit signal last), and
    the tid pointers and TLS the flags use, in the arch's argument order (CONFIG_CLONE_BACKWARDS:
    the TLS before the child's tid)."""
    flags, stack = c.arg(0) & 0xFFFFFFFF, c.arg(1)
    backwards = c.abi is not None and c.abi.clone_backwards
    ptid, ctid, tls = (c.arg(2), c.arg(4), c.arg(3)) if backwards else (c.arg(2), c.arg(3), c.arg(4))
    sig, rest = flags & CSIGNAL, flags & ~CSIGNAL
    names = flag_names(rest, CLONE_FLAGS) if rest else []
    if sig:
        names.append(signal_name(sig, c.signal_names()))
    out = [f"child_stack={pointer(stack)}", f"flags={'|'.join(names) or '0'}"]
    if rest & 0x100000:  # CLONE_PARENT_SETTID: the child's tid, written there
        number = c.int_at(ptid)
        out.append(f"parent_tid={pointer(ptid) if number is None else f'[{number}]'}")
    if rest & 0x80000:
        out.append(f"tls={pointer(tls)}")
    if rest & 0x1200000:  # CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID
        out.append(f"child_tidptr={pointer(ctid)}")
    return out


def _result(c: CallText) -> str:
    """The ``= RESULT`` part: ``?`` for a call that never returns, an error with its errno,
    an address in hex, a mode in octal, fcntl's flags as strace explains them."""
    result, name = c.result, c.call.name
    if result is None or name in NO_RETURN:
        return "?"
    if -4096 < result < 0:
        return errno_text(-result)
    if name in ADDRESS_RESULT:
        return hexa(result)
    if name in OCTAL_RESULT:
        return f"0{result:o}" if result else "0"
    if name in ("fcntl", "fcntl64") and "fcntlcmd" in c.kinds:
        command = FCNTL_COMMANDS.get(c.signed(c.value(c.kinds.index("fcntlcmd"))))
        if command == "F_GETFD" and result:
            return f"{hexa(result)} (flags {flags_text(result, FD_FLAGS)})"
        if command == "F_GETFL":
            return f"{hexa(result)} (flags {_open_flags(c, result)})"
    return str(result)


class StracePrinter:
    """Writes each system call of a Unicorn Linux program's first thread to ``out`` as strace
    would (without ``-f``: children and other threads are not shown).

    :param out: a text stream (``sys.stderr``, as strace's default).
    :param session: only this session's calls (None: every session's).
    """

    def __init__(self, out: TextIO, session: Session | None = None) -> None:
        self.out = out
        self.session = session
        self._pending: dict[int, tuple[CallText, list[Shown]]] = {}

    # -- the hooks ------------------------------------------------------------------------------

    @hookimpl
    def kpsdk_syscall_entry(self, session: Session, call: SyscallEvent) -> None:
        if self._mine(session) and self._first_thread(session):
            text = CallText(session.target, call, _signature(call.name) or ())
            self._pending[id(call)] = (text, self._arguments(text))

    @hookimpl
    def kpsdk_syscall_exit(self, session: Session, call: SyscallEvent) -> None:
        pending = self._pending.pop(id(call), None) if self._mine(session) else None
        if pending is None:
            return
        text, args = pending
        self._line(f"{call.name}({', '.join(self._finish(text, args))})", _result(text))

    @hookimpl
    def kpsdk_program_exit(self, session: Session, status: int) -> None:
        if not self._mine(session):
            return
        for text, args in self._pending.values():  # exit/exit_group: they never return
            shown = [item if isinstance(item, str) else "?" for _, item in args if item is not None]
            self._line(f"{text.call.name}({', '.join(shown)})", "?")
        self._pending.clear()
        self.out.write(f"+++ exited with {status} +++\n")
        self.out.flush()

    # -- formatting ---------------------------------------------------------------------------

    def _mine(self, session: Session) -> bool:
        return self.session is None or session is self.session

    @staticmethod
    def _first_thread(session: Session) -> bool:
        """Whether the call is the program's first thread's (strace without ``-f`` follows no
        child and no other thread); True where the target does not say."""
        kernel = getattr(getattr(session.target, "linux", None), "kernel", None)
        current, init = getattr(kernel, "current", None), getattr(kernel, "init", None)
        if current is None or init is None:
            return True
        return bool(current.tid == init.pid)

    def _line(self, text: str, result: str) -> None:
        self.out.write(f"{text.ljust(RESULT_COLUMN)}= {result}\n" if len(text) < RESULT_COLUMN
                       else f"{text} = {result}\n")
        self.out.flush()

    @staticmethod
    def _arguments(c: CallText) -> list[Shown]:
        """The call's arguments at its entry, each with its kind's index: text, :data:`LATER`
        for what is read once it returned, None for an argument strace does not show
        (fcntl's, for F_GETFD)."""
        if not c.kinds:
            # undeclared: the six registers (strace knows how many a call takes; kpsdk does not)
            return [(-1, f"{a:#x}") for a in c.call.args] if _signature(c.call.name) is None else []
        if c.kinds[0] == "clone":
            return [(0, LATER)]
        out: list[Shown] = []
        for k, kind in enumerate(c.kinds):
            out.append((k, ENTRY[kind](c, k, c.value(k))))
            creates = kind == "oflags" and c.generic_open_flags(c.value(k)) & 0o20100100  # O_CREAT, O_TMPFILE
            if creates and k + 1 < len(c.call.args):
                out.append((-1, octal(c.arg(c.slots[k] + 1) & 0o7777)))
        return out

    @staticmethod
    def _finish(c: CallText, args: list[Shown]) -> list[str]:
        """The arguments once the call returned: what it wrote is read now."""
        if c.kinds[:1] == ("clone",):
            return _clone_args(c)
        shown: list[str] = []
        for k, item in args:
            text = EXIT[c.kinds[k]](c, k, c.value(k)) if isinstance(item, _Later) else item
            if text is not None:
                shown.append(text)
        return shown


def _signature(name: str) -> tuple[str, ...] | None:
    """Call ``name``'s argument kinds, as its handler in the Linux layer declares them
    (:mod:`kpsdk.targets.unicorn.linux.calls.declare`); None: strace prints its registers.
    Imported at the first call: only a Unicorn run fires these hooks, and the CLI starts
    without loading Unicorn."""
    from kpsdk.targets.unicorn.linux.syscalls import signature

    return signature(name)
