"""``siginfo_t`` as the kernel copies it to user space, and the numbers that go in it.

The layout is include/uapi/asm-generic/siginfo.h: ``si_signo``, ``si_errno``, ``si_code``
(MIPS swaps the last two: arch/mips/include/uapi/asm/siginfo.h ``__ARCH_HAS_SWAPPED_SIGINFO``),
then the union ``_sifields`` aligned to a pointer (offset 16 on 64-bit, 12 on 32-bit), 128
bytes in all.  ``copy_siginfo_to_user`` copies all 128, so the union's unused bytes are 0.

Signal numbers are the generic ones on every architecture here but MIPS
(arch/mips/include/uapi/asm/signal.h), whose masks are also 128 bits wide (``_NSIG`` 128);
both tables are here so that the lead's layer and later MIPS frames share one source.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SIGINFO_SIZE = 128

# si_code values (include/uapi/asm-generic/siginfo.h)
SI_USER = 0
SI_KERNEL = 0x80
SI_QUEUE = -1
SI_TIMER = -2
SI_MESGQ = -3
SI_ASYNCIO = -4
SI_SIGIO = -5
SI_TKILL = -6
ILL_ILLOPC, ILL_ILLOPN, ILL_ILLADR, ILL_ILLTRP, ILL_PRVOPC, ILL_PRVREG, ILL_COPROC, ILL_BADSTK = range(1, 9)
FPE_INTDIV, FPE_INTOVF, FPE_FLTDIV, FPE_FLTOVF, FPE_FLTUND, FPE_FLTRES, FPE_FLTINV, FPE_FLTSUB = range(1, 9)
SEGV_MAPERR, SEGV_ACCERR, SEGV_BNDERR, SEGV_PKUERR = range(1, 5)
BUS_ADRALN, BUS_ADRERR, BUS_OBJERR, BUS_MCEERR_AR, BUS_MCEERR_AO = range(1, 6)
TRAP_BRKPT, TRAP_TRACE, TRAP_BRANCH, TRAP_HWBKPT = range(1, 5)
CLD_EXITED, CLD_KILLED, CLD_DUMPED, CLD_TRAPPED, CLD_STOPPED, CLD_CONTINUED = range(1, 7)
POLL_IN, POLL_OUT, POLL_MSG, POLL_ERR, POLL_PRI, POLL_HUP = range(1, 7)

#: the generic signal numbers (include/uapi/asm-generic/signal.h; x86, arm and powerpc
#: define the same in their own uapi headers, riscv uses the generic file); _NSIG 64
SIGNALS = {
    "SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGIOT": 6,
    "SIGBUS": 7, "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13,
    "SIGALRM": 14, "SIGTERM": 15, "SIGSTKFLT": 16, "SIGCHLD": 17, "SIGCONT": 18, "SIGSTOP": 19,
    "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22, "SIGURG": 23, "SIGXCPU": 24, "SIGXFSZ": 25,
    "SIGVTALRM": 26, "SIGPROF": 27, "SIGWINCH": 28, "SIGIO": 29, "SIGPOLL": 29, "SIGPWR": 30, "SIGSYS": 31,
    "SIGRTMIN": 32, "SIGRTMAX": 64,
}
#: MIPS's (arch/mips/include/uapi/asm/signal.h); _NSIG 128
MIPS_SIGNALS = {
    "SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGIOT": 6,
    "SIGEMT": 7, "SIGFPE": 8, "SIGKILL": 9, "SIGBUS": 10, "SIGSEGV": 11, "SIGSYS": 12, "SIGPIPE": 13,
    "SIGALRM": 14, "SIGTERM": 15, "SIGUSR1": 16, "SIGUSR2": 17, "SIGCHLD": 18, "SIGCLD": 18, "SIGPWR": 19,
    "SIGWINCH": 20, "SIGURG": 21, "SIGIO": 22, "SIGPOLL": 22, "SIGSTOP": 23, "SIGTSTP": 24, "SIGCONT": 25,
    "SIGTTIN": 26, "SIGTTOU": 27, "SIGVTALRM": 28, "SIGPROF": 29, "SIGXCPU": 30, "SIGXFSZ": 31,
    "SIGRTMIN": 32, "SIGRTMAX": 128,
}
#: MIPS's sa_flags where they differ from :mod:`.base`'s (arch/mips/include/uapi/asm/signal.h)
MIPS_SA = {"SA_SIGINFO": 0x8, "SA_NOCLDWAIT": 0x10000}

_MIPS = ("mips", "mipsel", "mips64el")


def signals(arch: str) -> dict[str, int]:
    """The signal numbers of ``arch`` by name."""
    return dict(MIPS_SIGNALS if arch in _MIPS else SIGNALS)


def sigprocmask_how(arch: str) -> tuple[int, int, int]:
    """``SIG_BLOCK``, ``SIG_UNBLOCK``, ``SIG_SETMASK`` on ``arch``: 0, 1, 2, but MIPS's 1, 2, 3
    (arch/mips/include/uapi/asm/signal.h)."""
    return (1, 2, 3) if arch in _MIPS else (0, 1, 2)


@dataclass(frozen=True)
class SiginfoLayout:
    """Where ``siginfo_t``'s fields are for one architecture."""

    word: int
    order: str  #: struct's byte order ("<" or ">")
    swapped: bool = False  #: MIPS: si_code before si_errno

    @property
    def union(self) -> int:
        """The offset of ``_sifields``: three ints, padded to a pointer's alignment."""
        return 16 if self.word == 8 else 12

    def head(self, sig: int, code: int, errno: int = 0) -> bytearray:
        out = bytearray(SIGINFO_SIZE)
        second, third = (code, errno) if self.swapped else (errno, code)
        struct.pack_into(self.order + "iii", out, 0, sig, second, third)
        return out

    def put(self, out: bytearray, offset: int, fmt: str, *values: int) -> None:
        struct.pack_into(self.order + fmt.replace("W", "Q" if self.word == 8 else "I"), out,
                         self.union + offset, *values)


