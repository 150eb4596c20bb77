"""32-bit ARM, with its two instruction sets: ARM and Thumb.

An address with bit 0 set is Thumb, as in the ELF symbol table and in ``bx``.
The kernel writes UDF encodings (0xe7f001f8, Thumb 0xde18/0xf7f0a018); Unicorn
2.1.4 turns UDF into a hard stop, so on Unicorn kpsdk writes ``bkpt``
(0xe1200070, Thumb 0xbe00), which it reports as interrupt 7 at the bkpt itself.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import capstone
import keystone
import unicorn
from capstone import arm_const as ca
from unicorn import arm_const as ua

from kpsdk import hookimpl
from kpsdk.arch import (
    Abi,
    Arch,
    Breakpoint,
    Conditions,
    DebianPort,
    DetourCode,
    DwarfRegisters,
    EntryDetour,
    FieldUse,
    FrameRecord,
    InsnRules,
    InstructionSet,
    KernelTasks,
    LinuxAbi,
    ModeBit,
    OutOfLine,
    PltTable,
    QemuMachine,
    Register,
    ReturnDetour,
    StatLayout,
    Syscalls,
    TaskCode,
    WatchRules,
)
from kpsdk.arch.fixture import FixtureVariant, Toolchain
from kpsdk.arch.insn import ReadMem, ReadReg, changes_flow
from kpsdk.arch_backends import syscall_numbers as numbers
from kpsdk.arch_backends import syscall_tables as tables

_PC_IDS = frozenset({ca.ARM_REG_PC})
_REFUSED_PREFIXES = ("ldrex", "strex", "mrc", "mcr", "msr", "mrs", "cps", "svc", "bkpt", "udf", "wfi", "wfe")


def _reg(name: str, uc_name: str, aliases: tuple[str, ...] = ()) -> Register:
    return Register(name, 4, getattr(ua, f"UC_ARM_REG_{uc_name}"), name, aliases)


_REGS = (
    *(_reg(f"r{i}", f"R{i}") for i in range(0, 9)),
    _reg("r9", "R9", ("sb",)),
    _reg("r10", "R10", ("sl",)),
    _reg("r11", "R11", ("fp",)),
    _reg("r12", "R12", ("ip",)),
    _reg("sp", "SP", ("r13",)),
    _reg("lr", "LR", ("r14",)),
    _reg("pc", "PC", ("r15",)),
    _reg("cpsr", "CPSR"),
)


def classify(insn: capstone.CsInsn) -> tuple[bool, str | None]:
    """(boostable, refused reason): PC-using forms are stepped, not boosted.

    A Thumb instruction inside an IT block takes its condition from the CPU's
    ITSTATE, which a copy out of line would not see: it runs in place.
    """
    if insn.mnemonic.startswith(_REFUSED_PREFIXES):
        return False, f"{insn.mnemonic} cannot be probed (exclusive, coprocessor or system instruction)"
    if insn.mnemonic.startswith("it"):
        return False, "an IT instruction cannot be probed (it conditions the next ones)"
    in_it_block = insn._cs.mode & capstone.CS_MODE_THUMB and condition(insn) is not None
    return not (in_it_block or changes_flow(insn, _PC_IDS)), None


def condition(insn: capstone.CsInsn) -> int | None:
    """The instruction's condition code (capstone ARM_CC_*), None if always executed.

    Capstone knows a Thumb instruction's IT condition when it decoded the IT
    instruction before it, which is why probes decode from the function start.
    """
    cc = insn.cc
    return None if cc in (ca.ARM_CC_AL, ca.ARM_CC_INVALID) or changes_flow(insn, _PC_IDS) else cc


def reads_flags(insn: capstone.CsInsn, reads: set[str]) -> bool:
    """Whether ``insn`` reads NZCV: it names cpsr, or it is conditional (branches too)."""
    return "cpsr" in reads or insn.cc not in (ca.ARM_CC_AL, ca.ARM_CC_INVALID)


def condition_passes(cc: int, reg: ReadReg) -> bool:
    """Evaluate an ARM condition code against CPSR's NZCV flags."""
    cpsr = reg("cpsr")
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    return {
        ca.ARM_CC_EQ: z == 1, ca.ARM_CC_NE: z == 0, ca.ARM_CC_HS: c == 1, ca.ARM_CC_LO: c == 0,
        ca.ARM_CC_MI: n == 1, ca.ARM_CC_PL: n == 0, ca.ARM_CC_VS: v == 1, ca.ARM_CC_VC: v == 0,
        ca.ARM_CC_HI: c == 1 and z == 0, ca.ARM_CC_LS: c == 0 or z == 1, ca.ARM_CC_GE: n == v,
        ca.ARM_CC_LT: n != v, ca.ARM_CC_GT: z == 0 and n == v, ca.ARM_CC_LE: z == 1 or n != v,
    }.get(cc, True)


