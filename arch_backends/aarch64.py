"""aarch64: the A64 instruction set, LP64 (Linux's arm64).

Every instruction is 4 bytes.  The kernel's kprobes write ``brk #0x004``
(``KPROBES_BRK_IMM``, arch/arm64/include/asm/brk-imm.h; uprobes ``brk #0x005``);
Unicorn 2.1.4 delivers a ``brk`` to an interrupt hook as EXCP_BKPT (7) with the pc on
the ``brk`` itself, so kpsdk writes the kernel's own encoding on every target.

Which instructions a probe may sit on, and how each is run, follows the kernel's
decoder (arch/arm64/kernel/probes/decode-insn.c: ``aarch64_insn_is_steppable``,
``arm_probe_decode_insn``, ``arm_kprobe_decode_insn``) and its instruction classes
(arch/arm64/include/asm/insn.h, arch/arm64/lib/insn.c): the predicates below are the
same mask/value pairs on the instruction word, not capstone's mnemonics.  The branches
and PC-relative instructions the kernel simulates (arch/arm64/kernel/probes/simulate-insn.c)
are followed by :func:`successors` the same way.

keystone 0.9.2 assembles A64, but kpsdk encodes the handful of instructions its own code
needs (branches, literal loads, ``stp``...) itself: they are few, and encoding them here
keeps the code and its offsets in one place, checked by tests against capstone.
"""

from __future__ import annotations

import struct

import capstone
import keystone
import unicorn
from unicorn import arm64_const as u64

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

#: ``brk #0x004``: KPROBES_BRK_IMM (arch/arm64/include/asm/brk-imm.h), what arm64's kprobes write
KPROBES_BRK = 0xD4200080
#: ``brk #0x005``: UPROBES_BRK_IMM
UPROBES_BRK = 0xD42000A0


def _regs() -> tuple[Register, ...]:
    """x0-x30 (x29 is the frame pointer, x30 the link register, x16/x17 the psABI's
    intra-procedure-call scratch registers IP0/IP1), sp, pc, PSTATE (gdb calls it ``cpsr``),
    the thread pointer and the low halves d0-d31 of the SIMD registers.  The 128-bit
    v0-v31 are not listed: kpsdk's register paths move 8-byte words (signal frames save
    them through their own table, kpsdk/targets/unicorn/linux/sigframes/unicorn.py)."""
    aliases = {16: ("ip0",), 17: ("ip1",), 29: ("fp",), 30: ("lr",)}
    out = [Register(f"x{i}", 8, getattr(u64, f"UC_ARM64_REG_X{i}"), f"x{i}", aliases.get(i, ()))
           for i in range(31)]
    out += [
        Register("sp", 8, u64.UC_ARM64_REG_SP, "sp"),
        Register("pc", 8, u64.UC_ARM64_REG_PC, "pc"),
        # the kernel's pt_regs and kprobe_events call it pstate; gdb's aarch64-core.xml cpsr
        # (NZCV is its top four bits: ``nzcv`` names the same register)
        Register("pstate", 4, u64.UC_ARM64_REG_PSTATE, "cpsr", ("cpsr", "nzcv")),
        Register("tpidr_el0", 8, u64.UC_ARM64_REG_TPIDR_EL0, "tpidr", ("tpidr",)),
        # a kernel's current task (arch/arm64/include/asm/current.h); QEMU's gdbstub lists it
        # among its system registers by the cp register's name
        Register("sp_el0", 8, u64.UC_ARM64_REG_SP_EL0, "SP_EL0", ("SP_EL0",)),
        Register("fpcr", 4, u64.UC_ARM64_REG_FPCR, "fpcr"),
        Register("fpsr", 4, u64.UC_ARM64_REG_FPSR, "fpsr"),
    ]
    out += [Register(f"d{i}", 8, getattr(u64, f"UC_ARM64_REG_D{i}"), f"d{i}") for i in range(32)]
    return tuple(out)


