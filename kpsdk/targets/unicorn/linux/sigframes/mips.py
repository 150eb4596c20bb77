"""MIPS signal frames: o32 (mips, mipsel) and n64 (mips64el).

Sources: arch/mips/kernel/signal.c (``struct sigframe`` and ``struct rt_sigframe``: four words
of argument save space and two of padding, then the sigcontext and the mask, or the siginfo
and the ucontext; ``get_sigframe``: 32 bytes below sp, then the alternate stack, then
``ALMASK``-aligned; ``setup_frame``, ``setup_rt_frame``, ``setup_sigcontext``,
``protected_save_fp_context``, ``restore_sigcontext``), arch/mips/include/uapi/asm/sigcontext.h
(o32's ``sc_pc`` and ``sc_regs`` as 64-bit words after two unused words; n64's registers
first, ``sc_pc`` after hi/lo), asm/ucontext.h and asm/signal.h (``stack_t`` is ``ss_sp``,
``ss_size``, ``ss_flags`` on MIPS; masks are 128 bits).

o32 gives a handler without ``SA_SIGINFO`` the old frame (a0 = sig, a1 = 0, a2 = the
sigcontext) and returns it through ``sigreturn``; n64 always builds the rt frame
(``sig_uses_siginfo`` is true on a 64-bit kernel).  The handler is entered at its address
with t9 holding it too (PIC code computes gp from t9) and ra at the vDSO's
``__vdso_sigreturn``/``__vdso_rt_sigreturn`` (arch/mips/vdso/sigreturn.S): here
``sigreturn_code_addr`` + 0 / + 8, where :func:`trampoline`'s code goes.

The FP state is saved as ``protected_save_fp_context`` saves a task's: in FR=1 (n64 always;
o32 as Linux starts FPXX and FP64 programs on a CPU with a 64-bit FPU, the 24Kf here and
QEMU's: arch/mips/kernel/elf.c) all 32 registers of 64 bits, ``sc_used_math`` = ``USED_FP |
USED_FR1``; in FR=0 (an o32 FP32 program) an even register and the odd one after it are one
64-bit value: only the even slots are written (``copy_fp_to_sigcontext``'s ``inc`` of 2), each
the even register's 32 bits with the odd one's above them (the CPU here, as QEMU's, holds the
odd register apart).  The mode is the task's Status.FR (``sr``).  Linux saves the FP state
only for a task that used the FPU (``used_math()``, set at its first FP instruction); this CPU
traps no first use, so every task counts as one that did.  The CPUs Unicorn emulates here have
no DSP ASE: the DSP accumulators are not saved, as the kernel does without ``cpu_has_dsp``.
"""

from __future__ import annotations

import struct

from kpsdk.targets.unicorn.linux.sigframes.base import (
    AltStack,
    Delivery,
    FrameCpu,
    FrameReader,
    FrameWriter,
    bad_frame,
    on_sig_stack,
    sigsp,
)

#: $0-$31 by the backend's names (arch_backends/mips.py): o32's, and n64's ($8-$15 differ)
O32_REGS = ("zero", "at", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7",
            "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8", "t9", "k0", "k1", "gp", "sp", "s8", "ra")
N64_REGS = (*O32_REGS[:8], "a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3", *O32_REGS[16:])
#: the save area and padding before a frame's contents
HEAD = 24
INFO = HEAD  #: the rt frame's siginfo
UC = HEAD + 128  #: its ucontext
SIGINFO_SIZE = 128
#: sc_used_math: the task used the FPU; FR=1 (arch/mips/kernel/signal.c)
USED_FP, USED_FR1 = 1, 2
#: ``li v0, __NR_sigreturn; syscall`` then ``li v0, __NR_rt_sigreturn; syscall`` (o32: 4119, 4193;
#: n64 has no sigreturn: 5211 for rt_sigreturn): arch/mips/vdso/sigreturn.S
SIGRETURN = {"o32": (4119, 4193), "n64": (None, 5211)}


