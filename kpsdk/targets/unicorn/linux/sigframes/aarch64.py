"""aarch64 signal frames (always rt).

Sources: arch/arm64/kernel/signal.c (``struct rt_sigframe``: siginfo then ucontext;
``init_user_layout``, ``setup_sigframe_layout``, ``sigframe_alloc_end``, ``get_sigframe``,
``setup_sigframe``, ``setup_return``, ``setup_rt_frame``, ``parse_user_sigframe``,
``restore_sigframe``, ``sys_rt_sigreturn``), arch/arm64/include/uapi/asm/ucontext.h and
sigcontext.h (``struct sigcontext`` with its 4 KiB ``__reserved`` area of records:
``fpsimd_context``, ``esr_context``, the null terminator) and
arch/arm64/kernel/vdso/sigreturn.S.

The records are the ones Linux writes on a CPU with FP/SIMD and without SVE, SME, GCS,
FPMR or POE (Unicorn's CPU): ``fpsimd_context`` (v0-v31, FPSR, FPCR), an
``esr_context`` when the task has a fault code (``FaultContext.error``), the terminator.
A ``frame_record`` (x29, x30) sits above the frame for unwinders, and the handler's x29
points at it.  The CPU runs in Unicorn's EL1, where Linux runs a task at EL0: the PSTATE
saved in a frame says EL0t with D, A, I and F clear, and a return keeps the emulator's
mode and mask bits.  The arch has no kpsdk backend yet: the register names are ``x0``-
``x30``, ``sp``, ``pc``, ``pstate``, ``v0``-``v31``, ``fpsr``, ``fpcr``.
"""

from __future__ import annotations

import struct

from kpsdk.targets.unicorn.linux.sigframes.base import (
    SA_RESTORER,
    SA_SIGINFO,
    Delivery,
    FrameCpu,
    FrameReader,
    FrameWriter,
    bad_frame,
    read_stack_t,
    round_down,
    save_altstack,
    sigsp,
)

INFO, UC = 0, 128
UC_FLAGS, UC_LINK, UC_STACK, UC_SIGMASK, UC_MCONTEXT = 0, 8, 16, 40, 176
SC_FAULT_ADDRESS, SC_REGS, SC_SP, SC_PC, SC_PSTATE, SC_RESERVED = 0, 8, 256, 264, 272, 288
RESERVED_SIZE = 4096
RT_SIGFRAME_SIZE = UC + UC_MCONTEXT + SC_RESERVED + RESERVED_SIZE  #: 4688
FRAME_RECORD_SIZE = 16
# records (arch/arm64/include/uapi/asm/sigcontext.h)
FPSIMD_MAGIC, FPSIMD_SIZE = 0x46508001, 528
ESR_MAGIC, ESR_SIZE = 0x45535201, 16
TERMINATOR_SIZE = 16
# PSTATE bits (arch/arm64/include/uapi/asm/ptrace.h)
PSR_MODE_MASK, PSR_MODE32_BIT = 0xF, 0x10
PSR_F_BIT, PSR_I_BIT, PSR_A_BIT, PSR_D_BIT = 0x40, 0x80, 0x100, 0x200
PSR_TCO_BIT = 1 << 25
_PRIVILEGED = PSR_MODE_MASK | PSR_MODE32_BIT | PSR_F_BIT | PSR_I_BIT | PSR_A_BIT | PSR_D_BIT
_NR_RT_SIGRETURN = 139
#: ``mov x8, #__NR_rt_sigreturn; svc #0`` (the vDSO's ``__kernel_rt_sigreturn``)
TRAMPOLINE = struct.pack("<II", 0xD2800008 | _NR_RT_SIGRETURN << 5, 0xD4000001)
_M64 = (1 << 64) - 1


def trampoline(arch: str) -> bytes:
    return TRAMPOLINE


def _records(d: Delivery) -> tuple[int, int | None, int]:
    """``setup_sigframe_layout``: offsets in ``__reserved`` of the FP/SIMD record, the ESR
    record (None without a fault code) and the terminator."""
    esr = FPSIMD_SIZE if d.fault.error else None
    end = FPSIMD_SIZE + (ESR_SIZE if esr is not None else 0)
    return 0, esr, end


def push_aarch64(cpu: FrameCpu, d: Delivery) -> None:
    """``setup_rt_frame``: the frame record, then the frame 16-byte aligned below it."""
    top = sigsp(cpu.reg("sp"), d.flags, d.altstack)
    record = round_down(top - FRAME_RECORD_SIZE, 16)
    frame = record - RT_SIGFRAME_SIZE
    w = FrameWriter(frame, record + FRAME_RECORD_SIZE - frame, "<", 8)
    w.put(record - frame, "QQ", cpu.reg("x29"), cpu.reg("x30"))
    w.put(UC + UC_FLAGS, "QQ", 0, 0)
    save_altstack(w, UC + UC_STACK, d.altstack)
    sc = UC + UC_MCONTEXT
    w.words(sc + SC_REGS, [cpu.reg(f"x{i}") for i in range(31)])
    pstate = (cpu.reg("pstate") & ~_PRIVILEGED) & 0xFFFFFFFF
    w.put(sc + SC_SP, "QQQ", cpu.reg("sp"), cpu.reg("pc"), pstate)
    w.put(sc + SC_FAULT_ADDRESS, "Q", d.fault.address & _M64)
    w.put(UC + UC_SIGMASK, "Q", d.blocked & _M64)
    fpsimd, esr, end = _records(d)
    base = sc + SC_RESERVED
    w.put(base + fpsimd, "IIII", FPSIMD_MAGIC, FPSIMD_SIZE, cpu.reg("fpsr") & 0xFFFFFFFF,
          cpu.reg("fpcr") & 0xFFFFFFFF)
    for i in range(32):
        v = cpu.reg(f"v{i}")
        w.put(base + fpsimd + 16 + 16 * i, "QQ", v & _M64, (v >> 64) & _M64)
    if esr is not None:
        w.put(base + esr, "IIQ", ESR_MAGIC, ESR_SIZE, d.fault.error & _M64)
    w.put(base + end, "II", 0, 0)
    if d.flags & SA_SIGINFO:
        w.raw(INFO, d.info)
    w.flush(cpu.write)

    cpu.set_reg("x0", d.sig)
    if d.flags & SA_SIGINFO:
        cpu.set_reg("x1", frame + INFO)
        cpu.set_reg("x2", frame + UC)
    cpu.set_reg("sp", frame)
    cpu.set_reg("x29", record)
    cpu.set_reg("x30", d.restorer if d.flags & SA_RESTORER else d.sigreturn_code_addr)
    cpu.set_reg("pc", d.handler)
    cpu.set_reg("pstate", cpu.reg("pstate") & ~PSR_TCO_BIT)  # no BTI on the emulated CPU: BTYPE stays


