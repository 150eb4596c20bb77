"""i386 and x86_64.

Breakpoint ``int3`` (0xCC) on every target: Unicorn reports it as interrupt 3
with the pc after the int3, like the hardware.  i386 user code passes arguments
on the stack (cdecl); the kernel uses regparm(3) (eax, edx, ecx).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import capstone
import keystone
import unicorn
from capstone import x86_const as cx
from unicorn import x86_const as ux

from kpsdk import hookimpl
from kpsdk.arch import (
    Abi,
    Arch,
    Breakpoint,
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
    OutOfLine,
    PltGotTable,
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

INT3 = b"\xcc"
_PC_IDS = frozenset({cx.X86_REG_RIP, cx.X86_REG_EIP, cx.X86_REG_IP})
# Instructions the kernel refuses (arch/x86/kernel/kprobes/core.c can_probe and
# is_IF_modifier): traps and far transfers.
_REFUSED = frozenset({"int3", "into", "iret", "iretd", "iretq", "ljmp", "lcall", "int1", "ud2"})


def _reg(name: str, size: int, gdb: str | None = None, aliases: tuple[str, ...] = ()) -> Register:
    return Register(name, size, getattr(ux, f"UC_X86_REG_{name.upper()}"), gdb or name, aliases)


_X86_64_REGS = (
    *(_reg(n, 8, aliases=(n[1:],)) for n in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp")),
    *(_reg(f"r{i}", 8) for i in range(8, 16)),
    _reg("rip", 8, aliases=("ip",)),
    _reg("eflags", 4, aliases=("flags",)),
    *(_reg(s, 2) for s in ("cs", "ss", "ds", "es", "fs", "gs")),
)
_I386_REGS = (
    *(_reg(n, 4, aliases=(n[1:],)) for n in ("eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp")),
    _reg("eip", 4, aliases=("ip",)),
    _reg("eflags", 4, aliases=("flags",)),
    *(_reg(s, 2) for s in ("cs", "ss", "ds", "es", "fs", "gs")),
)


def classify(insn: capstone.CsInsn) -> tuple[bool, str | None]:
    """(boostable, refused reason) for an x86 instruction."""
    if insn.mnemonic in _REFUSED:
        return False, f"{insn.mnemonic} cannot be probed (a trap or far transfer)"
    return not changes_flow(insn, _PC_IDS), None


def successors(insn: capstone.CsInsn, reg: ReadReg, mem: ReadMem, word: int) -> set[int] | None:
    """Where execution can go after ``insn``, given the registers now."""
    nxt = insn.address + insn.size
    fmt = "<Q" if word == 8 else "<I"
    if insn.mnemonic.startswith("ret"):
        return {struct.unpack(fmt, mem(reg("sp"), word))[0]}
    if not changes_flow(insn, _PC_IDS):
        return {nxt}
    out = {nxt}
    if capstone.CS_GRP_JUMP in insn.groups or capstone.CS_GRP_CALL in insn.groups:
        for op in insn.operands:
            if op.type == capstone.CS_OP_IMM:
                out.add(op.imm)
            elif op.type == capstone.CS_OP_REG:
                out.add(reg(insn.reg_name(op.reg)))
            elif op.type == capstone.CS_OP_MEM:
                ea = op.mem.disp
                if op.mem.base in _PC_IDS:
                    ea += nxt
                elif op.mem.base:
                    ea += reg(insn.reg_name(op.mem.base))
                if op.mem.index:
                    ea += reg(insn.reg_name(op.mem.index)) * op.mem.scale
                out.add(struct.unpack(fmt, mem(ea & ((1 << (8 * word)) - 1), word))[0])
        return out
    if {capstone.CS_GRP_INT, capstone.CS_GRP_IRET}.intersection(insn.groups):
        return None  # traps: where they go is the system's business
    return out  # rip-relative data access: falls through


def jump_back_64(at: int, target: int, iset: InstructionSet) -> bytes:
    """``jmp [rip+0]`` followed by the absolute target: reaches anywhere."""
    return b"\xff\x25\x00\x00\x00\x00" + struct.pack("<Q", target)


def jump_back_32(at: int, target: int, iset: InstructionSet) -> bytes:
    """``jmp rel32``: reaches anywhere in a 32-bit address space."""
    return b"\xe9" + struct.pack("<I", (target - (at + 5)) & 0xFFFFFFFF)


def return_jump_64(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """The kretprobe trampoline: ``mov [rip+d], rsp`` (kpsdk reads the stack pointer of
    the return from ``sp_word`` without a register read), then ``jmp [rip+0]``, which
    goes wherever the word after it says when it runs (kpsdk writes that word, so
    resuming needs no pc write).  Returns the code, the offset of the jump (the
    instruction kpsdk hooks) and of the word (aligned: kpsdk writes it as a word)."""
    store = b"\x48\x89\x25" + struct.pack("<i", sp_word - (at + 7)) + b"\x90"  # nop: the word lands aligned
    return store + b"\xff\x25\x02\x00\x00\x00" + bytes(2) + bytes(8), 8, 16  # jmp [rip+2]


def return_jump_32(at: int, iset: InstructionSet, sp_word: int) -> tuple[bytes, int, int]:
    """``mov [sp_word], esp`` then ``jmp [abs32]`` through the word right after it (see
    :func:`return_jump_64`)."""
    return b"\x89\x25" + struct.pack("<I", sp_word) + b"\xff\x25" + struct.pack("<I", at + 12) + bytes(4), 6, 12


def near_jump(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``jmp rel32`` (5 bytes), the jump a return probe's detour writes over a function
    entry; None where the target is beyond +-2 GiB (x86_64)."""
    off = target - (at + 5)
    if not -(1 << 31) <= off < (1 << 31) and iset.name == "x86_64":
        return None
    return b"\xe9" + struct.pack("<I", off & 0xFFFFFFFF)


