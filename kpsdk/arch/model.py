"""The architecture model: registers, their roles, ABIs, instruction sets, and :class:`Arch`.

An :class:`Arch` is what every layer asks about a CPU (see :mod:`kpsdk.arch`).  Its fields
are data declared by a backend; lookups (by exact name or alias, never by pattern), masks and
engine handles are derived here.  The optional capabilities it holds are declared in
:mod:`kpsdk.arch.capabilities`, the Linux ABI in :mod:`kpsdk.arch.linux`, QEMU's board and
Debian's packages in :mod:`kpsdk.arch.machine`, a live kernel's data in :mod:`kpsdk.arch.kernel`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from kpsdk.arch.capabilities import (
    Conditions,
    DetourCode,
    FrameRecord,
    InsnRules,
    ModeBit,
    OutOfLine,
    PltGotTable,
    PltTable,
    WatchRules,
)
from kpsdk.arch.dwarfregs import DwarfRegisters
from kpsdk.arch.fixture import Toolchain
from kpsdk.arch.kernel import AccessGate, KernelTasks, PageWalk
from kpsdk.arch.linux import Syscalls
from kpsdk.arch.machine import DebianPort, QemuMachine
from kpsdk.errors import CapabilityError, UnknownNameError

if TYPE_CHECKING:
    import capstone

#: ``is_call(insn) -> bool``: an instruction set's own rule for calls (InstructionSet.is_call)
CallRule = Callable[["capstone.CsInsn"], bool]


@dataclass(frozen=True)
class Register:
    """One architectural register.

    :param name: the canonical name users write (``rdi``, ``a0``, ``r3``).
    :param size: width in bytes.
    :param uc: Unicorn's register id, or ``None`` where Unicorn has none.
    :param gdb: gdb's name for it (``$pc`` without the ``$``).
    :param aliases: other exact names (``x10`` for ``a0``, ``gpr3`` for ``r3``).
    """

    name: str
    size: int
    uc: int | None
    gdb: str
    aliases: tuple[str, ...] = ()

    @cached_property
    def mask(self) -> int:
        """All-ones of the register's width (computed once: it is on the hot path)."""
        return (1 << (8 * self.size)) - 1


@dataclass(frozen=True)
class Breakpoint:
    """How a breakpoint is encoded and how its trap is reported.

    :param encodings: breakpoint bytes by the length of the instruction they
        replace (``{1: b"\\xcc"}`` for x86: one encoding for every length).
    :param intno: the interrupt number Unicorn reports for it.
    :param pc_adjust: trap pc + this = the probed address (x86 -1, riscv -4).
    """

    encodings: dict[int, bytes]
    intno: int
    pc_adjust: int

    def for_length(self, length: int) -> bytes:
        """The breakpoint to write over an instruction of ``length`` bytes."""
        if length in self.encodings:
            return self.encodings[length]
        return self.encodings[min(self.encodings)]


