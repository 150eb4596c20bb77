"""riscv64 (RV64GC: compressed instructions included).

Instruction length: ``(insn & 3) == 3`` means 4 bytes, else 2.  The kernel
writes ``ebreak``/``c.ebreak``; Unicorn 2.1.4 stops emulation on
``RISCV_EXCP_BREAKPOINT`` before any hook runs, so on Unicorn kpsdk writes an
all-zero (defined-illegal) instruction of the same length, which Unicorn reports
as interrupt 2 with the pc 4 bytes past it, whatever its length.  keystone has
no RISC-V: kpsdk encodes the one instruction it needs (``jal x0``) itself.
"""

from __future__ import annotations

import struct

import capstone
import unicorn
from unicorn import riscv_const as ur

from kpsdk import hookimpl
from kpsdk.arch import (
    Abi,
    Arch,
    Breakpoint,
    DebianPort,
    DetourCode,
    DwarfRegisters,
    EntryDetour,
    FrameRecord,
    InsnRules,
    InstructionSet,
    KernelClock,
    KernelTasks,
    LinuxAbi,
    OutOfLine,
    PltTable,
    QemuMachine,
    Register,
    ReturnDetour,
    StatLayout,
    Syscalls,
    WatchRules,
)
from kpsdk.arch.fixture import FixtureVariant, Toolchain
from kpsdk.arch.insn import ReadMem, ReadReg, sign_extend
from kpsdk.arch_backends import syscall_numbers as numbers
from kpsdk.arch_backends import syscall_tables as tables

_ABI_NAMES = (
    "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1",
    "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
    "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11",
    "t3", "t4", "t5", "t6",
)
_REGS = (
    *(
        Register(n, 8, getattr(ur, f"UC_RISCV_REG_X{i}"), n, (f"x{i}", "fp") if n == "s0" else (f"x{i}",))
        for i, n in enumerate(_ABI_NAMES)
    ),
    Register("pc", 8, ur.UC_RISCV_REG_PC, "pc", ("epc",)),  # epc: the kernel's pt_regs name
)

_BRANCHES = frozenset({"beq", "bne", "blt", "bge", "bltu", "bgeu", "c.beqz", "c.bnez",
                       "beqz", "bnez", "blez", "bgez", "bltz", "bgtz", "bgt", "ble", "bgtu", "bleu"})
_JUMPS_IMM = frozenset({"jal", "c.j", "c.jal", "j"})
_JUMPS_REG = frozenset({"jalr", "c.jr", "c.jalr", "jr", "ret"})
_PC_READERS = frozenset({"auipc"})
_REFUSED = frozenset({"ecall", "ebreak", "c.ebreak", "mret", "sret", "uret", "wfi", "fence", "fence.i",
                      "c.jal"})


def insn_length(first_halfword: int) -> int:
    return 4 if first_halfword & 3 == 3 else 2


def classify(insn: capstone.CsInsn) -> tuple[bool, str | None]:
    m = insn.mnemonic
    if m in _REFUSED or m.startswith("csr"):
        return False, f"{m} cannot be probed (system instruction, as in the kernel)"
    return not (m in _BRANCHES or m in _JUMPS_IMM or m in _JUMPS_REG or m in _PC_READERS), None


def successors(insn: capstone.CsInsn, reg: ReadReg, mem: ReadMem, word: int) -> set[int] | None:
    """Branch and jump targets; capstone 5 gives riscv immediates pc-relative."""
    m = insn.mnemonic
    nxt = insn.address + insn.size
    imms = [op.imm for op in insn.operands if op.type == capstone.CS_OP_IMM]
    regs = [insn.reg_name(op.reg) for op in insn.operands if op.type == capstone.CS_OP_REG]
    if m in _BRANCHES:
        return {nxt, insn.address + imms[-1]}
    if m in _JUMPS_IMM:
        return {insn.address + imms[-1]}
    if m in _JUMPS_REG:
        if m == "ret":
            return {reg("ra") & ~1}
        src = regs[-1] if m in ("c.jr", "c.jalr", "jr") else regs[1] if len(regs) > 1 else regs[0]
        offset = imms[-1] if imms else 0
        return {(reg(src) + offset) & ~1 & ((1 << 64) - 1)}
    return {nxt}


