"""ppc64, big-endian (ELFv1 function descriptors by default), and ppc64le, its
little-endian variant (ELFv2: global and local entry points, no descriptors).

Unicorn 2.1.4 runs it with three settings (:func:`unicorn_setup`): the default
CPU model (the explicit PPC64 models map to 32-bit ones), the soft MMU off
(``UC_TLB_VIRTUAL``: the hash MMU would raise an instruction storage interrupt at
the first fetch, MSR[HV] being dropped at reset) and MSR = SF|FP|VR|VSX.  On any
exception Unicorn 2.1.4 reports the pc 4 bytes past the instruction: a ``tw`` at A
arrives at A+4 (hence the breakpoint's ``pc_adjust``), and an ``sc`` at A at A+4,
which is where Linux returns to anyway.
"""

from __future__ import annotations

import struct
from dataclasses import replace

import capstone
import keystone
import unicorn
from unicorn import ppc_const as up

from kpsdk import hookimpl
from kpsdk.arch import (
    Abi,
    Arch,
    Breakpoint,
    DebianPort,
    InsnRules,
    InstructionSet,
    LinuxAbi,
    OutOfLine,
    PltTable,
    QemuMachine,
    Register,
    StatLayout,
    Syscalls,
    WatchRules,
)
from kpsdk.arch_backends import syscall_tables as tables
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


def _local_entry(code: bytes, order: str) -> int:
    """ELFv2: the offset of a function's local entry, past its TOC set-up.

    A function that needs its TOC pointer starts ``addis r2,r12,hi; addi r2,r2,lo``
    (or ``lis r2,hi; addi r2,r2,lo``); calls from the same module skip those two
    instructions, so a return probe there counts as at the entry (the kernel's
    ``arch_kprobe_on_func_entry``).  0 for ELFv1 code and functions without one.
    """
    if len(code) < 8:
        return 0
    first, second = struct.unpack(f"{order}II", code[:8])
    return 8 if first >> 16 in (0x3C4C, 0x3C40) and second >> 16 == 0x3842 else 0


def local_entry(code: bytes) -> int:
    """:func:`_local_entry` of big-endian code."""
    return _local_entry(code, ">")


def local_entry_le(code: bytes) -> int:
    """:func:`_local_entry` of little-endian code (ppc64le: every function is ELFv2)."""
    return _local_entry(code, "<")


def _branch(at: int, target: int, order: str) -> bytes | None:
    """``b target`` when within +-32 MiB."""
    off = target - at
    if not -(1 << 25) <= off < (1 << 25):
        return None
    return struct.pack(f"{order}I", 0x48000000 | (off & 0x03FFFFFC))


