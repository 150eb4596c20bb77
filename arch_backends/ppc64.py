"""ppc64, big-endian (ELFv1 function descriptors by default), and ppc64le, its
little-endian variant (ELFv2: global and local entry points, no descriptors).

Unicorn 2.1.4 runs it with three settings (:func:`unicorn_setup`): the default
CPU model (the explicit PPC64 models map to 32-bit ones), the soft MMU off
(``UC_TLB_VIRTUAL``: the hash MMU would raise an instruction storage interrupt at
the first fetch, MSR[HV] being dropped at reset; kpsdk's Unicorn target fills that
TLB itself, as on every arch but ARM: kpsdk.targets.unicorn.tlb) and MSR = SF|FP|VR|VSX.  On any
exception Unicorn 2.1.4 reports the pc 4 bytes past the instruction: a ``tw`` at A
arrives at A+4 (hence the breakpoint's ``pc_adjust``), and an ``sc`` at A at A+4,
which is where Linux returns to anyway.  ppc64le runs on the same big-endian engine
with MSR[LE] set (:func:`unicorn_setup_le`; ``UC_MODE_LITTLE_ENDIAN`` is refused).
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
    AccessGate,
    Arch,
    Breakpoint,
    DebianPort,
    DetourCode,
    DwarfRegisters,
    FieldUse,
    FrameRecord,
    InsnRules,
    InstructionSet,
    KernelTasks,
    LinuxAbi,
    OutOfLine,
    PltTable,
    QemuMachine,
    Register,
    StatLayout,
    Syscalls,
    TaskCode,
    WatchRules,
)
from kpsdk.arch.fixture import FixtureVariant, Toolchain
from kpsdk.arch.insn import ReadMem, ReadReg, changes_flow, immediate_targets
from kpsdk.arch_backends import ppc64_detour
from kpsdk.arch_backends import syscall_numbers as numbers
from kpsdk.arch_backends import syscall_tables as tables

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


def is_call(insn: capstone.CsInsn) -> bool:
    """A branch with the LK bit set (``bl``, ``bla``, ``bcl``, ``bctrl``, ``blrl``...): it
    writes the return address to LR.  Capstone 5 puts these in its JUMP group only.  Read
    from the encoding of big-endian code (I-form b, B-form bc, XL-form bclr/bcctr/bctar)."""
    return _links(int.from_bytes(bytes(insn.bytes[:4]), "big"))


def is_call_le(insn: capstone.CsInsn) -> bool:
    """:func:`is_call` of little-endian code."""
    return _links(int.from_bytes(bytes(insn.bytes[:4]), "little"))


def _links(word: int) -> bool:
    opcode = word >> 26
    if opcode in (16, 18):
        return bool(word & 1)
    return opcode == 19 and (word >> 1) & 0x3FF in (16, 528, 560) and bool(word & 1)


#: Kernel Userspace Access Prevention (CONFIG_PPC_KUAP, on in Debian's kernels): outside
#: its uaccess windows the kernel keeps the AMR at AMR_KUAP_BLOCKED, which denies
#: kernel-mode reads and writes of non-privileged (user) pages; QEMU's radix translation
#: applies it to the debugger too (target/ppc/mmu-radix64.c, ppc_radix64_get_prot_amr), so a
#: syscall's string argument reads as a fault at a probe.  An AMR of 0 masks nothing.
KUAP = AccessGate("amr", 0, "Linux arch/powerpc/include/asm/book3s/64/kup.h; Power ISA 3.0 AMR")


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
#: arch/powerpc/include/uapi/asm/fcntl.h: the open(2) flags whose bits are powerpc's own
OPEN_FLAG_BITS = (("O_DIRECTORY", 0o40000), ("O_NOFOLLOW", 0o100000), ("O_LARGEFILE", 0o200000),
                  ("O_DIRECT", 0o400000), ("O_TMPFILE", 0o20040000))
HWCAP = 0x80000000 | 0x40000000 | 0x08000000 | 0x04000000
#: ppc64le's AT_HWCAP: the same and TRUE_LE (0x2); AT_HWCAP2: ARCH_2_07 (POWER8), the least
#: glibc's ppc64le port starts on ("CPU ISA level is lower than required" otherwise)
HWCAP_LE = HWCAP | 0x00000002
HWCAP2_LE = 0x80000000


def unicorn_setup(uc: unicorn.Uc) -> None:
    """Make Unicorn 2.1.4 run 64-bit code (see the module's doc): no soft MMU, MSR for a
    64-bit process with the FPU and vector units on."""
    uc.ctl_set_tlb_mode(unicorn.UC_TLB_VIRTUAL)  # type: ignore[attr-defined]  # the stubs lack it
    uc.reg_write(up.UC_PPC_REG_MSR, MSR)


#: MSR[LE]: the CPU fetches instructions and accesses data little-endian (Power ISA 3.0, 4.2.1)
MSR_LE = 1


def unicorn_setup_le(uc: unicorn.Uc) -> None:
    """ppc64le on Unicorn 2.1.4: the big-endian engine (``UC_MODE_LITTLE_ENDIAN`` is refused
    with UC_ERR_MODE for PPC64) with MSR[LE] set, as Linux runs a little-endian process:
    QEMU's PowerPC translator then byte-swaps every fetch and data access (checked: code,
    ``std``/``ld``/``lwz``, ``sc`` and ``tw`` behave as on POWER, MSR[LE] kept across the
    interrupt hook)."""
    unicorn_setup(uc)
    uc.reg_write(up.UC_PPC_REG_MSR, MSR | MSR_LE)


def entry_registers(descriptor: bytes, bias: int) -> dict[str, int]:
    """ELFv1: the entry is a function descriptor (code address, TOC, environment); Linux's
    start_thread loads r2 with its TOC (arch/powerpc/kernel/process.c), plus the load bias
    when the object was loaded at one (ld.so's descriptor is not relocated yet: ld.so
    relocates itself, with that TOC)."""
    return {"r2": struct.unpack(">Q", descriptor[8:16])[0] + bias}


def _return_jump(at: int, order: str) -> tuple[bytes, int, int]:
    code = struct.pack(f"{order}IIIIII", 0x429F0005, 0x7D8802A6, 0xE98C0014, 0x7D8903A6, 0x4E800420, 0x60000000)
    return code + bytes(8), 8, 24


def return_jump(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline: ``bcl 20,31,$+4; mflr r12`` (its own address: lr is dead
    once the probed function has returned, and the code is reached by its ``blr`` or by a
    ``b`` from a detour's return code once the detour is gone, so lr cannot be trusted to
    point here), then ``ld r12,20(r12)`` (hooked: kpsdk writes the real return address
    into the doubleword the code ends with just before it runs), ``mtctr r12; bctr``.
    r12 is volatile across a call in both ELF ABIs.  It does not store sp at ``sp_word``
    (the 32-byte slot has no room for the address arithmetic; kpsdk reads r1 itself).
    Returns the code, the offset of the hooked ``ld`` and of the doubleword."""
    return _return_jump(at, ">")


