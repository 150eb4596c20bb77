"""MIPS: ``mips`` (32-bit big-endian, o32), ``mipsel`` (32-bit little-endian, o32) and
``mips64el`` (64-bit little-endian, n64), one module declaring three arches as ppc64.py
declares two.

Delay slots.  Every MIPS branch and jump before Release 6 runs the instruction after it (its
*delay slot*) before it goes.  The kernel's kprobes follow from that
(arch/mips/kernel/kprobes.c): ``arch_prepare_kprobe`` refuses ``ll``/``lld``/``sc``/``scd``
("Kprobes for ll and sc instructions are not supported"), an instruction whose previous one
has a delay slot ("Kprobes for branch delayslot are not supported", the test being
``__insn_has_delay_slot`` of arch/mips/kernel/probes-common.h) and Release 6's compact
branches (none on the Release 2 CPUs here); a probed branch is *evaluated*
(``evaluate_branch_instruction``: ``__compute_return_epc_for_insn`` of
arch/mips/kernel/branch.c gives the new epc) and only its delay slot runs out of line, after
which the post_handler runs and the CPU resumes at the branch's target (at once, with
``SKIP_DELAYSLOT``, when the slot is a ``nop`` or a branch-likely is taken).  kpsdk runs a
probed branch in place, delay slot and all, and its post_handler where the branch went:
the same registers and the same place the kernel's post_handler sees.  Branches are not
boostable (they read the pc); the instructions the kernel refuses are refused with its
words; a probe after a coprocessor-1 instruction is refused too, because Linux's test counts
every ``cop1`` opcode as a branch (probes-common.h), though only ``bc1f``/``bc1t`` have a slot.

Unicorn 2.1.4.  Its MIPS CPUs run code in kernel mode (Status.ERL set), so ``rdhwr $29``
(UserLocal, the TLS pointer glibc reads) works without emulation on a Release 2 CPU, and
``set_thread_area`` writes ``CP0_UserLocal``; the MIPS64 default CPU is an R4000 (MIPS III: no
``rdhwr``, a reserved-instruction exception), so mips64el runs the 5KEf qemu-user picks
(``cpu_get_model`` in linux-user/mips64/target_elf.h) and mips/mipsel the 24Kf
(linux-user/mips/target_elf.h).  An n64 program lives above 4 GiB (``xuseg``), which the
MIPS64 CPU maps through its TLB: kpsdk's virtual TLB fill (kpsdk.targets.unicorn.tlb) serves it.
Three engine facts shape the rest, each measured here:

* On any exception but ``syscall`` the interrupt hook finds the pc at the last system call
  + 4 (``cpu_handle_exception`` sets it to ``uc->next_pc``, which only ``syscall`` updates):
  a ``break`` or ``teq`` says nothing of where it was.  So kpsdk's breakpoint on Unicorn is
  ``syscall 515`` (the kernel's code for its kprobe ``break``): interrupt 17, the pc 4 past it,
  told from the program's own system calls by the address (a real ``syscall`` is never
  where a breakpoint is, kpsdk having put the breakpoint there).
* Unicorn restores the CPU state of an instruction in a delay slot, the pending branch
  included (``cpu_restore_state`` before a memory hook runs, or in every fill of the virtual
  TLB: ``unicorn_vtlb.c``), and nothing clears it: the next translated block starts as a
  delay slot and its first instruction runs twice.  :func:`unicorn_settle` clears QEMU's
  ``MIPS_HFLAG_BMASK`` bits again (their place in the engine's state is found once, by
  making the engine do it, :func:`_hflags_offset`); the code the translator made for the
  branch clears them itself at run time, so clearing them early changes nothing else.
* A fault in a delay slot leaves the pc at the branch's target, the faulting access undone:
  a watched access there is re-run from its branch (:class:`~kpsdk.arch.DelaySlots`).
"""

from __future__ import annotations

import ctypes
import struct
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import capstone
import keystone
import unicorn
from unicorn import mips_const as um

from kpsdk import hookimpl
from kpsdk.arch import (
    Abi,
    Arch,
    Breakpoint,
    DebianPort,
    DelaySlots,
    DetourCode,
    DwarfRegisters,
    EntryDetour,
    FieldUse,
    InsnRules,
    InstructionSet,
    KernelTasks,
    LinuxAbi,
    OutOfLine,
    QemuMachine,
    Register,
    ReturnDetour,
    StatLayout,
    Syscalls,
    TaskCode,
    WatchRules,
)
from kpsdk.arch.fixture import FixtureVariant, Toolchain
from kpsdk.arch.insn import ReadMem, ReadReg, sign_extend
from kpsdk.arch_backends import syscall_numbers as numbers
from kpsdk.arch_backends import syscall_tables as tables
from kpsdk.errors import TargetError

# -- registers --------------------------------------------------------------------------------

#: o32's names of $0-$31, as gdb's mips-tdep.c and the psABI give them
O32_NAMES = ("zero", "at", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7",
             "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8", "t9", "k0", "k1", "gp", "sp", "s8", "ra")
#: n64's: $8-$11 are argument registers a4-a7, $12-$15 the temporaries t0-t3 (the n32/n64 psABI)
N64_NAMES = (*O32_NAMES[:8], "a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3", *O32_NAMES[16:])


def _dwarf(names: tuple[str, ...]) -> DwarfRegisters:
    """The MIPS psABI's DWARF numbers, as gcc emits them (gcc/config/mips/mips.cc's
    mips_dwarf_regno): $0-$31 are 0-31, $f0-$f31 32-63, hi 64 and lo 65; the return address
    column is ra's, 31."""
    return DwarfRegisters({**dict(enumerate(names)), **{32 + i: f"f{i}" for i in range(32)}, 64: "hi", 65: "lo"})


def _registers(names: tuple[str, ...], size: int) -> tuple[Register, ...]:
    """$0-$31 by their ABI names, with ``rN`` (the kernel's names in probe events:
    regoffset_table in arch/mips/kernel/ptrace.c) and s8's ``fp`` as aliases; pc, hi, lo,
    Status (the irqs-off bit of a trace line; Unicorn has no Cause or BadVAddr, so neither is
    here), and the FPU registers Unicorn names."""
    gprs = tuple(Register(n, size, getattr(um, f"UC_MIPS_REG_{i}"), n, (f"r{i}", "fp") if n == "s8" else (f"r{i}",))
                 for i, n in enumerate(names))
    return (
        *gprs,
        Register("pc", size, um.UC_MIPS_REG_PC, "pc", ("epc", "cp0_epc")),
        Register("hi", size, um.UC_MIPS_REG_HI, "hi"),
        Register("lo", size, um.UC_MIPS_REG_LO, "lo"),
        Register("sr", size, um.UC_MIPS_REG_CP0_STATUS, "sr", ("status", "cp0_status")),
        *(Register(f"f{i}", 8, getattr(um, f"UC_MIPS_REG_F{i}"), f"f{i}") for i in range(32)),
        Register("fcsr", 4, um.UC_MIPS_REG_FCSR, "fsr", ("fcr31",)),
        Register("fir", 4, um.UC_MIPS_REG_FIR, "fir", ("fcr0",)),
    )


# -- instructions (the fields of ``union mips_instruction``, arch/mips/include/uapi/asm/inst.h) --