_REGS = _regs()


# -- the kernel's instruction classes (arch/arm64/include/asm/insn.h: __AARCH64_INSN_FUNCS) ---------

def _is(word: int, mask: int, value: int) -> bool:
    return word & mask == value


#: name -> (mask, value), as insn.h declares them
INSN_FUNCS: dict[str, tuple[int, int]] = {
    "adr": (0x9F000000, 0x10000000), "adrp": (0x9F000000, 0x90000000),
    "prfm_lit": (0xFF000000, 0xD8000000),
    "ldr_lit": (0xBF000000, 0x18000000), "ldrsw_lit": (0xFF000000, 0x98000000),
    "exclusive": (0x3F800000, 0x08000000), "load_ex": (0x3F400000, 0x08400000),
    "store_ex": (0x3F400000, 0x08000000),
    "b": (0xFC000000, 0x14000000), "bl": (0xFC000000, 0x94000000),
    "cbz": (0x7F000000, 0x34000000), "cbnz": (0x7F000000, 0x35000000),
    "tbz": (0x7F000000, 0x36000000), "tbnz": (0x7F000000, 0x37000000),
    "bcond": (0xFF000010, 0x54000000),
    "exception": (0xFF000000, 0xD4000000),
    "hint": (0xFFFFF01F, 0xD503201F),
    "br": (0xFFFFFC1F, 0xD61F0000), "br_auth": (0xFEFFF800, 0xD61F0800),
    "blr": (0xFFFFFC1F, 0xD63F0000), "blr_auth": (0xFEFFF800, 0xD63F0800),
    "ret": (0xFFFFFC1F, 0xD65F0000), "ret_auth": (0xFFFFFBFF, 0xD65F0BFF),
    "eret": (0xFFFFFFFF, 0xD69F03E0), "eret_auth": (0xFFFFFBFF, 0xD69F0BFF),
    "mrs": (0xFFF00000, 0xD5300000), "msr_imm": (0xFFF8F01F, 0xD500401F),
    "msr_reg": (0xFFF00000, 0xD5100000),
}


def insn_is(name: str, word: int) -> bool:
    """``aarch64_insn_is_NAME(word)``."""
    mask, value = INSN_FUNCS[name]
    return word & mask == value


def is_class_branch_sys(word: int) -> bool:
    """``aarch64_insn_is_class_branch_sys``: op0 (bits 28-25) is 101x, the "branches,
    exception generating and system instructions" group of the A64 encoding table."""
    return word & 0x1C000000 == 0x14000000


def is_branch(word: int) -> bool:
    """``aarch64_insn_is_branch`` (arch/arm64/lib/insn.c): b, bl, cb*, tb*, ret*, br*, blr*, b.cond."""
    return any(insn_is(n, word) for n in ("b", "bl", "cbz", "cbnz", "tbz", "tbnz", "ret", "ret_auth", "br",
                                          "br_auth", "blr", "blr_auth", "bcond"))


def uses_literal(word: int) -> bool:
    """``aarch64_insn_uses_literal``: ldr/ldrsw (literal), adr/adrp, prfm (literal)."""
    return any(insn_is(n, word) for n in ("ldr_lit", "ldrsw_lit", "adr", "adrp", "prfm_lit"))


#: the HINT instructions aarch64_insn_is_steppable_hint takes (``insn & 0xFE0``, Linux 6.1's
#: arch/arm64/lib/insn.c: NOP, the PAC* and XPACLRI hints, the four BTI forms; AUT* are refused
#: since 5.9, "arm64: kprobe: disable probe of ptrauth instruction")
STEPPABLE_HINTS = {
    0x000: "nop", 0x0E0: "xpaclri", 0x100: "pacia1716", 0x140: "pacib1716",
    0x300: "paciaz", 0x320: "paciasp", 0x340: "pacibz", 0x360: "pacibsp",
    0x400: "bti", 0x440: "bti c", 0x480: "bti j", 0x4C0: "bti jc",
}
#: ``mrs Xt, daif``'s system register field (aarch64_insn_extract_system_reg: bits 20-5):
#: AARCH64_INSN_SPCLREG_DAIF
SPCLREG_DAIF = 0xDA11