def _entry_detour_text(d: EntryDetour, wide: bool) -> tuple[str, str]:
    """The :class:`~kpsdk.arch.EntryDetour` code as assembly: up to the hooked
    instruction, and that instruction.

    Every guest store here goes through Unicorn's slow store path (about as dear
    as a dozen other instructions), so the code makes four (x86_64) or five
    (i386): the count, the record's two words, the return address.  x86_64
    uses r11, which the psABI leaves free at a call (PLT stubs clobber it);
    i386 has no such register and spills eax.  Both clobber the status flags,
    which no calling convention passes.  The record is written by pointing
    the stack at it and pushing, which needs no second register."""
    if wide:
        head = """
            mov r11, qword ptr [rip + lit_gate]
            cmp qword ptr [r11], 0
            jne slow
            mov r11, qword ptr [rip + lit_avail]
            cmp qword ptr [r11], 0
            je slow
            dec qword ptr [r11]
            mov r11, qword ptr [r11]
            shl r11, 4
            add r11, qword ptr [rip + lit_end]
            xchg rsp, r11
            push r11
            push qword ptr [r11]
            mov rsp, r11
            mov r11, qword ptr [rip + lit_tramp]
            mov qword ptr [rsp], r11
            jmp resume
        slow:
        """
        tail = f"""
            jmp resume
        lit_gate: .quad {d.gate:#x}
        lit_avail: .quad {d.avail:#x}
        lit_end: .quad {d.records + 16:#x}
        lit_tramp: .quad {d.tramp:#x}
        """
    else:
        head = f"""
            cmp dword ptr [{d.gate:#x}], 0
            jne slow
            cmp dword ptr [{d.avail:#x}], 0
            je slow
            dec dword ptr [{d.avail:#x}]
            push eax
            mov eax, dword ptr [{d.avail:#x}]
            lea eax, [eax * 8 + {d.records + 8:#x}]
            xchg esp, eax
            lea eax, [eax + 4]
            push eax
            push dword ptr [eax]
            lea esp, [eax - 4]
            mov dword ptr [esp + 4], {d.tramp:#x}
            pop eax
            jmp resume
        slow:
        """
        tail = "jmp resume"
    return head, tail.replace("resume", f"{d.resume:#x}")


