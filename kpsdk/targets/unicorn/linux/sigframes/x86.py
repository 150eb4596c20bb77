"""x86_64 and i386 signal frames, as a 64-bit Linux kernel builds them.

Sources: arch/x86/kernel/signal.c (``get_sigframe``, ``handle_signal``),
arch/x86/kernel/signal_64.c (``x64_setup_rt_frame``, ``sys_rt_sigreturn``),
arch/x86/kernel/signal_32.c (``ia32_setup_frame``, ``ia32_setup_rt_frame``,
``sys_sigreturn``), arch/x86/include/asm/sigframe.h (``rt_sigframe``,
``sigframe_ia32``, ``rt_sigframe_ia32``), arch/x86/include/uapi/asm/sigcontext.h
(``sigcontext_64``, ``sigcontext_32``, ``_fpstate_32``, ``_fpx_sw_bytes``) and
arch/x86/kernel/fpu/signal.c (``fpu__alloc_mathframe``, ``copy_fpstate_to_sigframe``,
``save_fsave_header``, ``save_xstate_epilog``, ``__fpu_restore_sig``).

The FP state is the XSAVE image of a CPU whose XCR0 enables x87 and SSE only (what
Unicorn's default x86 CPUs offer): 512 bytes of FXSAVE layout, the 64-byte XSAVE header,
``FP_XSTATE_MAGIC2`` after it, and the software bytes (``FP_XSTATE_MAGIC1``, sizes,
features) at byte 464, 580 bytes in all.  AVX and later components (YMM, AVX-512, PKRU)
are left out: a kernel on a CPU that has them makes the image larger (the frame moves
down by as much) and lists them in the software bytes.  i386 frames put the 112-byte
``fsave`` header the kernel converts from the FXSAVE image in front of it, encoded as a
64-bit kernel running a 32-bit process does (``convert_from_fxsr`` under
CONFIG_X86_64: ``cssel`` the task's cs, ``datasel`` its ds with the top half set).

A frame's XMM and x87 registers come from the :class:`~.base.FrameCpu` as ``xmm0``...,
``fp0``... (the eight physical x87 registers; ST(i) is ``fp((top + i) % 8)``),
``fpcw``, ``fpsw``, ``fptag`` (the full 16-bit tag word), ``fop``, ``fip``, ``fdp``,
``mxcsr``.
"""

from __future__ import annotations

from kpsdk.targets.unicorn.linux.sigframes.base import (
    SA_ONSTACK,
    SA_RESTORER,
    SA_SIGINFO,
    Delivery,
    FrameCpu,
    FrameReader,
    FrameWriter,
    bad_frame,
    on_sig_stack,
    read_stack_t,
    round_down,
    sas_ss_flags,
    save_altstack,
)

# eflags bits (arch/x86/include/uapi/asm/processor-flags.h)
X86_EFLAGS_CF, X86_EFLAGS_PF, X86_EFLAGS_AF, X86_EFLAGS_ZF, X86_EFLAGS_SF = 0x1, 0x4, 0x10, 0x40, 0x80
X86_EFLAGS_TF, X86_EFLAGS_DF, X86_EFLAGS_OF, X86_EFLAGS_RF, X86_EFLAGS_AC = 0x100, 0x400, 0x800, 0x10000, 0x40000
#: the flags sigreturn takes from the frame (arch/x86/kernel/signal_{64,32}.c FIX_EFLAGS)
FIX_EFLAGS = (X86_EFLAGS_AC | X86_EFLAGS_OF | X86_EFLAGS_DF | X86_EFLAGS_TF | X86_EFLAGS_SF | X86_EFLAGS_ZF
              | X86_EFLAGS_AF | X86_EFLAGS_PF | X86_EFLAGS_CF | X86_EFLAGS_RF)

# uc_flags (arch/x86/include/uapi/asm/ucontext.h)
UC_FP_XSTATE, UC_SIGCONTEXT_SS, UC_STRICT_RESTORE_SS = 0x1, 0x2, 0x4