def return_jump_le(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """:func:`return_jump` in little-endian code (ppc64le)."""
    return _return_jump(at, "<")


#: the 64-bit PowerPC ELF ABIs' stack frames (ELFv1 3.2.2, ELFv2 2.2.2): 0(r1) is the back
#: chain, the caller's r1, stored by the ``stdu r1,-N(r1)`` that allocates a frame; a function
#: saves its return address at 16 in its caller's frame.  The frame goes with ``addi r1,...``
#: (gcc with a frame pointer: ``addi r1,r31,N``), ``ld r1,0(r1)`` or ``mr r1,...``
FRAMES = FrameRecord(fp="r1", saved_fp=0, saved_ret=16, sets_fp=r"stdux? r1, ",
                     restores_fp=r"(addi r1, r\d+, |ld r1, 0\(r1\)|mr r1, )", back_chain=True)

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
    frame_record=FRAMES,
    is_call=is_call,
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

#: D-form loads of a kernel's fields: bytes read
_LOAD_SIZES = {"lwz": 4, "lwa": 4, "lhz": 2, "lha": 2, "lbz": 1, "ld": 8}


def loads_current(insn: capstone.CsInsn) -> tuple[str, int] | None:
    """``ld R, D(r13)``: a 64-bit Book3S kernel keeps its PACA in r13 (arch/powerpc/include/asm/paca.h:
    ``register struct paca_struct *local_paca asm("r13")``) and ``current`` in
    ``paca_struct.__current`` (asm/current.h)."""
    ops = insn.operands
    if insn.mnemonic != "ld" or len(ops) != 2 or ops[1].type != capstone.CS_OP_MEM:
        return None
    if insn.reg_name(ops[1].mem.base) != "r13":
        return None
    return insn.reg_name(ops[0].reg), ops[1].mem.disp


def current_field(insn: capstone.CsInsn, reg: str) -> FieldUse | None:
    """``lwz X, d(R)`` (and the other D-form loads) or ``addi X, R, d`` with current in R."""
    ops = insn.operands
    size = _LOAD_SIZES.get(insn.mnemonic)
    if size is not None and len(ops) == 2 and ops[1].type == capstone.CS_OP_MEM \
            and insn.reg_name(ops[1].mem.base) == reg:
        return "load", ops[1].mem.disp, size
    if insn.mnemonic == "addi" and len(ops) == 3 and ops[1].type == capstone.CS_OP_REG \
            and insn.reg_name(ops[1].reg) == reg and ops[2].type == capstone.CS_OP_IMM:
        return "address", ops[2].imm, 0
    return None


#: ppc64 kernels: r13 is the PACA, ``current`` its ``__current`` (no BTF in Debian's ppc64el
#: kernel: the offset, and task_struct's pid and comm, come from the code of
#: dump_stack_print_info, :mod:`kpsdk.kernel.taskcode`).  No register says whether interrupts are off:
#: the kernel masks them in software (``paca_struct.irq_soft_mask``, arch/powerpc/include/asm/
#: hw_irq.h), so the prefix's irqs-off flag prints as ``.``.
KERNEL_TASKS = KernelTasks(
    percpu_register="r13",
    current=(),
    flags_register="",
    irqs_disabled=lambda _value: False,
    code=TaskCode("dump_stack_print_info", loads_current, current_field),
)


#: DWARF register numbers, 64-bit ELF ABI (ELFv1 and ELFv2: "DWARF Register Number Mapping"):
#: r0-r31, CR 64, XER 101, LR 108, CTR 109 in .debug_info and .debug_frame; GCC's .eh_frame
#: keeps its older numbers for LR (65: the return address column there), CTR (66) and XER (76)
DWARF_PPC64 = DwarfRegisters({**{i: f"r{i}" for i in range(32)}, **{32 + i: f"f{i}" for i in range(32)},
                              64: "cr", 101: "xer", 108: "lr", 109: "ctr"},
                             eh_frame={65: "lr", 66: "ctr", 76: "xer"})


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
    syscalls=Syscalls("r0", tuple(f"r{i}" for i in range(3, 9)), "r3", 8, numbers.PPC64,
                      linux=LinuxAbi("ppc970", HWCAP, machine="ppc64", sysroot="/usr/powerpc64-linux-gnu",
                                     stat=StatLayout(*tables.STAT_X86_64), error_flag=(up.UC_PPC_REG_CR, CR0_SO),
                                     open_flag_bits=OPEN_FLAG_BITS, calls=tables.PPC64,
                                     clone_backwards=True, tls_gpr="r13")),
    stack_alignment=16,
    qemu_user="qemu-ppc64",
    function_descriptors=".opd",
    multiarch="powerpc64-linux-gnu",
    cross_libc_package="libc6-ppc64-cross",
    plt=PPC64_PLT,
    # R_PPC64_JMP_IREL (.plt: the slot gets the chosen code), R_PPC64_IRELATIVE (glibc elf/elf.h)
    irelative=(247, 248),
    tls_tpoff=(73,),  # R_PPC64_TPREL64 (relative to r13, 0x7000 past the thread control block)
    qemu_system=QemuMachine("qemu-system-ppc64", "qemu-system-ppc", machine="pseries", console="hvc0",
                            memory="1G"),
    # one DAWR (POWER10 adds a second; Linux counts 1 before it): up to 512 bytes at any address,
    # not crossing a 512-byte boundary; read, write or both, no execute
    watch=WatchRules(slots=1, types=frozenset({"w", "r", "rw"}), lengths=tuple(range(1, 513)), aligned=False,
                     window=512, source="Power ISA 3.0 DAWR0; Linux arch/powerpc/kernel/hw_breakpoint.c"),
    cross_gcc_package="gcc-powerpc64-linux-gnu",
    access_gate=KUAP,
    out_of_line=OutOfLine(jump_back, return_jump),
    detours=DetourCode(ppc64_detour.near_jump, ppc64_detour.entry_detour, ppc64_detour.return_detour,
                       scratch=("r11", "r12"), flags="cr0", regs_access=ppc64_detour.regs_access,
                       data_endian="little"),
    local_entry=local_entry,
    kernel_tasks=KERNEL_TASKS,
    # big-endian, default ELFv1 ABI; no traceback tables after blr so st_size covers instructions only
    toolchain=Toolchain((FixtureVariant("ppc64", ("-mtraceback=no",), demo=5),), libc_dev="libc6-dev-ppc64-cross",
                        elf_flags=(3, 1, "ELFv1")),
    dwarf=DWARF_PPC64,
)