def successors(insn: capstone.CsInsn, reg: ReadReg, mem: ReadMem, word: int) -> set[int] | None:
    """Where execution can go after ``insn`` (addresses carry the Thumb bit)."""
    thumb = insn.size == 2 or bool(reg("cpsr") & 0x20)
    nxt = (insn.address + insn.size) | (1 if thumb else 0)
    if not changes_flow(insn, _PC_IDS):
        return {nxt}
    out = {nxt}
    m = insn.mnemonic.split(".")[0]
    ops = insn.operands
    if m.startswith(("b", "cb")) and ops and ops[-1].type == capstone.CS_OP_IMM:
        # b, bl, blx imm, cbz/cbnz: blx imm switches instruction set
        switch = m.startswith("blx")
        out.add(ops[-1].imm | (0 if thumb == switch else 1))
    elif m.startswith(("bx", "blx")) and ops and ops[0].type == capstone.CS_OP_REG:
        out.add(reg(insn.reg_name(ops[0].reg)))
    elif m.startswith(("pop", "ldm")) and any(o.type == capstone.CS_OP_REG and o.reg == ca.ARM_REG_PC for o in ops):
        regs = [o for o in ops if o.type == capstone.CS_OP_REG]
        base = reg("sp") if m.startswith("pop") else reg(insn.reg_name(regs[0].reg))
        listed = regs if m.startswith("pop") else regs[1:]
        slot = [o.reg for o in listed].index(ca.ARM_REG_PC)
        out.add(struct.unpack("<I", mem(base + 4 * slot, 4))[0])
    elif m.startswith("mov") and len(ops) == 2 and ops[1].type == capstone.CS_OP_REG:
        out.add(reg(insn.reg_name(ops[1].reg)) | (1 if thumb else 0))
    elif m.startswith("ldr") and len(ops) == 2 and ops[1].type == capstone.CS_OP_MEM and ops[0].reg == ca.ARM_REG_PC:
        base = ops[1].mem.base
        ea = ((insn.address + (4 if thumb else 8)) & ~3) if base == ca.ARM_REG_PC else reg(insn.reg_name(base))
        ea += ops[1].mem.disp
        out.add(struct.unpack("<I", mem(ea, 4))[0])
    elif any(o.type == capstone.CS_OP_REG and o.reg == ca.ARM_REG_PC for o in ops[:1]):
        return None  # arithmetic into pc: not followed
    return out


def unicorn_setup(uc: unicorn.Uc) -> None:
    """Turn the VFP/NEON unit on, as Linux does for an armhf process: Unicorn
    2.1.4 starts with CPACR and FPEXC clear, so the first ``vpush`` (GCC saves
    d8-d15 around ``__builtin_setjmp``) is an invalid instruction."""
    uc.reg_write(ua.UC_ARM_REG_C1_C0_2, uc.reg_read(ua.UC_ARM_REG_C1_C0_2) | (0xF << 20))  # cp10, cp11: full access
    uc.reg_write(ua.UC_ARM_REG_FPEXC, 0x40000000)  # FPEXC.EN


#: where Linux maps ARM's vector page with the kuser helpers (arch/arm/kernel/entry-armv.S)
KUSER_PAGE = 0xFFFF0000


