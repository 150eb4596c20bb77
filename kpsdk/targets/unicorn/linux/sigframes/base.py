"""What every architecture's signal frame shares: the CPU a builder may touch, the
alternate signal stack rules, and a writer that packs fields in the guest's byte order.

The rules here are the kernel's generic ones (include/linux/sched/signal.h:
``on_sig_stack``, ``sas_ss_flags``, ``sigsp``; kernel/signal.c: ``__save_altstack``);
each architecture's module (:mod:`.x86`, :mod:`.arm`, :mod:`.riscv`, :mod:`.ppc64`)
lays its own frame out with them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kpsdk.errors import TargetFault

# sa_flags (include/uapi/asm-generic/signal-defs.h; arch/x86, arm and powerpc add SA_RESTORER
# in their uapi/asm/signal.h; MIPS numbers differ: see :mod:`.siginfo`)
SA_NOCLDSTOP = 0x00000001
SA_NOCLDWAIT = 0x00000002
SA_SIGINFO = 0x00000004
SA_UNSUPPORTED = 0x00000400
SA_EXPOSE_TAGBITS = 0x00000800
SA_RESTORER = 0x04000000
SA_ONSTACK = 0x08000000
SA_RESTART = 0x10000000
SA_NODEFER = 0x40000000
SA_RESETHAND = 0x80000000

# sigaltstack's ss_flags (include/uapi/linux/signal.h)
SS_ONSTACK = 1
SS_DISABLE = 2
SS_AUTODISARM = 1 << 31


class FrameCpu(Protocol):
    """All a frame builder touches: registers by name and guest memory.

    Register names are the arch backends' (``rip``, ``eflags``, ``cpsr``, ``r1``, ``msr``...)
    and, for the floating-point and vector state the backends do not list, the names of
    :data:`kpsdk.targets.unicorn.linux.sigframes.unicorn.EXTRA_REGISTERS` (``xmm0``,
    ``fpcw``, ``mxcsr``, ``fp0``, ``d0``, ``fpscr``, ``f0``, ``fcsr``...).  Values are
    unsigned integers of the register's width; x87 registers are 80-bit integers
    (exponent and sign in bits 64-79, the significand below), XMM registers 128-bit.
    """

    def reg(self, name: str) -> int:
        """The register's value."""
        ...

    def set_reg(self, name: str, value: int) -> None:
        """Set the register (for the handler call, or from a frame on return)."""
        ...

    def read(self, addr: int, size: int) -> bytes:
        """Guest memory."""
        ...

    def write(self, addr: int, data: bytes) -> None:
        """Write guest memory."""
        ...


@dataclass(frozen=True)
class AltStack:
    """The task's ``sigaltstack`` as the kernel keeps it (``sas_ss_sp``, ``sas_ss_size``,
    ``sas_ss_flags`` of struct task_struct).  A task that never called sigaltstack has
    all three 0 (which is what ``None`` means to :func:`push_frame`); one that disabled it
    has flags ``SS_DISABLE``.  ``flags`` may carry ``SS_AUTODISARM``."""

    sp: int
    size: int
    flags: int = 0


@dataclass(frozen=True)
class FaultContext:
    """What ``current->thread`` remembers of the last fault, which the kernel copies into
    the sigcontext: x86's ``trap_nr``, ``error_code`` and ``cr2``; arm's ``trap_no``,
    ``error_code`` and ``address``; ppc64's ``trap``, ``dsisr`` and ``dar``.  All 0 for a
    task that never faulted (a signal sent by ``kill``)."""

    trapno: int = 0
    error: int = 0
    address: int = 0


def bad_frame(arch: str, address: int, reason: str) -> TargetFault:
    """The error for a frame the kernel would refuse: delivery would overflow the alternate
    stack or lacks x86_64's required restorer, or a sigreturn found a frame it cannot
    restore (bad magic, a privileged mode).  Linux answers each with SIGSEGV
    (``force_sigsegv`` on delivery, ``force_sig(SIGSEGV)`` on return), as it does when the
    frame cannot be written or read at all; the caller does the same for this
    :class:`~kpsdk.TargetFault` (``address``: the frame's) and for the one its
    :class:`FrameCpu` raises on unmapped memory."""
    return TargetFault(f"{arch} signal frame: {reason}", address=address)