def _offsets(code: bytes, at: int, iset: InstructionSet, mnemonic: str, op_str: str) -> list[int]:
    """Offsets in ``code`` of the instructions spelled ``mnemonic op_str`` (how the
    hooked instructions are found: keystone reports no label addresses)."""
    md = capstone.Cs(*iset.capstone)
    return [i.address - at for i in md.disasm(code, at) if i.mnemonic == mnemonic and i.op_str == op_str]


def entry_detour(at: int, iset: InstructionSet, d: EntryDetour) -> tuple[bytes, int]:
    """The return probes' fast entry (:class:`~kpsdk.arch.EntryDetour`) at ``at``."""
    head, tail = _entry_detour_text(d, iset.name == "x86_64")
    ks = keystone.Ks(*iset.keystone)  # type: ignore[misc]
    code = bytes(ks.asm(head.replace("jmp resume", f"jmp {d.resume:#x}") + tail, at)[0])
    return code, _offsets(code, at, iset, "jmp", f"{d.resume:#x}")[-1]


def return_detour(at: int, iset: InstructionSet, r: ReturnDetour) -> tuple[bytes, int, int]:
    """The return half (:class:`~kpsdk.arch.ReturnDetour`) at ``at``: r11 and rcx
    (x86_64) or ecx (i386) and the flags are free when a function has returned.
    The stack pointer is compared by moving it with ``lea``, which keeps the flags."""
    if iset.name == "x86_64":
        text = """
            mov r11, qword ptr [rip + lit_avail]
            mov rcx, qword ptr [r11]
            cmp rcx, qword ptr [r11 + 8]
            jae general
            shl rcx, 4
            add rcx, qword ptr [rip + lit_records]
            lea rsp, [rsp - RET_SP]
            cmp qword ptr [rcx + 8], rsp
            lea rsp, [rsp + RET_SP]
            jne general
        short:
            jmp qword ptr [rcx]
        general:
            jmp qword ptr [r11 + 16]
        lit_avail: .quad AVAIL
        lit_records: .quad RECORDS
        """
    else:
        text = """
            mov ecx, dword ptr [AVAIL]
            cmp ecx, dword ptr [AVAIL + 4]
            jae general
            lea ecx, [ecx * 8 + RECORDS]
            lea esp, [esp - RET_SP]
            cmp dword ptr [ecx + 4], esp
            lea esp, [esp + RET_SP]
            jne general
        short:
            jmp dword ptr [ecx]
        general:
            jmp dword ptr [AVAIL + 8]
        """
    text = text.replace("AVAIL", f"{r.avail:#x}").replace("RECORDS", f"{r.records:#x}").replace("RET_SP", str(r.ret_sp))
    ks = keystone.Ks(*iset.keystone)  # type: ignore[misc]
    code = bytes(ks.asm(text, at)[0])
    short = _offsets(code, at, iset, "jmp", "qword ptr [rcx]" if iset.name == "x86_64" else "dword ptr [ecx]")[0]
    return code, short, short + 2


def _frame_record(fp: str, sp: str, word: int) -> FrameRecord:
    """``push rbp; mov rbp, rsp``: [rbp] is the caller's rbp, [rbp+word] the return address."""
    return FrameRecord(fp=fp, saved_fp=0, saved_ret=word, sets_fp=rf"mov {fp}, {sp}$",
                       restores_fp=rf"(leave|pop {fp})\b", saves_fp=rf"push {fp}$")


