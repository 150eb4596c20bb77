"""ppc64 (big-endian, ELFv1) and ppc64le (ELFv2) signal frames (always rt).

Sources: arch/powerpc/kernel/signal_64.c (``struct rt_sigframe``,
``__unsafe_setup_sigcontext``, ``handle_rt_signal64``, ``__unsafe_restore_sigcontext``,
``sys_rt_sigreturn``, ``setup_trampoline``), arch/powerpc/kernel/signal.c
(``get_sigframe``), arch/powerpc/include/uapi/asm/ucontext.h, .../sigcontext.h
(``gp_regs``, ``fp_regs``, ``v_regs`` and ``vmx_reserve``), .../ptrace.h (the ``PT_*``
indexes of ``gp_regs``) and arch/powerpc/include/asm/ptrace.h (``__SIGNAL_FRAMESIZE``
128, ``USER_REDZONE_SIZE`` 512).

The frame is the one of a kernel without transactional memory (no second ucontext),
with the 7-word trampoline area of kernels since 5.10.  The handler is entered the
way Linux enters it through the vDSO: the pc at ``__kernel_start_sigtramp_rt64``
(``sigreturn_code_addr``, where :func:`trampoline`'s ``bctrl; addi r1,r1,128; li
r0,__NR_rt_sigreturn; sc`` goes), ctr holding the handler's entry, so the handler
runs with lr pointing after the ``bctrl``.  ELFv1's handler is a function descriptor:
the entry and r2 come from it; ELFv2's entry also goes in r12.

FP: f0-f31 and FPSCR.  VMX and VSX are left out (Unicorn has no vector registers): the
frame is the one Linux builds for a task that never used them, ``v_regs`` pointing at
the (unwritten) vector area, VRSAVE 0 and MSR_VEC and MSR_VSX clear in the saved MSR,
and a return restores no vector state.  ``gp_regs`` words 44-47, where Linux copies
kernel-internal pt_regs words (ppr, exit_result, amr, iamr), are written 0, and so are
orig_gpr3, trap, dar, dsisr and result unless the :class:`~.base.FaultContext` says
(trap, dsisr, dar).  The sigcontext's ``oldmask`` is not written: the rt path passes
no mask to ``setup_sigcontext`` (``uc_sigmask`` has it).
"""

from __future__ import annotations

import struct

from kpsdk.targets.unicorn.linux.sigframes.base import (
    SA_SIGINFO,
    Delivery,
    FrameCpu,
    FrameReader,
    FrameWriter,
    read_stack_t,
    save_altstack,
    sigsp,
)

UC_FLAGS, UC_LINK, UC_STACK, UC_SIGMASK, UC_MCONTEXT = 0, 8, 16, 40, 168
# struct sigcontext, from uc_mcontext
SC_SIGNAL, SC_HANDLER, SC_OLDMASK, SC_REGS, SC_GP_REGS, SC_FP_REGS, SC_V_REGS, SC_VMX = \
    32, 40, 48, 56, 64, 448, 712, 720
SIGCONTEXT_SIZE = 1528
UCONTEXT_SIZE = UC_MCONTEXT + SIGCONTEXT_SIZE  #: 1696
TRAMP_SIZE = 7
TRAMP = UCONTEXT_SIZE + 16              #: after _unused[2]
PINFO = 1744                            #: tramp[7] padded to 8
PUC, INFO = PINFO + 8, PINFO + 16
USER_REDZONE_SIZE = 512
RT_SIGFRAME_SIZE = INFO + 128 + USER_REDZONE_SIZE  #: 2400, a multiple of 16
SIGNAL_FRAMESIZE = 128
# gp_regs indexes (arch/powerpc/include/uapi/asm/ptrace.h)
PT_NIP, PT_MSR, PT_ORIG_R3, PT_CTR, PT_LNK, PT_XER, PT_CCR, PT_SOFTE = 32, 33, 34, 35, 36, 37, 38, 39
PT_TRAP, PT_DAR, PT_DSISR, PT_RESULT = 40, 41, 42, 43
ELF_NGREG = 48
# MSR bits (arch/powerpc/include/asm/reg.h)
MSR_LE, MSR_VSX, MSR_VEC = 1 << 0, 1 << 23, 1 << 25
_NR_RT_SIGRETURN = 172
#: ``bctrl; addi r1,r1,__SIGNAL_FRAMESIZE; li r0,__NR_rt_sigreturn; sc`` (setup_trampoline,
#: arch/powerpc/kernel/vdso/sigtramp64.S)
_TRAMP_WORDS = (0x4E800421, 0x38210000 | SIGNAL_FRAMESIZE, 0x38000000 | _NR_RT_SIGRETURN, 0x44000002)
_M64 = (1 << 64) - 1


def _order(arch: str) -> str:
    return ">" if arch == "ppc64" else "<"


def trampoline(arch: str) -> bytes:
    return struct.pack(_order(arch) + "4I", *_TRAMP_WORDS)