@dataclass(frozen=True)
class InstructionSet:
    """One instruction set of an architecture (ARM has ARM and Thumb).

    :param name: ``arm``, ``thumb`` or the architecture's name.
    :param capstone: ``(arch, mode)`` for capstone.
    :param keystone: ``(arch, mode)`` for keystone, ``None`` if keystone lacks it.
    :param kernel_breakpoints: what Linux kprobes writes, by instruction length
        (each architecture's kprobes code in the kernel: x86 ``int3``, ARM's
        ``KPROBE_ARM_BREAKPOINT_INSTRUCTION`` and the two Thumb ones in
        ``arch/arm/probes/kprobes/core.h``, RISC-V ``ebreak``/``c.ebreak``,
        ppc64 ``BREAKPOINT_INSTRUCTION``, a ``trap``); shown by ``kpsdk archs``
        and used on live targets.
    :param unicorn_breakpoint: what kpsdk writes on Unicorn, chosen because it
        raises an interrupt Unicorn 2.1.4 delivers to a hook (the kernel's own
        UDF/ebreak encodings stop emulation instead).
    :param min_insn: the shortest instruction, in bytes.
    :param thumb_bit: address bit 0 marks this set (Thumb).
    :param length_rule: the instruction length from its first bytes.
    :param frame_record: the frame-pointer chain of code compiled with frame
        pointers, or None where backtraces scan the stack.
    :param max_call: the longest call instruction, in bytes: a stack scan looks
        this far back from a candidate return address for the call before it.
    :param is_call: whether an instruction is a call where capstone does not put it
        in ``CS_GRP_CALL`` (PowerPC's branches with the LK bit: ``bl``, ``bctrl``);
        None: capstone's group decides.
    """

    name: str
    capstone: tuple[int, int]
    keystone: tuple[int, int] | None
    kernel_breakpoints: dict[int, bytes]
    unicorn_breakpoint: Breakpoint
    min_insn: int
    thumb_bit: bool = False
    #: the length rule: instruction bytes -> length, or None where only a
    #: decoder can tell (x86's 1-15 bytes)
    length_rule: Callable[[bytes], int | None] = lambda code: None
    frame_record: FrameRecord | None = None
    max_call: int = 4
    is_call: CallRule | None = None


@dataclass(frozen=True)
class Abi:
    """A calling convention.

    :param args: integer argument registers in order.
    :param stack_args_offset: at function entry, where stack argument 0 lives,
        as an offset from sp (x86: after the return address).
    """

    args: tuple[str, ...]
    stack_args_offset: int