def _watch(word: int) -> WatchRules:
    """DR0-DR3, shared by every type; DR7's RW field has no read-only encoding; LEN is 1, 2, 4
    (8 on x86_64) and the address must be a multiple of it; Linux takes an execute breakpoint
    only with ``bp_len == sizeof(long)`` (arch/x86/kernel/hw_breakpoint.c)."""
    return WatchRules(slots=4, types=frozenset({"x", "w", "rw"}), lengths=(1, 2, 4, 8)[: 3 + (word == 8)],
                      exec_lengths=(word,), source="Intel SDM vol. 3 ch. 18 (DR0-DR3, DR7); Linux hw_breakpoint")


def _iset(name: str, cs_mode: int, ks_mode: int, frame: FrameRecord) -> InstructionSet:
    return InstructionSet(
        name=name,
        capstone=(capstone.CS_ARCH_X86, cs_mode),
        keystone=(keystone.KS_ARCH_X86, ks_mode),
        kernel_breakpoints={1: INT3},
        unicorn_breakpoint=Breakpoint({1: INT3}, intno=3, pc_adjust=-1),
        min_insn=1,
        frame_record=frame,
        max_call=8,  # call rel32 is 5 bytes; call [base + index*scale + disp32] with a REX prefix 8
    )


INSN_RULES = InsnRules(classify, successors)

#: X86_EFLAGS_IF (arch/x86/include/uapi/asm/processor-flags.h): interrupts are enabled
EFLAGS_IF = 0x200


def _loads_percpu(segment: int, size: int) -> Callable[[capstone.CsInsn], tuple[str, int] | None]:
    """``mov R, %SEG:ADDR`` of ``size`` bytes, no base or index: how an x86 kernel reads a
    per-cpu word (arch/x86/include/asm/percpu.h: %gs on x86_64, %fs on i386, whose base is
    this CPU's per-cpu offset)."""

    def loads(insn: capstone.CsInsn) -> tuple[str, int] | None:
        if insn.id != cx.X86_INS_MOV or len(insn.operands) != 2:
            return None
        dst, src = insn.operands
        if dst.type != capstone.CS_OP_REG or src.type != capstone.CS_OP_MEM or src.size != size:
            return None
        mem = src.mem
        if mem.segment != segment or mem.base or mem.index:
            return None
        return insn.reg_name(dst.reg), mem.disp & (1 << 8 * size) - 1

    return loads


def current_field(insn: capstone.CsInsn, reg: str) -> FieldUse | None:
    """A read of ``[R + d]`` (``mov``, ``push``...) or ``lea X, [R + d]`` with current in R."""
    for op in insn.operands:
        if op.type != capstone.CS_OP_MEM or op.mem.index or op.mem.segment or not op.mem.base \
                or insn.reg_name(op.mem.base) != reg:
            continue
        if insn.id == cx.X86_INS_LEA:
            return "address", op.mem.disp, 0
        if op.access & capstone.CS_AC_READ:
            return "load", op.mem.disp, op.size
    return None


#: x86_64 kernels address per-cpu data through %gs (arch/x86/include/asm/percpu.h), whose
#: base the kernel's swapgs loads on entry; ``current`` is the per-cpu ``current_task``
#: (arch/x86/include/asm/current.h) and the preempt count the per-cpu ``__preempt_count``
#: (arch/x86/include/asm/preempt.h), both members of ``pcpu_hot`` since 6.2.  That count
#: folds PREEMPT_NEED_RESCHED in, inverted; TIF_NEED_RESCHED is thread_info flag 3
#: (arch/x86/include/asm/thread_info.h).  A kernel built without BTF shows current and
#: task_struct's pid and comm in the code of dump_stack_print_info (:mod:`kpsdk.kernel.taskcode`).
KERNEL_TASKS_64 = KernelTasks(
    percpu_register="gs_base",
    current=("current_task", "pcpu_hot.current_task"),
    flags_register="eflags",
    irqs_disabled=lambda flags: not flags & EFLAGS_IF,
    preempt_count=("__preempt_count", "pcpu_hot.preempt_count"),
    need_resched_bit=3,
    preempt_need_resched_inverted=0x80000000,
    code=TaskCode("dump_stack_print_info", _loads_percpu(cx.X86_REG_GS, 8), current_field),
)