# the FP image (arch/x86/include/uapi/asm/sigcontext.h, arch/x86/include/asm/fpu/types.h)
FP_XSTATE_MAGIC1 = 0x46505853
FP_XSTATE_MAGIC2 = 0x46505845
FXSAVE_SIZE = 512
XSAVE_HDR_SIZE = 64
XFEATURE_MASK_FPSSE = 0x3
#: the XSAVE user image with XCR0 = x87 | SSE (fpstate->user_size)
XSTATE_USER_SIZE = FXSAVE_SIZE + XSAVE_HDR_SIZE
#: what fpu__alloc_mathframe reserves: the image and MAGIC2 (xstate_sigframe_size)
XSTATE_SIGFRAME_SIZE = XSTATE_USER_SIZE + 4
#: ``struct fregs_state``: the i386 frame's fsave header in front of the image
FSAVE_HEADER_SIZE = 112
SW_BYTES = 464  #: offset of ``struct _fpx_sw_bytes`` in the FXSAVE image
#: MXCSR bits a CPU without DAZ accepts (QEMU's and so Unicorn's FXSAVE report 0xffff);
#: sigreturn refuses a frame with others set (``mxcsr_feature_mask``)
MXCSR_MASK = 0xFFFF
MXCSR_DEFAULT = 0x1F80  #: the SSE state a handler starts with (init_fpstate)
FPCW_DEFAULT = 0x037F   #: the x87 control word after fninit (init_fpstate)

# x86_64 (arch/x86/include/asm/sigframe.h, include/uapi/asm-generic/ucontext.h)
RT_SIGFRAME_64 = 440  #: pretcode, struct ucontext (304), struct siginfo (128)
UC_64 = 8
INFO_64 = 312
SC_64 = UC_64 + 40  #: uc_mcontext
SIGMASK_64 = UC_64 + 296
#: ``struct sigcontext_64`` from r8 to eflags, one 8-byte slot each
SC64_REGS = ("r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp", "rbx", "rdx", "rax",
             "rcx", "rsp", "rip", "eflags")
SC64_CS, SC64_GS, SC64_FS, SC64_SS = 144, 146, 148, 150
SC64_ERR, SC64_TRAPNO, SC64_OLDMASK, SC64_CR2, SC64_FPSTATE = 152, 160, 168, 176, 184
RED_ZONE_64 = 128

# i386 (struct sigframe_ia32, struct rt_sigframe_ia32, struct ucontext_ia32)
SIGFRAME_32 = 732     #: pretcode, sig, sigcontext (88), unused _fpstate_32 (624), extramask, retcode[8]
RT_SIGFRAME_32 = 268  #: pretcode, sig, pinfo, puc, siginfo (128), ucontext_ia32 (116), retcode[8]
SC_32_OLD = 8
EXTRAMASK_32 = 720
RETCODE_32_OLD = 724
INFO_32, UC_32 = 16, 144
SC_32_RT = UC_32 + 20
SIGMASK_32 = UC_32 + 108
RETCODE_32_RT = 260
#: ``struct sigcontext_32``, one 4-byte slot each (segment registers zero-extended)
SC32_REGS = ("gs", "fs", "es", "ds", "edi", "esi", "ebp", "esp", "ebx", "edx", "ecx", "eax", "trapno", "err",
             "eip", "cs", "eflags", "esp_at_signal", "ss", "fpstate", "oldmask", "cr2")
#: the historical return code the kernel still stores in i386 frames (gdb recognises frames by it):
#: ``popl %eax; movl $__NR_sigreturn, %eax; int $0x80`` and ``movl $__NR_rt_sigreturn, %eax; int $0x80``
RETCODE_32 = bytes.fromhex("58b877000000cd80")
RT_RETCODE_32 = bytes.fromhex("b8ad000000cd8000")
#: what :func:`trampoline` returns for i386: the vDSO's ``__kernel_sigreturn`` at 0 and
#: ``__kernel_rt_sigreturn`` at 8 (arch/x86/entry/vdso/vdso32/sigreturn.S)
TRAMPOLINE_32 = RETCODE_32 + bytes.fromhex("b8ad000000cd8090")
RT_TRAMPOLINE_OFFSET_32 = 8

_M64 = (1 << 64) - 1
_M32 = 0xFFFFFFFF


def trampoline(arch: str) -> bytes:
    """The sigreturn code kpsdk's frames return through when there is no SA_RESTORER:
    i386's vDSO pair; none on x86_64, where Linux requires SA_RESTORER."""
    return TRAMPOLINE_32 if arch == "i386" else b""


# -- x87 and SSE -------------------------------------------------------------------------