_LAYOUTS = {
    "x86_64": SiginfoLayout(8, "<"), "i386": SiginfoLayout(4, "<"), "arm": SiginfoLayout(4, "<"),
    "riscv64": SiginfoLayout(8, "<"), "ppc64": SiginfoLayout(8, ">"), "ppc64le": SiginfoLayout(8, "<"),
    "aarch64": SiginfoLayout(8, "<"), "mips": SiginfoLayout(4, ">", True),
    "mipsel": SiginfoLayout(4, "<", True), "mips64el": SiginfoLayout(8, "<", True),
}


def layout(arch: str) -> SiginfoLayout:
    """The siginfo layout of ``arch`` (a kpsdk architecture name)."""
    try:
        return _LAYOUTS[arch]
    except KeyError:
        from kpsdk.errors import UnknownNameError

        raise UnknownNameError("signal frame architecture", arch, list(_LAYOUTS)) from None


def _word(value: int, lay: SiginfoLayout) -> int:
    return value & ((1 << 8 * lay.word) - 1)


def siginfo_kill(arch: str, sig: int, *, pid: int, uid: int, code: int = SI_USER) -> bytes:
    """``kill`` (``SI_USER``), ``tkill``/``tgkill`` (``SI_TKILL``): the sender's pid and uid
    (``_kill``: si_pid, si_uid)."""
    lay = layout(arch)
    out = lay.head(sig, code)
    lay.put(out, 0, "iI", pid, uid & 0xFFFFFFFF)
    return bytes(out)


def siginfo_queue(arch: str, sig: int, *, pid: int, uid: int, value: int, code: int = SI_QUEUE) -> bytes:
    """``rt_sigqueueinfo``/``sigqueue`` and message queues (``_rt``: si_pid, si_uid,
    si_value, a pointer-sized union after the two ints)."""
    lay = layout(arch)
    out = lay.head(sig, code)
    lay.put(out, 0, "iI", pid, uid & 0xFFFFFFFF)
    lay.put(out, 8, "W", _word(value, lay))
    return bytes(out)


def siginfo_timer(arch: str, sig: int, *, timerid: int, overrun: int, value: int, code: int = SI_TIMER) -> bytes:
    """A POSIX timer's expiry (``_timer``: si_tid, si_overrun, si_value; kernel/time/posix-timers.c)."""
    lay = layout(arch)
    out = lay.head(sig, code)
    lay.put(out, 0, "ii", timerid, overrun)
    lay.put(out, 8, "W", _word(value, lay))
    return bytes(out)


def siginfo_kernel(arch: str, sig: int) -> bytes:
    """A signal the kernel sends for itself (``SEND_SIG_PRIV``: ``alarm``/``setitimer``'s
    SIGALRM, SIGPIPE on a broken pipe, SIGXFSZ...): ``SI_KERNEL``, no sender (kernel/signal.c
    ``__send_signal_locked``)."""
    lay = layout(arch)
    return bytes(lay.head(sig, SI_KERNEL))


def siginfo_fault(arch: str, sig: int, *, code: int, addr: int, addr_lsb: int = 0) -> bytes:
    """A fault (``_sigfault``: si_addr, then ``si_addr_lsb`` for BUS_MCEERR_*):
    SIGSEGV ``SEGV_MAPERR``/``SEGV_ACCERR`` with the address touched, SIGBUS
    ``BUS_ADRALN``, SIGILL ``ILL_ILLOPC`` and SIGFPE ``FPE_INTDIV`` with the instruction's
    address, SIGTRAP ``TRAP_BRKPT``..."""
    lay = layout(arch)
    out = lay.head(sig, code)
    lay.put(out, 0, "W", _word(addr, lay))
    if addr_lsb:
        lay.put(out, lay.word, "h", addr_lsb)
    return bytes(out)


def siginfo_chld(arch: str, *, code: int, pid: int, uid: int, status: int, utime: int = 0, stime: int = 0,
                 sig: int | None = None) -> bytes:
    """SIGCHLD for a child that changed state (``_sigchld``: si_pid, si_uid, si_status, then
    si_utime and si_stime as clock_t; kernel/signal.c ``do_notify_parent``): ``CLD_EXITED``
    with the exit code, ``CLD_KILLED``/``CLD_DUMPED`` with the signal number."""
    lay = layout(arch)
    out = lay.head(signals(arch)["SIGCHLD"] if sig is None else sig, code)
    lay.put(out, 0, "iIi", pid, uid & 0xFFFFFFFF, status)
    lay.put(out, 16 if lay.word == 8 else 12, "WW", _word(utime, lay), _word(stime, lay))
    return bytes(out)


def siginfo_poll(arch: str, sig: int, *, code: int, band: int, fd: int) -> bytes:
    """SIGIO/SIGPOLL (``_sigpoll``: si_band as a long, si_fd)."""
    lay = layout(arch)
    out = lay.head(sig, code)
    lay.put(out, 0, "W", _word(band, lay))
    lay.put(out, lay.word, "i", fd)
    return bytes(out)