def is_steppable(word: int) -> bool:
    """``aarch64_insn_is_steppable`` (decode-insn.c): may run from an out-of-line slot."""
    if is_class_branch_sys(word):
        if (is_branch(word) or insn_is("msr_imm", word) or insn_is("msr_reg", word)
                or insn_is("exception", word) or insn_is("eret", word) or insn_is("eret_auth", word)):
            return False
        if insn_is("mrs", word):
            return (word & 0x1FFFE0) >> 5 != SPCLREG_DAIF
        if insn_is("hint", word):
            return word & 0xFE0 in STEPPABLE_HINTS
        return True
    return not (uses_literal(word) or insn_is("exclusive", word))


#: what ``arm_kprobe_decode_insn`` / ``arm_probe_decode_insn`` simulate instead of stepping
#: (simulate-insn.c), by the insn.h predicate that picks each handler
SIMULATED = ("ldr_lit", "ldrsw_lit", "bcond", "cbz", "cbnz", "tbz", "tbnz", "adr", "adrp", "b", "bl", "br",
             "blr", "ret")


def decode(word: int) -> tuple[str, str]:
    """What the kernel's decoder makes of ``word``: ``("step", "")`` (INSN_GOOD: stepped
    out of line), ``("simulate", predicate)`` (INSN_GOOD_NO_SLOT) or ``("reject", why)``
    (INSN_REJECTED: ``register_kprobe`` fails with EINVAL)."""
    for name in SIMULATED[:2]:  # arm_kprobe_decode_insn checks the literal loads first
        if insn_is(name, word):
            return "simulate", name
    if is_steppable(word):
        return "step", ""
    for name in SIMULATED[2:]:
        if insn_is(name, word):
            return "simulate", name
    return "reject", _rejected_why(word)


def _rejected_why(word: int) -> str:
    if insn_is("exclusive", word):
        return "an exclusive load/store (it would never complete when stepped)"
    if insn_is("exception", word):
        return "an exception-generating instruction (svc, hvc, smc, brk, hlt, dcps)"
    if insn_is("eret", word) or insn_is("eret_auth", word):
        return "an exception return"
    if insn_is("msr_imm", word) or insn_is("msr_reg", word):
        return "an msr (it may change the CPU's state under the step)"
    if insn_is("mrs", word):
        return "an mrs of DAIF (the step runs with other interrupt masks)"
    if insn_is("hint", word):
        return "a hint other than nop, pac* and bti (wfi, wfe, yield, sev, aut*...)"
    if is_branch(word):
        return "a pointer-authenticating branch (braa, blraa, retaa...), which the kernel does not simulate"
    if insn_is("prfm_lit", word):
        return "a prfm (literal), which the kernel does not simulate"
    return "an instruction the kernel neither steps nor simulates"


def _word(insn: capstone.CsInsn) -> int:
    return int.from_bytes(bytes(insn.bytes[:4]), "little")


def classify(insn: capstone.CsInsn) -> tuple[bool, str | None]:
    """(boostable, refused reason): boostable where the kernel would step the instruction
    out of line (it reads no pc); the instructions the kernel simulates are followed in
    place; the ones it rejects are refused with its reason."""
    kind, why = decode(_word(insn))
    if kind == "reject":
        return False, f"{insn.mnemonic} cannot be probed: {why} (arch/arm64/kernel/probes/decode-insn.c)"
    return kind == "step", None


#: MAX_ATOMIC_CONTEXT_SIZE (arch/arm64/kernel/probes/decode-insn.h): instructions looked back
MAX_ATOMIC_CONTEXT_SIZE = 16