TRAP_LE = struct.pack("<I", 0x7FE00008)

PPC64LE_ISET = InstructionSet(
    name="ppc64le",
    capstone=(capstone.CS_ARCH_PPC, capstone.CS_MODE_64 | capstone.CS_MODE_LITTLE_ENDIAN),
    keystone=(keystone.KS_ARCH_PPC, keystone.KS_MODE_PPC64 | keystone.KS_MODE_LITTLE_ENDIAN),
    kernel_breakpoints={4: TRAP_LE},
    # a program exception reported at the trap + 4, as in big-endian mode
    unicorn_breakpoint=Breakpoint({4: TRAP_LE}, intno=6, pc_adjust=-4),
    min_insn=4,
    # the primary opcode is in the top bits of the word, its last byte in memory
    length_rule=lambda code: 8 if code[3] >> 2 == 1 else 4,
    frame_record=FRAMES,
    is_call=is_call_le,
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
    # QEMU's ppc64 plugin registers are gdb's (power64-core.xml); 24 fit the snapshot: r0-r18
    # (the stack, the TOC, the arguments r3-r10, the PACA in r13) and the special registers
    plugin_registers=(*((f"r{i}", f"r{i}") for i in range(19)), *((r, r) for r in ("lr", "ctr", "msr", "cr", "xer"))),
    isets=(PPC64LE_ISET,),
    unicorn_setup=unicorn_setup_le,
    # no descriptors: Linux's start_thread puts the entry in r12 for the global entry's TOC set-up
    entry_registers=None,
    function_descriptors=None,
    entry_address_register="r12",
    syscalls=Syscalls("r0", tuple(f"r{i}" for i in range(3, 9)), "r3", 8, numbers.PPC64LE,
                      linux=LinuxAbi("power8", HWCAP_LE, HWCAP2_LE, machine="ppc64le",
                                     sysroot="/usr/powerpc64le-linux-gnu", stat=StatLayout(*tables.STAT_X86_64),
                                     error_flag=(up.UC_PPC_REG_CR, CR0_SO), open_flag_bits=OPEN_FLAG_BITS,
                                     calls=tables.PPC64, clone_backwards=True, tls_gpr="r13")),
    multiarch="powerpc64le-linux-gnu",
    cross_libc_package="libc6-ppc64el-cross",
    qemu_user="qemu-ppc64le",
    # VOF, QEMU's minimal client-interface firmware, instead of SLOF: it runs the kernel that
    # QEMU loads itself (-kernel), and boots to init ~30 s sooner under TCG
    qemu_system=QemuMachine("qemu-system-ppc64", "qemu-system-ppc", machine="pseries", console="hvc0",
                            args=("-machine", "x-vof=on"), memory="1G"),
    # Debian's ppc64el kernel package ships an uncompressed ELF vmlinux with its .symtab
    debian=DebianPort("ppc64el", "bookworm", "linux-image-powerpc64le", "vmlinux-*"),
    # Debian 12's ppc64el 6.1 answers "Invalid $-variable specified" to $argN even in a kprobe
    # at a function's entry (tests/test_kernel_arches.py asks the guest); why is not found yet
    kernel_arg_access=False,
    cross_gcc_package="gcc-powerpc64le-linux-gnu",
    out_of_line=OutOfLine(jump_back_le, return_jump_le),
    local_entry=local_entry_le,
    # little-endian, ELFv2 (global and local entry points, no descriptors); added after the
    # demo's list was drawn: shown with kpsdk demo --arch ppc64le
    toolchain=Toolchain((FixtureVariant("ppc64le", ("-mtraceback=no",)),), libc_dev="libc6-dev-ppc64el-cross",
                        elf_flags=(3, 2, "ELFv2")),
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [PPC64, PPC64LE]
