"""32-bit ARM (EABI, armhf; ARM and Thumb handlers) signal frames.

Sources: arch/arm/kernel/signal.c (``get_sigframe``, ``setup_sigframe``,
``setup_return``, ``setup_frame``, ``setup_rt_frame``, ``restore_sigframe``,
``sys_sigreturn``, ``sys_rt_sigreturn``), arch/arm/kernel/signal.h (``struct
sigframe``: the ucontext and ``retcode[4]``; ``struct rt_sigframe``: siginfo first),
arch/arm/include/asm/ucontext.h (``struct ucontext`` with ``uc_regspace``, ``struct
vfp_sigframe``, ``struct aux_sigframe``), arch/arm/include/uapi/asm/sigcontext.h and
arch/arm/vfp/vfpmodule.c (``vfp_preserve_user_clear_hwstate``,
``vfp_restore_user_hwstate``).

The old frame (no SA_SIGINFO) is the rt one without the siginfo: ``uc_flags`` is the
marker 0x5ac3c35a and ``uc_link``/``uc_stack`` are not written.  ``uc_regspace`` holds
the VFP record (magic 0x56465001, 288 bytes: d0-d31, FPSCR, FPEXC, FPINST, FPINST2)
and a zero end marker; no iWMMXt record (armhf kernels have no iWMMXt).  FPINST and FPINST2
are saved as 0: they hold something only after a VFP subarchitecture exception, which the
emulated VFP never raises (Unicorn 2 has no such registers).

The CPU runs in Unicorn's privileged mode, where Linux runs a task in USR mode: the CPSR
saved in a frame says USR with A, I and F clear, as a user task's does, and a return
keeps the emulator's mode and mask bits, taking the rest from the frame.
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
    save_altstack,
    sigsp,
)

# struct ucontext (arch/arm/include/asm/ucontext.h)
UC_FLAGS, UC_LINK, UC_STACK, UC_MCONTEXT, UC_SIGMASK, UC_REGSPACE = 0, 4, 8, 20, 104, 232
UCONTEXT_SIZE = 744
SIGFRAME_SIZE = UCONTEXT_SIZE + 16       #: struct sigframe: uc, retcode[4]
RT_SIGFRAME_SIZE = 128 + SIGFRAME_SIZE   #: struct rt_sigframe: info, struct sigframe
RETCODE = UCONTEXT_SIZE
#: the marker in an old frame's uc_flags: a value sc.trap_no never has (setup_frame)
OLD_FRAME_UC_FLAGS = 0x5AC3C35A
#: struct sigcontext, word by word
SC_REGS = ("trapno", "err", "oldmask", "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10",
           "r11", "r12", "sp", "lr", "pc", "cpsr", "fault_address")
SC_CORE = SC_REGS[3:20]
# struct vfp_sigframe (arch/arm/include/asm/ucontext.h)
VFP_MAGIC = 0x56465001
VFP_STORAGE_SIZE = 288
VFP_FPSCR, VFP_FPEXC = 8 + 256, 8 + 264
# CPSR and FPSCR bits (arch/arm/include/uapi/asm/ptrace.h, arch/arm/include/asm/vfp.h)
MODE_MASK, USR_MODE = 0x1F, 0x10
PSR_T_BIT, PSR_F_BIT, PSR_I_BIT, PSR_A_BIT, PSR_E_BIT = 0x20, 0x40, 0x80, 0x100, 0x200
PSR_F_FIELD = 0xFF000000  #: PSR_f: N Z C V Q, IT[1:0], J
PSR_IT_MASK = 0x0600FC00
_PRIVILEGED = MODE_MASK | PSR_A_BIT | PSR_I_BIT | PSR_F_BIT
FPSCR_LENGTH_MASK, FPSCR_STRIDE_MASK = 7 << 16, 3 << 20
FPEXC_EN, FPEXC_EX, FPEXC_FP2V = 1 << 30, 1 << 31, 1 << 28

# arch/arm/kernel/sigreturn_codes.S: an ARM slot (two words) at 12 * n, a Thumb slot (one
# word) 8 bytes after it; setup_return picks word (thumb << 1) + (3 if SA_SIGINFO) and adds
# the Thumb bit.  Linux's ARM slots call ``swi 0x900077``/``0x9000ad`` (the OABI number,
# so that OABI tasks work too); kpsdk's use ``svc 0`` with r7, the EABI call, which every
# EABI kernel takes alike.
_NR_SIGRETURN, _NR_RT_SIGRETURN = 119, 173
TRAMPOLINE = struct.pack("<IIHHIIHH", 0xE3A07000 | _NR_SIGRETURN, 0xEF000000, 0x2700 | _NR_SIGRETURN, 0xDF00,
                         0xE3A07000 | _NR_RT_SIGRETURN, 0xEF000000, 0x2700 | _NR_RT_SIGRETURN, 0xDF00)
_M32 = 0xFFFFFFFF


def trampoline(arch: str) -> bytes:
    return TRAMPOLINE


def _user_cpsr(cpsr: int) -> int:
    """The CPSR a user task has: the emulator's mode and mask bits replaced by USR's."""
    return (cpsr & ~_PRIVILEGED) | USR_MODE


def _put_sigframe(w: FrameWriter, at: int, cpu: FrameCpu, d: Delivery) -> None:
    """``setup_sigframe``: the sigcontext, the mask, the VFP record and the end marker."""
    values = {n: cpu.reg(n) for n in SC_CORE}
    values.update(trapno=d.fault.trapno, err=d.fault.error, oldmask=d.blocked & _M32,
                  fault_address=d.fault.address, pc=values["pc"] & ~1, cpsr=_user_cpsr(values["cpsr"]))
    w.words(at + UC_MCONTEXT, [values[n] & _M32 for n in SC_REGS])
    w.put(at + UC_SIGMASK, "Q", d.blocked & (1 << 64) - 1)
    # vfp_sigframe: memset to 0, so its padding is written too
    vfp = at + UC_REGSPACE
    w.put(vfp, "II", VFP_MAGIC, VFP_STORAGE_SIZE)
    w.put(vfp + 8, "32Q", *(cpu.reg(f"d{i}") & (1 << 64) - 1 for i in range(32)))
    w.put(vfp + VFP_FPSCR, "II", cpu.reg("fpscr") & _M32, 0)
    # FPINST and FPINST2 only mean something after a VFP subarchitecture exception (FPEXC.EX),
    # which the emulated VFP never raises: 0, as Linux saves them then
    w.put(vfp + VFP_FPEXC, "IIII", cpu.reg("fpexc") & _M32, 0, 0, 0)
    w.put(vfp + VFP_STORAGE_SIZE, "I", 0)  # aux_sigframe.end_magic


def push_arm(cpu: FrameCpu, d: Delivery) -> None:
    """``setup_rt_frame`` with SA_SIGINFO, else ``setup_frame``; then ``setup_return``."""
    rt = bool(d.flags & SA_SIGINFO)
    size = RT_SIGFRAME_SIZE if rt else SIGFRAME_SIZE
    frame = (sigsp(cpu.reg("sp"), d.flags, d.altstack) - size) & ~7  # ATPCS: 8-byte aligned
    sig_at = 128 if rt else 0
    w = FrameWriter(frame, size, "<", 4)
    if rt:
        w.raw(0, d.info)
        w.put(sig_at + UC_FLAGS, "II", 0, 0)
        save_altstack(w, sig_at + UC_STACK, d.altstack)
    else:
        w.put(UC_FLAGS, "I", OLD_FRAME_UC_FLAGS)
    _put_sigframe(w, sig_at, cpu, d)

    thumb = d.handler & 1
    cpsr = cpu.reg("cpsr") & ~(PSR_F_FIELD | PSR_E_BIT | PSR_IT_MASK | PSR_T_BIT)
    if thumb:
        cpsr |= PSR_T_BIT
    if d.flags & SA_RESTORER:
        retcode = d.restorer
    else:
        # the code goes into the frame too, "to remain ABI compliant", and the task
        # returns through the signal page (here: the caller's copy of TRAMPOLINE)
        idx = (thumb << 1) + (3 if rt else 0)
        w.raw(sig_at + RETCODE, TRAMPOLINE[4 * idx:4 * idx + 8].ljust(8, b"\0"))
        retcode = d.sigreturn_code_addr + (idx << 2) + thumb
    w.flush(cpu.write)

    cpu.set_reg("r0", d.sig)
    if rt:
        cpu.set_reg("r1", frame)
        cpu.set_reg("r2", frame + sig_at)
    cpu.set_reg("sp", frame)
    cpu.set_reg("lr", retcode)
    cpu.set_reg("cpsr", cpsr)
    cpu.set_reg("pc", d.handler)  # after cpsr: bit 0 selects Thumb, as Unicorn's PC takes it
    # vfp_preserve_user_clear_hwstate: a handler starts with FPSCR's LEN and STRIDE clear
    cpu.set_reg("fpscr", cpu.reg("fpscr") & ~(FPSCR_LENGTH_MASK | FPSCR_STRIDE_MASK))


def pop_arm(cpu: FrameCpu, rt: bool) -> int:
    """``sys_rt_sigreturn``/``sys_sigreturn``: ``restore_sigframe`` from the frame at sp."""
    frame = cpu.reg("sp")
    if frame & 7:
        raise bad_frame("arm", frame, "the stack pointer is not 8-byte aligned")
    at = 128 if rt else 0
    r = FrameReader(frame, cpu.read(frame, RT_SIGFRAME_SIZE if rt else SIGFRAME_SIZE), "<", 4)
    mask = r.one(at + UC_SIGMASK, "Q")
    regs = dict(zip(SC_REGS, r.get(at + UC_MCONTEXT, f"{len(SC_REGS)}I"), strict=True))
    cpsr = regs["cpsr"] & ~(PSR_F_BIT | PSR_A_BIT)
    if cpsr & PSR_I_BIT or cpsr & MODE_MASK != USR_MODE:  # valid_user_regs
        raise bad_frame("arm", frame, f"CPSR {regs['cpsr']:#x} is not a user mode's")
    vfp = at + UC_REGSPACE
    magic, size = r.get(vfp, "II")
    if magic != VFP_MAGIC or size != VFP_STORAGE_SIZE:
        raise bad_frame("arm", frame, f"VFP record magic {magic:#x} size {size}")
    for name in SC_CORE[:-2]:
        cpu.set_reg(name, regs[name])
    cpu.set_reg("cpsr", (cpsr & ~_PRIVILEGED) | (cpu.reg("cpsr") & _PRIVILEGED))
    cpu.set_reg("pc", regs["pc"] | (1 if cpsr & PSR_T_BIT else 0))
    for i, value in enumerate(r.get(vfp + 8, "32Q")):
        cpu.set_reg(f"d{i}", value)
    cpu.set_reg("fpscr", r.one(vfp + VFP_FPSCR, "I"))
    # vfp_restore_user_hwstate: VFP enabled, no exception pending (FPINST/FPINST2 then unused)
    cpu.set_reg("fpexc", (r.one(vfp + VFP_FPEXC, "I") | FPEXC_EN) & ~(FPEXC_EX | FPEXC_FP2V))
    return mask


def altstack_arm(cpu: FrameCpu, rt: bool) -> tuple[int, int, int]:
    if not rt:
        raise bad_frame("arm", cpu.reg("sp"), "the old (non-rt) frame's stack_t is not written")
    frame = cpu.reg("sp")
    alt = read_stack_t(FrameReader(frame, cpu.read(frame, RT_SIGFRAME_SIZE), "<", 4), 128 + UC_STACK, 4)
    return alt.sp, alt.size, alt.flags


def layout_arm() -> dict[str, int]:
    out = {"uc.flags": UC_FLAGS, "uc_link": UC_LINK, "uc_stack": UC_STACK, "uc_mcontext": UC_MCONTEXT,
           "uc_sigmask": UC_SIGMASK, "uc_regspace": UC_REGSPACE, "uc.stack.sp": UC_STACK,
           "uc.stack.flags": UC_STACK + 4, "uc.stack.size": UC_STACK + 8, "frame.uc": 128, "frame.info": 0,
           "frame.size": RT_SIGFRAME_SIZE, "frame.size_old": SIGFRAME_SIZE}
    for i, name in enumerate(SC_REGS):
        out[f"reg.{name}"] = UC_MCONTEXT + 4 * i
    return out