#: i386 kernels: %fs holds the per-cpu offset in kernel mode (entry_32.S loads __KERNEL_PERCPU,
#: a GDT entry based at it; QEMU's gdbstub shows that base as fs_base), ``current`` is the
#: per-cpu ``current_task`` (``pcpu_hot.current_task`` since 6.2).  Debian's 686 kernel has no
#: BTF and no data symbols: the address of ``current_task`` and task_struct's pid and comm are
#: read in the code of dump_stack_print_info (:mod:`kpsdk.kernel.taskcode`).
KERNEL_TASKS_32 = KernelTasks(
    percpu_register="fs_base",
    current=("current_task", "pcpu_hot.current_task"),
    flags_register="eflags",
    irqs_disabled=lambda flags: not flags & EFLAGS_IF,
    code=TaskCode("dump_stack_print_info", _loads_percpu(cx.X86_REG_FS, 4), current_field),
)


#: the first of the three TLS entries in the GDT a 64-bit kernel gives 32-bit processes
#: (arch/x86/include/asm/segment.h, GDT_ENTRY_TLS_MIN); glibc asks for "any" (-1) and loads
#: gs with the entry it gets back
GDT_ENTRY_TLS_MIN = 12
#: kpsdk's flat stack segment (any entry outside the TLS ones)
GDT_ENTRY_STACK = 2
GDT_ENTRIES = 32


def unicorn_setup(uc: unicorn.Uc) -> None:
    """The FPU state a Linux process starts with (fpstate_init: ``fninit``'s control word
    0x37f: all exceptions masked, 64-bit precision, round to nearest; MXCSR_DEFAULT 0x1f80):
    Unicorn 2.1.4 starts both at 0, so x87 arithmetic after the first control-word save and
    restore ran at 24-bit precision (Debian's sqlite3 printed 999*0.5 as 499.499988555908)."""
    uc.reg_write(ux.UC_X86_REG_FPCW, 0x37F)
    uc.reg_write(ux.UC_X86_REG_MXCSR, 0x1F80)


#: the exceptions Linux's x86 traps.c turns into signals (vector, signal, si_code): #DE divide
#: error (SIGFPE, FPE_INTDIV), #UD invalid opcode (SIGILL, ILL_ILLOPN), #GP (SIGSEGV, SI_KERNEL),
#: int3 that is not kpsdk's (SIGTRAP, SI_KERNEL)
X86_EXCEPTIONS = ((0, "SIGFPE", 1), (6, "SIGILL", 2), (13, "SIGSEGV", 0x80), (3, "SIGTRAP", 0x80))


def set_thread_area(uc: unicorn.Uc, gdt: int, base: int, limit: int, pages: bool) -> int:
    """i386's ``set_thread_area``: a 32-bit data descriptor (present, DPL 3, read/write)
    for ``base``/``limit`` at GDT_ENTRY_TLS_MIN of the table at ``gdt`` (one page the
    caller mapped), and GDTR pointed at the table, so the program's ``mov gs, ...`` loads it.
    The descriptor format: Intel SDM vol. 3A, 3.4.5 "Segment Descriptors"; the kernel's
    fill_ldt() in arch/x86/include/asm/desc.h."""
    uc.mem_write(gdt + 8 * GDT_ENTRY_TLS_MIN, _descriptor(base, limit, pages, dpl=3))
    if uc.reg_read(ux.UC_X86_REG_GDTR)[1] != gdt:
        # Loading any segment register makes the CPU re-derive its 32-bit stack flag from
        # SS's cached descriptor, which Unicorn 2.1.4 leaves without the B bit: the first
        # push after ``mov gs`` then wrapped sp to 16 bits.  So SS gets a flat 32-bit
        # descriptor of its own first (kernel privilege, as the CPU Unicorn runs is at CPL 0).
        uc.mem_write(gdt + 8 * GDT_ENTRY_STACK, _descriptor(0, 0xFFFFF, True, dpl=0))
        uc.reg_write(ux.UC_X86_REG_GDTR, (0, gdt, 8 * GDT_ENTRIES - 1, 0))
        uc.reg_write(ux.UC_X86_REG_SS, GDT_ENTRY_STACK << 3)
    return GDT_ENTRY_TLS_MIN


