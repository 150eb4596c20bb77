"""ppc64, big-endian (ELFv1 function descriptors by default).

Described fully so disassembly, symbols and (with the live-targets work) QEMU
can use it, but Unicorn 2.1.4 cannot run it: explicit PPC64 CPU models map to
32-bit ones and the default POWER10 model faults on its first instruction.
``unicorn_unsupported`` carries that cause so ``kpsdk.open`` can say it.
"""

from __future__ import annotations

import struct

import capstone
import keystone
import unicorn
from unicorn import ppc_const as up

from kpsdk import hookimpl
from kpsdk.arch import (
    Abi,
    Arch,
    Breakpoint,
    InsnRules,
    InstructionSet,
    OutOfLine,
    QemuMachine,
    Register,
    Syscalls,
    WatchRules,
)
from kpsdk.insn import ReadMem, ReadReg, changes_flow, immediate_targets

TRAP = struct.pack(">I", 0x7FE00008)  # tw 31,0,0
_PC_IDS: frozenset[int] = frozenset()  # ppc has no pc register operand; flow is by groups and mnemonics
_REFUSED = ("rfid", "rfi", "mtmsr", "mtmsrd", "sc", "tw", "td", "twi", "tdi", "sleep", "nap")

_REGS = (
    *(Register(f"r{i}", 8, getattr(up, f"UC_PPC_REG_{i}"), f"r{i}", (f"gpr{i}",)) for i in range(32)),
    Register("pc", 8, up.UC_PPC_REG_PC, "pc", ("nip",)),
    Register("lr", 8, up.UC_PPC_REG_LR, "lr", ("link",)),
    Register("ctr", 8, up.UC_PPC_REG_CTR, "ctr"),
    Register("msr", 8, up.UC_PPC_REG_MSR, "msr"),
    Register("cr", 4, up.UC_PPC_REG_CR, "cr", ("ccr",)),
    Register("xer", 8, up.UC_PPC_REG_XER, "xer"),
)


def classify(insn: capstone.CsInsn) -> tuple[bool, str | None]:
    if insn.mnemonic.startswith(_REFUSED):
        return False, f"{insn.mnemonic} cannot be probed (as in the kernel)"
    return not (changes_flow(insn, _PC_IDS) or insn.mnemonic.startswith("b")), None


def successors(insn: capstone.CsInsn, reg: ReadReg, mem: ReadMem, word: int) -> set[int] | None:
    nxt = insn.address + 4
    m = insn.mnemonic
    if not m.startswith("b"):
        return {nxt}
    out = {nxt} | immediate_targets(insn, relative=False)
    if m.startswith("blr"):
        out.add(reg("lr"))
    elif m.startswith("bctr"):
        out.add(reg("ctr"))
    return out


def local_entry(code: bytes) -> int:
    """ELFv2: the offset of a function's local entry, past its TOC set-up.

    A function that needs its TOC pointer starts ``addis r2,r12,hi; addi r2,r2,lo``
    (or ``lis r2,hi; addi r2,r2,lo``); calls from the same module skip those two
    instructions, so a return probe there counts as at the entry (the kernel's
    ``arch_kprobe_on_func_entry``).  0 for ELFv1 code and functions without one.
    """
    if len(code) < 8:
        return 0
    first, second = struct.unpack(">II", code[:8])
    return 8 if first >> 16 in (0x3C4C, 0x3C40) and second >> 16 == 0x3842 else 0


def jump_back(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b target`` when within +-32 MiB."""
    off = target - at
    if not -(1 << 25) <= off < (1 << 25):
        return None
    return struct.pack(">I", 0x48000000 | (off & 0x03FFFFFC))


PPC64_ISET = InstructionSet(
    name="ppc64",
    capstone=(capstone.CS_ARCH_PPC, capstone.CS_MODE_64 | capstone.CS_MODE_BIG_ENDIAN),
    keystone=(keystone.KS_ARCH_PPC, keystone.KS_MODE_PPC64 | keystone.KS_MODE_BIG_ENDIAN),
    kernel_breakpoints={4: TRAP},
    unicorn_breakpoint=Breakpoint({4: TRAP}, intno=-1, pc_adjust=0),
    min_insn=4,
    # ISA 3.1 prefixed instructions (primary opcode 1) are 8 bytes
    length_rule=lambda code: 8 if code[0] >> 2 == 1 else 4,
)

PPC64 = Arch(
    name="ppc64",
    aliases=("powerpc64", "ppc64be"),
    bits=64,
    endian="big",
    registers=_REGS,
    pc="pc",
    sp="r1",
    return_value="r3",
    link="lr",
    kernel_abi=Abi(tuple(f"r{i}" for i in range(3, 11)), stack_args_offset=112),
    user_abi=Abi(tuple(f"r{i}" for i in range(3, 11)), stack_args_offset=112),
    isets=(PPC64_ISET,),
    insn=InsnRules(classify, successors),
    unicorn=(unicorn.UC_ARCH_PPC, unicorn.UC_MODE_PPC64 | unicorn.UC_MODE_BIG_ENDIAN),
    unicorn_unsupported=(
        "Unicorn 2.1.4 cannot run ppc64: its explicit PPC64 CPU models map to 32-bit ones and the "
        "default POWER10 model raises an unhandled CPU exception on the first instruction "
        "(checked: two nops fail with UC_ERR_EXCEPTION). Run ppc64 code under QEMU instead "
        "(kpsdk.open(\"qemu-user:PROG\"))"
    ),
    gdb_arch="powerpc:common64",
    elf_machine="EM_PPC64",
    elf_class=64,
    syscalls=Syscalls("r0", tuple(f"r{i}" for i in range(3, 9)), "r3", None,
                      {"write": 4, "exit": 1, "exit_group": 234}),
    stack_alignment=16,
    qemu_user="qemu-ppc64",
    function_descriptors=".opd",
    multiarch="powerpc64-linux-gnu",
    cross_libc_package="libc6-ppc64-cross",
    qemu_system=QemuMachine("qemu-system-ppc64", "qemu-system-ppc", machine="pseries", console="hvc0"),
    # one DAWR (POWER10 adds a second; Linux counts 1 before it): up to 512 bytes at any address,
    # not crossing a 512-byte boundary; read, write or both, no execute
    watch=WatchRules(slots=1, types=frozenset({"w", "r", "rw"}), lengths=tuple(range(1, 513)), aligned=False,
                     window=512, source="Power ISA 3.0 DAWR0; Linux arch/powerpc/kernel/hw_breakpoint.c"),
    cross_gcc_package="gcc-powerpc64-linux-gnu",
    out_of_line=OutOfLine(jump_back),
    local_entry=local_entry,
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [PPC64]