def pop_aarch64(cpu: FrameCpu, rt: bool) -> int:
    """``sys_rt_sigreturn``: the frame at sp (16-byte aligned), its records parsed as
    ``parse_user_sigframe`` does."""
    frame = cpu.reg("sp")
    if frame & 15:
        raise bad_frame("aarch64", frame, "the stack pointer is not 16-byte aligned")
    r = FrameReader(frame, cpu.read(frame, RT_SIGFRAME_SIZE), "<", 8)
    sc = UC + UC_MCONTEXT
    pstate = r.one(sc + SC_PSTATE)
    if pstate & _PRIVILEGED:  # valid_user_regs: EL0t, AArch64, D A I F clear
        raise bad_frame("aarch64", frame, f"PSTATE {pstate:#x} is not EL0t's")
    fpsimd = _parse_records(r, sc + SC_RESERVED)
    mask = r.one(UC + UC_SIGMASK)
    for i, value in enumerate(r.get(sc + SC_REGS, "31Q")):
        cpu.set_reg(f"x{i}", value)
    sp, pc = r.get(sc + SC_SP, "QQ")
    cpu.set_reg("sp", sp)
    cpu.set_reg("pc", pc)
    cpu.set_reg("pstate", (pstate & ~_PRIVILEGED) | (cpu.reg("pstate") & _PRIVILEGED))
    fpsr, fpcr = r.get(fpsimd + 8, "II")
    cpu.set_reg("fpsr", fpsr)
    cpu.set_reg("fpcr", fpcr)
    for i in range(32):
        lo, hi = r.get(fpsimd + 16 + 16 * i, "QQ")
        cpu.set_reg(f"v{i}", lo | hi << 64)
    return mask


def _parse_records(r: FrameReader, base: int) -> int:
    """The FP/SIMD record's offset; any record this CPU cannot have (SVE, ZA, extra...) or a
    malformed chain makes the frame bad."""
    offset, fpsimd = 0, None
    while True:
        if RESERVED_SIZE - offset < 8 or offset % 16:
            raise bad_frame("aarch64", r.base, "the record chain runs out of __reserved")
        magic, size = r.get(base + offset, "II")
        if RESERVED_SIZE - offset < size:
            raise bad_frame("aarch64", r.base, f"record {magic:#x} is {size} bytes")
        if magic == 0:
            if size:
                raise bad_frame("aarch64", r.base, "a terminator with a size")
            break
        if magic == FPSIMD_MAGIC:
            if fpsimd is not None or size != FPSIMD_SIZE:
                raise bad_frame("aarch64", r.base, "a second or misshapen FP/SIMD record")
            fpsimd = base + offset
        elif magic != ESR_MAGIC:
            raise bad_frame("aarch64", r.base, f"record magic {magic:#x}")
        if size < 8:
            raise bad_frame("aarch64", r.base, f"record {magic:#x} is {size} bytes")
        offset += size
    if fpsimd is None:
        raise bad_frame("aarch64", r.base, "no FP/SIMD record")
    return fpsimd


def altstack_aarch64(cpu: FrameCpu, rt: bool) -> tuple[int, int, int]:
    frame = cpu.reg("sp")
    alt = read_stack_t(FrameReader(frame, cpu.read(frame, UC + UC_MCONTEXT), "<", 8), UC + UC_STACK, 8)
    return alt.sp, alt.size, alt.flags


def layout_aarch64() -> dict[str, int]:
    out = {"uc.flags": UC_FLAGS, "uc_link": UC_LINK, "uc_stack": UC_STACK, "uc_sigmask": UC_SIGMASK,
           "uc_mcontext": UC_MCONTEXT, "uc.stack.sp": UC_STACK, "uc.stack.flags": UC_STACK + 8,
           "uc.stack.size": UC_STACK + 16, "frame.info": INFO, "frame.uc": UC, "frame.size": RT_SIGFRAME_SIZE,
           "reg.fault_address": UC_MCONTEXT + SC_FAULT_ADDRESS, "reg.sp": UC_MCONTEXT + SC_SP,
           "reg.pc": UC_MCONTEXT + SC_PC, "reg.pstate": UC_MCONTEXT + SC_PSTATE,
           "mc.reserved": UC_MCONTEXT + SC_RESERVED}
    for i in range(31):
        out[f"reg.x{i}"] = UC_MCONTEXT + SC_REGS + 8 * i
    return out