def in_atomic_sequence(before: bytes, addr: int) -> str | None:
    """``is_probed_address_atomic`` (decode-insn.c): a probe after an exclusive load with no
    exclusive store since, within the function and 16 instructions back, would make the
    sequence fail forever (the exception clears the exclusive monitor): refused."""
    for at in range(len(before) - 4, -1, -4):
        word = int.from_bytes(before[at:at + 4], "little")
        if insn_is("store_ex", word):
            return None
        if insn_is("load_ex", word):
            return (f"{addr:#x} is inside an exclusive load/store sequence (an ldxr at "
                    f"{addr - len(before) + at:#x}, no stxr since: arch/arm64/kernel/probes/decode-insn.c)")
    return None


def successors(insn: capstone.CsInsn, reg: ReadReg, mem: ReadMem, word: int) -> set[int] | None:
    """Where execution can go after ``insn``, as simulate-insn.c computes each branch's
    target (both ways for the conditional ones, whose flags or register decide)."""
    w = _word(insn)
    pc, nxt = insn.address, insn.address + 4
    mask = (1 << 64) - 1
    if insn_is("b", w) or insn_is("bl", w):
        return {(pc + sign_extend((w & 0x3FFFFFF) << 2, 28)) & mask}
    if insn_is("bcond", w) or insn_is("cbz", w) or insn_is("cbnz", w):
        return {nxt, (pc + sign_extend(((w >> 5) & 0x7FFFF) << 2, 21)) & mask}
    if insn_is("tbz", w) or insn_is("tbnz", w):
        return {nxt, (pc + sign_extend(((w >> 5) & 0x3FFF) << 2, 16)) & mask}
    if insn_is("br", w) or insn_is("blr", w) or insn_is("ret", w):
        rn = (w >> 5) & 31
        return {reg(f"x{rn}") if rn != 31 else 0}  # Rn 31 is xzr here
    if is_branch(w) or insn_is("eret", w) or insn_is("eret_auth", w):
        return None  # an authenticated branch (its target a signed pointer), an exception return
    if insn_is("exception", w) and w & 0x1F != 1:  # svc returns after itself; brk, hlt... trap
        return None
    return {nxt}


# -- code kpsdk writes ------------------------------------------------------------------------------

_X16, _X17, _X30, _SP = 16, 17, 30, 31


def _b(at: int, target: int, link: bool = False) -> int | None:
    """``b``/``bl target``: +-128 MiB."""
    off = target - at
    if off & 3 or not -(1 << 27) <= off < (1 << 27):
        return None
    return (0x94000000 if link else 0x14000000) | (off >> 2) & 0x3FFFFFF


def _ldr_lit(rt: int, offset: int) -> int:
    """``ldr Xt, pc + offset``."""
    assert offset % 4 == 0 and -(1 << 20) <= offset < (1 << 20)
    return 0x58000000 | ((offset >> 2) & 0x7FFFF) << 5 | rt


def _ldr(rt: int, rn: int, offset: int = 0) -> int:
    """``ldr Xt, [Xn, #offset]`` (unsigned, scaled by 8)."""
    assert offset % 8 == 0 and 0 <= offset < 32768
    return 0xF9400000 | (offset >> 3) << 10 | rn << 5 | rt


def _str(rt: int, rn: int, offset: int = 0) -> int:
    """``str Xt, [Xn, #offset]``."""
    assert offset % 8 == 0 and 0 <= offset < 32768
    return 0xF9000000 | (offset >> 3) << 10 | rn << 5 | rt


def _cbz(rt: int, offset: int, nonzero: bool = False) -> int:
    return (0xB5000000 if nonzero else 0xB4000000) | ((offset >> 2) & 0x7FFFF) << 5 | rt


def _bcond(cond: int, offset: int) -> int:
    return 0x54000000 | ((offset >> 2) & 0x7FFFF) << 5 | cond


_NE, _HS = 1, 2