SPECIAL, REGIMM, J, JAL, BEQ, BNE, BLEZ, BGTZ = 0, 1, 2, 3, 4, 5, 6, 7
COP0, COP1 = 0x10, 0x11
BEQL, BNEL, BLEZL, BGTZL = 0x14, 0x15, 0x16, 0x17
JALX = 0x1D
LL, LLD, SC, SCD = 0x30, 0x34, 0x38, 0x3C
#: SPECIAL's function field
F_JR, F_JALR, F_SYSCALL, F_BREAK = 0x08, 0x09, 0x0C, 0x0D
F_TRAPS = frozenset({0x30, 0x31, 0x32, 0x33, 0x34, 0x36})  # tge tgeu tlt tltu teq tne
#: REGIMM's rt field: the branches, then the traps on an immediate
R_BRANCHES = {0x00: "bltz", 0x01: "bgez", 0x02: "bltzl", 0x03: "bgezl", 0x10: "bltzal", 0x11: "bgezal",
              0x12: "bltzall", 0x13: "bgezall", 0x1C: "bposge32"}
R_LINKS = frozenset({0x10, 0x11, 0x12, 0x13})
R_TRAPS = frozenset({0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0E})
#: COP1's rs field of bc1f/bc1t/bc1fl/bc1tl
COP1_BC = 0x08
#: COP0's function field with rs = CO: eret, deret, wait
COP0_RETURNS = frozenset({0x18, 0x1F})
#: the code kprobes gives its ``break`` (BRK_KPROBE_BP, arch/mips/include/uapi/asm/break.h)
BRK_KPROBE_BP = 515


def _word(insn: capstone.CsInsn) -> int:
    """The instruction's 32 bits, in the byte order its code is in."""
    order: Literal["big", "little"] = "big" if insn._cs.mode & capstone.CS_MODE_BIG_ENDIAN else "little"
    return int.from_bytes(bytes(insn.bytes[:4]), order)


def _fields(w: int) -> tuple[int, int, int, int]:
    """opcode, rs, rt, function."""
    return w >> 26, (w >> 21) & 31, (w >> 16) & 31, w & 63


def kernel_has_delay_slot(w: int) -> bool:
    """``__insn_has_delay_slot`` (arch/mips/kernel/probes-common.h): the kernel's test,
    which counts every coprocessor-1 instruction (and on Octeon the cop2 loads) as a branch."""
    op, _rs, rt, fn = _fields(w)
    if op == SPECIAL:
        return fn in (F_JR, F_JALR)
    if op == REGIMM:
        return rt in R_BRANCHES
    return op in (J, JAL, BEQ, BEQL, BNE, BNEL, BLEZ, BLEZL, BGTZ, BGTZL, COP1)


def has_delay_slot(w: int) -> bool:
    """Whether the CPU runs the next instruction before this one goes on: the kernel's test,
    less the coprocessor-1 instructions that are not ``bc1f``/``bc1t`` (and ``jalx``, whose
    slot kpsdk never reaches: it is refused)."""
    op, rs, _rt, _fn = _fields(w)
    if op == COP1:
        return rs == COP1_BC
    return kernel_has_delay_slot(w)


def _links(w: int) -> bool:
    """``jal``, ``jalr``, ``bal`` and the other ``*al`` branches: they write the return address."""
    op, _rs, rt, fn = _fields(w)
    return op in (JAL, JALX) or (op == SPECIAL and fn == F_JALR) or (op == REGIMM and rt in R_LINKS)


def is_call(insn: capstone.CsInsn) -> bool:
    """A branch that links (:func:`_links`): capstone 5 puts MIPS calls in no CALL group."""
    return insn.size == 4 and _links(_word(insn))


def classify(insn: capstone.CsInsn) -> tuple[bool, str | None]:
    """(boostable, refused): the kernel's refusals (``arch_prepare_kprobe``); branches read the
    pc and traps report it, so neither runs out of line (the delay slot's refusal needs the
    instruction before: :func:`refuses_after`)."""
    w = _word(insn)
    op, rs, rt, fn = _fields(w)
    if op in (LL, LLD, SC, SCD):
        return False, (f"{insn.mnemonic} cannot be probed: Kprobes for ll and sc instructions are not supported "
                       "(arch/mips/kernel/kprobes.c)")
    if op == JALX:
        return False, ("jalx cannot be probed: it switches to MIPS16e or microMIPS code, which kpsdk does not "
                       "decode")
    if has_delay_slot(w):
        return False, None
    trap = (op == SPECIAL and (fn in (F_SYSCALL, F_BREAK) or fn in F_TRAPS)) or (op == REGIMM and rt in R_TRAPS)
    privileged = op == COP0 and rs & 0x10 and fn in COP0_RETURNS
    return not (trap or privileged), None


def refuses_after(previous: bytes, order: str) -> str | None:
    """Why a probe is refused on the instruction after ``previous`` (the kernel's words), or None."""
    if len(previous) < 4:
        return None
    if not kernel_has_delay_slot(int.from_bytes(previous[:4], "big" if order == ">" else "little")):
        return None
    return "Kprobes for branch delayslot are not supported (arch/mips/kernel/kprobes.c)"


def _successors(names: tuple[str, ...]) -> Callable[[capstone.CsInsn, ReadReg, ReadMem, int], set[int] | None]:
    def successors(insn: capstone.CsInsn, reg: ReadReg, mem: ReadMem, word: int) -> set[int] | None:
        """Where execution goes after ``insn`` (and its delay slot): a branch's target and the
        instruction after its slot, as ``__compute_return_epc_for_insn`` (branch.c) computes
        them; ``eret``'s is the system's business."""
        w = _word(insn)
        op, rs, rt, fn = _fields(w)
        pc = insn.address
        mask = (1 << (8 * word)) - 1
        taken = (pc + 4 + (sign_extend(w & 0xFFFF, 16) << 2)) & mask
        after = pc + 8
        if op == SPECIAL and fn in (F_JR, F_JALR):
            return {reg(names[rs]) & mask}
        if op in (J, JAL):
            return {((pc + 4) & ~0x0FFFFFFF & mask) | (w & 0x03FFFFFF) << 2}
        if op == REGIMM and rt in R_BRANCHES:
            return {taken} if rs == 0 and rt in (0x01, 0x11) else {taken, after}  # bal / b: always
        if op in (BEQ, BEQL) and rs == rt:
            return {taken}  # b (beq $0, $0)
        if op in (BEQ, BNE, BLEZ, BGTZ, BEQL, BNEL, BLEZL, BGTZL) or (op == COP1 and rs == COP1_BC):
            return {taken, after}
        if op == COP0 and rs & 0x10 and fn in COP0_RETURNS:
            return None
        return {pc + 4}

    return successors


def _prologue(endian: Literal["big", "little"]) -> Callable[[bytes, int], tuple[int, int | None]]:
    def prologue(code: bytes, start: int) -> tuple[int, int | None]:
        """The frame the code from a function's start up to the pc has set up: what MIPS's own
        unwinder reads (``get_frame_info``, arch/mips/kernel/process.c: the stack-pointer move
        ``addiu``/``daddiu sp, sp, -N`` and the return-address save ``sw``/``sd ra, off(sp)``);
        an ``addiu sp, sp, +N`` after them pops the frame (the epilogue: ra is back in its
        register).  gcc's MIPS frame pointer is the stack pointer after the move, so its frames
        link nothing a frame-pointer walk could follow."""
        size, saved = 0, None
        for i in range(0, len(code) - 3, 4):
            w = int.from_bytes(code[i:i + 4], endian)
            op, rs, rt = w >> 26, (w >> 21) & 31, (w >> 16) & 31
            imm = sign_extend(w & 0xFFFF, 16)
            if op in (0x09, 0x19) and rs == 29 and rt == 29:  # addiu / daddiu sp, sp, imm
                size -= imm
                if size <= 0:
                    size, saved = 0, None
            elif op in (0x2B, 0x3F) and rs == 29 and rt == 31 and saved is None:  # sw / sd ra, off(sp)
                saved = imm
        return size, saved

    return prologue


# -- out of line ----------------------------------------------------------------------------


def _pack(order: str, *words: int) -> bytes:
    return struct.pack(f"{order}{len(words)}I", *words)