def kuser_helpers() -> bytes:
    """The kuser helpers page as a uniprocessor kernel fills it (Documentation/arch/arm/
    kernel_user_helpers.rst): ``__kuser_cmpxchg64`` at 0xffff0f60, ``__kuser_memory_barrier`` at
    0xffff0fa0, ``__kuser_cmpxchg`` at 0xffff0fc0, ``__kuser_get_tls`` at 0xffff0fe0 and
    ``__kuser_helper_version`` (5) at 0xffff0ffc.  Each helper runs as one translated block,
    so kpsdk's scheduler (which switches tasks only between blocks) keeps it atomic."""
    page = bytearray(0x1000)
    helpers = {
        # push {r4-r7}; ldrd r4, r5, [r0]; ldrd r6, r7, [r2]; eors r3, r6, r4; eorseq r3, r7, r5;
        # ldrdeq r6, r7, [r1]; strdeq r6, r7, [r2]; rsbs r0, r3, #0; pop {r4-r7}; bx lr
        0xF60: (0xE92D00F0, 0xE1C040D0, 0xE1C260D0, 0xE0363004, 0x00373005, 0x01C160D0, 0x01C260F0,
                0xE2730000, 0xE8BD00F0, 0xE12FFF1E),
        0xFA0: (0xF57FF05B, 0xE12FFF1E),  # dmb ish; bx lr
        # ldr r3, [r2]; subs r3, r3, r0; streq r1, [r2]; rsbs r0, r3, #0; bx lr
        0xFC0: (0xE5923000, 0xE0533000, 0x05821000, 0xE2730000, 0xE12FFF1E),
        0xFE0: (0xEE1D0F70, 0xE12FFF1E),  # mrc p15, 0, r0, c13, c0, 3 (TPIDRURO); bx lr
    }
    for at, words in helpers.items():
        struct.pack_into(f"<{len(words)}I", page, at, *words)
    struct.pack_into("<I", page, 0xFFC, 5)
    return bytes(page)


def oabi_call(read: Callable[[int, int], bytes], pc: int, thumb: bool) -> int | None:
    """An OABI system call's number (``swi 0x900000 + N``, the instruction before ``pc``), or
    None for an EABI ``svc 0`` (or any call from Thumb code, which has no OABI)."""
    if thumb:
        return None
    word = struct.unpack("<I", read(pc - 4, 4))[0]
    imm = word & 0xFFFFFF
    return imm - 0x900000 if imm >= 0x900000 else None


def jump_back(at: int, target: int, iset: InstructionSet) -> bytes:
    """ARM: ``ldr pc, [pc, #-4]`` + target.  Thumb: ``ldr.w pc, [pc]`` + target|1,
    with a leading ``nop`` when needed to put the literal on a 4-byte boundary."""
    if not iset.thumb_bit:
        return struct.pack("<II", 0xE51FF004, target)
    pad = b"" if at % 4 == 0 else struct.pack("<H", 0xBF00)
    return pad + struct.pack("<HHI", 0xF8DF, 0xF000, target | 1)