def push_ppc64(cpu: FrameCpu, d: Delivery, arch: str) -> None:
    """``handle_rt_signal64``."""
    order = _order(arch)
    frame = (sigsp(cpu.reg("r1"), d.flags, d.altstack) - RT_SIGFRAME_SIZE) & ~0xF
    w = FrameWriter(frame, RT_SIGFRAME_SIZE, order, 8)
    w.put(PINFO, "QQ", frame + INFO, frame)  # pinfo, puc (the ucontext is first)
    w.put(UC_FLAGS, "Q", 0)
    save_altstack(w, UC_STACK, d.altstack)
    w.put(UC_LINK, "Q", 0)

    sc = UC_MCONTEXT
    v_regs = (frame + sc + SC_VMX + 15) & ~0xF
    w.put(sc + SC_V_REGS, "Q", v_regs)
    w.put(v_regs - frame + 33 * 16, "I", 0)  # VRSAVE
    w.put(sc + SC_FP_REGS, "33Q", *(cpu.reg(f"f{i}") & _M64 for i in range(32)), cpu.reg("fpscr") & 0xFFFFFFFF)
    msr = cpu.reg("msr") & ~(MSR_VEC | MSR_VSX)
    w.put(sc + SC_REGS, "Q", frame + sc + SC_GP_REGS)
    gp = [cpu.reg(f"r{i}") for i in range(32)] + [0] * (ELF_NGREG - 32)
    gp[PT_NIP], gp[PT_MSR], gp[PT_CTR], gp[PT_LNK] = cpu.reg("pc"), msr, cpu.reg("ctr"), cpu.reg("lr")
    gp[PT_XER], gp[PT_CCR], gp[PT_SOFTE] = cpu.reg("xer"), cpu.reg("cr"), 1
    gp[PT_TRAP], gp[PT_DAR], gp[PT_DSISR] = d.fault.trapno, d.fault.address, d.fault.error
    w.words(sc + SC_GP_REGS, gp)
    w.put(sc + SC_SIGNAL, "i", d.sig)
    w.put(sc + SC_HANDLER, "Q", d.handler)
    w.put(UC_SIGMASK, "Q", d.blocked & _M64)
    w.raw(INFO, d.info)
    w.flush(cpu.write)

    # the dummy caller frame: its back chain is the interrupted stack pointer
    newsp = frame - SIGNAL_FRAMESIZE
    cpu.write(newsp, struct.pack(order + "Q", cpu.reg("r1")))
    if arch == "ppc64":
        entry, toc = struct.unpack(order + "QQ", cpu.read(d.handler, 16))
        cpu.set_reg("ctr", entry)
        cpu.set_reg("r2", toc)
    else:
        cpu.set_reg("ctr", d.handler)
        cpu.set_reg("r12", d.handler)
    le = MSR_LE if order == "<" else 0
    cpu.set_reg("msr", (cpu.reg("msr") & ~MSR_LE) | le)
    cpu.set_reg("r1", newsp)
    cpu.set_reg("r3", d.sig)
    if d.flags & SA_SIGINFO:
        cpu.set_reg("r4", frame + INFO)
        cpu.set_reg("r5", frame)
        cpu.set_reg("r6", frame)
    else:
        cpu.set_reg("r4", frame + UC_MCONTEXT)
    cpu.set_reg("fpscr", 0)  # "Make sure signal handler doesn't get spurious FP exceptions"
    cpu.set_reg("pc", d.sigreturn_code_addr)


def pop_ppc64(cpu: FrameCpu, rt: bool, arch: str) -> int:
    """``sys_rt_sigreturn``: the ucontext at r1 (the trampoline popped the dummy frame)."""
    uc = cpu.reg("r1")
    r = FrameReader(uc, cpu.read(uc, UCONTEXT_SIZE), _order(arch), 8)
    mask = r.one(UC_SIGMASK)
    sc = UC_MCONTEXT
    gp = r.get(sc + SC_GP_REGS, f"{ELF_NGREG}Q")
    for i in range(32):
        cpu.set_reg(f"r{i}", gp[i])
    cpu.set_reg("pc", gp[PT_NIP])
    msr = cpu.reg("msr")
    if (msr ^ gp[PT_MSR]) & MSR_LE:  # only the endianness comes from the frame
        cpu.set_reg("msr", (msr & ~MSR_LE) | (gp[PT_MSR] & MSR_LE))
    cpu.set_reg("ctr", gp[PT_CTR])
    cpu.set_reg("lr", gp[PT_LNK])
    cpu.set_reg("xer", gp[PT_XER])
    cpu.set_reg("cr", gp[PT_CCR])
    fp = r.get(sc + SC_FP_REGS, "33Q")
    for i in range(32):
        cpu.set_reg(f"f{i}", fp[i])
    cpu.set_reg("fpscr", fp[32] & 0xFFFFFFFF)
    return mask


def altstack_ppc64(cpu: FrameCpu, rt: bool, arch: str) -> tuple[int, int, int]:
    uc = cpu.reg("r1")
    alt = read_stack_t(FrameReader(uc, cpu.read(uc, UC_MCONTEXT), _order(arch), 8), UC_STACK, 8)
    return alt.sp, alt.size, alt.flags


def layout_ppc64() -> dict[str, int]:
    out = {"uc.flags": UC_FLAGS, "uc_link": UC_LINK, "uc_stack": UC_STACK, "uc_sigmask": UC_SIGMASK,
           "uc_mcontext": UC_MCONTEXT, "uc.stack.sp": UC_STACK, "uc.stack.flags": UC_STACK + 8,
           "uc.stack.size": UC_STACK + 16, "frame.uc": SIGNAL_FRAMESIZE, "frame.info": SIGNAL_FRAMESIZE + INFO,
           "frame.size": RT_SIGFRAME_SIZE}
    for name, off in (("signal", SC_SIGNAL), ("handler", SC_HANDLER), ("oldmask", SC_OLDMASK), ("regs", SC_REGS),
                      ("gp_regs", SC_GP_REGS), ("fp_regs", SC_FP_REGS), ("v_regs", SC_V_REGS),
                      ("vmx_reserve", SC_VMX)):
        out[f"mc.{name}"] = UC_MCONTEXT + off
    return out