def gs_base(uc: unicorn.Uc) -> int | None:
    """The base of the GDT descriptor i386's gs selects: glibc's thread pointer (its TCB),
    which Unicorn's GS_BASE does not give in 32-bit mode; None when gs selects none."""
    selector = uc.reg_read(ux.UC_X86_REG_GS)
    _, table, limit, _ = uc.reg_read(ux.UC_X86_REG_GDTR)
    index = selector >> 3
    if not index or selector & 4 or 8 * index + 7 > limit:  # the null selector, an LDT one, past the table
        return None
    raw = bytes(uc.mem_read(table + 8 * index, 8))
    return raw[2] | raw[3] << 8 | raw[4] << 16 | raw[7] << 24


def _descriptor(base: int, limit: int, pages: bool, dpl: int) -> bytes:
    """A present, read/write, 32-bit data segment descriptor (Intel SDM vol. 3A, 3.4.5)."""
    return struct.pack("<HHBBBB", limit & 0xFFFF, base & 0xFFFF, (base >> 16) & 0xFF, 0x93 | (dpl << 5),
                       (0x80 if pages else 0) | 0x40 | ((limit >> 16) & 0xF), (base >> 24) & 0xFF)


#: the lazy PLT (PLT0, then one 16-byte stub per .rela.plt entry), or with IBT (-fcf-protection)
#: the 16-byte stubs of .plt.sec that calls reach, .plt holding only the lazy path (binutils
#: bfd/elfxx-x86.h LAZY_PLT_ENTRY_SIZE, NON_LAZY_PLT_ENTRY_SIZE; elf_x86_64_get_synthetic_symtab)
def plt_got_slot(stub: bytes, addr: int, got_plt: int) -> int | None:
    """The GOT slot a ``.plt.got`` stub jumps through: ``jmp *disp32(%rip)`` (``ff 25``, x86_64),
    ``jmp *disp32(%ebx)`` (``ff a3``, i386 PIC: %ebx holds .got.plt's address), after an
    ``endbr`` and a ``bnd`` prefix when there are (binutils bfd/elfxx-x86.h non-lazy PLTs)."""
    at = 4 if stub[:3] == b"\xf3\x0f\x1e" else 0  # endbr64 / endbr32
    if stub[at:at + 1] == b"\xf2":  # bnd
        at += 1
    if len(stub) < at + 6:
        return None
    disp = int.from_bytes(stub[at + 2:at + 6], "little", signed=True)
    if stub[at:at + 2] == b"\xff\x25":
        return addr + at + 6 + disp
    if stub[at:at + 2] == b"\xff\xa3":
        return got_plt + disp
    return None


X86_PLT_GOT = PltGotTable(".plt.got", 8, 16, ".plt.sec", plt_got_slot,
                          source="binutils bfd/elfxx-x86.h elf_x86_64_non_lazy_plt, elf_i386_non_lazy_plt")

X86_PLT = (PltTable(".plt.sec", 0, 16, by_slot=True, source="binutils bfd/elfxx-x86.h (IBT: .plt.sec)"),
           PltTable(".plt", 16, 16, by_slot=True, source="binutils bfd/elfxx-x86.h (lazy PLT)"))