def _jump(at: int, target: int, order: str) -> bytes | None:
    """``j target; nop`` where ``target`` lies in the 256 MiB region of the delay slot (the
    jump's reach: bits 31-28, or 63-28, come from the slot's address), else None."""
    if target & 3 or (at + 4) >> 28 != target >> 28:
        return None
    return _pack(order, J << 26 | (target >> 2) & 0x03FFFFFF, 0)


def jump_back(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """The booster's jump back (the copy of a probed instruction, then this): ``j`` and a
    ``nop`` in its delay slot, when the function is in the slot's 256 MiB region.  Further
    away there is no booster (a probe there takes the hook path): a longer jump would need a
    register, and none is free at an arbitrary instruction (``$at`` belongs to the
    assembler's macros)."""
    return _jump(at, target, _order(iset))


#: ``bal .+8; nop``: ra = the address after the delay slot (``bgezal $0, 1``)
_BAL_NEXT = 0x04110001
_JR_T9 = 0x03200008
_MOVE_RA_T9 = 0x0320F825  # or ra, t9, zero


def return_jump(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline: ``bal`` to the next instruction (its own address in ra: ra
    is dead once the probed function has returned), then, hooked, ``lw``/``ld t9, 16(ra)``
    of the word kpsdk writes just before it runs, ``jr t9`` with ``move ra, t9`` in the delay
    slot, so ra holds the real return address as a plain return leaves it.  t9 is a
    temporary a call may clobber.  It does not store sp (kpsdk reads it).  Returns the
    code, the offset of the hooked load and of the word."""
    order = _order(iset)
    load = (0x37 if iset.capstone[1] & capstone.CS_MODE_MIPS64 else 0x23) << 26 | 31 << 21 | 25 << 16 | 16
    return _pack(order, _BAL_NEXT, 0, load, _JR_T9, _MOVE_RA_T9, 0) + bytes(8), 8, 24


def _order(iset: InstructionSet) -> str:
    return ">" if iset.capstone[1] & capstone.CS_MODE_BIG_ENDIAN else "<"


# -- detours: a kretprobe's entry and return in guest code (kpsdk.targets.unicorn.detour) ---------

AT, T9, K0, K1, SP, RA = 1, 25, 26, 27, 29, 31


def _r(rs: int, rt: int, rd: int, sa: int, fn: int) -> int:
    return rs << 21 | rt << 16 | rd << 11 | sa << 6 | fn


def _i(op: int, rs: int, rt: int, imm: int) -> int:
    return op << 26 | rs << 21 | rt << 16 | (imm & 0xFFFF)


class _Code:
    """Guest code for one instruction set, word by word, with branches to labels and loads of
    literals placed after the code (reached from ``ra``, which ``bal`` pointed at ``base``)."""

    def __init__(self, iset: InstructionSet) -> None:
        self.wide = bool(iset.capstone[1] & capstone.CS_MODE_MIPS64)
        self.word = 8 if self.wide else 4
        self.order = _order(iset)
        #: kpsdk writes its data words in the host's byte order: a big-endian guest swaps them
        self.swap = self.order == ">"
        self.words: list[int | tuple[str, int, int, str]] = []
        self.labels: dict[str, int] = {}

    def emit(self, *words: int) -> None:
        self.words += words

    def label(self, name: str) -> None:
        self.labels[name] = 4 * len(self.words)

    def load(self, rt: int, base: int, off: int) -> None:
        self.emit(_i(0x37 if self.wide else 0x23, base, rt, off))

    def store(self, rt: int, base: int, off: int) -> None:
        self.emit(_i(0x3F if self.wide else 0x2B, base, rt, off))

    def addiu(self, rt: int, rs: int, imm: int) -> None:
        self.emit(_i(0x19 if self.wide else 0x09, rs, rt, imm))

    def addu(self, rd: int, rs: int, rt: int) -> None:
        self.emit(_r(rs, rt, rd, 0, 0x2D if self.wide else 0x21))

    def move(self, rd: int, rs: int) -> None:
        self.emit(_r(rs, 0, rd, 0, 0x25))  # or rd, rs, zero

    def scale(self, rd: int) -> None:
        """rd *= the size of a record (two words)."""
        self.emit(_r(0, rd, rd, 4, 0x38) if self.wide else _r(0, rd, rd, 3, 0x00))  # dsll 4 / sll 3

    def swap_word(self, rd: int) -> None:
        """A big-endian 32-bit guest reads and writes kpsdk's (little-endian) data words
        byte-swapped: ``wsbh rd, rd; rotr rd, rd, 16`` (MIPS32 Release 2)."""
        if self.swap:
            self.emit(31 << 26 | rd << 16 | rd << 11 | 2 << 6 | 0x20, _r(1, rd, rd, 16, 0x02))

    def branch(self, op: int, rs: int, rt: int, label: str) -> None:
        self.words.append(("b", op, rs << 5 | rt, label))
        self.emit(0)  # its delay slot

    def jump(self, target: int, at: int) -> None:
        code = _jump(at + 4 * len(self.words), target, self.order)
        assert code is not None, "a detour's jumps stay inside kpsdk's area"
        self.emit(*struct.unpack(self.order + "2I", code))

    def assemble(self, at: int, literals: list[int], lit_base: int) -> tuple[bytes, int]:
        """The code, then the literals word-aligned after it; and where they start (their
        offsets from ``lit_base`` were given to the loads as ``("lit", i)`` placeholders)."""
        n = 4 * len(self.words)
        lit = n + (-(at + n) % self.word)
        out = []
        for k, w in enumerate(self.words):
            if isinstance(w, tuple):
                kind, op, regs, name = w
                if kind == "b":
                    off = (self.labels[name] - 4 * (k + 1)) // 4
                    w = _i(op, regs >> 5, regs & 31, off)
                else:  # a literal load: regs is (rt << 5 | base), op the literal's index
                    w = _i(0x37 if self.wide else 0x23, regs & 31, regs >> 5, lit + self.word * op - lit_base)
            out.append(w)
        fmt = "Q" if self.wide else "I"
        return (struct.pack(f"{self.order}{len(out)}I", *out) + bytes(lit - n)
                + struct.pack(f"{self.order}{len(literals)}{fmt}", *literals)), lit

    def literal(self, rt: int, index: int) -> None:
        """rt = literal ``index`` (through ra, the base ``bal`` gave)."""
        self.words.append(("l", index, rt << 5 | RA, ""))


def entry_detour(at: int, iset: InstructionSet, d: EntryDetour) -> tuple[bytes, int]:
    """The return probes' fast entry (:class:`~kpsdk.arch.EntryDetour`), hand-encoded (no
    keystone in the hot setup).  It clobbers at, k0 and k1 only (at is the assembler's and free
    at a call, k0 and k1 the kernel's: nothing in a user program holds a value in them, and
    nothing interrupts kpsdk's code on Unicorn); ra is kept in k1 while ``bal`` gives the code
    its own address, from which it reads its literals (gate, avail, records, tramp)."""
    c = _Code(iset)
    c.move(K1, RA)
    c.emit(_BAL_NEXT, 0)  # ra = at + 12
    c.literal(K0, 0)
    c.load(K0, K0, 0)  # the gate (0 or not: no byte order to mind)
    c.branch(5, K0, 0, "slow")  # bnez
    c.literal(K0, 1)
    c.load(AT, K0, 0)  # the count
    c.swap_word(AT)
    c.branch(4, AT, 0, "slow")  # beqz
    c.addiu(AT, AT, -1)
    c.swap_word(AT)
    c.store(AT, K0, 0)
    c.swap_word(AT)
    c.literal(K0, 2)
    c.scale(AT)
    c.addu(K0, K0, AT)  # record n
    c.swap_word(K1)
    c.store(K1, K0, 0)  # the return address
    c.swap_word(K1)
    c.move(AT, SP)
    c.swap_word(AT)
    c.store(AT, K0, c.word)  # the entry sp
    c.literal(RA, 3)  # the return code
    c.jump(d.resume, at)
    c.label("slow")
    c.move(RA, K1)
    hook = 4 * len(c.words)
    c.jump(d.resume, at)
    code, _lit = c.assemble(at, [d.gate, d.avail, d.records, d.tramp], 12)
    return code, hook


def return_detour(at: int, iset: InstructionSet, r: ReturnDetour) -> tuple[bytes, int, int]:
    """The return half (:class:`~kpsdk.arch.ReturnDetour`): at, k0, k1 and t9 are free after a
    return (v0 and v1 hold the value); ``bal`` gives the code its address (ra is dead)."""
    c = _Code(iset)
    c.emit(_BAL_NEXT, 0)  # ra = at + 8
    c.literal(K0, 0)  # avail
    c.load(K1, K0, 0)
    c.swap_word(K1)
    c.load(AT, K0, c.word)
    c.swap_word(AT)
    c.emit(_r(K1, AT, T9, 0, 0x2B))  # sltu t9, k1, at
    c.branch(4, T9, 0, "general")  # beqz
    c.literal(T9, 1)  # records
    c.scale(K1)
    c.addu(T9, T9, K1)
    c.load(K1, T9, c.word)
    c.swap_word(K1)
    if r.ret_sp:
        c.addiu(K1, K1, r.ret_sp)
    c.branch(5, K1, SP, "general")  # bne
    short = 4 * len(c.words)
    c.load(T9, T9, 0)
    c.swap_word(T9)
    c.emit(_JR_T9, 0)
    c.label("general")
    general = 4 * len(c.words)
    c.load(T9, K0, 2 * c.word)
    c.swap_word(T9)
    c.emit(_JR_T9, 0)
    code, _lit = c.assemble(at, [r.avail, r.records], 8)
    return code, short, general


def near_jump(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``j target; nop`` over a function's first two instructions (the jump needs its delay
    slot: the second instruction must not run before the detour), within 256 MiB."""
    return _jump(at, target, _order(iset))


_STORES = frozenset({"sb", "sh", "sw", "sd", "swl", "swr", "sdl", "sdr", "sc", "scd", "swc1", "sdc1", "swxc1",
                     "sdxc1"})


def regs_access(insn: capstone.CsInsn) -> tuple[set[str], set[str]]:
    """The registers ``insn`` reads and writes, from its operands (capstone 5 has no MIPS
    ``regs_access``): stores and branches only read (the linking ones write ra), the rest
    write their first register operand and read the others."""
    names = [insn.reg_name(op.reg) for op in insn.operands if op.type == capstone.CS_OP_REG]
    names += [insn.reg_name(op.mem.base) for op in insn.operands if op.type == capstone.CS_OP_MEM]
    w = _word(insn)
    if insn.mnemonic in _STORES or has_delay_slot(w):
        return set(names), {"ra"} if _links(w) else set()
    if not names:
        return set(), set()
    return set(names[1:]), {names[0]}


# -- Unicorn ---------------------------------------------------------------------------------

#: Status bits (MIPS64 PRA): FR (64-bit FPU registers, as Linux runs an n64 task), and KX, SX,
#: UX (64-bit addressing in each mode; xuseg needs UX)
ST_FR, ST_KX, ST_SX, ST_UX = 1 << 26, 1 << 7, 1 << 6, 1 << 5


#: MIPS_ABI_FP_* (``.MIPS.abiflags``' fp_abi) -> the FPU modes code of that ABI runs in:
#: (single, soft, fr1, frdefault, fre), arch/mips/kernel/elf.c's ``fpu_reqs``; a file without
#: abiflags: anything but FR=1 (``none_req``)
FPU_REQS = {0: (True, True, True, True, True), 1: (False, False, False, True, True),
            2: (True, False, False, False, False), 3: (False, True, False, False, False),
            4: (False, False, False, False, False), 5: (False, False, True, True, True),
            6: (False, False, True, False, False), 7: (False, False, True, False, True)}
NONE_REQ = (True, True, False, True, True)
PT_MIPS_ABIFLAGS = 0x70000003


def fp_abi(path: Path) -> int | None:
    """The ``fp_abi`` of an ELF's ``.MIPS.abiflags`` (its PT_MIPS_ABIFLAGS segment), None
    without one (arch/mips/kernel/elf.c, ``arch_elf_pt_proc``)."""
    with open(path, "rb") as f:
        head = f.read(64)
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        phoff, phentsize, phnum = (struct.unpack_from(order + "Q", head, 32)[0], *struct.unpack_from(
            order + "HH", head, 54)) if wide else (struct.unpack_from(order + "I", head, 28)[0],
                                                   *struct.unpack_from(order + "HH", head, 42))
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            ph = table[i * phentsize:(i + 1) * phentsize]
            if struct.unpack_from(order + "I", ph)[0] != PT_MIPS_ABIFLAGS:
                continue
            offset = struct.unpack_from(order + ("Q" if wide else "I"), ph, 8 if wide else 4)[0]
            f.seek(offset + 7)  # version (2), isa_level, isa_rev, gpr_size, cpr1_size, cpr2_size, fp_abi
            return f.read(1)[0]
    return None


def o32_fr1(abis: tuple[int | None, ...], f64_r2: bool = True) -> bool:
    """Whether Linux runs an o32 program in FR=1 (``arch_check_elf``, with Debian's
    CONFIG_MIPS_O32_FP64_SUPPORT=y; ``f64_r2``: the CPU's FPU is 64-bit (FIR.F64) and it is
    MIPS32r2 or later, as the 24Kf here): the program's and interpreter's requirements joined;
    FPXX code runs in the mode the hardware prefers, FR=1 on such a CPU; FP64 code needs FR=1;
    FP32 (``-mfp32``) code and files without abiflags FR=0, the default.  ``abis``: the
    executable's fp_abi and its interpreter's (if it has one), None for a file without abiflags."""
    reqs = [NONE_REQ if a is None else FPU_REQS.get(a, FPU_REQS[4]) for a in abis]
    single, _soft, fr1, frdefault, fre = (all(r[i] for r in reqs) for i in range(5))
    if fre and not frdefault and not fr1:
        return True  # FRE, the hybrid mode: FR=1 with odd singles emulated (not a mode this CPU has)
    if (fr1 and frdefault) or (single and not frdefault):
        return f64_r2
    return fr1


def exec_state_o32(uc: unicorn.Uc, executable: Path, interpreter: Path | None) -> None:
    """The FPU mode Linux gives an o32 program at exec (:func:`o32_fr1`): Status.FR.  Debian's
    o32 code is FPXX (``-mfpxx``): FR=1 on the 24Kf, as on QEMU's."""
    fr1 = o32_fr1((fp_abi(executable),) + ((fp_abi(interpreter),) if interpreter is not None else ()))
    status = uc.reg_read(um.UC_MIPS_REG_CP0_STATUS)
    uc.reg_write(um.UC_MIPS_REG_CP0_STATUS, status | ST_FR if fr1 else status & ~ST_FR)


#: where an n64 PIE is loaded: Linux's ELF_ET_DYN_BASE for a task with MIPS64's 40-bit user space
#: (TASK_SIZE64 / 3 * 2, arch/mips/include/asm/elf.h, page-aligned): the x86_64 base kpsdk uses
#: elsewhere is beyond the 5KEf's 42 segment bits
PIE_BASE_N64 = 0xAAAAAAA000
#: the parts of xuseg (2 GiB up) an n64 process uses on Unicorn, each 512 MiB (one TLB entry of
#: two 256 MiB pages): above the 32-bit space up to 6 GiB (non-PIE programs load at 0x120000000)
#: and 1 GiB at PIE_BASE_N64
XUSEG_REGIONS = (*range(0x80000000, 0x180000000, 0x20000000), 0xAAA0000000, 0xAAC0000000)
#: PageMask of 256 MiB pages (MIPS64 PRA); EntryLo: cacheable, dirty, valid, global (no ASID)
PAGEMASK_256M, ENTRYLO_DVG = 0x1FFFE000, 2 << 3 | 7
_TLB_STUB: list[bytes] = []


def _tlb_stub() -> bytes:
    """The code that writes the wired TLB entries of :data:`XUSEG_REGIONS` (each to
    physical page 0: see :func:`unicorn_setup_n64`), assembled once."""
    if not _TLB_STUB:
        lines = [".set noreorder"]
        for i, va in enumerate(XUSEG_REGIONS):
            lines += [f"li $8, {i}", "mtc0 $8, $0", f"dli $9, {va:#x}", "dmtc0 $9, $10", f"li $10, {ENTRYLO_DVG}",
                      "dmtc0 $10, $2", "dmtc0 $10, $3", f"li $11, {PAGEMASK_256M:#x}", "mtc0 $11, $5", "tlbwi", "nop"]
        lines += [f"li $8, {len(XUSEG_REGIONS)}", "mtc0 $8, $6", "nop"]  # Wired: never replaced
        ks = keystone.Ks(keystone.KS_ARCH_MIPS, keystone.KS_MODE_MIPS64 | keystone.KS_MODE_LITTLE_ENDIAN)
        _TLB_STUB.append(bytes(ks.asm("\n".join(lines), STUB_AT)[0]))
    return _TLB_STUB[0]


STUB_AT = 0x1000


def unicorn_setup_n64(uc: unicorn.Uc) -> None:
    """An n64 process's CPU: 64-bit FPU registers (Status.FR: Linux's FR=1 for n64), 64-bit
    addressing (UX, SX, KX), without which the program at 0x120000000 is out of reach, and the
    TLB entries ``ll`` needs above 2 GiB.

    kpsdk's virtual TLB (kpsdk.targets.unicorn.tlb) serves every load, store and fetch, but
    QEMU's ``ll`` also translates its address for CP0's LLAddr through the CPU's own MMU
    (``cpu_mips_translate_address``), which in xuseg is the TLB: without an entry, glibc's
    first atomic on its own data is a TLB refill exception (measured: tcache_init).  LLAddr is
    only informational (``sc`` compares the virtual address), so the entries map every page
    to physical page 0; the code writing them runs once, from a page mapped for it."""
    uc.reg_write(um.UC_MIPS_REG_CP0_STATUS, uc.reg_read(um.UC_MIPS_REG_CP0_STATUS) | ST_FR | ST_KX | ST_SX | ST_UX)
    code = _tlb_stub()
    uc.mem_map(STUB_AT, 0x1000)
    try:
        uc.mem_write(STUB_AT, code)
        uc.emu_start(STUB_AT, STUB_AT + len(code))
    finally:
        uc.mem_unmap(STUB_AT, 0x1000)


#: QEMU's MIPS_HFLAG_BMASK (target/mips/cpu.h): the kind of branch whose delay slot runs;
#: BRANCH_KINDS its B, BC, BL and BR bits, one of which a delay slot always has
BMASK = 0x87F800
BRANCH_KINDS = 0x3800


class _UcContextHeader(ctypes.Structure):
    """Unicorn 2.1.4's ``struct uc_context`` up to its ``data`` (include/uc_priv.h)."""

    _fields_ = [("context_size", ctypes.c_size_t), ("mode", ctypes.c_int), ("arch", ctypes.c_int),
                ("snapshot_level", ctypes.c_int), ("ramblock_freed", ctypes.c_bool),
                ("last_block", ctypes.c_void_p), ("fv", ctypes.c_void_p)]


_HFLAGS: dict[tuple[int, int, int | None], int] = {}
_SETTLERS: weakref.WeakKeyDictionary[unicorn.Uc, tuple[Any, ctypes.c_uint32]] = weakref.WeakKeyDictionary()


def _data(ctx: Any) -> int:
    """The address of a saved context's CPU state, checked against its size."""
    base = ctx.context.value
    header = _UcContextHeader.from_address(base)
    if ctypes.sizeof(_UcContextHeader) + header.context_size != ctx.size:
        raise TargetError("Unicorn's saved context is not laid out as 2.1.4's: kpsdk cannot settle a MIPS "
                          "delay slot")
    return int(base) + ctypes.sizeof(_UcContextHeader)


def _hflags_offset(mode: int, cpu: int | None, order: str) -> int:
    """Where QEMU's ``hflags`` lies in the engine's CPU state: found by making a scratch
    engine of the same mode run a store in a delay slot under a memory hook (the state
    restored there has BMASK bits set) and comparing the state before and after."""
    key = (unicorn.UC_ARCH_MIPS, mode, cpu)
    if key in _HFLAGS:
        return _HFLAGS[key]
    uc = unicorn.Uc(unicorn.UC_ARCH_MIPS, mode)
    if cpu is not None:
        uc.ctl_set_cpu_model(cpu)
    base, data = 0x10000, 0x300000  # no value here or in the registers it sets has only BMASK bits
    uc.mem_map(base, 0x1000)
    uc.mem_map(data, 0x1000)
    # lui t0, 0x30 ; jal base+0x100 ; sw a0, 0(t0) [the delay slot] ; nop ... base+0x100: jr ra ; nop
    uc.mem_write(base, _pack(order, 0x3C080030, JAL << 26 | (base + 0x100) >> 2, 0xAD040000, 0))
    uc.mem_write(base + 0x100, _pack(order, 0x03E00008, 0))
    clean = uc.context_save()
    before = ctypes.string_at(_data(clean), clean.size - ctypes.sizeof(_UcContextHeader))
    seen: list[bytes] = []

    def hook(uc: unicorn.Uc, access: int, addr: int, size: int, value: int, user: Any) -> None:
        ctx = uc.context_save()
        seen.append(ctypes.string_at(_data(ctx), ctx.size - ctypes.sizeof(_UcContextHeader)))
        uc.emu_stop()

    uc.hook_add(unicorn.UC_HOOK_MEM_WRITE, hook, None, data, data + 3)
    uc.emu_start(base, base + 16, count=4)
    found = [off for off in range(0, len(before) - 3, 4) if seen and
             (a := int.from_bytes(before[off:off + 4], "little")) != (b := int.from_bytes(seen[0][off:off + 4],
                                                                                         "little"))
             and not (a ^ b) & ~BMASK and (a ^ b) & BRANCH_KINDS]
    if len(found) != 1:
        raise TargetError(f"kpsdk cannot find Unicorn's MIPS hflags ({len(found)} candidates): a hook inside a "
                          "delay slot would leave the engine in that slot")
    _HFLAGS[key] = found[0]
    return found[0]


def _settler(mode: int, cpu: int | None, order: str) -> Callable[[unicorn.Uc], None]:
    def unicorn_settle(uc: unicorn.Uc) -> None:
        """Clear the pending branch Unicorn restored into the engine for a hook or a TLB fill
        inside a delay slot (see the module's doc).  A saved context is the way in: updated
        (~0.7 us, no allocation), read, and written back only when the bits are set."""
        entry = _SETTLERS.get(uc)
        if entry is None:
            ctx = uc.context_save()
            entry = _SETTLERS[uc] = (ctx, ctypes.c_uint32.from_address(_data(ctx) + _hflags_offset(mode, cpu, order)))
        ctx, hflags = entry
        uc.context_update(ctx)
        if hflags.value & BMASK:
            hflags.value &= ~BMASK
            uc.context_restore(ctx)

    return unicorn_settle


def _delay_slots(order: str, mode: int, cpu: int | None) -> DelaySlots:
    endian: Literal["big", "little"] = "big" if order == ">" else "little"
    return DelaySlots(lambda prev: refuses_after(prev, order),
                      lambda raw: len(raw) >= 4 and has_delay_slot(int.from_bytes(raw[:4], endian)),
                      unicorn_settle=_settler(mode, cpu, order))


# -- the kernel ---------------------------------------------------------------------------------

#: the loads of a kernel's fields: bytes read
_LOAD_SIZES = {"lw": 4, "lh": 2, "lhu": 2, "lb": 1, "lbu": 1, "ld": 8, "lwu": 4}


def loads_current(insn: capstone.CsInsn) -> tuple[str, int] | None:
    """``lw``/``ld R, 0($28)``: a MIPS kernel keeps its thread_info in $28 while it runs
    (arch/mips/include/asm/thread_info.h: ``register struct thread_info *__current_thread_info
    __asm__("$28")``) and ``current`` is its first member, ``task`` (asm/current.h)."""
    ops = insn.operands
    if insn.mnemonic not in ("lw", "ld") or len(ops) != 2 or ops[1].type != capstone.CS_OP_MEM:
        return None
    if insn.reg_name(ops[1].mem.base) != "gp" or ops[1].mem.disp != 0:
        return None
    return insn.reg_name(ops[0].reg), 0


def current_field(insn: capstone.CsInsn, reg: str) -> FieldUse | None:
    """``lw X, d(R)`` (and the other loads) or ``addiu``/``daddiu X, R, d`` with current in R."""
    ops = insn.operands
    size = _LOAD_SIZES.get(insn.mnemonic)
    if size is not None and len(ops) == 2 and ops[1].type == capstone.CS_OP_MEM \
            and insn.reg_name(ops[1].mem.base) == reg:
        return "load", ops[1].mem.disp, size
    if insn.mnemonic in ("addiu", "daddiu") and len(ops) == 3 and ops[1].type == capstone.CS_OP_REG \
            and insn.reg_name(ops[1].reg) == reg and ops[2].type == capstone.CS_OP_IMM:
        return "address", ops[2].imm, 0
    return None


#: Status.IE: interrupts enabled (Linux masks them by clearing it: arch/mips/include/asm/irqflags.h)
ST_IE = 1
#: ``current`` is ``$28->task`` (thread_info's first member), read at offset 0 from $28, gdb's
#: ``gp``; task_struct's pid and comm come from the kernel's BTF, else from
#: dump_stack_print_info's code.  TIF_NEED_RESCHED is 2 (arch/mips/include/asm/thread_info.h).
KERNEL_TASKS = KernelTasks(
    percpu_register="gp",
    current=(),
    flags_register="sr",
    irqs_disabled=lambda status: not status & ST_IE,
    need_resched_bit=2,
    code=TaskCode("dump_stack_print_info", loads_current, current_field),
)


# -- data -------------------------------------------------------------------------------------

#: arch/mips/include/uapi/asm/errno.h: each errno MIPS numbers its own way, as (generic, MIPS),
#: the generic number being Python's (the host's); checked against the cross compiler's
#: header by tests/test_mips.py
ERRNOS: tuple[tuple[int, int], ...] = (
    (35, 45), (36, 78), (37, 46), (38, 89), (39, 93), (40, 90), (42, 35), (43, 36), (44, 37), (45, 38), (46, 39),
    (47, 40), (48, 41), (49, 42), (50, 43), (51, 44), (52, 50), (53, 51), (54, 52), (55, 53), (56, 54), (57, 55),
    (72, 74), (74, 77), (75, 79), (76, 80), (77, 81), (78, 82), (79, 83), (80, 84), (81, 85), (82, 86), (83, 87),
    (84, 88), (85, 91), (86, 92), (87, 94), (88, 95), (89, 96), (90, 97), (91, 98), (92, 99), (93, 120),
    (94, 121), (95, 122), (96, 123), (97, 124), (98, 125), (99, 126), (100, 127), (101, 128), (102, 129),
    (103, 130), (104, 131), (105, 132), (106, 133), (107, 134), (108, 143), (109, 144), (110, 145), (111, 146),
    (112, 147), (113, 148), (114, 149), (115, 150), (116, 151), (117, 135), (118, 137), (119, 138), (120, 139),
    (121, 140), (122, 1133), (123, 159), (124, 160), (125, 158), (126, 161), (127, 162), (128, 163), (129, 164),
    (130, 165), (131, 166), (132, 167), (133, 168),
)
#: arch/mips/include/uapi/asm/mman.h: the mmap(2) flags whose bits are MIPS's own, as (MIPS,
#: asm-generic): MAP_NORESERVE, MAP_ANONYMOUS, MAP_GROWSDOWN, MAP_DENYWRITE, MAP_EXECUTABLE,
#: MAP_LOCKED, MAP_POPULATE, MAP_NONBLOCK, MAP_STACK, MAP_HUGETLB
MMAP_FLAGS = ((0x0400, 0x4000), (0x0800, 0x20), (0x1000, 0x0100), (0x2000, 0x0800), (0x4000, 0x1000),
              (0x8000, 0x2000), (0x10000, 0x8000), (0x20000, 0x10000), (0x40000, 0x20000), (0x80000, 0x40000))
#: arch/mips/include/uapi/asm/fcntl.h: every open(2) flag whose bit is MIPS's own, as (MIPS,
#: asm-generic): O_APPEND, O_DSYNC, O_NONBLOCK, O_CREAT, O_EXCL, O_NOCTTY, FASYNC, O_LARGEFILE,
#: __O_SYNC, O_DIRECT (O_TRUNC, O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC, O_PATH and __O_TMPFILE have the
#: generic bits).  The layer works in the generic bits (LinuxAbi.open_flags), so open_flag_bits
#: stays empty for MIPS; strace names them after the same translation.
OPEN_FLAGS = ((0x0008, 0o2000), (0x0010, 0o10000), (0x0080, 0o4000), (0x0100, 0o100), (0x0400, 0o200),
              (0x0800, 0o400), (0x1000, 0o20000), (0x2000, 0o100000), (0x4000, 0o4000000), (0x8000, 0o40000))

#: arch/mips/include/uapi/asm/stat.h: o32's struct stat and stat64, n64's struct stat (their
#: offsets printed by a program built with each cross compiler)
STAT_O32 = (144, (("st_dev", 0, "I"), ("st_ino", 16, "I"), ("st_mode", 20, "I"), ("st_nlink", 24, "I"),
                  ("st_uid", 28, "I"), ("st_gid", 32, "I"), ("st_rdev", 36, "I"), ("st_size", 48, "i"),
                  ("st_atime", 56, "i"), ("st_atime_nsec", 60, "i"), ("st_mtime", 64, "i"),
                  ("st_mtime_nsec", 68, "i"), ("st_ctime", 72, "i"), ("st_ctime_nsec", 76, "i"),
                  ("st_blksize", 80, "i"), ("st_blocks", 84, "i")))
STAT64_O32 = (104, (("st_dev", 0, "I"), ("st_ino", 16, "Q"), ("st_mode", 24, "I"), ("st_nlink", 28, "I"),
                    ("st_uid", 32, "I"), ("st_gid", 36, "I"), ("st_rdev", 40, "I"), ("st_size", 56, "q"),
                    ("st_atime", 64, "i"), ("st_atime_nsec", 68, "I"), ("st_mtime", 72, "i"),
                    ("st_mtime_nsec", 76, "I"), ("st_ctime", 80, "i"), ("st_ctime_nsec", 84, "I"),
                    ("st_blksize", 88, "I"), ("st_blocks", 96, "q")))
STAT_N64 = (104, (("st_dev", 0, "I"), ("st_ino", 16, "Q"), ("st_mode", 24, "I"), ("st_nlink", 28, "I"),
                  ("st_uid", 32, "I"), ("st_gid", 36, "I"), ("st_rdev", 40, "I"), ("st_size", 56, "q"),
                  ("st_atime", 64, "I"), ("st_atime_nsec", 68, "I"), ("st_mtime", 72, "I"),
                  ("st_mtime_nsec", 76, "I"), ("st_ctime", 80, "I"), ("st_ctime_nsec", 84, "I"),
                  ("st_blksize", 88, "I"), ("st_blocks", 96, "Q")))

#: arch/mips/include/uapi/asm/statfs.h: f_frsize third, f_bavail after f_ffree (the offsets printed by
#: a program built with each cross compiler): o32's struct statfs64 (glibc's statfs calls statfs64),
#: n64's struct statfs
_STATFS_ORDER = ("f_type", "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_files", "f_ffree", "f_bavail",
                 "f_fsid0", "f_fsid1", "f_namelen", "f_flags")
STATFS64_O32 = ("3I4x5Q2i2I24x", _STATFS_ORDER)
STATFS_N64 = ("8q2i2q40x", _STATFS_ORDER)

#: The watch registers (MIPS32/MIPS64 PRA: WatchLo's doubleword address and I/R/W bits, WatchHi's
#: mask of address bits 11-3 widening it to an aligned power of two up to 4 KiB).  QEMU's CPUs have
#: 8 pairs (target/mips/cpu.c, mips_cpu_reset: WatchHi.M chains 0-6); Linux lets user space use 4
#: (NUM_WATCH_REGS, arch/mips/include/asm/processor.h; arch/mips/kernel/watch.c counts them)
WATCH = WatchRules(slots=4, types=frozenset({"x", "w", "r", "rw"}),
                   lengths=(1, 2, 3, 4, 5, 6, 7, 8), aligned=False, window=8, masked=(16, 4096), exec_lengths=(4,),
                   source="MIPS32/64 PRA WatchLo/WatchHi; QEMU target/mips/cpu.c; Linux arch/mips/kernel/watch.c")


def _iset(name: str, mode: int, ks_mode: int, order: str) -> InstructionSet:
    return InstructionSet(
        name=name,
        capstone=(capstone.CS_ARCH_MIPS, mode),
        keystone=(keystone.KS_ARCH_MIPS, ks_mode),
        # kprobes' ``break 515`` (the code in bits 25-6, arch/mips/kernel/kprobes.c breakpoint_insn)
        kernel_breakpoints={4: _pack(order, BRK_KPROBE_BP << 6 | F_BREAK)},
        # ``syscall 515``: the one trap whose pc Unicorn reports (see the module's doc)
        unicorn_breakpoint=Breakpoint({4: _pack(order, BRK_KPROBE_BP << 6 | F_SYSCALL)}, intno=17, pc_adjust=-4),
        min_insn=4,
        length_rule=lambda code: 4,
        # no frame record: gcc's MIPS frame pointer is the sp after the prologue's allocation, the
        # saved ra at a different offset in every function; backtraces read each prologue
        frame_record=None,
        is_call=is_call,
        delay_slot=4,
        prologue=_prologue("big" if order == ">" else "little"),
    )


MIPS_ISET = _iset("mips", capstone.CS_MODE_MIPS32 | capstone.CS_MODE_BIG_ENDIAN,
                  keystone.KS_MODE_MIPS32 | keystone.KS_MODE_BIG_ENDIAN, ">")
MIPSEL_ISET = _iset("mipsel", capstone.CS_MODE_MIPS32 | capstone.CS_MODE_LITTLE_ENDIAN,
                    keystone.KS_MODE_MIPS32 | keystone.KS_MODE_LITTLE_ENDIAN, "<")
MIPS64EL_ISET = _iset("mips64el", capstone.CS_MODE_MIPS64 | capstone.CS_MODE_LITTLE_ENDIAN,
                      keystone.KS_MODE_MIPS64 | keystone.KS_MODE_LITTLE_ENDIAN, "<")

#: the syscall trap: EXCP_SYSCALL (17); the pc is past it, where Linux returns
SYSCALL_INTNO = 17
#: the fixtures' entry: sys.h's _start (ld's default on MIPS is __start)
_ENTRY = ("-Wl,-e,_start",)
O32_ABI = Abi(("a0", "a1", "a2", "a3"), stack_args_offset=16)  # o32: a 16-byte home area for a0-a3
N64_ABI = Abi(tuple(f"a{i}" for i in range(8)), stack_args_offset=0)


#: QEMU's MIPS exceptions that Linux turns into a program's signal (target/mips/cpu.h's EXCP_*;
#: arch/mips/kernel/traps.c): a reserved instruction (do_ri: SIGILL, ILL_ILLOPC), an integer
#: overflow of add/sub (do_ov: SIGFPE, FPE_INTOVF), a ``break`` (do_bp: SIGTRAP from force_sig,
#: SI_KERNEL).  A ``teq``'s code (gcc's divide-by-zero check, 7: SIGFPE) is not seen: the trap
#: arrives as one number
MIPS_EXCEPTIONS = ((20, "SIGILL", 1), (21, "SIGFPE", 2), (18, "SIGTRAP", 0x80))
#: the kernel's ``struct sigaction`` (its 32-bit flags first, no restorer) and ``stack_t``
#: (arch/mips/include/uapi/asm/signal.h)
MIPS_SIGACTION = ("flags", "handler", "mask")
MIPS_STACK_T = ("sp", "size", "flags")


def _o32_linux(machine: str, sysroot: str) -> LinuxAbi:
    return LinuxAbi(None, 0, machine=machine, sysroot=sysroot, stat=StatLayout(*STAT_O32),
                    stat64=StatLayout(*STAT64_O32), statfs=STATFS64_O32, tls_register=um.UC_MIPS_REG_CP0_USERLOCAL,
                    pair_aligned=True, error_register=um.UC_MIPS_REG_A3, errnos=ERRNOS, mmap_flags=MMAP_FLAGS,
                    open_flags=OPEN_FLAGS, calls=tables.MIPS_O32, clone_backwards=True, sigaction=MIPS_SIGACTION,
                    stack_t=MIPS_STACK_T, cpu_exceptions=MIPS_EXCEPTIONS,
                    exec_state=exec_state_o32)


def _o32_syscalls(linux: LinuxAbi) -> Syscalls:
    """o32: the number in v0, a0-a3 and four more from the caller's stack at sp+16
    (arch/mips/kernel/scall32-o32.S), the result in v0, a3 the error flag."""
    return Syscalls("v0", ("a0", "a1", "a2", "a3"), "v0", SYSCALL_INTNO, numbers.MIPS_O32, linux=linux,
                    stack_args=4, stack_args_offset=16)


#: QEMU's Malta board: its own console on the first 16550 (ttyS0), 256 MiB of low memory
#: the 32-bit kernels map, the YAMON-less boot QEMU does with -kernel
MALTA_32 = QemuMachine("qemu-system-mipsel", "qemu-system-mips", machine="malta", memory="256M")
MALTA_32BE = QemuMachine("qemu-system-mips", "qemu-system-mips", machine="malta", memory="256M")
#: Debian's 5kc-malta kernel runs on a MIPS64 Release 2 CPU (QEMU's Malta default, a 20Kc, is
#: Release 1)
MALTA_64 = QemuMachine("qemu-system-mips64el", "qemu-system-mips", machine="malta", cpu="5KEc", memory="256M")

MIPS = Arch(
    name="mips",
    aliases=("mipsbe", "mips32", "mipseb"),
    bits=32,
    endian="big",
    registers=_registers(O32_NAMES, 4),
    pc="pc",
    sp="sp",
    return_value="v0",
    link="ra",
    kernel_abi=O32_ABI,
    user_abi=O32_ABI,
    isets=(MIPS_ISET,),
    insn=InsnRules(classify, _successors(O32_NAMES)),
    unicorn=(unicorn.UC_ARCH_MIPS, unicorn.UC_MODE_MIPS32 | unicorn.UC_MODE_BIG_ENDIAN),
    unicorn_unsupported=None,
    unicorn_cpu=um.UC_CPU_MIPS32_24KF,
    delay_slots=_delay_slots(">", unicorn.UC_MODE_MIPS32 | unicorn.UC_MODE_BIG_ENDIAN, um.UC_CPU_MIPS32_24KF),
    gdb_arch="mips",
    # gdb's MIPS Linux ABI steps in software (mips_software_single_step: a breakpoint on the
    # next instruction and a continue), so a kernel's pending timer interrupt ran inside the
    # step of a kprobe and the probed instruction was hit again (measured: mips64el's jiffies
    # watchpoint test); with no OS ABI gdb asks QEMU's stub, which steps with interrupts off
    gdb_linux_steps_in_software=True,
    # arch/mips selects no HAVE_FUNCTION_ARG_ACCESS_API (Debian's malta configs have none): the
    # kernel's probe events refuse $argN ("Invalid $-variable", asked of the guest in
    # tests/test_kernel_arches.py); kpsdk's own targets read arguments by the o32/n64 ABIs
    kernel_arg_access=False,
    odd_code=("MIPS16e or microMIPS code (the ISA bit is set) cannot be probed: kpsdk decodes MIPS32 and MIPS64 "
              "instructions only"),
    elf_machine="EM_MIPS",
    elf_class=32,
    syscalls=_o32_syscalls(_o32_linux("mips", "/usr/mips-linux-gnu")),
    stack_alignment=8,
    qemu_user="qemu-mips",
    multiarch="mips-linux-gnu",
    cross_libc_package="libc6-mips-cross",
    cross_gcc_package="gcc-mips-linux-gnu",
    # the calls of a PIC program go through $t9 loaded from the GOT, not through stubs a
    # table could name (a non-PIC one's stubs are in .MIPS.stubs, named by no relocation order)
    entry_address_register="t9",
    qemu_system=MALTA_32BE,
    kernel_stack_size=8192,
    kernel_tasks=KERNEL_TASKS,
    dwarf=_dwarf(O32_NAMES),
    # no TCG plugin registers: QEMU 10's MIPS CPUs describe no registers to plugins (they have no
    # gdb XML, so qemu_plugin_get_registers lists none: measured on malta, 24Kf and 5KEc)
    limits=(("tcg-plugin", "no: QEMU 10's MIPS CPUs give plugins no registers (no gdb XML); the gdb mechanism "
             "serves"),
            ("current", "yes: the kernel's code ($28's thread_info; Debian's malta kernels have no BTF)"),
            ("kernel", "yes: bare metal under -M malta (Debian has no big-endian MIPS kernel)")),
    watch=WATCH,
    out_of_line=OutOfLine(jump_back, return_jump),
    detours=DetourCode(near_jump, entry_detour, return_detour, scratch=("at", "k0", "k1"), regs_access=regs_access,
                       data_endian="little"),
    # the toolchain's defaults (MIPS32 Release 2, FPXX); the static PIE relocates its own GOT in
    # _start (a MIPS GOT has no relocation records: sys.h)
    toolchain=Toolchain((FixtureVariant("mips", _ENTRY, demo=7),), libc_dev="libc6-dev-mips-cross"),
)

MIPSEL = replace(
    MIPS,
    name="mipsel",
    aliases=("mips32el", "mipsle"),
    endian="little",
    isets=(MIPSEL_ISET,),
    unicorn=(unicorn.UC_ARCH_MIPS, unicorn.UC_MODE_MIPS32 | unicorn.UC_MODE_LITTLE_ENDIAN),
    delay_slots=_delay_slots("<", unicorn.UC_MODE_MIPS32 | unicorn.UC_MODE_LITTLE_ENDIAN, um.UC_CPU_MIPS32_24KF),
    syscalls=_o32_syscalls(_o32_linux("mips", "/usr/mipsel-linux-gnu")),
    qemu_user="qemu-mipsel",
    multiarch="mipsel-linux-gnu",
    cross_libc_package="libc6-mipsel-cross",
    cross_gcc_package="gcc-mipsel-linux-gnu",
    qemu_system=MALTA_32,
    debian=DebianPort("mipsel", "bookworm", "linux-image-4kc-malta"),
    limits=tuple(lim for lim in MIPS.limits if lim[0] != "kernel"),
    toolchain=Toolchain((FixtureVariant("mipsel", _ENTRY, demo=8),), libc_dev="libc6-dev-mipsel-cross"),
)

MIPS64EL = replace(
    MIPS,
    name="mips64el",
    aliases=("mips64", "mips64le"),
    bits=64,
    endian="little",
    registers=_registers(N64_NAMES, 8),
    dwarf=_dwarf(N64_NAMES),
    kernel_abi=N64_ABI,
    user_abi=N64_ABI,
    isets=(MIPS64EL_ISET,),
    insn=InsnRules(classify, _successors(N64_NAMES)),
    unicorn=(unicorn.UC_ARCH_MIPS, unicorn.UC_MODE_MIPS64 | unicorn.UC_MODE_LITTLE_ENDIAN),
    unicorn_cpu=um.UC_CPU_MIPS64_5KEF,
    unicorn_setup=unicorn_setup_n64,
    pie_base=PIE_BASE_N64,
    delay_slots=_delay_slots("<", unicorn.UC_MODE_MIPS64 | unicorn.UC_MODE_LITTLE_ENDIAN, um.UC_CPU_MIPS64_5KEF),
    gdb_arch="mips:isa64r2",
    gdb_settings=("mips abi n64",),
    elf_class=64,
    # n64: the number in v0, a0-a5, the result in v0, a3 the error flag (scall64-n64.S)
    syscalls=Syscalls("v0", tuple(f"a{i}" for i in range(6)), "v0", SYSCALL_INTNO, numbers.MIPS_N64,
                      linux=LinuxAbi(None, 0, machine="mips64", sysroot="/usr/mips64el-linux-gnuabi64",
                                     stat=StatLayout(*STAT_N64), statfs=STATFS_N64,
                                     tls_register=um.UC_MIPS_REG_CP0_USERLOCAL, error_register=um.UC_MIPS_REG_A3,
                                     errnos=ERRNOS, mmap_flags=MMAP_FLAGS, open_flags=OPEN_FLAGS,
                                     calls=tables.MIPS_N64, clone_backwards=True, sigaction=MIPS_SIGACTION,
                                     stack_t=MIPS_STACK_T, cpu_exceptions=MIPS_EXCEPTIONS)),
    stack_alignment=16,
    qemu_user="qemu-mips64el",
    multiarch="mips64el-linux-gnuabi64",
    cross_libc_package="libc6-mips64el-cross",
    cross_gcc_package="gcc-mips64el-linux-gnuabi64",
    qemu_system=MALTA_64,
    debian=DebianPort("mips64el", "bookworm", "linux-image-5kc-malta"),
    limits=tuple(lim for lim in MIPS.limits if lim[0] != "kernel"),
    kernel_stack_size=16384,
    toolchain=Toolchain((FixtureVariant("mips64el", _ENTRY, demo=9),), libc_dev="libc6-dev-mips64el-cross"),
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [MIPS, MIPSEL, MIPS64EL]