def tag_class(value: int) -> int:
    """The x87 tag (00 valid, 01 zero, 10 special) of a non-empty register's 80-bit value,
    as FSTENV and the kernel's ``twd_fxsr_to_i387`` derive it."""
    exponent, significand = (value >> 64) & 0x7FFF, value & _M64
    if exponent == 0x7FFF:
        return 2
    if exponent == 0:
        return 1 if significand == 0 else 2
    return 0 if significand >> 63 else 2


def full_tag(abridged: int, physical: list[int]) -> int:
    """The 16-bit tag word from FXSAVE's abridged one (bit i: physical register i is not
    empty) and the registers' values."""
    tag = 0
    for i in range(8):
        tag |= (tag_class(physical[i]) if abridged >> i & 1 else 3) << 2 * i
    return tag


def abridged_tag(tag: int) -> int:
    return sum(1 << i for i in range(8) if (tag >> 2 * i) & 3 != 3)


def _physical(cpu: FrameCpu) -> list[int]:
    return [cpu.reg(f"fp{i}") for i in range(8)]


def _put_fxsave(w: FrameWriter, at: int, cpu: FrameCpu, nxmm: int) -> None:
    """The FXSAVE legacy image (REX.W form: 64-bit FIP and FDP, and 16 XMM slots, which a
    64-bit kernel writes for 32-bit tasks too, xmm8-15 zero) from the CPU, bytes 0-415;
    416-463 are left alone as XSAVE leaves them."""
    fsw = cpu.reg("fpsw") & 0xFFFF
    top = (fsw >> 11) & 7
    phys = _physical(cpu)
    w.put(at, "HHBBH", cpu.reg("fpcw") & 0xFFFF, fsw, abridged_tag(cpu.reg("fptag")), 0, cpu.reg("fop") & 0x7FF)
    w.put(at + 8, "QQII", cpu.reg("fip") & _M64, cpu.reg("fdp") & _M64, cpu.reg("mxcsr") & _M32, MXCSR_MASK)
    for i in range(8):
        v = phys[(top + i) & 7]
        w.put(at + 32 + 16 * i, "QHHI", v & _M64, (v >> 64) & 0xFFFF, 0, 0)
    for i in range(16):
        v = cpu.reg(f"xmm{i}") if i < nxmm else 0
        w.put(at + 160 + 16 * i, "QQ", v & _M64, (v >> 64) & _M64)


def _put_xstate(w: FrameWriter, at: int, cpu: FrameCpu, nxmm: int, ia32: bool) -> None:
    """The XSAVE image at ``at`` (64-byte aligned) with the software bytes and MAGIC2
    (``copy_fpstate_to_sigframe`` + ``save_xstate_epilog``)."""
    _put_fxsave(w, at, cpu, nxmm)
    extended = XSTATE_SIGFRAME_SIZE + (FSAVE_HEADER_SIZE if ia32 else 0)
    w.put(at + SW_BYTES, "IIQI28x", FP_XSTATE_MAGIC1, extended, XFEATURE_MASK_FPSSE, XSTATE_USER_SIZE)
    # the header is cleared first; xstate_bv always has FP and SSE (the kernel's comment:
    # legacy programs that edit the FXSAVE part see their changes restored)
    w.put(at + FXSAVE_SIZE, "QQ48x", XFEATURE_MASK_FPSSE, 0)
    w.put(at + XSTATE_USER_SIZE, "I", FP_XSTATE_MAGIC2)


def _put_fsave_header(w: FrameWriter, at: int, cpu: FrameCpu) -> None:
    """``save_fsave_header``: ``struct user_i387_ia32_struct`` from the FXSAVE state
    (``convert_from_fxsr``, the CONFIG_X86_64 flavour), then ``status`` and the
    ``X86_FXSR_MAGIC`` (0) that says an FXSAVE image follows."""
    fsw = cpu.reg("fpsw") & 0xFFFF
    top = (fsw >> 11) & 7
    phys = _physical(cpu)
    w.put(at, "7I", (cpu.reg("fpcw") & 0xFFFF) | 0xFFFF0000, fsw | 0xFFFF0000,
          full_tag(abridged_tag(cpu.reg("fptag")), phys) | 0xFFFF0000, cpu.reg("fip") & _M32,
          cpu.reg("cs") & 0xFFFF, cpu.reg("fdp") & _M32, (cpu.reg("ds") & 0xFFFF) | 0xFFFF0000)
    for i in range(8):
        v = phys[(top + i) & 7]
        w.put(at + 28 + 10 * i, "QH", v & _M64, (v >> 64) & 0xFFFF)
    w.put(at + 108, "HH", fsw, 0)