def jump_back(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b target`` (big-endian) when within +-32 MiB."""
    return _branch(at, target, ">")


def jump_back_le(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b target`` (little-endian) when within +-32 MiB."""
    return _branch(at, target, "<")


#: MSR bits a 64-bit Linux process runs with: SF (64-bit), VEC, VSX, FP (Power ISA 3.0, 4.2.1);
#: FP is needed for the ``stfd`` of functions that save f14-f31
MSR = (1 << 63) | (1 << 25) | (1 << 23) | (1 << 13)
#: CR0's summary-overflow bit: a system call failed
CR0_SO = 0x10000000
#: AT_HWCAP: 32- and 64-bit, an FPU and an MMU (arch/powerpc/include/uapi/asm/cputable.h); no
#: AltiVec/VSX claimed, so glibc's IFUNCs pick their generic code
HWCAP = 0x80000000 | 0x40000000 | 0x08000000 | 0x04000000


def unicorn_setup(uc: unicorn.Uc) -> None:
    """Make Unicorn 2.1.4 run 64-bit code (see the module's doc): no soft MMU, MSR for a
    64-bit process with the FPU and vector units on."""
    uc.ctl_set_tlb_mode(unicorn.UC_TLB_VIRTUAL)  # type: ignore[attr-defined]  # the stubs lack it
    uc.reg_write(up.UC_PPC_REG_MSR, MSR)


def entry_registers(descriptor: bytes) -> dict[str, int]:
    """ELFv1: the entry is a function descriptor (code address, TOC, environment); Linux's
    start_thread loads r2 with its TOC (arch/powerpc/kernel/process.c)."""
    return {"r2": struct.unpack(">Q", descriptor[8:16])[0]}


def return_jump(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline, reached by the probed function's ``blr`` (so lr holds its
    address): ``mflr r12; addis r11,r12,ha; std r1,lo(r11)`` stores sp at ``sp_word`` (r11
    and r12 are volatile across a call in the ELFv1 ABI), then ``ld r12,24(r12); mtctr
    r12; bctr`` jumps through the doubleword 24 bytes on, which kpsdk's hook (on the
    ``ld``) has just written.  Returns the code, the offset of the hooked ``ld`` and of
    the doubleword."""
    off = sp_word - at
    lo = ((off & 0xFFFF) ^ 0x8000) - 0x8000
    hi = ((off - lo) >> 16) & 0xFFFF
    assert not lo % 4 and -(1 << 31) <= off < (1 << 31), "std's displacement is a multiple of 4 within 2 GiB"
    code = struct.pack(">IIIIII", 0x7D8802A6, 0x3D6C0000 | hi, 0xF82B0000 | (lo & 0xFFFC), 0xE98C0018,
                       0x7D8903A6, 0x4E800420)
    return code + bytes(8), 12, 24


PPC64_ISET = InstructionSet(
    name="ppc64",
    capstone=(capstone.CS_ARCH_PPC, capstone.CS_MODE_64 | capstone.CS_MODE_BIG_ENDIAN),
    keystone=(keystone.KS_ARCH_PPC, keystone.KS_MODE_PPC64 | keystone.KS_MODE_BIG_ENDIAN),
    kernel_breakpoints={4: TRAP},
    # a program exception (POWERPC_EXCP_PROGRAM), reported at the trap + 4 (see the module's doc)
    unicorn_breakpoint=Breakpoint({4: TRAP}, intno=6, pc_adjust=-4),
    min_insn=4,
    # ISA 3.1 prefixed instructions (primary opcode 1) are 8 bytes
    length_rule=lambda code: 8 if code[0] >> 2 == 1 else 4,
)

#: .dynamic's DT_PPC64_GLINK: 32 bytes before the first glink stub
DT_PPC64_GLINK = 0x70000000
#: ELFv1 and ELFv2 (e_flags' EF_PPC64_ABI): glink stubs of 8 bytes (li r0,N; b resolve) or 4
#: (b resolve), named SYM@plt from DT_PPC64_GLINK + 32 as binutils' ppc64_elf_get_synthetic_symtab
#: names them.  Calls reach them only while the function is not bound yet (lazy binding: its
#: first call); every call goes through a plt_call stub of the caller's, which loads the
#: function's address from .plt
PPC64_GLINK = PltTable("", 32, 8, dynamic_tag=DT_PPC64_GLINK, name=".glink", e_flags=(3, 2),
                       source="binutils bfd/elf64-ppc.c ppc64_elf_get_synthetic_symtab")
PPC64_PLT = (replace(PPC64_GLINK, entry=4), replace(PPC64_GLINK, e_flags=None))

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
    unicorn_unsupported=None,
    unicorn_setup=unicorn_setup,
    entry_registers=entry_registers,
    gdb_arch="powerpc:common64",
    elf_machine="EM_PPC64",
    elf_class=64,
    # sc: a system call exception (POWERPC_EXCP_SYSCALL, 8); a failed call sets CR0.SO and
    # returns the positive errno (Linux arch/powerpc/kernel/syscall.c; the ppc64 ELF ABI)
    syscalls=Syscalls("r0", tuple(f"r{i}" for i in range(3, 9)), "r3", 8, tables.PPC64,
                      linux=LinuxAbi("ppc970", HWCAP, machine="ppc64", sysroot="/usr/powerpc64-linux-gnu",
                                     stat=StatLayout(*tables.STAT_X86_64), error_flag=(up.UC_PPC_REG_CR, CR0_SO))),
    stack_alignment=16,
    qemu_user="qemu-ppc64",
    function_descriptors=".opd",
    multiarch="powerpc64-linux-gnu",
    cross_libc_package="libc6-ppc64-cross",
    plt=PPC64_PLT,
    # R_PPC64_JMP_IREL (.plt: the slot gets the chosen code), R_PPC64_IRELATIVE (glibc elf/elf.h)
    irelative=(247, 248),
    qemu_system=QemuMachine("qemu-system-ppc64", "qemu-system-ppc", machine="pseries", console="hvc0",
                            memory="1G"),
    # one DAWR (POWER10 adds a second; Linux counts 1 before it): up to 512 bytes at any address,
    # not crossing a 512-byte boundary; read, write or both, no execute
    watch=WatchRules(slots=1, types=frozenset({"w", "r", "rw"}), lengths=tuple(range(1, 513)), aligned=False,
                     window=512, source="Power ISA 3.0 DAWR0; Linux arch/powerpc/kernel/hw_breakpoint.c"),
    cross_gcc_package="gcc-powerpc64-linux-gnu",
    out_of_line=OutOfLine(jump_back, return_jump),
    local_entry=local_entry,
)

TRAP_LE = struct.pack("<I", 0x7FE00008)

PPC64LE_ISET = InstructionSet(
    name="ppc64le",
    capstone=(capstone.CS_ARCH_PPC, capstone.CS_MODE_64 | capstone.CS_MODE_LITTLE_ENDIAN),
    keystone=(keystone.KS_ARCH_PPC, keystone.KS_MODE_PPC64 | keystone.KS_MODE_LITTLE_ENDIAN),
    kernel_breakpoints={4: TRAP_LE},
    unicorn_breakpoint=Breakpoint({4: TRAP_LE}, intno=-1, pc_adjust=0),
    min_insn=4,
    # the primary opcode is in the top bits of the word, its last byte in memory
    length_rule=lambda code: 8 if code[3] >> 2 == 1 else 4,
)

#: Little-endian ppc64 (ELFv2), what Debian's ppc64el port and its kernels are: the same
#: registers, ABI and debug hardware as ppc64; instructions stored little-endian; a probe on
#: a function by name lands on its local entry, as the kernel's ``kprobe_lookup_name``
#: (arch/powerpc/kernel/kprobes.c) puts it at ``ppc_function_entry()`` for ELFv2 (with
#: CONFIG_KPROBES_ON_FTRACE the kernel picks the ``_mcount`` call a few instructions later).
PPC64LE = replace(
    PPC64,
    name="ppc64le",
    aliases=("powerpc64le", "ppc64el"),
    endian="little",
    isets=(PPC64LE_ISET,),
    unicorn=None,
    unicorn_unsupported=(
        "Unicorn 2.1.4 has no little-endian PowerPC: Uc(UC_ARCH_PPC, UC_MODE_PPC64 | UC_MODE_LITTLE_ENDIAN) "
        "raises UC_ERR_MODE (checked), and the big-endian ppc64 model cannot run either. Run ppc64le code "
        "under QEMU instead (qemu-user:PROG, qemu-system:ppc64le)"
    ),
    qemu_user="qemu-ppc64le",
    qemu_system=QemuMachine("qemu-system-ppc64", "qemu-system-ppc", machine="pseries", console="hvc0",
                            memory="1G"),
    # Debian's ppc64el kernel package ships an uncompressed ELF vmlinux with its .symtab
    debian=DebianPort("ppc64el", "bookworm", "linux-image-powerpc64le", "vmlinux-*"),
    cross_gcc_package="gcc-powerpc64le-linux-gnu",
    out_of_line=OutOfLine(jump_back_le),
    local_entry=local_entry_le,
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [PPC64, PPC64LE]
