"""riscv64 signal frames (always rt).

Sources: arch/riscv/kernel/signal.c (``struct rt_sigframe``: siginfo then ucontext;
``get_sigframe``, ``setup_rt_frame``, ``setup_sigcontext``, ``restore_sigcontext``,
``sys_rt_sigreturn``), arch/riscv/include/uapi/asm/ucontext.h (``uc_sigmask`` before
``uc_mcontext``, with room for a 1024-bit mask), arch/riscv/include/uapi/asm/sigcontext.h
(``sc_regs``: pc then x1-x31; a union of the F/D/Q state and ``__riscv_extra_ext_header``,
whose ``reserved`` word and first ``__riscv_ctx_hdr`` sit after the Q-sized area) and
arch/riscv/include/uapi/asm/ptrace.h (``__riscv_d_ext_state``: f0-f31 and fcsr).

The D state is saved (the F/D registers as 64-bit values and fcsr); there is no V state
(Unicorn has no vector unit), so the extension chain is the END header alone, which is
what Linux writes for a task that has not used V.  The handler returns to the vDSO's
``__vdso_rt_sigreturn``: here ``sigreturn_code_addr``, where :func:`trampoline`'s code goes.
"""

from __future__ import annotations

import struct

from kpsdk.targets.unicorn.linux.sigframes.base import (
    Delivery,
    FrameCpu,
    FrameReader,
    FrameWriter,
    bad_frame,
    on_sig_stack,
    read_stack_t,
    save_altstack,
    sigsp,
)

# the backend's names for x1..x31 (arch_backends/riscv.py)
XREGS = ("ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
         "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6")
INFO, UC = 0, 128
UC_FLAGS, UC_LINK, UC_STACK, UC_SIGMASK, UC_MCONTEXT = 0, 8, 16, 40, 176
SC_FP = 256                    #: sc_fpregs after the 32 sc_regs words
SC_RESERVED = SC_FP + 516      #: __riscv_extra_ext_header.reserved, after __padding[129]
SC_EXT_HDR = SC_FP + 520       #: its first __riscv_ctx_hdr (magic, size)
SIGCONTEXT_SIZE = SC_FP + 528  #: the union is as big as the Q state: 32 16-byte registers, fcsr, 3 words
UCONTEXT_SIZE = UC_MCONTEXT + SIGCONTEXT_SIZE
RT_SIGFRAME_SIZE = UC + UCONTEXT_SIZE  #: 1088, a multiple of 16 (get_rt_frame_size rounds up)
END_MAGIC, END_HDR_SIZE = 0, 0
RISCV_V_MAGIC = 0x53465457
#: ``li a7, __NR_rt_sigreturn (139); ecall``: arch/riscv/kernel/vdso/rt_sigreturn.S
TRAMPOLINE = struct.pack("<II", 0x08B00893, 0x00000073)
_M64 = (1 << 64) - 1


def trampoline(arch: str) -> bytes:
    return TRAMPOLINE


def push_riscv64(cpu: FrameCpu, d: Delivery) -> None:
    """``setup_rt_frame``: the handler always gets the siginfo and the ucontext (a0-a2),
    SA_SIGINFO or not."""
    sp = cpu.reg("sp")
    alt = d.altstack
    if on_sig_stack(alt, sp) and not on_sig_stack(alt, sp - RT_SIGFRAME_SIZE):
        raise bad_frame("riscv64", sp, "the frame would overflow the alternate signal stack")
    frame = (sigsp(sp, d.flags, alt) - RT_SIGFRAME_SIZE) & ~0xF
    w = FrameWriter(frame, RT_SIGFRAME_SIZE, "<", 8)
    w.raw(INFO, d.info)
    w.put(UC + UC_FLAGS, "QQ", 0, 0)
    save_altstack(w, UC + UC_STACK, alt)
    sc = UC + UC_MCONTEXT
    w.words(sc, [cpu.reg("pc"), *(cpu.reg(n) for n in XREGS)])
    # __riscv_d_ext_state is copied whole: f0-f31, fcsr and its 4 bytes of padding
    w.put(sc + SC_FP, "32QII", *(cpu.reg(f"f{i}") & _M64 for i in range(32)), cpu.reg("fcsr") & 0xFFFFFFFF, 0)
    w.put(sc + SC_RESERVED, "III", 0, END_MAGIC, END_HDR_SIZE)
    w.put(UC + UC_SIGMASK, "Q", d.blocked & _M64)
    w.flush(cpu.write)

    cpu.set_reg("ra", d.sigreturn_code_addr)
    cpu.set_reg("pc", d.handler)
    cpu.set_reg("sp", frame)
    cpu.set_reg("a0", d.sig)
    cpu.set_reg("a1", frame + INFO)
    cpu.set_reg("a2", frame + UC)


def pop_riscv64(cpu: FrameCpu, rt: bool) -> int:
    """``sys_rt_sigreturn``: the frame at sp."""
    frame = cpu.reg("sp")
    r = FrameReader(frame, cpu.read(frame, RT_SIGFRAME_SIZE), "<", 8)
    sc = UC + UC_MCONTEXT
    if r.one(sc + SC_RESERVED, "I"):
        raise bad_frame("riscv64", frame, "the sigcontext's reserved word is not 0")
    magic, size = r.get(sc + SC_EXT_HDR, "II")
    if magic != END_MAGIC or size != END_HDR_SIZE:
        # RISCV_V_MAGIC (a V state) cannot be restored without a vector unit
        raise bad_frame("riscv64", frame, f"extension header magic {magic:#x} size {size}")
    mask = r.one(UC + UC_SIGMASK, "Q")
    values = r.get(sc, "32Q")
    for name, value in zip(XREGS, values[1:], strict=True):
        cpu.set_reg(name, value)
    cpu.set_reg("pc", values[0])
    for i, value in enumerate(r.get(sc + SC_FP, "32Q")):
        cpu.set_reg(f"f{i}", value)
    cpu.set_reg("fcsr", r.one(sc + SC_FP + 256, "I"))
    return mask


def altstack_riscv64(cpu: FrameCpu, rt: bool) -> tuple[int, int, int]:
    frame = cpu.reg("sp")
    alt = read_stack_t(FrameReader(frame, cpu.read(frame, RT_SIGFRAME_SIZE), "<", 8), UC + UC_STACK, 8)
    return alt.sp, alt.size, alt.flags


def layout_riscv64() -> dict[str, int]:
    out = {"uc.flags": UC_FLAGS, "uc_link": UC_LINK, "uc_stack": UC_STACK, "uc_sigmask": UC_SIGMASK,
           "uc_mcontext": UC_MCONTEXT, "uc.stack.sp": UC_STACK, "uc.stack.flags": UC_STACK + 8,
           "uc.stack.size": UC_STACK + 16, "frame.info": INFO, "frame.uc": UC, "frame.size": RT_SIGFRAME_SIZE,
           "reg.pc": UC_MCONTEXT, "reg.f0": UC_MCONTEXT + SC_FP, "reg.fcsr": UC_MCONTEXT + SC_FP + 256,
           "size.mcontext": SIGCONTEXT_SIZE}
    for i, name in enumerate(XREGS):
        out[f"reg.{name}"] = UC_MCONTEXT + 8 * (i + 1)
    return out