def _init_fpu(cpu: FrameCpu, nxmm: int) -> None:
    """``fpu__clear_user_states``: a handler starts with the FPU as ``fninit`` and a reset
    MXCSR leave it, the XMM registers zero."""
    for name, value in (("fpcw", FPCW_DEFAULT), ("fpsw", 0), ("fptag", 0xFFFF), ("fop", 0), ("fip", 0),
                        ("fdp", 0), ("mxcsr", MXCSR_DEFAULT)):
        cpu.set_reg(name, value)
    for i in range(8):
        cpu.set_reg(f"fp{i}", 0)
    for i in range(nxmm):
        cpu.set_reg(f"xmm{i}", 0)


def _restore_fxsave(cpu: FrameCpu, arch: str, r: FrameReader, at: int, nxmm: int,
                    x87_from: tuple[int, int, int, int, int, int, list[int]] | None) -> None:
    """Load the FXSAVE/XSAVE image at ``at`` (``__fpu_restore_sig``).  Components the
    header's ``xstate_bv`` leaves out go to their init state, as XRSTOR does; an image
    whose software bytes do not check out is restored as plain FXSAVE (``fx_only``).
    ``x87_from`` replaces the x87 part (i386: the fsave header, ``convert_to_fxsr``)."""
    magic1, extended, _features, xsize = r.get(at + SW_BYTES, "IIQI")
    bv = XFEATURE_MASK_FPSSE
    # check_xstate_in_sigframe: the only image size this CPU's features allow is 576
    if magic1 == FP_XSTATE_MAGIC1 and xsize == XSTATE_USER_SIZE <= extended \
            and r.one(at + xsize, "I") == FP_XSTATE_MAGIC2:
        bv = r.one(at + FXSAVE_SIZE, "Q")
    mxcsr = r.one(at + 24, "I")
    if mxcsr & ~MXCSR_MASK:
        raise bad_frame(arch, r.base, f"MXCSR {mxcsr:#x} has bits the CPU does not have")
    if x87_from is None:
        fcw, fsw, ftw, fop = r.get(at, "HHBxH")
        fip, fdp = r.get(at + 8, "QQ")
        top = (fsw >> 11) & 7
        st = [r.one(at + 32 + 16 * i, "Q") | r.one(at + 40 + 16 * i, "H") << 64 for i in range(8)]
    else:
        fcw, fsw, ftw, fop, fip, fdp, st = x87_from
        top = (fsw >> 11) & 7
    if bv & 1:
        phys = [st[(i - top) & 7] for i in range(8)]
        for name, value in (("fpcw", fcw), ("fpsw", fsw), ("fop", fop), ("fip", fip), ("fdp", fdp)):
            cpu.set_reg(name, value)
        for i in range(8):
            cpu.set_reg(f"fp{i}", phys[i])
        cpu.set_reg("fptag", full_tag(ftw, phys))
    else:
        for name, value in (("fpcw", FPCW_DEFAULT), ("fpsw", 0), ("fptag", 0xFFFF), ("fop", 0), ("fip", 0),
                            ("fdp", 0)):
            cpu.set_reg(name, value)
        for i in range(8):
            cpu.set_reg(f"fp{i}", 0)
    cpu.set_reg("mxcsr", mxcsr)
    for i in range(nxmm):
        lo, hi = r.get(at + 160 + 16 * i, "QQ") if bv & 2 else (0, 0)
        cpu.set_reg(f"xmm{i}", lo | hi << 64)


def _set_if_changed(cpu: FrameCpu, name: str, value: int, rpl: int = 0) -> None:
    """Segment registers: Linux reloads them from the frame (cs and ss forced to RPL 3);
    kpsdk writes one only when the handler changed it, since Unicorn re-reads a
    descriptor on every segment write and its flat segments need not have RPL 3."""
    if (cpu.reg(name) | rpl) != (value | rpl):
        cpu.set_reg(name, value | rpl)


# -- x86_64 --------------------------------------------------------------------------------