@dataclass
class Arch:
    """Everything kpsdk knows about one architecture.

    Backends construct one and return it from the ``kpsdk_archs`` hook.  Only the
    fields are data; engines and lookups are derived on first use.

    Behaviour beyond data comes as typed capabilities.  ``insn`` is required
    (nothing works without it); the others are optional, and a feature that
    needs one the backend lacks says so by name when it is asked for
    (:meth:`require`: a :class:`~kpsdk.errors.CapabilityError` at registration):

    ====================  ================================================================
    capability            what it is for
    ====================  ================================================================
    ``insn``              classify and follow instructions (every probe)
    ``conditions``        conditional execution (ARM): skip a probe whose condition fails
    ``out_of_line``       Unicorn's booster (``jump_back``) and kretprobe trampoline
                          (``return_jump``); without it probes run through code hooks
                          and kretprobes on Unicorn are refused
    ``detours``           kretprobe entries in guest code on Unicorn (else the hook path)
    ``mode_bit``          the register bit that says which instruction set runs (ARM's T)
    ``unicorn_setup``     CPU state a new Unicorn engine needs (ARM's VFP)
    ``local_entry``       ELFv2 local entry points (ppc64): where a probe by name lands
    ``kernel_entry_skip`` where a kprobe by name lands in a kernel's function that starts
                          with an IBT marker (x86's ``endbr``: arch_adjust_kprobe_addr)
    ``page_walk``         translate a virtual address with the guest's own page tables, for
                          a live kernel's reads that the CPU's access control refuses to a
                          debugger (ARM's software PAN: user memory from kernel mode)
    ``access_gate``       a register that denies kernel-mode user accesses, opened for a
                          live kernel's refused reads (ppc64's KUAP through the AMR)
    ``kernel_tasks``      where a kernel keeps ``current`` (every arch): comm and pid in the
                          trace prefix on a live kernel (else ``<...>-0``)
    ``entry_registers``   registers a process starts with beyond sp, from its entry's
                          function descriptor (ppc64 ELFv1: r2, the TOC)
    ``kernel_arg_access`` the arch's kernel reads ``$argN`` in probe events (32-bit arm's has
                          no HAVE_FUNCTION_ARG_ACCESS_API; Debian 12's ppc64el refuses it too:
                          "Invalid $-variable", asked of the guest in the tests)
    ``kernel_log2_overflow`` a hist ``.log2`` key where the kernel's ``1UL << bits`` overflows
                          (0, negative values): 32-bit arm's is ``ilog2(0)``, 2**64 - 1, as its
                          kernel prints it; None: the exponent (x86_64's 64)
    ====================  ================================================================
    """

    name: str
    bits: Literal[32, 64]
    endian: Literal["little", "big"]
    registers: tuple[Register, ...]
    pc: str
    sp: str
    return_value: str
    link: str | None  # register holding the return address at entry, None: on the stack
    kernel_abi: Abi
    user_abi: Abi
    isets: tuple[InstructionSet, ...]
    insn: InsnRules
    unicorn: tuple[int, int] | None
    unicorn_unsupported: str | None
    gdb_arch: str
    elf_machine: str
    elf_class: int
    syscalls: Syscalls | None
    stack_alignment: int
    qemu_user: str
    cross_gcc_package: str
    #: how qemu-system runs a whole machine of this arch (None: no qemu-system target)
    qemu_system: QemuMachine | None = None
    #: Debian's kernel and busybox for it (None: Debian builds none)
    debian: DebianPort | None = None
    #: gdb's ``decr_pc_after_break`` is non-zero (x86: the pc is past the int3):
    #: after a software-breakpoint stop gdb moves the pc back one byte whenever
    #: another software breakpoint sits there.  QEMU reports the exact pc, so
    #: two adjacent probes (a ``ret`` and the next function) would be confused;
    #: live targets use gdb hardware breakpoints on such archs (QEMU implements
    #: both kinds alike, at the same cost).
    gdb_break_adjusts_pc: bool = False
    #: gdb's Linux OS ABI single-steps this arch in software (a breakpoint on the next
    #: instruction, then a continue: Linux's ptrace has no step there), so an interrupt
    #: pending in a kernel runs inside the step.  Kernel targets tell gdb there is no OS
    #: ABI, and gdb asks the stub, which steps with interrupts held off.  (Set only where
    #: needed: without QEMU's target description, an XML-less stub's register packet has
    #: the OS ABI's layout, x86_64's Linux one with orig_rax.  arm's Linux ABI has a software
    #: step too, but asks the stub first when the stub can step: QEMU's sends ``vCont;s``.)
    gdb_linux_steps_in_software: bool = False
    #: the kernel's THREAD_SIZE: each task's kernel stack is this big and this
    #: aligned, so ``sp & ~(size - 1)`` names the task on a live kernel
    kernel_stack_size: int = 16384
    #: the debug hardware's watchpoint rules (slots, lengths, alignment, types)
    watch: WatchRules | None = None
    aliases: tuple[str, ...] = ()
    conditions: Conditions | None = None
    out_of_line: OutOfLine | None = None
    detours: DetourCode | None = None
    mode_bit: ModeBit | None = None
    unicorn_setup: Callable[[Any], None] | None = None
    #: whether kpsdk fills Unicorn's virtual TLB on this arch (kpsdk.targets.unicorn.tlb: guest stores
    #: on the fast path); where not, Unicorn's CPU fills its TLB itself, every store on the slow path
    unicorn_tlb_fill: bool = True
    local_entry: Callable[[bytes], int] | None = None
    #: on a kernel, how far past a function's first bytes a probe by name goes (x86 IBT:
    #: the 4-byte ``endbr``, or the nop the kernel seals an unused one with)
    kernel_entry_skip: Callable[[bytes], int] | None = None
    page_walk: PageWalk | None = None
    access_gate: AccessGate | None = None
    kernel_tasks: KernelTasks | None = None
    kernel_arg_access: bool = True
    kernel_log2_overflow: int | None = None
    #: what kpsdk's TCG plugin (``mechanism="plugin"``) reads at each hit into the register
    #: snapshot, in order, as (gdb's name, QEMU's name in ``qemu_plugin_get_registers``, which
    #: comes from the target's gdb XML): at most ``kpsdk.targets.live.tcg.plugin.MAX_REGS``, the pc
    #: not among them (the hit's address is the pc); empty: the plugin does not serve the arch
    plugin_registers: tuple[tuple[str, str], ...] = ()
    #: ``(descriptor bytes, load bias) -> {register: value}``: what the kernel loads from an
    #: ELFv1 entry descriptor besides the pc (only called when e_entry is one); the descriptor
    #: as the file has it, the bias that of the object it belongs to (the loader's, if any)
    entry_registers: Callable[[bytes, int], dict[str, int]] | None = None
    #: the register a function's global entry expects its own address in (ppc64le, ELFv2:
    #: r12, from which it computes its TOC pointer); Linux's start_thread sets it to the entry
    #: point, and a call kpsdk makes sets it to the function called; None: no such convention
    entry_address_register: str | None = None
    #: the ELF section of function descriptors (ppc64 ELFv1's ``.opd``): a function symbol's
    #: value (and ``e_entry``) is a descriptor there, whose first word is the code's address
    function_descriptors: str | None = None
    #: Debian's multiarch triple: user programs of this arch find their libraries in the
    #: cross sysroot ``/usr/<triple>`` (QEMU's ``-L``) when they are not the host's own
    multiarch: str = ""
    #: the Debian package that installs that sysroot's C library
    cross_libc_package: str = ""
    #: the PLT stub layouts of the arch's linker, tried in order (the first that fits a file
    #: names its ``SYM@plt`` stubs); empty: none are named
    plt: tuple[PltTable, ...] = ()
    #: x86's ``.plt.got`` stubs (None: the arch's linker makes none)
    plt_got: PltGotTable | None = None
    #: the relocation types that make the loader call an IFUNC resolver and store its choice
    #: in a GOT slot (``R_X86_64_IRELATIVE``...): how a session learns what an IFUNC
    #: symbol resolved to (:mod:`kpsdk.binfmt.ifunc`); empty: IFUNC symbols are refused
    irelative: tuple[int, ...] = ()
    #: the relocation types that make the loader store a TLS block's offset from the thread
    #: pointer in a GOT slot (``R_X86_64_TPOFF64``...): how a session finds a library's
    #: thread-local variable, glibc's ``errno`` (:mod:`kpsdk.binfmt.tls`); empty: not found
    tls_tpoff: tuple[int, ...] = ()
    #: how kpsdk's test programs are built for the arch (:mod:`kpsdk.arch.fixture`); None: it has none
    toolchain: Toolchain | None = None
    #: DWARF register numbers -> register names (:mod:`kpsdk.arch.dwarfregs`); None: no DWARF reading
    dwarf: DwarfRegisters | None = None

    def require(self, capability: str, feature: str) -> Any:
        """The capability named ``capability`` (an attribute of this class, or of its
        ``out_of_line`` as ``out_of_line.return_jump``), or a
        :class:`~kpsdk.errors.CapabilityError` naming the architecture, the
        capability and the ``feature`` that needs it."""
        value: Any = self
        for part in capability.split("."):
            value = getattr(value, part, None)
            if value is None:
                raise CapabilityError(self.name, capability, feature)
        return value

    # -- derived lookups -------------------------------------------------

    @cached_property
    def by_name(self) -> dict[str, Register]:
        """Every register by its canonical name and each alias (exact names only)."""
        table: dict[str, Register] = {}
        for reg in self.registers:
            for n in (reg.name, *reg.aliases):
                if n in table:
                    raise ValueError(f"{self.name}: register name {n!r} declared twice")
                table[n] = reg
        return table

    @cached_property
    def has_thumb(self) -> bool:
        """Bit 0 of a code address selects an instruction set (ARM/Thumb)."""
        return any(i.thumb_bit for i in self.isets)

    @property
    def word_size(self) -> int:
        return self.bits // 8

    @property
    def word_mask(self) -> int:
        return (1 << self.bits) - 1

    def register(self, name: str) -> Register:
        """The register called ``name`` exactly (canonical name or alias)."""
        try:
            return self.by_name[name]
        except KeyError:
            raise UnknownNameError(f"{self.name} register", name, [r.name for r in self.registers]) from None

    def has_register(self, name: str) -> bool:
        return name in self.by_name

    @property
    def register_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.registers)

    def iset(self, name: str | None = None) -> InstructionSet:
        """The named instruction set, or the default (first) one."""
        if name is None:
            return self.isets[0]
        for iset in self.isets:
            if iset.name == name:
                return iset
        raise UnknownNameError(f"{self.name} instruction set", name, [i.name for i in self.isets])

    def iset_for_address(self, addr: int) -> InstructionSet:
        """The instruction set an address selects (bit 0 set selects Thumb)."""
        if addr & 1:
            for iset in self.isets:
                if iset.thumb_bit:
                    return iset
        return self.isets[0]

    def abi(self, kind: str) -> Abi:
        return self.user_abi if kind == "user" else self.kernel_abi

    # -- engines, made on first use ----------------------------------------

    def disassembler(self, iset: InstructionSet | None = None) -> capstone.Cs:
        """A capstone disassembler with details on (cached per instruction set)."""
        iset = iset or self.isets[0]
        md = self._disassemblers.get(iset.name)
        if md is None:
            import capstone

            md = capstone.Cs(*iset.capstone)
            md.detail = True
            self._disassemblers[iset.name] = md
        return md

    @cached_property
    def _disassemblers(self) -> dict[str, capstone.Cs]:
        return {}

    def running_iset(self, read: Callable[[str], int]) -> InstructionSet:
        """The instruction set the CPU runs now, from ``mode_bit`` (``read`` reads a
        register by name); the first one where there is no such bit."""
        bit = self.mode_bit
        if bit is not None and read(bit.register) & bit.mask:
            return self.iset(bit.iset)
        return self.isets[0]

    def assemble(self, source: str, address: int = 0, iset: InstructionSet | None = None) -> bytes:
        """Assemble with keystone; a clear error where keystone lacks the arch."""
        iset = iset or self.isets[0]
        if iset.keystone is None:
            from kpsdk.errors import TargetError

            raise TargetError(
                f"keystone-engine 0.9.2 has no {iset.name} assembler; "
                f"use a cross-built binary (Debian package {self.cross_gcc_package})"
            )
        import keystone

        ks = keystone.Ks(*iset.keystone)
        encoding, _ = ks.asm(source, address)
        return bytes(encoding or b"")

    def engines_available(self) -> dict[str, bool]:
        """Which engines work for this architecture on this machine."""
        import capstone
        import unicorn

        out = {
            "unicorn": self.unicorn is not None
            and self.unicorn_unsupported is None
            and unicorn.uc_arch_supported(self.unicorn[0]),
            "capstone": all(capstone.cs_support(i.capstone[0]) for i in self.isets),
        }
        try:
            import keystone

            out["keystone"] = all(
                i.keystone is not None and keystone.ks_arch_supported(i.keystone[0]) for i in self.isets
            )
        except ImportError:
            out["keystone"] = False
        return out


class ArchRegistry:
    """Architectures by exact name or alias, filled from the ``kpsdk_archs`` hook."""

    def __init__(self, archs: list[Arch]) -> None:
        self._archs: dict[str, Arch] = {}
        self._aliases: dict[str, str] = {}
        for arch in archs:
            if arch.name in self._archs:
                raise ValueError(f"architecture {arch.name!r} provided twice")
            self._archs[arch.name] = arch
            for alias in arch.aliases:
                self._aliases[alias] = arch.name

    def get(self, name: str) -> Arch:
        key = self._aliases.get(name, name)
        if key not in self._archs:
            raise UnknownNameError("architecture", name, [*self._archs, *self._aliases])
        return self._archs[key]

    def by_elf(self, machine: str, elf_class: int, endian: str) -> Arch:
        for arch in self._archs.values():
            if arch.elf_machine == machine and arch.elf_class == elf_class and arch.endian == endian:
                return arch
        raise UnknownNameError("ELF machine", f"{machine}/{elf_class}-bit/{endian}", [
            f"{a.elf_machine}/{a.elf_class}-bit/{a.endian}" for a in self._archs.values()
        ])

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._archs.values())

    def names(self) -> list[str]:
        return list(self._archs)
