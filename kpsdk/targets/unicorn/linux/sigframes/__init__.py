"""Linux's signal frames, per architecture: what the kernel writes on the user stack when it
delivers a signal to a handler, the registers it sets for the call, and what
``rt_sigreturn``/``sigreturn`` restores from the frame.

The Linux layer's signal code (pending sets, masks, the choice of the signal, the
moment of delivery) uses two calls::

    push_frame(arch, cpu, sig=..., info=..., handler=..., flags=..., restorer=...,
               blocked=..., altstack=..., sigreturn_code_addr=...)
    mask = pop_frame(arch, cpu, rt=True)     # at the rt_sigreturn (or sigreturn) call

``cpu`` is a :class:`FrameCpu` (registers by name, guest memory);
:class:`~.unicorn.UnicornFrameCpu` is one over a Unicorn engine.  Which frame a delivery
gets is the kernel's choice: i386, arm and MIPS o32 build the old ``sigframe`` for a
handler without ``SA_SIGINFO`` (and return through ``sigreturn``), every other case is an
``rt_sigframe`` (``rt_sigreturn``).  :func:`is_rt` says which, for the return.

A handler returns through ``restorer`` when ``flags`` has ``SA_RESTORER`` (x86 and arm:
glibc always sets it; x86_64 delivers to no handler without it), else through the code at
``sigreturn_code_addr``, where the caller has put :func:`sigreturn_trampoline` ``(arch)``
(the vDSO's or signal page's code on Linux: i386, arm, riscv64 and ppc64 use it).

After :func:`pop_frame` the registers are the frame's: the system call that got there
must not write a return value over them (Linux's ``rt_sigreturn`` returns the restored
rax/r0/a0, and ppc64's leaves r3 and cr alone), nor move the pc past the call.  The caller
restores the task's alternate stack from the frame with :func:`read_altstack` before the
pop if it wants ``restore_altstack``'s effect, and disarms an ``SS_AUTODISARM`` stack after a push.

On ppc64 the call leaves the pc at ``sigreturn_code_addr``, as Linux does: the trampoline's
``bctrl`` calls the handler (ctr), so the handler runs with lr pointing at the rest of the
trampoline.  Everywhere else the pc is the handler.

The constants and the siginfo builders are in :mod:`.siginfo` (signal numbers, ``SI_*``,
fault and ``CLD_*`` codes) and :mod:`.base` (``SA_*``, ``SS_*``); the builders and the
``SA_*``/``SS_*`` values are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kpsdk.errors import UnknownNameError
from kpsdk.targets.unicorn.linux.sigframes import aarch64, arm, mips, ppc64, riscv, x86
from kpsdk.targets.unicorn.linux.sigframes.base import (
    SA_EXPOSE_TAGBITS,
    SA_NOCLDSTOP,
    SA_NOCLDWAIT,
    SA_NODEFER,
    SA_ONSTACK,
    SA_RESETHAND,
    SA_RESTART,
    SA_RESTORER,
    SA_SIGINFO,
    SA_UNSUPPORTED,
    SS_AUTODISARM,
    SS_DISABLE,
    SS_ONSTACK,
    AltStack,
    Delivery,
    FaultContext,
    FrameCpu,
)
from kpsdk.targets.unicorn.linux.sigframes.siginfo import (
    SIGINFO_SIZE,
    SIGNALS,
    siginfo_chld,
    siginfo_fault,
    siginfo_kernel,
    siginfo_kill,
    siginfo_poll,
    siginfo_queue,
    siginfo_timer,
    signals,
    sigprocmask_how,
)
from kpsdk.targets.unicorn.linux.sigframes.siginfo import layout as siginfo_layout

__all__ = [
    "SA_EXPOSE_TAGBITS", "SA_NOCLDSTOP", "SA_NOCLDWAIT", "SA_NODEFER", "SA_ONSTACK", "SA_RESETHAND",
    "SA_RESTART", "SA_RESTORER", "SA_SIGINFO", "SA_UNSUPPORTED", "SIGINFO_SIZE", "SIGNALS", "SS_AUTODISARM",
    "SS_DISABLE", "SS_ONSTACK", "ARCHES", "AltStack", "FaultContext", "FrameCpu", "frame_layout",
    "is_rt", "pop_frame", "push_frame", "read_altstack", "sa_flags", "siginfo_chld", "siginfo_fault",
    "siginfo_kernel", "siginfo_kill", "siginfo_layout", "siginfo_poll", "siginfo_queue", "siginfo_timer", "signals",
    "sigprocmask_how",
    "sigreturn_trampoline",
]


@dataclass(frozen=True)
class _Frames:
    push: Callable[[FrameCpu, Delivery], None]
    pop: Callable[[FrameCpu, bool], int]
    altstack: Callable[[FrameCpu, bool], tuple[int, int, int]]
    trampoline: bytes
    layout: Callable[[], dict[str, int]]
    has_old_frame: bool  #: a non-SA_SIGINFO handler gets the old sigframe and uses sigreturn


def _mips(arch: str) -> _Frames:
    return _Frames(lambda cpu, d: mips.push(cpu, d, arch), lambda cpu, rt: mips.pop(cpu, arch, rt),
                   lambda cpu, rt: mips.altstack(cpu, arch, rt), mips.trampoline(arch), lambda: mips.layout(arch),
                   arch != "mips64el")


def _ppc(arch: str) -> _Frames:
    return _Frames(lambda cpu, d: ppc64.push_ppc64(cpu, d, arch), lambda cpu, rt: ppc64.pop_ppc64(cpu, rt, arch),
                   lambda cpu, rt: ppc64.altstack_ppc64(cpu, rt, arch), ppc64.trampoline(arch),
                   ppc64.layout_ppc64, False)


_FRAMES: dict[str, _Frames] = {
    "x86_64": _Frames(x86.push_x86_64, x86.pop_x86_64, x86.altstack_x86_64, x86.trampoline("x86_64"),
                      x86.layout_x86_64, False),
    "i386": _Frames(x86.push_i386, x86.pop_i386, x86.altstack_i386, x86.trampoline("i386"), x86.layout_i386,
                    True),
    "arm": _Frames(arm.push_arm, arm.pop_arm, arm.altstack_arm, arm.trampoline("arm"), arm.layout_arm, True),
    "riscv64": _Frames(riscv.push_riscv64, riscv.pop_riscv64, riscv.altstack_riscv64, riscv.trampoline("riscv64"),
                       riscv.layout_riscv64, False),
    "ppc64": _ppc("ppc64"),
    "ppc64le": _ppc("ppc64le"),
    "aarch64": _Frames(aarch64.push_aarch64, aarch64.pop_aarch64, aarch64.altstack_aarch64,
                       aarch64.trampoline("aarch64"), aarch64.layout_aarch64, False),
    "mips": _mips("mips"),
    "mipsel": _mips("mipsel"),
    "mips64el": _mips("mips64el"),
}
#: the architectures with frames
ARCHES = tuple(_FRAMES)


def _frames(arch: str) -> _Frames:
    try:
        return _FRAMES[arch]
    except KeyError:
        raise UnknownNameError("signal frame architecture", arch, list(_FRAMES)) from None


def push_frame(arch: str, cpu: FrameCpu, *, sig: int, info: bytes, handler: int, flags: int, restorer: int,
               blocked: int, altstack: AltStack | tuple[int, int, int] | None, sigreturn_code_addr: int,
               fault: FaultContext | None = None) -> None:
    """Deliver ``sig`` to ``handler``: write the frame Linux writes on ``arch`` below the
    task's stack pointer (or on its alternate stack) and set the registers for the call.

    :param arch: a kpsdk architecture name (:data:`ARCHES`).
    :param cpu: the task's registers and memory, as the signal found them.
    :param sig: the signal number.
    :param info: the 128-byte ``siginfo_t`` (the ``siginfo_*`` builders make one).
    :param handler: ``sa_handler`` as the program gave it: a Thumb handler's bit 0 set on
        arm; the address of a function descriptor on ppc64 (ELFv1).
    :param flags: ``sa_flags``.
    :param restorer: ``sa_restorer`` (used with ``SA_RESTORER``).
    :param blocked: the signal mask to save, the one the handler's return restores
        (bit ``n - 1`` for signal ``n``).
    :param altstack: the task's ``sigaltstack``, as :class:`AltStack` or (sp, size, flags);
        ``None`` for a task that never set one.
    :param sigreturn_code_addr: where :func:`sigreturn_trampoline` ``(arch)`` is mapped.
    :param fault: the fault the signal reports, for the sigcontext's trap fields.

    The frame's place, its alignment and the red zone it skips are the kernel's (x86_64:
    128 bytes below sp, then the FP image 64-byte aligned, then the frame so that sp + 8
    is 16-byte aligned; i386: the fsave header and image, the frame with sp + 4 16-byte
    aligned; arm: 8-byte aligned; riscv64: 16; ppc64: 16, with the 512-byte
    ``USER_REDZONE_SIZE`` inside the frame and a 128-byte dummy caller frame below it).
    :raises kpsdk.TargetFault: where Linux fails the delivery with SIGSEGV (an overflowing
        alternate stack, x86_64 without ``SA_RESTORER``, a stack it cannot write).
    """
    if len(info) != SIGINFO_SIZE:
        from kpsdk.errors import ArgumentError

        raise ArgumentError(f"push_frame: info is {len(info)} bytes, siginfo_t is {SIGINFO_SIZE}")
    if altstack is None:
        alt = AltStack(0, 0, 0)
    elif isinstance(altstack, AltStack):
        alt = altstack
    else:
        alt = AltStack(*altstack)
    _frames(arch).push(cpu, Delivery(sig, bytes(info), handler, flags, restorer, blocked, alt,
                                     sigreturn_code_addr, fault or FaultContext()))


def pop_frame(arch: str, cpu: FrameCpu, rt: bool) -> int:
    """What ``rt_sigreturn`` (``rt``) or ``sigreturn`` does, called with the registers as
    that system call finds them: restore every register the frame at the stack pointer
    holds (changed or not by the handler), the FP state with them, and return the signal
    mask saved there, for the caller to install (without SIGKILL and SIGSTOP).

    :raises kpsdk.TargetFault: where Linux answers with SIGSEGV (a bad VFP magic, a privileged
        CPSR, a bad riscv extension header, an MXCSR with reserved bits, a frame it cannot read).
    """
    return _frames(arch).pop(cpu, rt)


def read_altstack(arch: str, cpu: FrameCpu, rt: bool = True) -> AltStack:
    """The ``uc_stack`` of the frame ``pop_frame`` would restore (``restore_altstack``
    hands it to ``sigaltstack``); call it before :func:`pop_frame`."""
    return AltStack(*_frames(arch).altstack(cpu, rt))


def is_rt(arch: str, flags: int) -> bool:
    """Whether a handler installed with ``flags`` gets an rt frame (and returns with
    ``rt_sigreturn``) on ``arch``."""
    return not _frames(arch).has_old_frame or bool(flags & sa_flags(arch)["SA_SIGINFO"])


def sigreturn_trampoline(arch: str) -> bytes:
    """The code that must be at ``sigreturn_code_addr`` (readable and executable), in the
    arch's byte order.  i386: ``__kernel_sigreturn`` at 0, ``__kernel_rt_sigreturn`` at 8;
    arm: the four slots of the kernel's signal page (ARM/Thumb, sigreturn/rt_sigreturn);
    riscv64: ``__vdso_rt_sigreturn``; aarch64: ``__kernel_rt_sigreturn``; ppc64:
    ``__kernel_start_sigtramp_rt64``, which calls the handler and then ``rt_sigreturn``.
    Empty for x86_64 (SA_RESTORER only)."""
    return _frames(arch).trampoline


def frame_layout(arch: str) -> dict[str, int]:
    """Named offsets of the frame (``uc_*`` and ``reg.*`` from the ucontext, ``frame.*``
    from the handler's stack pointer), for tests and for readers of the frames."""
    return _frames(arch).layout()


def sa_flags(arch: str) -> dict[str, int]:
    """The ``SA_*`` values of ``arch`` by name (MIPS's SA_SIGINFO and SA_NOCLDWAIT differ;
    riscv has no SA_RESTORER)."""
    from kpsdk.targets.unicorn.linux.sigframes.siginfo import MIPS_SA

    out = {"SA_NOCLDSTOP": SA_NOCLDSTOP, "SA_NOCLDWAIT": SA_NOCLDWAIT, "SA_SIGINFO": SA_SIGINFO,
           "SA_ONSTACK": SA_ONSTACK, "SA_RESTART": SA_RESTART, "SA_NODEFER": SA_NODEFER,
           "SA_RESETHAND": SA_RESETHAND, "SA_RESTORER": SA_RESTORER}
    if arch in ("mips", "mipsel", "mips64el"):
        out.update(MIPS_SA)
    if arch in ("riscv64", "mips", "mipsel", "mips64el"):
        out.pop("SA_RESTORER")
    return out