def push_x86_64(cpu: FrameCpu, d: Delivery) -> None:
    """``x64_setup_rt_frame``: always an rt frame, always through SA_RESTORER."""
    sp = cpu.reg("rsp")
    alt = d.altstack
    onstack = on_sig_stack(alt, sp)
    sp -= RED_ZONE_64
    if d.flags & SA_ONSTACK and sas_ss_flags(alt, sp) == 0:
        sp = alt.sp + alt.size
    fpstate = round_down(sp - XSTATE_SIGFRAME_SIZE, 64)
    frame = round_down(fpstate - RT_SIGFRAME_64, 16) - 8
    if onstack and not on_sig_stack(alt, frame):
        raise bad_frame("x86_64", frame, "the frame would overflow the alternate signal stack")
    if not d.flags & SA_RESTORER:
        raise bad_frame("x86_64", frame, "x86_64 delivers only to handlers with SA_RESTORER")
    w = FrameWriter(frame, fpstate + XSTATE_SIGFRAME_SIZE - frame, "<", 8)
    _put_xstate(w, fpstate - frame, cpu, 16, ia32=False)
    if d.flags & SA_SIGINFO:
        w.raw(INFO_64, d.info)
    w.put(UC_64, "QQ", UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS, 0)
    save_altstack(w, UC_64 + 16, alt)
    w.put(0, "Q", d.restorer)
    w.words(SC_64, [cpu.reg(n) for n in SC64_REGS])
    w.put(SC_64 + SC64_CS, "HHHH", cpu.reg("cs") & 0xFFFF, 0, 0, cpu.reg("ss") & 0xFFFF)
    w.put(SC_64 + SC64_ERR, "QQQQQ", d.fault.error, d.fault.trapno, d.blocked & _M64, d.fault.address,
          fpstate)
    w.put(SIGMASK_64, "Q", d.blocked & _M64)
    w.flush(cpu.write)

    cpu.set_reg("rdi", d.sig)
    cpu.set_reg("rax", 0)
    cpu.set_reg("rsi", frame + INFO_64)
    cpu.set_reg("rdx", frame + UC_64)
    cpu.set_reg("rip", d.handler)
    cpu.set_reg("rsp", frame)
    cpu.set_reg("eflags", cpu.reg("eflags") & ~(X86_EFLAGS_DF | X86_EFLAGS_RF | X86_EFLAGS_TF))
    _init_fpu(cpu, 16)


def pop_x86_64(cpu: FrameCpu, rt: bool) -> int:
    """``sys_rt_sigreturn``: the frame is below the stack pointer by the popped pretcode."""
    frame = cpu.reg("rsp") - 8
    r = FrameReader(frame, cpu.read(frame, RT_SIGFRAME_64), "<", 8)
    mask = r.one(SIGMASK_64, "Q")
    values = r.get(SC_64, "18Q")
    regs = dict(zip(SC64_REGS, values, strict=True))
    flags = regs.pop("eflags")
    for name, value in regs.items():
        cpu.set_reg(name, value)
    cpu.set_reg("eflags", (cpu.reg("eflags") & ~FIX_EFLAGS) | (flags & FIX_EFLAGS))
    cs, _gs, _fs, ss = r.get(SC_64 + SC64_CS, "HHHH")
    _set_if_changed(cpu, "cs", cs, 3)
    _set_if_changed(cpu, "ss", ss, 3)
    fpstate = r.one(SC_64 + SC64_FPSTATE, "Q")
    if not fpstate:
        _init_fpu(cpu, 16)
    else:
        image = FrameReader(fpstate, cpu.read(fpstate, XSTATE_SIGFRAME_SIZE), "<", 8)
        _restore_fxsave(cpu, "x86_64", image, 0, 16, None)
    return mask


def altstack_x86_64(cpu: FrameCpu, rt: bool) -> tuple[int, int, int]:
    frame = cpu.reg("rsp") - 8
    alt = read_stack_t(FrameReader(frame, cpu.read(frame, RT_SIGFRAME_64), "<", 8), UC_64 + 16, 8)
    return alt.sp, alt.size, alt.flags


# -- i386 -------------------------------------------------------------------------------------