def near_jump(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b`` (ARM, +-32 MiB) or ``b.w`` (Thumb, +-16 MiB), 4 bytes: the jump a return
    probe's detour writes over a function entry; None out of range."""
    off = target - (at + (4 if iset.thumb_bit else 8))
    if not -(1 << (24 if iset.thumb_bit else 25)) <= off < (1 << (24 if iset.thumb_bit else 25)) or off & 1:
        return None
    ks = keystone.Ks(*iset.keystone)  # type: ignore[misc]
    return bytes(ks.asm(f"{'b.w' if iset.thumb_bit else 'b'} #{target:#x}", at)[0])


def _movw_movt(reg: str, value: int) -> str:
    return f"movw {reg}, #{value & 0xFFFF:#x}\nmovt {reg}, #{value >> 16:#x}"


def entry_detour(at: int, iset: InstructionSet, d: EntryDetour) -> tuple[bytes, int]:
    """The return probes' fast entry (:class:`~kpsdk.arch.EntryDetour`), ARM or Thumb-2.
    It uses ip (r12, which AAPCS leaves to veneers at a call) and the flags, and
    spills r0 (one store: guest stores are what a detour costs); the entry sp
    is one word up from where it runs.  lr is free once written to the record."""
    b = "b.w" if iset.thumb_bit else "b"
    head = f"""
        push {{r0}}
        {_movw_movt("r0", d.gate)}
        ldr ip, [r0]
        cmp ip, #0
        bne slow
        {_movw_movt("r0", d.avail)}
        ldr ip, [r0]
        subs ip, ip, #1
        bmi slow
        str ip, [r0]
        {_movw_movt("r0", d.records)}
        add r0, r0, ip, lsl #3
        str lr, [r0]
        add ip, sp, #4
        str ip, [r0, #4]
        {_movw_movt("lr", d.tramp)}
        pop {{r0}}
        {b} #{d.resume:#x}
    slow:
        pop {{r0}}
    """
    ks = keystone.Ks(*iset.keystone)  # type: ignore[misc]
    hook = len(bytes(ks.asm(head, at)[0]))
    return bytes(ks.asm(head + f"{b} #{d.resume:#x}", at)[0]), hook


def return_detour(at: int, iset: InstructionSet, r: ReturnDetour) -> tuple[bytes, int, int]:
    """The return half (:class:`~kpsdk.arch.ReturnDetour`): ip and lr (which holds this
    code's own address) and the flags are free after a return; r0-r3 are kept.
    ``ldr pc`` interworks, so the record's bit 0 picks ARM or Thumb."""
    ldr = "ldr.w" if iset.thumb_bit else "ldr"
    head = f"""
        {_movw_movt("ip", r.avail)}
        ldr lr, [ip]
        ldr ip, [ip, #4]
        cmp lr, ip
        bhs general
        {_movw_movt("ip", r.records)}
        add ip, ip, lr, lsl #3
        ldr lr, [ip, #4]
        {"add lr, lr, #" + str(r.ret_sp) if r.ret_sp else ""}
        cmp sp, lr
        bne general
    """
    short = f"{ldr} pc, [ip]\n"
    general = f"general:\n{_movw_movt('ip', r.avail + 8)}\n"
    ks = keystone.Ks(*iset.keystone)  # type: ignore[misc]
    at_short = len(bytes(ks.asm(head + "general:\n", at)[0]))
    at_general = len(bytes(ks.asm(head + short + general, at)[0]))
    return bytes(ks.asm(head + short + general + short, at)[0]), at_short, at_general


def return_jump(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline: ``str sp`` to ``sp_word`` through ``ip`` (r12, the
    scratch register a call may clobber anyway), so kpsdk reads the stack pointer of
    the return without a register read; then :func:`jump_back` through a literal
    kpsdk rewrites per return: ``ldr pc`` interworks, so the literal's bit 0 picks
    ARM or Thumb.  Returns the code, the offset of the jump (hooked) and of the word."""
    ks = keystone.Ks(*iset.keystone)  # type: ignore[misc]
    store = bytes(ks.asm(f"{_movw_movt('ip', sp_word)}\nstr{'.w' if iset.thumb_bit else ''} sp, [ip]", at)[0])
    code = store + jump_back(at + len(store), 0, iset)
    return code, len(store), len(code) - 4


ARM_ISET = InstructionSet(
    name="arm",
    capstone=(capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM),
    keystone=(keystone.KS_ARCH_ARM, keystone.KS_MODE_ARM),
    kernel_breakpoints={4: struct.pack("<I", 0xE7F001F8)},
    unicorn_breakpoint=Breakpoint({4: struct.pack("<I", 0xE1200070)}, intno=7, pc_adjust=0),
    min_insn=4,
    length_rule=lambda code: 4,
    # GCC's ARM frames: ``push {..., fp, lr}; add fp, sp, #N`` leaves fp at the saved lr, the
    # caller's fp one word below; a leaf pushes fp alone (``push {fp}; add fp, sp, #0``)
    frame_record=FrameRecord(fp="fp", saved_fp=-4, saved_ret=0, sets_fp=r"add fp, sp, ",
                             restores_fp=r"(pop|ldm\w*) .*\bfp\b", leaf_saved_fp=0),
)
THUMB_ISET = InstructionSet(
    name="thumb",
    capstone=(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB),
    keystone=(keystone.KS_ARCH_ARM, keystone.KS_MODE_THUMB),
    kernel_breakpoints={2: struct.pack("<H", 0xDE18), 4: struct.pack("<HH", 0xF7F0, 0xA018)},
    unicorn_breakpoint=Breakpoint({2: struct.pack("<H", 0xBE00)}, intno=7, pc_adjust=0),
    min_insn=2,
    thumb_bit=True,
    # a first halfword of 0b11101, 0b11110 or 0b11111 in its top bits starts a 32-bit instruction
    length_rule=lambda code: 4 if int.from_bytes(code[:2], "little") >= 0xE800 else 2,
    # no frame record: GCC's Thumb frame pointer r7 points below the locals, at a different
    # distance from the saved lr in every function, so Thumb backtraces scan the stack
)

#: The slot counts are what QEMU's (and Unicorn's) default CPU, a Cortex-A15, reports in
#: DBGDIDR = 0x3515f021 (read back from Unicorn 2.1.4): WRPs field 3 -> 4 watchpoint registers,
#: BRPs field 5 -> 6 breakpoint registers (a separate pool, used for ``x``).  Debug architecture
#: v7.1 has no 8-byte byte-select, and a watched range must lie inside one aligned word
#: (Linux's arch/arm/kernel/hw_breakpoint.c: len 1 anywhere, len 2 at offsets 0-2, len 4 at 0).
WATCH = WatchRules(slots=4, types=frozenset({"x", "w", "r", "rw"}), lengths=(1, 2, 4), aligned=False, window=4,
                   exec_lengths=(2, 4), exec_slots=6,
                   source="Cortex-A15 DBGDIDR 0x3515f021 (QEMU/Unicorn); ARM ARM v7 C11; Linux hw_breakpoint")

def page_walk(read_reg: ReadReg, read_phys: ReadMem, va: int) -> int | None:
    """The physical address of ``va`` through the short-descriptor translation tables
    (ARM ARM, "Short-descriptor translation table format": sections, supersections, large
    and small pages; TTBCR.N picks TTBR0 or TTBR1).  None where it is not mapped, or where
    the kernel uses the long-descriptor (LPAE) format, which this walk does not read.

    Why: a kernel built with CONFIG_CPU_SW_DOMAIN_PAN (Debian's armmp) runs with the user
    domain set to "no access" in DACR, so QEMU's debug accesses at a user address fault
    although the page is mapped; the kernel itself opens the domain only inside uaccess.
    """
    ttbcr = read_reg("TTBCR")
    if ttbcr >> 31:  # EAE: long descriptors
        return None
    n = ttbcr & 7
    if n and va >> (32 - n):
        base = read_reg("TTBR1") & 0xFFFFC000
    else:
        base = read_reg("TTBR0") & ~((1 << (14 - n)) - 1) & 0xFFFFFFFF
    (first,) = struct.unpack("<I", read_phys(base | ((va >> 20) << 2), 4))
    kind = first & 3
    if kind == 0:
        return None
    if kind != 1:  # a section (bit 18: a 16 MB supersection)
        if first & (1 << 18):
            return (first & 0xFF000000) | (va & 0x00FFFFFF)
        return (first & 0xFFF00000) | (va & 0x000FFFFF)
    (second,) = struct.unpack("<I", read_phys((first & 0xFFFFFC00) | (((va >> 12) & 0xFF) << 2), 4))
    if second & 3 == 0:
        return None
    if second & 3 == 1:  # a 64 KB large page
        return (second & 0xFFFF0000) | (va & 0xFFFF)
    return (second & 0xFFFFF000) | (va & 0xFFF)


#: arch/arm/include/uapi/asm/fcntl.h: the open(2) flags whose bits are ARM's own
OPEN_FLAG_BITS = (("O_DIRECTORY", 0o40000), ("O_NOFOLLOW", 0o100000), ("O_DIRECT", 0o200000),
                  ("O_LARGEFILE", 0o400000), ("O_TMPFILE", 0o20040000))
#: AT_HWCAP: what the CPU Unicorn emulates (Cortex-A15) has and glibc's IFUNCs look at
#: (arch/arm/include/uapi/asm/hwcap.h): half, thumb, fast_mult, vfp, edsp, neon, vfpv3,
#: tls, vfpv4, idiva, idivt, vfpd32
HWCAP = 2 | 4 | 16 | 64 | 128 | 4096 | 8192 | 32768 | 65536 | 131072 | 262144 | 524288

#: PLT0 is 5 words; a stub 3 words (4 with --long-plt), ARM code, preceded by ``bx pc; b .-2``
#: (Thumb, 4 bytes) when Thumb code branches to it (binutils bfd/elf32-arm.c elf32_arm_plt0_entry,
#: elf32_arm_plt_entry_short/_long, elf32_arm_plt_thumb_stub)
THUMB_PLT_PREFIX = struct.pack("<H", 0x4778)  # bx pc
ARM_PLT = (PltTable(".plt", 20, 12, prefix=THUMB_PLT_PREFIX, prefix_size=4,
                    source="binutils bfd/elf32-arm.c elf32_arm_plt_entry_short"),
           PltTable(".plt", 20, 16, prefix=THUMB_PLT_PREFIX, prefix_size=4,
                    source="binutils bfd/elf32-arm.c elf32_arm_plt_entry_long"))

#: the loads of a 32-bit kernel's fields: bytes read
_LOAD_SIZES = {ca.ARM_INS_LDR: 4, ca.ARM_INS_LDRH: 2, ca.ARM_INS_LDRSH: 2, ca.ARM_INS_LDRB: 1, ca.ARM_INS_LDRSB: 1}
#: ``mrc p15, 0, Rt, c13, c0, 3``: a read of TPIDRURO (ARM ARM B4.1.150)
_TPIDRURO = ((capstone.CS_OP_IMM, 0), (capstone.arm.ARM_OP_CIMM, 13), (capstone.arm.ARM_OP_CIMM, 0),
             (capstone.CS_OP_IMM, 3))


def loads_current(insn: capstone.CsInsn) -> tuple[str, int] | None:
    """``mrc p15, 0, R, c13, c0, 3``: a 6.1 SMP kernel keeps current in TPIDRURO while it runs
    (CONFIG_CURRENT_POINTER_IN_TPIDRURO, arch/arm/include/asm/current.h)."""
    if insn.id != ca.ARM_INS_MRC or len(insn.operands) != 6:
        return None
    coproc, opc1, rt, crn, crm, opc2 = insn.operands
    if coproc.type != ca.ARM_OP_PIMM or coproc.imm != 15 or rt.type != ca.ARM_OP_REG:
        return None
    if tuple((op.type, op.imm) for op in (opc1, crn, crm, opc2)) != _TPIDRURO:
        return None
    return insn.reg_name(rt.reg), 0


def current_field(insn: capstone.CsInsn, reg: str) -> FieldUse | None:
    """``ldr X, [R, #d]`` (or its halfword and byte forms) or ``add X, R, #d`` with current in R."""
    ops = insn.operands
    size = _LOAD_SIZES.get(insn.id)
    if size is not None and len(ops) == 2 and ops[1].type == ca.ARM_OP_MEM and not insn.writeback:
        mem = ops[1].mem
        if mem.base and insn.reg_name(mem.base) == reg and not mem.index:
            return "load", -mem.disp if ops[1].subtracted else mem.disp, size
    if insn.id == ca.ARM_INS_ADD and len(ops) == 3 and ops[1].type == ca.ARM_OP_REG \
            and insn.reg_name(ops[1].reg) == reg and ops[2].type == ca.ARM_OP_IMM and not ops[2].shift.type:
        return "address", ops[2].imm, 0
    return None


#: CPSR.I: IRQs masked
CPSR_I = 0x80
#: Debian's armmp kernel (6.1, SMP, THREAD_INFO_IN_TASK) keeps ``current`` in TPIDRURO (QEMU's
#: gdbstub names the register so).  It has no BTF and no data symbols: task_struct's pid
#: and comm offsets come from the code of dump_stack_print_info (:mod:`kpsdk.kernel.taskcode`),
#: which also reads thread_info.cpu (raw_smp_processor_id; thread_info is task_struct's
#: first member: flags, preempt_count, cpu at 0, 4 and 8, arch/arm/include/asm/thread_info.h).
KERNEL_TASKS = KernelTasks(
    percpu_register="",
    current=(),
    flags_register="cpsr",
    irqs_disabled=lambda cpsr: bool(cpsr & CPSR_I),
    current_register="TPIDRURO",
    code=TaskCode("dump_stack_print_info", loads_current, current_field, not_pid=(0, 4, 8)),
)


#: DWARF register numbers, "DWARF for the Arm Architecture" (AAELF32 DWARF, table 1): r0-r15
#: (13 sp, 14 lr: the return address column, 15 pc), 256-287 the VFP's d0-d31
DWARF_ARM = DwarfRegisters({**{i: f"r{i}" for i in range(13)}, 13: "sp", 14: "lr", 15: "pc",
                            **{256 + i: f"d{i}" for i in range(32)}})


ARM = Arch(
    name="arm",
    aliases=("arm32", "armhf", "thumb"),
    # QEMU's arm plugin registers are gdb's (arm-core.xml)
    plugin_registers=tuple((r, r) for r in (*(f"r{i}" for i in range(13)), "sp", "lr", "cpsr")),
    bits=32,
    endian="little",
    registers=_REGS,
    pc="pc",
    sp="sp",
    return_value="r0",
    link="lr",
    kernel_abi=Abi(("r0", "r1", "r2", "r3"), stack_args_offset=0),
    user_abi=Abi(("r0", "r1", "r2", "r3"), stack_args_offset=0),
    isets=(ARM_ISET, THUMB_ISET),
    insn=InsnRules(classify, successors),
    unicorn=(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_ARM),
    unicorn_unsupported=None,
    gdb_arch="arm",
    elf_machine="EM_ARM",
    elf_class=32,
    syscalls=Syscalls("r7", ("r0", "r1", "r2", "r3", "r4", "r5"), "r0", 2, numbers.ARM,
                      linux=LinuxAbi("v7l", HWCAP, machine="armv7l", sysroot="/usr/arm-linux-gnueabihf",
                                     stat64=StatLayout(*tables.STAT64_ARM), tls_register=ua.UC_ARM_REG_C13_C0_3,
                                     pair_aligned=True, open_flag_bits=OPEN_FLAG_BITS, calls=tables.ARM,
                                     clone_backwards=True, vector_page=(KUSER_PAGE, kuser_helpers()),
                                     legacy_call=oabi_call)),
    stack_alignment=8,
    qemu_user="qemu-arm",
    multiarch="arm-linux-gnueabihf",
    cross_libc_package="libc6-armhf-cross",
    plt=ARM_PLT,
    irelative=(160,),  # R_ARM_IRELATIVE (ARM ELF ABI)
    tls_tpoff=(19,),  # R_ARM_TLS_TPOFF32
    qemu_system=QemuMachine("qemu-system-arm", "qemu-system-arm", machine="virt", console="ttyAMA0"),
    debian=DebianPort("armhf", "bookworm", "linux-image-armmp"),
    kernel_stack_size=8192,
    # arch/arm selects no HAVE_FUNCTION_ARG_ACCESS_API (no regs_get_kernel_argument): its kernel's
    # probe events refuse $argN anywhere; kpsdk's own targets read it by the AAPCS
    kernel_arg_access=False,
    # hist .log2 of 0 or a negative value: 1UL << 32 is 0 on Debian's 6.1 armmp kernel, and
    # ilog2(0) is -1, printed as a u64 (tests/test_trace_triggers_kernel.py, the guest's own hist)
    kernel_log2_overflow=2**64 - 1,
    watch=WATCH,
    cross_gcc_package="gcc-arm-linux-gnueabihf",
    conditions=Conditions(condition, condition_passes),
    out_of_line=OutOfLine(jump_back, return_jump),
    detours=DetourCode(near_jump, entry_detour, return_detour, scratch=("ip",), flags="cpsr",
                       reads_flags=reads_flags,
                       writes_flags=lambda insn, writes: "cpsr" in writes or bool(insn.update_flags)),
    mode_bit=ModeBit("cpsr", 0x20, "thumb"),  # CPSR.T
    page_walk=page_walk,
    unicorn_setup=unicorn_setup,
    kernel_tasks=KERNEL_TASKS,
    # armhf is hard-float: plain -march=armv7-a is rejected ("selected architecture lacks an
    # FPU"), +fp is the toolchain default; "thumb" is the same program with every function in Thumb
    toolchain=Toolchain((FixtureVariant("arm", ("-marm", "-march=armv7-a+fp"), demo=2),
                         FixtureVariant("thumb", ("-mthumb", "-march=armv7-a+fp"), iset="thumb", demo=3)),
                        libc_dev="libc6-dev-armhf-cross"),
    dwarf=DWARF_ARM,
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [ARM]