class _Abi:
    """One ABI's layout: word size, byte order, where each sigcontext field lies."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.n64 = arch == "mips64el"
        self.order = ">" if arch == "mips" else "<"
        self.word = 8 if self.n64 else 4
        self.regs = N64_REGS if self.n64 else O32_REGS
        self.align = 15 if self.n64 else 7  # ALMASK (arch/mips/include/asm/asm.h: ALSZ)
        if self.n64:  # sc_regs[32], sc_fpregs[32], mdhi, hi1-3, mdlo, lo1-3, pc, fpc_csr, used_math, dsp
            self.sc_regs, self.sc_fp, self.sc_hi, self.sc_lo, self.sc_pc = 0, 256, 512, 544, 576
            self.sc_csr, self.sc_used, self.sc_size = 584, 588, 600
        else:  # regmask, status, pc, regs[32], fpregs[32], acx, fpc_csr, fpc_eir, used_math, dsp, mdhi, mdlo...
            self.sc_regs, self.sc_fp, self.sc_hi, self.sc_lo, self.sc_pc = 16, 272, 552, 560, 8
            self.sc_csr, self.sc_used, self.sc_size = 532, 540, 592
        self.uc_stack = 2 * self.word  # after uc_flags and uc_link
        # stack_t (ss_sp, ss_size, ss_flags), then the sigcontext, 8-byte aligned (its 64-bit words)
        self.uc_mcontext = (self.uc_stack + 3 * self.word + 7) & ~7
        self.uc_sigmask = self.uc_mcontext + self.sc_size
        self.uc_size = self.uc_sigmask + 16
        self.rt_size = UC + self.uc_size
        self.old_sc = HEAD  #: the old frame's sigcontext
        self.old_mask = HEAD + self.sc_size
        self.old_size = self.old_mask + 16


#: Status.FR: 64-bit FPU registers
ST_FR = 1 << 26


_ABIS = {a: _Abi(a) for a in ("mips", "mipsel", "mips64el")}


def trampoline(arch: str) -> bytes:
    """The vDSO's sigreturn code: o32's ``__vdso_sigreturn`` at 0 and ``__vdso_rt_sigreturn``
    at 8 (n64: at 8 too, the 0 slot never used)."""
    abi = _ABIS[arch]
    plain, rt = SIGRETURN["n64" if abi.n64 else "o32"]
    words = (0x24020000 | (plain or 0), 0x0000000C, 0x24020000 | rt, 0x0000000C)
    return struct.pack(f"{abi.order}4I", *words)


def _m(value: int, word: int) -> int:
    return value & ((1 << 8 * word) - 1)


def _sc(w: FrameWriter, abi: _Abi, sc: int, cpu: FrameCpu) -> None:
    """``setup_sigcontext``: the pc, $0 as 0 and $1-$31, hi, lo, the FP state, and what it saved."""
    w.put(sc + abi.sc_pc, "Q", _m(cpu.reg("pc"), 8))
    w.put(sc + abi.sc_regs, "32Q", 0, *(_m(cpu.reg(n), 8) for n in abi.regs[1:]))
    w.put(sc + abi.sc_hi, "Q", _m(cpu.reg("hi"), 8))
    w.put(sc + abi.sc_lo, "Q", _m(cpu.reg("lo"), 8))
    fr1 = bool(cpu.reg("sr") & ST_FR)
    for i in range(0, 32, 1 if fr1 else 2):
        w.put(sc + abi.sc_fp + 8 * i, "Q", _fpr(cpu, fr1, i))
    w.put(sc + abi.sc_csr, "I", cpu.reg("fcsr") & 0xFFFFFFFF)
    w.put(sc + abi.sc_used, "I", USED_FP | (USED_FR1 if fr1 else 0))


def _fpr(cpu: FrameCpu, fr1: bool, i: int) -> int:
    """sc_fpregs[i]: FR=1's 64-bit register, or FR=0's pair (an even register low, the odd one
    high: what the kernel's ``sdc1`` of the even register stores, ``save_fp_context``)."""
    if fr1:
        return _m(cpu.reg(f"f{i}"), 8)
    return _m(cpu.reg(f"f{i}"), 4) | _m(cpu.reg(f"f{i + 1}"), 4) << 32


def _stack_t(w: FrameWriter, at: int, alt: AltStack, word: int) -> None:
    """``__save_altstack`` into MIPS's ``stack_t`` (ss_sp, ss_size, ss_flags)."""
    w.put(at, "W", alt.sp)
    w.put(at + word, "W", alt.size)
    w.put(at + 2 * word, "i", alt.flags - (1 << 32) if alt.flags & 0x80000000 else alt.flags)


#: MIPS's SA_SIGINFO (arch/mips/include/uapi/asm/signal.h; the generic one is 4)
SA_SIGINFO = 0x8


def push(cpu: FrameCpu, d: Delivery, arch: str) -> None:
    """``setup_frame`` (o32 without SA_SIGINFO) or ``setup_rt_frame``."""
    abi = _ABIS[arch]
    rt = abi.n64 or bool(d.flags & SA_SIGINFO)
    size = abi.rt_size if rt else abi.old_size
    sp = cpu.reg("sp")
    alt = d.altstack
    if on_sig_stack(alt, sp) and not on_sig_stack(alt, sp - size):
        raise bad_frame(arch, sp, "the frame would overflow the alternate signal stack")
    frame = (sigsp(sp - 32, d.flags, alt) - size) & ~abi.align
    w = FrameWriter(frame, size, abi.order, abi.word)
    if rt:
        w.raw(INFO, d.info)
        w.put(UC, "WW", 0, 0)  # uc_flags, uc_link
        _stack_t(w, UC + abi.uc_stack, alt, abi.word)
        _sc(w, abi, UC + abi.uc_mcontext, cpu)
        w.put(UC + abi.uc_sigmask, "QQ", *_mask(d.blocked, abi))
    else:
        _sc(w, abi, abi.old_sc, cpu)
        w.put(abi.old_mask, "QQ", *_mask(d.blocked, abi))
    w.flush(cpu.write)
    cpu.set_reg("a0", d.sig)
    cpu.set_reg("a1", frame + INFO if rt else 0)
    cpu.set_reg("a2", frame + (UC if rt else abi.old_sc))
    cpu.set_reg("sp", frame)
    cpu.set_reg("ra", d.sigreturn_code_addr + (8 if rt else 0))
    cpu.set_reg("t9", d.handler)
    cpu.set_reg("pc", d.handler)


def _mask(blocked: int, abi: _Abi) -> tuple[int, int]:
    """A 128-bit mask as the kernel's sigset_t holds it: two 64-bit words, or on o32 four 32-bit
    ones in order (the same bytes in a little-endian guest; a big-endian one swaps the halves of
    each 64-bit pair)."""
    lo, hi = blocked & (1 << 64) - 1, blocked >> 64 & (1 << 64) - 1
    if abi.word == 4 and abi.order == ">":
        lo, hi = (lo & 0xFFFFFFFF) << 32 | lo >> 32, (hi & 0xFFFFFFFF) << 32 | hi >> 32
    return lo, hi


def _unmask(lo: int, hi: int, abi: _Abi) -> int:
    if abi.word == 4 and abi.order == ">":
        lo, hi = (lo & 0xFFFFFFFF) << 32 | lo >> 32, (hi & 0xFFFFFFFF) << 32 | hi >> 32
    return lo | hi << 64


def pop(cpu: FrameCpu, arch: str, rt: bool) -> int:
    """``sys_rt_sigreturn``/``sys_sigreturn``: the frame at sp (``restore_sigcontext``)."""
    abi = _ABIS[arch]
    frame = cpu.reg("sp")
    size = abi.rt_size if rt else abi.old_size
    r = FrameReader(frame, cpu.read(frame, size), abi.order, abi.word)
    sc = UC + abi.uc_mcontext if rt else abi.old_sc
    lo, hi = r.get(UC + abi.uc_sigmask if rt else abi.old_mask, "QQ")
    mask = _unmask(lo, hi, abi)
    cpu.set_reg("pc", _m(r.one(sc + abi.sc_pc, "Q"), abi.word))
    for name, value in zip(abi.regs[1:], r.get(sc + abi.sc_regs + 8, "31Q"), strict=True):
        cpu.set_reg(name, _m(value, abi.word))
    cpu.set_reg("hi", _m(r.one(sc + abi.sc_hi, "Q"), abi.word))
    cpu.set_reg("lo", _m(r.one(sc + abi.sc_lo, "Q"), abi.word))
    if r.one(sc + abi.sc_used, "I") & USED_FP:  # restored in the task's mode, as Linux does
        fr1 = bool(cpu.reg("sr") & ST_FR)
        for i in range(0, 32, 1 if fr1 else 2):
            value = r.one(sc + abi.sc_fp + 8 * i, "Q")
            if fr1:
                cpu.set_reg(f"f{i}", value)
            else:  # the pair back into FR=0's two 32-bit registers
                cpu.set_reg(f"f{i}", value & 0xFFFFFFFF)
                cpu.set_reg(f"f{i + 1}", value >> 32)
        cpu.set_reg("fcsr", r.one(sc + abi.sc_csr, "I"))
    return mask


def altstack(cpu: FrameCpu, arch: str, rt: bool) -> tuple[int, int, int]:
    """The rt frame's ``uc_stack`` (MIPS's order: sp, size, flags); the old frame has none."""
    abi = _ABIS[arch]
    if not rt:
        return 0, 0, 0
    frame = cpu.reg("sp")
    r = FrameReader(frame, cpu.read(frame, abi.rt_size), abi.order, abi.word)
    at = UC + abi.uc_stack
    return r.one(at), r.one(at + abi.word), r.one(at + 2 * abi.word, "I")


def layout(arch: str) -> dict[str, int]:
    abi = _ABIS[arch]
    mc = abi.uc_mcontext
    out = {"uc.flags": 0, "uc_link": abi.word, "uc_stack": abi.uc_stack, "uc_mcontext": mc,
           "uc_sigmask": abi.uc_sigmask, "uc.stack.sp": abi.uc_stack, "uc.stack.size": abi.uc_stack + abi.word,
           "uc.stack.flags": abi.uc_stack + 2 * abi.word, "frame.info": INFO, "frame.uc": UC,
           "frame.size": abi.rt_size, "frame.old_size": abi.old_size, "frame.old_sc": abi.old_sc,
           "reg.pc": mc + abi.sc_pc, "reg.f0": mc + abi.sc_fp, "reg.fcsr": mc + abi.sc_csr,
           "reg.hi": mc + abi.sc_hi, "reg.lo": mc + abi.sc_lo, "reg.used_math": mc + abi.sc_used,
           "size.sigcontext": abi.sc_size}
    for i, name in enumerate(abi.regs):
        out[f"reg.{name}"] = mc + abi.sc_regs + 8 * i
    return out