def _sigcontext_32(cpu: FrameCpu, d: Delivery, fpstate: int) -> list[int]:
    """``unsafe_put_sigcontext32``: the 22 slots of ``struct sigcontext_32``."""
    values = {n: cpu.reg(n) for n in ("gs", "fs", "es", "ds", "edi", "esi", "ebp", "esp", "ebx", "edx",
                                     "ecx", "eax", "eip", "cs", "eflags", "ss")}
    values.update(trapno=d.fault.trapno, err=d.fault.error, esp_at_signal=values["esp"], fpstate=fpstate,
                  oldmask=d.blocked & _M32, cr2=d.fault.address)
    for seg in ("gs", "fs", "es", "ds", "cs", "ss"):
        values[seg] &= 0xFFFF
    return [values[n] & _M32 for n in SC32_REGS]


def push_i386(cpu: FrameCpu, d: Delivery) -> None:
    """``ia32_setup_rt_frame`` with SA_SIGINFO, else ``ia32_setup_frame``."""
    rt = bool(d.flags & SA_SIGINFO)
    sp = cpu.reg("esp")
    alt = d.altstack
    onstack = on_sig_stack(alt, sp)
    if d.flags & SA_ONSTACK and sas_ss_flags(alt, sp) == 0:
        sp = alt.sp + alt.size
    buf_fx = round_down(sp - XSTATE_SIGFRAME_SIZE, 64)
    fpstate = buf_fx - FSAVE_HEADER_SIZE
    size = RT_SIGFRAME_32 if rt else SIGFRAME_32
    frame = ((fpstate - size + 4) & -16) - 4
    if onstack and not on_sig_stack(alt, frame):
        raise bad_frame("i386", frame, "the frame would overflow the alternate signal stack")
    w = FrameWriter(frame, buf_fx + XSTATE_SIGFRAME_SIZE - frame, "<", 4)
    _put_xstate(w, buf_fx - frame, cpu, 8, ia32=True)
    _put_fsave_header(w, fpstate - frame, cpu)
    if d.flags & SA_RESTORER:
        restorer = d.restorer
    else:
        restorer = d.sigreturn_code_addr + (RT_TRAMPOLINE_OFFSET_32 if rt else 0)
    sc = _sigcontext_32(cpu, d, fpstate)
    if rt:
        w.put(0, "IiII", restorer & _M32, d.sig, frame + INFO_32, frame + UC_32)
        w.put(UC_32, "II", UC_FP_XSTATE, 0)
        save_altstack(w, UC_32 + 8, alt)
        w.raw(RETCODE_32_RT, RT_RETCODE_32)
        w.words(SC_32_RT, sc)
        w.put(SIGMASK_32, "Q", d.blocked & _M64)
        w.raw(INFO_32, d.info)
    else:
        w.put(0, "Ii", restorer & _M32, d.sig)
        w.words(SC_32_OLD, sc)
        w.put(EXTRAMASK_32, "I", (d.blocked >> 32) & _M32)
        w.raw(RETCODE_32_OLD, RETCODE_32)
    w.flush(cpu.write)

    cpu.set_reg("esp", frame)
    cpu.set_reg("eip", d.handler)
    cpu.set_reg("eax", d.sig)  # -mregparm=3 handlers take their arguments in eax, edx, ecx
    cpu.set_reg("edx", frame + INFO_32 if rt else 0)
    cpu.set_reg("ecx", frame + UC_32 if rt else 0)
    cpu.set_reg("eflags", cpu.reg("eflags") & ~(X86_EFLAGS_DF | X86_EFLAGS_RF | X86_EFLAGS_TF))
    _init_fpu(cpu, 8)