#: what the kernel's ``is_endbr`` takes (arch/x86/include/asm/ibt.h): ENDBR64, ENDBR32, and the
#: 4-byte nop (``nopl -42(%rax)``) that ``apply_seal_endbr`` writes over an unused one at boot.
#: Only x86_64 kernels have IBT (X86_KERNEL_IBT), so i386's backend has no kernel_entry_skip.
KERNEL_ENDBR = (b"\xf3\x0f\x1e\xfa", b"\xf3\x0f\x1e\xfb", b"\x0f\x1f\x40\xd6")


def kernel_entry_skip(code: bytes) -> int:
    """A kprobe on a kernel function that starts with an ``endbr`` goes after it (IBT kernels:
    ``arch_adjust_kprobe_addr``, arch/x86/kernel/kprobes/core.c)."""
    return 4 if code[:4] in KERNEL_ENDBR else 0


#: DWARF register numbers, System V x86-64 psABI (figure 3.36); 16 is the return address
#: column, the caller's rip
DWARF_X86_64 = DwarfRegisters(
    {0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
     **{i: f"r{i}" for i in range(8, 16)}, 16: "rip", **{17 + i: f"xmm{i}" for i in range(16)}, 49: "eflags",
     50: "es", 51: "cs", 52: "ss", 53: "ds", 54: "fs", 55: "gs"},
    return_address="rip")
#: DWARF register numbers, i386 psABI (table 2.14); 8 is the return address column, the eip
DWARF_I386 = DwarfRegisters(
    {0: "eax", 1: "ecx", 2: "edx", 3: "ebx", 4: "esp", 5: "ebp", 6: "esi", 7: "edi", 8: "eip", 9: "eflags",
     **{21 + i: f"xmm{i}" for i in range(8)},
     40: "es", 41: "cs", 42: "ss", 43: "ds", 44: "fs", 45: "gs"},
    return_address="eip")


X86_64 = Arch(
    name="x86_64",
    aliases=("amd64", "x86-64"),
    # QEMU's x86_64 plugin registers are gdb's (i386-64bit.xml): the same names
    plugin_registers=tuple((r, r) for r in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9",
                                            "r10", "r11", "r12", "r13", "r14", "r15", "eflags", "cs", "ss", "ds",
                                            "es", "fs", "gs")),
    bits=64,
    endian="little",
    registers=_X86_64_REGS,
    pc="rip",
    sp="rsp",
    return_value="rax",
    link=None,
    kernel_abi=Abi(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), stack_args_offset=8),
    user_abi=Abi(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), stack_args_offset=8),
    isets=(_iset("x86_64", capstone.CS_MODE_64, keystone.KS_MODE_64, _frame_record("rbp", "rsp", 8)),),
    insn=INSN_RULES,
    unicorn=(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64),
    unicorn_setup=unicorn_setup,
    unicorn_unsupported=None,
    gdb_arch="i386:x86-64",
    elf_machine="EM_X86_64",
    elf_class=64,
    syscalls=Syscalls("rax", ("rdi", "rsi", "rdx", "r10", "r8", "r9"), "rax", None, numbers.X86_64,
                      unicorn_insn=ux.UC_X86_INS_SYSCALL,
                      linux=LinuxAbi("x86_64", 0, machine="x86_64", stat=StatLayout(*tables.STAT_X86_64),
                                     tls_register=ux.UC_X86_REG_FS_BASE, calls=tables.X86_64,
                                     syscall_insn_size=2, cpu_exceptions=X86_EXCEPTIONS)),
    stack_alignment=16,
    qemu_user="qemu-x86_64",
    multiarch="x86_64-linux-gnu",
    cross_libc_package="libc6-amd64-cross",
    plt=X86_PLT,
    plt_got=X86_PLT_GOT,
    irelative=(37,),  # R_X86_64_IRELATIVE (x86-64 psABI)
    tls_tpoff=(18,),  # R_X86_64_TPOFF64
    qemu_system=QemuMachine("qemu-system-x86_64", "qemu-system-x86"),
    debian=DebianPort("amd64", "bookworm", "linux-image-amd64"),
    gdb_break_adjusts_pc=True,
    watch=_watch(8),
    cross_gcc_package="gcc-x86-64-linux-gnu",
    out_of_line=OutOfLine(jump_back_64, return_jump_64),
    detours=DetourCode(near_jump, entry_detour, return_detour, scratch=("r11",), flags="rflags"),
    kernel_tasks=KERNEL_TASKS_64,
    kernel_entry_skip=kernel_entry_skip,
    # no CET notes or endbr64: the fixture's code is what its source says
    toolchain=Toolchain((FixtureVariant("x86_64", ("-fcf-protection=none",), demo=0),),
                        libc_dev="libc6-dev-amd64-cross", native_machine="x86_64"),
    dwarf=DWARF_X86_64,
)