def jump_back(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``jal x0, target`` when within +-1 MiB, else ``None`` (no booster there)."""
    off = target - at
    if not -(1 << 20) <= off < (1 << 20) or off & 1:
        return None
    imm = off & 0x1FFFFF
    enc = (
        ((imm >> 20) & 1) << 31
        | ((imm >> 1) & 0x3FF) << 21
        | ((imm >> 11) & 1) << 20
        | ((imm >> 12) & 0xFF) << 12
        | 0x6F
    )
    assert sign_extend(off, 21) == off
    return struct.pack("<I", enc)


def _i(op: int, f3: int, rd: int, rs1: int, imm: int) -> int:
    """I-type (``addi``, ``ld``)."""
    return (imm & 0xFFF) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | op


def _s(rs1: int, rs2: int, imm: int) -> int:
    """``sd rs2, imm(rs1)``."""
    return (imm >> 5 & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | 3 << 12 | (imm & 0x1F) << 7 | 0x23


_RA, _SP, _T0, _T1, _T2 = 1, 2, 5, 6, 7


def _addi(rd: int, rs1: int, imm: int) -> int:
    return _i(0x13, 0, rd, rs1, imm)


def _ld(rd: int, rs1: int, imm: int) -> int:
    return _i(0x03, 3, rd, rs1, imm)


def _jal0(at: int, target: int) -> int:
    code = jump_back(at, target, RISCV_ISET)
    assert code is not None, "a detour's jumps stay inside its block"
    return int(struct.unpack("<I", code)[0])


def regs_access(insn: capstone.CsInsn) -> tuple[set[str], set[str]]:
    """The registers ``insn`` reads and writes, from its operands (capstone's
    ``regs_access`` has no RISC-V): stores and branches only read; otherwise
    the first register operand is written and the others read."""
    names = [insn.reg_name(op.reg) for op in insn.operands if op.type == capstone.CS_OP_REG]
    names += [insn.reg_name(op.mem.base) for op in insn.operands if op.type == capstone.CS_OP_MEM]
    m = insn.mnemonic.removeprefix("c.")
    if m[0] in "sb" and m not in ("sub", "subw", "sll", "slli", "sllw", "slliw", "slt", "slti", "sltu", "sltiu",
                                  "sra", "srai", "sraw", "sraiw", "srl", "srli", "srlw", "srliw", "slli64"):
        return set(names), set()
    if not names:
        return set(), set()
    reads = set(names[1:])
    if insn.mnemonic.startswith("c.") and m not in ("li", "lui", "mv") and m[0] != "l":
        reads.add(names[0])  # c.add rd, rs2, c.addi rd, imm ...: rd is a source too
    return reads, {names[0]}


def _br(f3: int, rs1: int, rs2: int, off: int) -> int:
    """B-type: ``bne``/``bgeu``/... ``rs1, rs2, off``."""
    return ((off >> 12 & 1) << 31 | (off >> 5 & 0x3F) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12
            | (off >> 1 & 0xF) << 8 | (off >> 11 & 1) << 7 | 0x63)


def _auipc(rd: int) -> int:
    return rd << 7 | 0x17


def _slli(rd: int, rs1: int, shamt: int) -> int:
    return _i(0x13, 1, rd, rs1, shamt)


def _add(rd: int, rs1: int, rs2: int) -> int:
    return rs2 << 20 | rs1 << 15 | rd << 7 | 0x33


def _jr(rs1: int) -> int:
    return _i(0x67, 0, 0, rs1, 0)


def _with_literals(at: int, words: list[int], literals: list[int]) -> tuple[bytes, int]:
    """The code, then the doublewords ``literals`` 8-aligned after it; and where they start."""
    lit = 4 * len(words) + (-(at + 4 * len(words)) % 8)
    return struct.pack(f"<{len(words)}I", *words) + bytes(lit - 4 * len(words)) + struct.pack(
        f"<{len(literals)}Q", *literals), lit


def entry_detour(at: int, iset: InstructionSet, d: EntryDetour) -> tuple[bytes, int]:
    """The return probes' fast entry (:class:`~kpsdk.arch.EntryDetour`), hand-encoded
    (keystone has no RISC-V).  It uses t1 (``tail`` and PLT stubs clobber it at
    a call) and spills t2 below sp (one store: guest stores are what a detour
    costs; the entry sp is 16 bytes up); ra is free once written to the record.
    Addresses are doublewords after the code, read with auipc."""
    lits = 112  # the literals' offset from the code's start: gate, avail, records, tramp
    words = [
        _addi(_SP, _SP, -16), _s(_SP, _T2, 0),
        _auipc(_T1), _ld(_T1, _T1, lits - 8),  # 8: gate
        _ld(_T2, _T1, 0), 0,  # 20: bnez t2, slow
        _auipc(_T1), _ld(_T1, _T1, lits + 8 - 24),  # 24: avail
        _ld(_T2, _T1, 0), 0,  # 36: beqz t2, slow
        _addi(_T2, _T2, -1), _s(_T1, _T2, 0),
        _auipc(_T1), _ld(_T1, _T1, lits + 16 - 48),  # 48: records
        _slli(_T2, _T2, 4), _add(_T1, _T1, _T2),
        _s(_T1, _RA, 0), _addi(_T2, _SP, 16), _s(_T1, _T2, 8),
        _auipc(_RA), _ld(_RA, _RA, lits + 24 - 76),  # 76: tramp
        _ld(_T2, _SP, 0), _addi(_SP, _SP, 16), _jal0(at + 92, d.resume),
        _ld(_T2, _SP, 0), _addi(_SP, _SP, 16), _jal0(at + 104, d.resume),  # 96: slow
    ]
    slow, hook = 96, 104
    words[5] = _br(1, _T2, 0, slow - 20)  # bnez
    words[9] = _br(0, _T2, 0, slow - 36)  # beqz
    code, lit = _with_literals(at, words, [d.gate, d.avail, d.records, d.tramp])
    assert lit == lits and at % 8 == 0
    return code, hook


def return_detour(at: int, iset: InstructionSet, r: ReturnDetour) -> tuple[bytes, int, int]:
    """The return half (:class:`~kpsdk.arch.ReturnDetour`): t0-t2 are free after a
    return (a0 and a1 hold the value)."""
    words = [
        _auipc(_T0), _ld(_T0, _T0, 64),  # the literals at 64: avail, records
        _ld(_T1, _T0, 0), _ld(_T2, _T0, 8),
        _br(7, _T1, _T2, 56 - 16),  # 16: bgeu t1, t2, general
        _auipc(_T2), _ld(_T2, _T2, 72 - 20),
        _slli(_T1, _T1, 4), _add(_T1, _T1, _T2),
        _ld(_T2, _T1, 8), _addi(_T2, _T2, r.ret_sp),
        _br(1, _T2, _SP, 56 - 44),  # 44: bne t2, sp, general
        _ld(_T1, _T1, 0), _jr(_T1),  # 48: short
        _ld(_T1, _T0, 16), _jr(_T1),  # 56: general
    ]
    code, lit = _with_literals(at, words, [r.avail, r.records])
    assert lit == 64 and at % 8 == 0
    return code, 48, 56


def return_jump(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline: ``auipc t0; sd sp`` to ``sp_word`` (t0 is a temporary
    a call may clobber anyway), so kpsdk reads the stack pointer of the return
    without a register read; then ``auipc ra, 0; ld ra, 16(ra); jr ra`` through the
    doubleword 16 bytes on.  It leaves ``ra`` holding the real return address, as a
    plain ``ret`` would have.  Returns the code, the offset of the jump (hooked) and
    of the doubleword."""
    off = sp_word - at
    hi = (off + 0x800) >> 12
    store = struct.pack("<II", (hi & 0xFFFFF) << 12 | _T0 << 7 | 0x17, _s(_T0, _SP, off - (hi << 12)))
    return store + struct.pack("<IIII", 0x00000097, 0x0100B083, 0x00008067, 0x00000013) + bytes(8), 8, 24


RISCV_ISET = InstructionSet(
    name="riscv64",
    capstone=(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC),
    keystone=None,
    kernel_breakpoints={4: struct.pack("<I", 0x00100073), 2: struct.pack("<H", 0x9002)},
    unicorn_breakpoint=Breakpoint({4: b"\0\0\0\0", 2: b"\0\0"}, intno=2, pc_adjust=-4),
    min_insn=2,
    length_rule=lambda code: insn_length(int.from_bytes(code[:2], "little")),
    # the psABI frame: s0 is the caller's sp, ra at s0-8 and the caller's s0 at s0-16; a leaf
    # saves s0 alone, at s0-8, and keeps its return address in ra
    frame_record=FrameRecord(fp="s0", saved_fp=-16, saved_ret=-8, sets_fp=r"(c\.addi4spn|addi) s0, sp, ",
                             restores_fp=r"(c\.ldsp|ld) s0, ", leaf_saved_fp=-8),
)

def unicorn_setup(uc: unicorn.Uc) -> None:
    """Turn the FPU on, as Linux does for a process (mstatus.FS = Initial; the privileged
    spec, 3.1.6.6): Unicorn 2.1.4 starts with FS off, so the first ``frflags`` (glibc's
    ``__sigsetjmp``) or ``fsd`` is an illegal instruction."""
    uc.reg_write(ur.UC_RISCV_REG_MSTATUS, uc.reg_read(ur.UC_RISCV_REG_MSTATUS) | (1 << 13))


#: SSTATUS.SIE: supervisor interrupts enabled (the kernel runs in S-mode)
SSTATUS_SIE = 1 << 1
#: a riscv kernel keeps ``current`` in ``tp`` while it runs (arch/riscv/include/asm/current.h:
#: ``register struct task_struct *riscv_current_is_tp __asm__("tp")``; entry.S loads it from
#: sscratch on a trap from user mode); the preempt count is in thread_info, not per cpu
KERNEL_TASKS = KernelTasks(
    percpu_register="",
    current=(),
    flags_register="sstatus",
    irqs_disabled=lambda status: not status & SSTATUS_SIE,
    need_resched_bit=3,  # TIF_NEED_RESCHED (arch/riscv/include/asm/thread_info.h)
    current_register="tp",
)


#: QEMU's riscv virt board: the ACLINT MTIMER at 0x2000000 + 0x4000 (hw/riscv/virt.c's
#: VIRT_CLINT, RISCV_ACLINT_SWI_SIZE), its 64-bit ``mtime`` at + 0x7ff8
#: (RISCV_ACLINT_DEFAULT_MTIME): the ``time`` CSR a kernel reads (drivers/clocksource/timer-riscv.c:
#: ``riscv_sched_clock`` returns get_cycles64()), at the board's 10 MHz timebase
VIRT_MTIME = KernelClock(0x200BFF8, 8, "riscv_sched_clock", "QEMU's virt board: ACLINT mtime at 0x200bff8")


#: the floating-point registers f0-f31 by their ABI names (gdb's)
_FP_NAMES = (*(f"ft{i}" for i in range(8)), "fs0", "fs1", *(f"fa{i}" for i in range(8)),
             *(f"fs{i}" for i in range(2, 12)), *(f"ft{i}" for i in range(8, 12)))
#: DWARF register numbers, RISC-V ELF psABI ("DWARF Register Numbers"): 0-31 are x0-x31 (the
#: return address column is 1, ra), 32-63 f0-f31; the pc has no number
DWARF_RISCV = DwarfRegisters({**dict(enumerate(_ABI_NAMES)), **{32 + i: n for i, n in enumerate(_FP_NAMES)}})


RISCV64 = Arch(
    name="riscv64",
    aliases=("riscv", "rv64"),
    # QEMU's riscv64 plugin registers: its gdb XML's (riscv-64bit-cpu.xml names s0 "fp"), and
    # the CSR list's sstatus for the trace's irqs-off flag; 24 fit the snapshot: the arguments,
    # the stack, gp and tp (the kernel's current), the return address, the first saved and
    # temporary registers (not t3-t6, s8-s11)
    plugin_registers=(*((r, r) for r in ("ra", "sp", "gp", "tp", "t0", "t1", "t2")), ("s0", "fp"),
                      *((r, r) for r in ("s1", *(f"a{i}" for i in range(8)), "s2", "s3", "s4", "s5", "s6", "s7",
                                         "sstatus"))),
    bits=64,
    endian="little",
    registers=_REGS,
    pc="pc",
    sp="sp",
    return_value="a0",
    link="ra",
    kernel_abi=Abi(tuple(f"a{i}" for i in range(8)), stack_args_offset=0),
    user_abi=Abi(tuple(f"a{i}" for i in range(8)), stack_args_offset=0),
    isets=(RISCV_ISET,),
    insn=InsnRules(classify, successors),
    unicorn=(unicorn.UC_ARCH_RISCV, unicorn.UC_MODE_RISCV64),
    unicorn_unsupported=None,
    unicorn_setup=unicorn_setup,
    gdb_arch="riscv:rv64",
    gdb_linux_steps_in_software=True,  # gdb/riscv-linux-tdep.c: riscv_software_single_step
    elf_machine="EM_RISCV",
    elf_class=64,
    syscalls=Syscalls("a7", tuple(f"a{i}" for i in range(6)), "a0", 8, numbers.RISCV64,
                      # AT_HWCAP: one bit per single-letter extension, RV64IMAFDC
                      # (arch/riscv/kernel/cpufeature.c); no ELF_PLATFORM on riscv
                      linux=LinuxAbi(None, sum(1 << (ord(c) - ord("a")) for c in "imafdc"),
                                     machine="riscv64", sysroot="/usr/riscv64-linux-gnu",
                                     stat=StatLayout(*tables.STAT_GENERIC64), calls=tables.RISCV64,
                                     tls_gpr="tp", sigaction=("handler", "flags", "mask"), clone_backwards=True)),
    stack_alignment=16,
    qemu_user="qemu-riscv64",
    multiarch="riscv64-linux-gnu",
    cross_libc_package="libc6-riscv64-cross",
    # binutils bfd/elfnn-riscv.c: PLT_HEADER_SIZE (32), PLT_ENTRY_SIZE (16)
    plt=(PltTable(".plt", 32, 16, source="binutils bfd/elfnn-riscv.c PLT_HEADER_SIZE, PLT_ENTRY_SIZE"),),
    irelative=(58,),  # R_RISCV_IRELATIVE (RISC-V ELF psABI)
    tls_tpoff=(11,),  # R_RISCV_TLS_TPREL64
    qemu_system=QemuMachine("qemu-system-riscv64", "qemu-system-misc", machine="virt", clock=VIRT_MTIME),
    # Debian 12 has no riscv64 kernel; 13 (trixie) has, as an uncompressed Image named vmlinux-*
    debian=DebianPort("riscv64", "trixie", "linux-image-riscv64", "vmlinux-*"),
    kernel_tasks=KERNEL_TASKS,
    # the Sdtrig trigger module: QEMU implements 2 mcontrol triggers (RV_MAX_TRIGGERS), each
    # matching loads, stores or execution of a naturally aligned 1, 2, 4 or 8-byte range
    watch=WatchRules(slots=2, types=frozenset({"x", "w", "r", "rw"}), lengths=(1, 2, 4, 8),
                     exec_lengths=(2, 4), source="RISC-V debug spec 0.13 (mcontrol); QEMU target/riscv/debug.c"),
    cross_gcc_package="gcc-riscv64-linux-gnu",
    out_of_line=OutOfLine(jump_back, return_jump),
    detours=DetourCode(jump_back, entry_detour, return_detour, scratch=("t1",), regs_access=regs_access),
    # small-data-limit=0: counter goes to .bss rather than .sbss
    toolchain=Toolchain((FixtureVariant("riscv64", ("-march=rv64gc", "-mabi=lp64d", "-msmall-data-limit=0"),
                                        demo=4),),
                        libc_dev="libc6-dev-riscv64-cross"),
    dwarf=DWARF_RISCV,
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [RISCV64]