def pop_i386(cpu: FrameCpu, rt: bool) -> int:
    """``sys_rt_sigreturn`` (the frame 4 bytes below sp: the restorer's ``ret`` popped
    pretcode) or ``sys_sigreturn`` (8: its ``popl %eax`` took the signal number too)."""
    frame = cpu.reg("esp") - (4 if rt else 8)
    size = RT_SIGFRAME_32 if rt else SIGFRAME_32
    r = FrameReader(frame, cpu.read(frame, size), "<", 4)
    if rt:
        sc_at = SC_32_RT
        mask = r.one(SIGMASK_32, "Q")
    else:
        sc_at = SC_32_OLD
        mask = r.one(SC_32_OLD + 4 * SC32_REGS.index("oldmask"), "I") | r.one(EXTRAMASK_32, "I") << 32
    regs = dict(zip(SC32_REGS, r.get(sc_at, "22I"), strict=True))
    for seg in ("gs", "fs", "es", "ds"):
        _set_if_changed(cpu, seg, regs[seg] & 0xFFFF)
    for name in ("edi", "esi", "ebp", "esp", "ebx", "edx", "ecx", "eip", "eax"):
        cpu.set_reg(name, regs[name])
    _set_if_changed(cpu, "cs", regs["cs"] & 0xFFFF, 3)
    _set_if_changed(cpu, "ss", regs["ss"] & 0xFFFF, 3)
    cpu.set_reg("eflags", (cpu.reg("eflags") & ~FIX_EFLAGS) | (regs["eflags"] & FIX_EFLAGS))
    fpstate = regs["fpstate"]
    if not fpstate:
        _init_fpu(cpu, 8)
        return mask
    image = FrameReader(fpstate, cpu.read(fpstate, FSAVE_HEADER_SIZE + XSTATE_SIGFRAME_SIZE), "<", 4)
    cwd, swd, twd, fip, fcs, foo, _fos = image.get(0, "7I")
    st = [image.one(28 + 10 * i, "Q") | image.one(36 + 10 * i, "H") << 64 for i in range(8)]
    # convert_to_fxsr: the fsave header's x87 state wins over the FXSAVE copy
    x87 = (cwd & 0xFFFF, swd & 0xFFFF, abridged_tag(twd), fcs >> 16, fip, foo, st)
    _restore_fxsave(cpu, "i386", image, FSAVE_HEADER_SIZE, 8, x87)
    return mask


def altstack_i386(cpu: FrameCpu, rt: bool) -> tuple[int, int, int]:
    if not rt:
        raise bad_frame("i386", cpu.reg("esp") - 8, "the old (non-rt) frame has no stack_t")
    frame = cpu.reg("esp") - 4
    alt = read_stack_t(FrameReader(frame, cpu.read(frame, RT_SIGFRAME_32), "<", 4), UC_32 + 8, 4)
    return alt.sp, alt.size, alt.flags


def layout_x86_64() -> dict[str, int]:
    """Offsets from the ucontext (``uc_*``, ``reg.*``) and from the handler's sp (``frame.*``)."""
    out = {"uc.flags": 0, "uc_link": 8, "uc_stack": 16, "uc_mcontext": 40, "uc_sigmask": 296,
           "uc.stack.sp": 16, "uc.stack.flags": 24, "uc.stack.size": 32, "frame.uc": UC_64,
           "frame.info": INFO_64, "frame.size": RT_SIGFRAME_64}
    for i, name in enumerate(SC64_REGS):
        out[f"reg.{name}"] = 40 + 8 * i
    out.update({"reg.cs": 40 + SC64_CS, "reg.gs": 40 + SC64_GS, "reg.fs": 40 + SC64_FS, "reg.ss": 40 + SC64_SS,
                "reg.err": 40 + SC64_ERR, "reg.trapno": 40 + SC64_TRAPNO, "reg.oldmask": 40 + SC64_OLDMASK,
                "reg.cr2": 40 + SC64_CR2, "reg.fpstate": 40 + SC64_FPSTATE,
                "fx.cwd": 0, "fx.mxcsr": 24, "fx.st": 32, "fx.xmm": 160, "fx.sw_bytes": SW_BYTES})
    return out


def layout_i386() -> dict[str, int]:
    out = {"uc.flags": 0, "uc_link": 4, "uc_stack": 8, "uc_mcontext": 20, "uc_sigmask": 108,
           "uc.stack.sp": 8, "uc.stack.flags": 12, "uc.stack.size": 16, "frame.uc": UC_32,
           "frame.info": INFO_32, "frame.size": RT_SIGFRAME_32, "frame.sigcontext_old": SC_32_OLD,
           "frame.size_old": SIGFRAME_32, "frame.extramask": EXTRAMASK_32,
           "fp.status": 108, "fp.magic": 110, "fp.fxsr": FSAVE_HEADER_SIZE, "fp.mxcsr": FSAVE_HEADER_SIZE + 24,
           "fp.xmm": FSAVE_HEADER_SIZE + 160}
    for i, name in enumerate(SC32_REGS):
        out[f"reg.{name}"] = 20 + 4 * i
    return out