@dataclass(frozen=True)
class Delivery:
    """One delivery's inputs, as :func:`push_frame` takes them (see there)."""

    sig: int
    info: bytes
    handler: int
    flags: int
    restorer: int
    blocked: int
    altstack: AltStack
    sigreturn_code_addr: int
    fault: FaultContext


# -- the alternate stack (include/linux/sched/signal.h) ---------------------------------

def on_sig_stack(alt: AltStack, sp: int) -> bool:
    """Whether ``sp`` is on the alternate stack (stacks grow down on every arch here); an
    ``SS_AUTODISARM`` stack never counts, by construction (the kernel's comment)."""
    if alt.flags & SS_AUTODISARM:
        return False
    return sp > alt.sp and sp - alt.sp <= alt.size


def sas_ss_flags(alt: AltStack, sp: int) -> int:
    """``SS_DISABLE`` without a stack, ``SS_ONSTACK`` when ``sp`` is on it, else 0."""
    if not alt.size:
        return SS_DISABLE
    return SS_ONSTACK if on_sig_stack(alt, sp) else 0


def sigsp(sp: int, flags: int, alt: AltStack) -> int:
    """The stack a frame goes on: the top of the alternate stack for an ``SA_ONSTACK``
    handler not already running on it, else ``sp``."""
    if flags & SA_ONSTACK and not sas_ss_flags(alt, sp):
        return alt.sp + alt.size
    return sp


def round_down(value: int, align: int) -> int:
    return value & ~(align - 1)


# -- packing ------------------------------------------------------------------------------

class FrameWriter:
    """The bytes of one frame, field by field, written to the guest in as few runs as
    the layout allows.  Only the fields set are written: the kernel leaves the rest of
    a frame (padding, unused slots) as the stack held it, and so does kpsdk."""

    def __init__(self, base: int, size: int, order: str, word: int) -> None:
        self.base, self.order, self.word = base, order, word
        self._buf = bytearray(size)
        self._set = bytearray(size)
        self._w = "Q" if word == 8 else "I"

    def put(self, offset: int, fmt: str, *values: int) -> None:
        """Pack ``values`` with ``fmt`` (struct codes; ``W`` is a word) at ``offset``."""
        fmt = self.order + fmt.replace("W", self._w)
        size = struct.calcsize(fmt)
        struct.pack_into(fmt, self._buf, offset, *values)
        self._set[offset:offset + size] = b"\1" * size

    def raw(self, offset: int, data: bytes) -> None:
        self._buf[offset:offset + len(data)] = data
        self._set[offset:offset + len(data)] = b"\1" * len(data)

    def words(self, offset: int, values: list[int]) -> None:
        self.put(offset, f"{len(values)}W", *(v & ((1 << 8 * self.word) - 1) for v in values))

    def flush(self, write: Callable[[int, bytes], None]) -> None:
        at, end = 0, len(self._set)
        while at < end:
            start = self._set.find(1, at)
            if start < 0:
                break
            stop = self._set.find(0, start)
            stop = end if stop < 0 else stop
            write(self.base + start, bytes(self._buf[start:stop]))
            at = stop


class FrameReader:
    """A frame read back in one piece, unpacked field by field."""

    def __init__(self, base: int, data: bytes, order: str, word: int) -> None:
        self.base, self.data, self.order = base, data, order
        self._w = "Q" if word == 8 else "I"

    def get(self, offset: int, fmt: str) -> tuple[int, ...]:
        return struct.unpack_from(self.order + fmt.replace("W", self._w), self.data, offset)

    def one(self, offset: int, fmt: str = "W") -> int:
        return int(self.get(offset, fmt)[0])


def save_altstack(w: FrameWriter, offset: int, alt: AltStack) -> None:
    """``__save_altstack`` (kernel/signal.c): ``stack_t`` {ss_sp, ss_flags, ss_size} with the
    task's own flags (not ``SS_ONSTACK``: Linux stores ``sas_ss_flags`` as sigaltstack set it).
    The caller disarms an ``SS_AUTODISARM`` stack afterwards, as that function does."""
    w.put(offset, "W", alt.sp)
    w.put(offset + w.word, "i", _s32(alt.flags))
    w.put(offset + 2 * w.word, "W", alt.size)


def read_stack_t(r: FrameReader, offset: int, word: int) -> AltStack:
    """A ``stack_t`` back from a frame (what ``restore_altstack`` gives ``do_sigaltstack``)."""
    return AltStack(r.one(offset), r.one(offset + 2 * word), r.one(offset + word, "I"))


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