def _add_sp(rd: int, rn: int, imm: int = 0) -> int:
    """``add Xd|SP, Xn|SP, #imm`` (``mov x16, sp`` is ``add x16, sp, #0``)."""
    assert 0 <= imm < 4096
    return 0x91000000 | imm << 10 | rn << 5 | rd


def _sub_imm(rd: int, rn: int, imm: int) -> int:
    return 0xD1000000 | imm << 10 | rn << 5 | rd


def _add_lsl(rd: int, rn: int, rm: int, shift: int) -> int:
    """``add Xd, Xn, Xm, lsl #shift``."""
    return 0x8B000000 | rm << 16 | shift << 10 | rn << 5 | rd


def _cmp(rn: int, rm: int) -> int:
    """``cmp Xn|SP, Xm`` (``subs xzr, Xn|SP, Xm, uxtx``: the extended form takes sp)."""
    return 0xEB206000 | rm << 16 | rn << 5 | 31


def _stp(rt: int, rt2: int, rn: int) -> int:
    """``stp Xt, Xt2, [Xn]``."""
    return 0xA9000000 | rt2 << 10 | rn << 5 | rt


def _br(rn: int) -> int:
    return 0xD61F0000 | rn << 5


def _adrp(rd: int, at: int, target: int) -> int:
    pages = (target >> 12) - (at >> 12)
    assert -(1 << 20) <= pages < (1 << 20)
    imm = pages & 0x1FFFFF
    return 0x90000000 | (imm & 3) << 29 | (imm >> 2) << 5 | rd


_NOP = 0xD503201F


def _pack(words: list[int]) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