I386 = Arch(
    name="i386",
    aliases=("x86", "i686"),
    # qemu-system-i386's plugin registers are gdb's (i386-32bit.xml)
    plugin_registers=tuple((r, r) for r in ("eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp", "eflags", "cs",
                                            "ss", "ds", "es", "fs", "gs")),
    bits=32,
    endian="little",
    registers=_I386_REGS,
    pc="eip",
    sp="esp",
    return_value="eax",
    link=None,
    kernel_abi=Abi(("eax", "edx", "ecx"), stack_args_offset=4),
    user_abi=Abi((), stack_args_offset=4),
    isets=(_iset("i386", capstone.CS_MODE_32, keystone.KS_MODE_32, _frame_record("ebp", "esp", 4)),),
    insn=INSN_RULES,
    unicorn=(unicorn.UC_ARCH_X86, unicorn.UC_MODE_32),
    unicorn_setup=unicorn_setup,
    unicorn_unsupported=None,
    gdb_arch="i386",
    elf_machine="EM_386",
    elf_class=32,
    syscalls=Syscalls("eax", ("ebx", "ecx", "edx", "esi", "edi", "ebp"), "eax", 0x80, numbers.I386,
                      linux=LinuxAbi("i686", 0, machine="i686", sysroot="/usr/i686-linux-gnu",
                                     stat64=StatLayout(*tables.STAT64_I386), set_thread_area=set_thread_area,
                                     calls=tables.I386, syscall_insn_size=2, clone_backwards=True,
                                     tls_segment=ux.UC_X86_REG_GS, thread_pointer=gs_base,
                                     cpu_exceptions=X86_EXCEPTIONS)),
    stack_alignment=16,
    qemu_user="qemu-i386",
    multiarch="i686-linux-gnu",
    cross_libc_package="libc6-i386-cross",
    plt=X86_PLT,
    plt_got=X86_PLT_GOT,
    irelative=(42,),  # R_386_IRELATIVE (i386 psABI)
    tls_tpoff=(14,),  # R_386_TLS_TPOFF (not R_386_TLS_TPOFF32: its value is negated)
    qemu_system=QemuMachine("qemu-system-i386", "qemu-system-x86"),
    debian=DebianPort("i386", "bookworm", "linux-image-686"),
    kernel_stack_size=8192,
    kernel_tasks=KERNEL_TASKS_32,
    gdb_break_adjusts_pc=True,
    watch=_watch(4),
    cross_gcc_package="gcc-i686-linux-gnu",
    out_of_line=OutOfLine(jump_back_32, return_jump_32),
    detours=DetourCode(near_jump, entry_detour, return_detour, scratch=(), flags="eflags"),
    toolchain=Toolchain((FixtureVariant("i386", ("-fcf-protection=none",), demo=1),), libc_dev="libc6-dev-i386-cross"),
    dwarf=DWARF_I386,
)


@hookimpl
def kpsdk_archs() -> list[Arch]:
    return [I386, X86_64]