def jump_back(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b target`` (+-128 MiB), else None: an out-of-line copy runs between any two
    instructions of the guest's, where no register is free, so there is no longer jump
    (A64 has no branch through memory); the probe then runs through a code hook."""
    word = _b(at, target)
    return None if word is None else struct.pack("<I", word)


def return_jump(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline: ``adrp x17; add x16, sp, #0; str x16, [x17, lo12]`` stores
    sp at ``sp_word`` (x16 and x17, IP0/IP1, hold nothing a caller may keep across a call),
    then ``ldr x30, word; br x30`` through the doubleword at 24, leaving x30 holding the real
    return address as ``ret`` would have.  Returns the code, the offset of the jump
    (the hooked ``ldr``) and of the doubleword."""
    assert at % 8 == 0 and sp_word % 8 == 0
    words = [_adrp(_X17, at, sp_word), _add_sp(_X16, _SP), _str(_X16, _X17, sp_word & 0xFFF),
             _ldr_lit(_X30, 12), _br(_X30), _NOP]
    return _pack(words) + bytes(8), 12, 24


def near_jump(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b target`` (4 bytes, +-128 MiB): the jump a return probe's detour writes over a
    function entry; None out of range."""
    return jump_back(at, target, iset)


def _with_literals(at: int, words: list[int], literals: list[int]) -> tuple[bytes, int]:
    """The code, then the doublewords ``literals`` 8-aligned after it; and where they start."""
    lit = 4 * len(words) + (-(at + 4 * len(words)) % 8)
    return _pack(words) + bytes(lit - 4 * len(words)) + struct.pack(f"<{len(literals)}Q", *literals), lit


def entry_detour(at: int, iset: InstructionSet, d: EntryDetour) -> tuple[bytes, int]:
    """The return probes' fast entry (:class:`~kpsdk.arch.EntryDetour`).  It uses x16 and
    x17 only, which the AAPCS64 gives veneers and PLT stubs at every call (a function's
    entry cannot expect anything in them), stores nothing but the count and the record
    (one ``stp``), and leaves the flags alone.  x30 is free once written to the record."""
    lits = 64  # gate, avail, records, tramp
    words = [
        _ldr_lit(_X16, lits - 0), _ldr(_X17, _X16), 0,  # 8: cbnz x17, slow
        _ldr_lit(_X16, lits + 8 - 12), _ldr(_X17, _X16), 0,  # 20: cbz x17, slow
        _sub_imm(_X17, _X17, 1), _str(_X17, _X16),
        _ldr_lit(_X16, lits + 16 - 32), _add_lsl(_X16, _X16, _X17, 4),
        _add_sp(_X17, _SP), _stp(_X30, _X17, _X16),
        _ldr_lit(_X30, lits + 24 - 48), 0,  # 52: b resume
        0,  # 56: slow: b resume (hooked)
    ]
    slow = 56
    words[2] = _cbz(_X17, slow - 8, nonzero=True)
    words[5] = _cbz(_X17, slow - 20)
    for i in (13, 14):
        jump = _b(at + 4 * i, d.resume)
        assert jump is not None, "a detour's block is in kpsdk's area, near its resume code"
        words[i] = jump
    code, lit = _with_literals(at, words, [d.gate, d.avail, d.records, d.tramp])
    assert lit == lits and at % 8 == 0
    return code, slow


def return_detour(at: int, iset: InstructionSet, r: ReturnDetour) -> tuple[bytes, int, int]:
    """The return half (:class:`~kpsdk.arch.ReturnDetour`): x16, x17 and x30 (which holds this
    code's address) are free after a return, and so are the flags; x0-x7 are kept."""
    assert 0 <= r.ret_sp < 4096
    words = [
        _ldr_lit(_X16, 64), _ldr(_X17, _X16), _ldr(_X30, _X16, 8),  # n, free
        _cmp(_X17, _X30), _bcond(_HS, 52 - 16),  # 16: b.hs general
        _ldr_lit(_X30, 72 - 20), _add_lsl(_X17, _X30, _X17, 4),
        _ldr(_X30, _X17, 8), _add_sp(_X30, _X30, r.ret_sp),
        _cmp(_SP, _X30), _bcond(_NE, 52 - 40),  # 40: b.ne general
        _ldr(_X17, _X17), _br(_X17),  # 44: short
        _ldr(_X17, _X16, 16), _br(_X17),  # 52: general
    ]
    code, lit = _with_literals(at, words, [r.avail, r.records])
    assert lit == 64 and at % 8 == 0
    return code, 44, 52


A64_ISET = InstructionSet(
    name="aarch64",
    capstone=(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
    keystone=(keystone.KS_ARCH_ARM64, keystone.KS_MODE_LITTLE_ENDIAN),
    kernel_breakpoints={4: struct.pack("<I", KPROBES_BRK)},
    unicorn_breakpoint=Breakpoint({4: struct.pack("<I", KPROBES_BRK)}, intno=7, pc_adjust=0),
    min_insn=4,
    length_rule=lambda code: 4,
    # AAPCS64 frame records: ``stp x29, x30, [sp, #-N]!; mov x29, sp`` leaves x29 at the saved
    # x29, the saved x30 above it; GCC keeps them in leaf functions too with -fno-omit-frame-pointer
    frame_record=FrameRecord(fp="x29", saved_fp=0, saved_ret=8, sets_fp=r"(mov x29, sp|add x29, sp, )",
                             restores_fp=r"ldp x29, x30, "),
)


def unicorn_setup(uc: unicorn.Uc) -> None:
    """The FP/SIMD state Linux gives a new process: CPACR_EL1.FPEN open (a task's first FP
    instruction never traps for good: the kernel enables it on first use) and FPCR 0
    (``fpsimd_flush_thread`` zeroes the state: round to nearest, no flush-to-zero, no
    default NaN), FPSR 0."""
    uc.reg_write(u64.UC_ARM64_REG_CPACR_EL1, uc.reg_read(u64.UC_ARM64_REG_CPACR_EL1) | (3 << 20))
    uc.reg_write(u64.UC_ARM64_REG_FPCR, 0)
    uc.reg_write(u64.UC_ARM64_REG_FPSR, 0)


#: AT_HWCAP (arch/arm64/include/uapi/asm/hwcap.h) of Unicorn 2.1.4's default CPU, a Cortex-A72
#: with the crypto extension: FP, ASIMD, AES, PMULL, SHA1, SHA2, CRC32.  Not CPUID (glibc would
#: read MIDR_EL1 to pick memcpy by core, an EL0 trap the kernel emulates) nor ATOMICS (no LSE on A72)
#: the open(2) flags whose bits differ from asm-generic's (arch/arm64/include/uapi/asm/fcntl.h: ARM's)
OPEN_FLAG_BITS = (("O_DIRECTORY", 0o40000), ("O_NOFOLLOW", 0o100000), ("O_DIRECT", 0o200000),
                  ("O_LARGEFILE", 0o400000), ("O_TMPFILE", 0o20040000))
HWCAP = 1 << 0 | 1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7

#: binutils bfd/elfnn-aarch64.c: PLT_ENTRY_SIZE (PLT0, 32 bytes) and PLT_SMALL_ENTRY_SIZE (16:
#: ``adrp x16; ldr x17, [x16, lo12]; add x16, x16, lo12; br x17``); with BTI or PAC (-z force-bti,
#: -z pac-plt) the stubs are PLT_BTI_SMALL_ENTRY_SIZE / PLT_PAC_SMALL_ENTRY_SIZE (24)
AARCH64_PLT = (PltTable(".plt", 32, 16, source="binutils bfd/elfnn-aarch64.c PLT_SMALL_ENTRY_SIZE"),
               PltTable(".plt", 32, 24, source="binutils bfd/elfnn-aarch64.c PLT_BTI_SMALL_ENTRY_SIZE"))

#: PSTATE.I (arch/arm64/include/uapi/asm/ptrace.h PSR_I_BIT): IRQs masked
PSR_I_BIT = 0x80
#: an arm64 kernel keeps ``current`` in SP_EL0 while it runs (arch/arm64/include/asm/current.h:
#: ``get_current`` reads sp_el0; entry.S loads it with the task on every entry from EL0), QEMU's
#: gdbstub shows it among the system registers as SP_EL0; the preempt count is in thread_info
#: (no per-cpu one); TIF_NEED_RESCHED is bit 1 (arch/arm64/include/asm/thread_info.h)
KERNEL_TASKS = KernelTasks(
    percpu_register="",
    current=(),
    flags_register="cpsr",
    irqs_disabled=lambda pstate: bool(pstate & PSR_I_BIT),
    need_resched_bit=1,
    current_register="SP_EL0",
)

#: AArch64's debug hardware (Arm ARM D2.10 "Watchpoint exceptions"; Linux
#: arch/arm64/kernel/hw_breakpoint.c): QEMU's cortex-a57 and max CPUs report ID_AA64DFR0_EL1.WRPs = 3
#: and BRPs = 5 (4 watchpoints, 6 breakpoints, separate pools).  A watchpoint's Byte Address
#: Select watches any 1-8 bytes inside one aligned doubleword (Linux takes lengths 1-8 and fits
#: them there); its MASK field watches a naturally aligned power of two from 8 bytes to 2 GiB.
#: An AArch64 breakpoint is 4 bytes.
WATCH = WatchRules(slots=4, types=frozenset({"x", "w", "r", "rw"}), lengths=tuple(range(1, 9)), aligned=False,
                   window=8, exec_lengths=(4,), exec_slots=6, masked=(8, 1 << 31),
                   source="Arm ARM D2.10 (DBGWCR BAS, MASK); QEMU cortex-a57 ID_AA64DFR0_EL1; Linux hw_breakpoint")

#: DWARF register numbers, "DWARF for the Arm 64-bit Architecture" (AADWARF64, table 1): 0-30 x0-x30
#: (30, the link register, is the return address column of the call frame information), 31 sp, 32
#: the pc, 64-95 the SIMD and floating-point v0-v31, read as their low 64 bits (d0-d31: a float
#: or double kept there is in those bits)
DWARF_AARCH64 = DwarfRegisters({**{i: f"x{i}" for i in range(31)}, 31: "sp", 32: "pc",
                                **{64 + i: f"d{i}" for i in range(32)}})


AARCH64 = Arch(
    name="aarch64",
    aliases=("arm64", "armv8"),
    # QEMU's aarch64 plugin registers are gdb's (aarch64-core.xml: x0-x30, sp, pc, cpsr) and its
    # system registers' (SP_EL0: the kernel's current); 24 fit the snapshot
    plugin_registers=(*((f"x{i}", f"x{i}") for i in range(19)), ("x29", "x29"), ("x30", "x30"), ("sp", "sp"),
                      ("cpsr", "cpsr"), ("SP_EL0", "SP_EL0")),
    bits=64,
    endian="little",
    registers=_REGS,
    pc="pc",
    sp="sp",
    return_value="x0",
    link="x30",
    kernel_abi=Abi(tuple(f"x{i}" for i in range(8)), stack_args_offset=0),
    user_abi=Abi(tuple(f"x{i}" for i in range(8)), stack_args_offset=0),
    isets=(A64_ISET,),
    insn=InsnRules(classify, successors, in_atomic_sequence, 4 * MAX_ATOMIC_CONTEXT_SIZE),
    unicorn=(unicorn.UC_ARCH_ARM64, unicorn.UC_MODE_ARM),
    unicorn_unsupported=None,
    unicorn_setup=unicorn_setup,
    gdb_arch="aarch64",
    elf_machine="EM_AARCH64",
    elf_class=64,
    # ``svc #0``, the number in x8 (arch/arm64/kernel/syscall.c, el0_svc_common); Unicorn raises
    # EXCP_SWI (2) with the pc past the svc.  glibc sets its thread pointer itself (msr tpidr_el0)
    syscalls=Syscalls("x8", tuple(f"x{i}" for i in range(6)), "x0", 2, numbers.AARCH64,
                      linux=LinuxAbi("aarch64", HWCAP, machine="aarch64", sysroot="/usr/aarch64-linux-gnu",
                                     stat=StatLayout(*tables.STAT_GENERIC64), calls=tables.AARCH64,
                                     open_flag_bits=OPEN_FLAG_BITS,
                                     # clone(CLONE_SETTLS) sets TPIDR_EL0; glibc's clone.S passes tls in
                                     # x3 and the child's tid in x4, as on riscv64
                                     tls_register=u64.UC_ARM64_REG_TPIDR_EL0, clone_backwards=True)),
    stack_alignment=16,
    qemu_user="qemu-aarch64",
    multiarch="aarch64-linux-gnu",
    cross_libc_package="libc6-arm64-cross",
    plt=AARCH64_PLT,
    irelative=(1032,),  # R_AARCH64_IRELATIVE (ELF for the Arm 64-bit Architecture)
    tls_tpoff=(1030,),  # R_AARCH64_TLS_TPREL64
    qemu_system=QemuMachine("qemu-system-aarch64", "qemu-system-arm", machine="virt", cpu="cortex-a57",
                            console="ttyAMA0"),
    debian=DebianPort("arm64", "bookworm", "linux-image-arm64"),
    kernel_tasks=KERNEL_TASKS,
    watch=WATCH,
    cross_gcc_package="gcc-aarch64-linux-gnu",
    out_of_line=OutOfLine(jump_back, return_jump),
    detours=DetourCode(near_jump, entry_detour, return_detour, scratch=("x16", "x17")),
    dwarf=DWARF_AARCH64,
    toolchain=Toolchain((FixtureVariant("aarch64", ("-march=armv8-a", "-mbranch-protection=none"), demo=6),),
                        libc_dev="libc6-dev-arm64-cross"),
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [AARCH64]
