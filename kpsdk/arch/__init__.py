"""Architecture descriptions: declared as data, the rest derived.

An :class:`Arch` is what every layer asks about a CPU: which registers exist and
how each engine numbers them, which register plays which role (pc, sp, return
value, link), how arguments are passed in kernel and user code, what breakpoint
to write and how long an instruction is.  Backends in ``kpsdk.arch_backends``
fill in the data; lookups (by exact name or alias, never by pattern), masks and
engine handles are derived here.  Engines (capstone, keystone, unicorn) are
created lazily because importing keystone alone costs tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from kpsdk.errors import CapabilityError, UnknownNameError

if TYPE_CHECKING:
    import capstone

    from kpsdk.arch.insn import ReadMem, ReadReg

#: ``classify(insn) -> (boostable, refused reason or None)``
Classify = Callable[["capstone.CsInsn"], tuple[bool, "str | None"]]
#: ``is_call(insn) -> bool``: an instruction set's own rule for calls (InstructionSet.is_call)
CallRule = Callable[["capstone.CsInsn"], bool]
#: ``successors(insn, read_reg, read_mem, word_size) -> addresses, or None where it cannot be followed``
Successors = Callable[["capstone.CsInsn", "ReadReg", "ReadMem", int], "set[int] | None"]
#: ``page_walk(read_reg, read_phys, va) -> physical address, or None where va is not mapped``
PageWalk = Callable[["ReadReg", "ReadMem", int], "int | None"]
#: ``jump(at, target, iset) -> code, or None where ``target`` is out of its reach``
Jump = Callable[[int, int, "InstructionSet"], "bytes | None"]


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
class StatLayout:
    """One ``struct stat`` as an architecture's kernel fills it (asm/stat.h), as data.

    :param size: the structure's size in bytes.
    :param fields: ``(name, offset, struct code)`` of each field the Linux layer
        fills (``st_mode``...; ``st_atime_nsec`` and friends included); the rest is 0.
    """

    size: int
    fields: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class LinuxAbi:
    """What the Unicorn target's Linux layer (:mod:`kpsdk.targets.unicorn.linux`) must know of an
    architecture's process ABI beyond the call numbers: data, so generic code never asks
    which architecture it runs.

    :param platform: ``AT_PLATFORM`` (the kernel's ``ELF_PLATFORM``), None where the
        kernel gives none (riscv).
    :param hwcap: ``AT_HWCAP``, the features a program may pick code for (IFUNCs).
    :param hwcap2: ``AT_HWCAP2``.
    :param machine: ``uname -m`` (``struct utsname``'s machine).
    :param sysroot: Debian's cross sysroot (``/usr/TRIPLE``), the default root of a
        program of a foreign architecture; None: none by default.
    :param stat: ``struct stat`` of ``fstat``/``newfstatat``/``stat``.
    :param stat64: ``struct stat64`` of ``fstat64``/``fstatat64`` (32-bit arches).
    :param tls_register: the Unicorn register ``arch_prctl(ARCH_SET_FS)`` or ARM's
        ``set_tls`` writes (x86_64 fs base, ARM TPIDRURO); None where the program
        sets its thread pointer itself (riscv tp, ppc64 r13).
    :param set_thread_area: i386's ``set_thread_area``: ``(uc, gdt, base, limit,
        pages) -> entry``: writes a TLS descriptor into the GDT at ``gdt`` (one
        page the layer maps) and returns its entry number.
    :param pair_aligned: a 64-bit argument starts at an even register (ARM EABI:
        ``pread64(fd, buf, count, pad, lo, hi)``).
    :param error_flag: how a failed call says so: None, a negative result
        (``-errno``); else ``(register, bit)``: the bit is set and the result is
        the positive errno (ppc64's CR0.SO).
    :param big_endian: the byte order of the guest's words.
    :param open_flag_bits: the ``open(2)`` flags whose bits differ from asm-generic's
        (arch/*/include/uapi/asm/fcntl.h: ``O_DIRECTORY``, ``O_NOFOLLOW``, ``O_DIRECT``,
        ``O_LARGEFILE`` on arm and powerpc), by name: what ``--strace`` prints.
    """

    platform: str | None
    hwcap: int
    hwcap2: int = 0
    machine: str = ""
    sysroot: str | None = None
    stat: StatLayout | None = None
    stat64: StatLayout | None = None
    tls_register: int | None = None
    set_thread_area: Callable[[Any, int, int, int, bool], int] | None = None
    pair_aligned: bool = False
    error_flag: tuple[int, int] | None = None
    open_flag_bits: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Syscalls:
    """The Linux system-call convention and table of an architecture.

    :param number: register holding the call number.
    :param args: argument registers in order.
    :param result: register receiving the result.
    :param intno: Unicorn interrupt number of the trap, or ``None`` when the
        trap is an instruction hook (x86_64 ``syscall``).
    :param calls: Linux numbers by call name (:mod:`kpsdk.arch_backends.syscall_tables`);
        at least ``write``, ``exit`` and ``exit_group``.
    :param unicorn_insn: Unicorn's instruction id to hook (``UC_HOOK_INSN``) where
        the trap is an instruction rather than an interrupt (x86_64's ``syscall``).
    :param linux: the process ABI the Linux layer needs (auxv, TLS, structs);
        None: only the freestanding calls (write, exit) are emulated.
    """

    number: str
    args: tuple[str, ...]
    result: str
    intno: int | None
    calls: dict[str, int]
    unicorn_insn: int | None = None
    linux: LinuxAbi | None = None


@dataclass(frozen=True)
class FrameRecord:
    """How code compiled with frame pointers links each frame to its caller's.

    Backtraces walk this chain (:mod:`kpsdk.backtrace`); an instruction set
    without one (Thumb, whose r7 points at a different place in every
    function) is unwound by a validated stack scan instead.  Patterns match
    ``"mnemonic op_str"`` as capstone prints it.

    :param fp: the frame-pointer register.
    :param saved_fp: where the caller's fp is saved, as an offset from fp.
    :param saved_ret: where the return address is saved, as an offset from fp.
    :param sets_fp: the prologue instruction that points fp at the new frame.
    :param restores_fp: an epilogue instruction that gives fp back to the caller.
    :param saves_fp: an instruction that saves fp before ``sets_fp`` on the
        stack, moving the return address one word up (x86 ``push rbp``).
    :param leaf_saved_fp: a function that calls nothing may save only fp and
        keep its return address in the link register; its caller's fp is
        then at this offset from fp (ARM 0, RISC-V -8).
    :param back_chain: the PowerPC ABIs' chain instead: fp is the stack pointer,
        every frame's word at ``saved_fp`` is its caller's stack pointer (the back
        chain, stored by the ``stdu`` that ``sets_fp`` matches), and the return
        address into the caller is saved at ``saved_ret`` in the *caller's* frame
        (the LR save doubleword), by the callee; a function that calls nothing
        keeps it in the link register.
    """

    fp: str
    saved_fp: int
    saved_ret: int
    sets_fp: str
    restores_fp: str
    saves_fp: str | None = None
    leaf_saved_fp: int | None = None
    back_chain: bool = False


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
class EntryDetour:
    """What an arch backend's ``entry_detour`` writes: the guest code that hooks a
    call's return at a function entry without leaving the emulated CPU (the
    return probes' fast entry on Unicorn, see ``kpsdk/targets/unicorn/detour.py``).

    The code runs at a function entry, where every psABI leaves the status
    flags and the backend's ``detour_scratch`` registers without meaning (PLT
    stubs and veneers clobber them); it may clobber those and keeps every
    other register.  When the word at ``gate`` is 0 and the count at ``avail``
    is not, it decrements the count to ``n``, writes the record ``(return
    address, stack pointer at entry)`` (two words) at ``records + n * 2 *
    word``, points the return address at ``tramp`` and jumps to ``resume``.
    Otherwise it reaches the instruction at the hook offset it returns, which
    jumps to ``resume`` with the entry's registers: kpsdk hooks that one
    instruction, so only calls it must look at leave the guest.

    :param gate: address of the gate word, shared by every detour.
    :param avail: address of this detour's available-instances count.
    :param records: address of this detour's records, one per instance.
    :param tramp: the value the return address gets (Thumb bit included): the
        detour's :class:`ReturnDetour` code.
    :param resume: where both paths go on: the displaced instructions.
    """

    gate: int
    avail: int
    records: int
    tramp: int
    resume: int


@dataclass(frozen=True)
class ReturnDetour:
    """What an arch backend's ``return_detour`` writes: where a call an
    :class:`EntryDetour` hooked returns to.  With the return value's registers
    kept (the caller-saved scratch registers and flags are free there), it
    decides whether the return is the detour's newest call: the count ``n`` at
    ``avail`` is below the word after it (the free instances kpsdk holds, so
    there is an unsettled record) and record ``n``'s stack pointer plus
    ``ret_sp`` is the stack pointer now.  If so it reaches the *short*
    instruction, which jumps through the record's first word (the return
    address, or what kpsdk wrote there); else the *general* one, which jumps
    through the word two after ``avail``.  Both are hooked.  Returns the code
    and the offsets of the two instructions.

    :param avail: the detour's count; the free count and the jump word follow.
    :param records: the detour's records.
    :param ret_sp: the stack pointer after a return minus the one at entry.
    """

    avail: int
    records: int
    ret_sp: int


@dataclass(frozen=True)
class WatchRules:
    """What the architecture's debug hardware allows a watchpoint (hw_breakpoint: the kernel's
    ``arch/*/kernel/hw_breakpoint.c``, and the architecture manual each backend names in ``source``).

    Declared by each backend as data; :mod:`kpsdk.plugins.watchpoints` checks
    every watchpoint with ``strict=True`` against it, the way Linux's
    ``hw_breakpoint_arch_parse`` does (``ENOSPC`` when no slot is left,
    ``EINVAL`` for a type, length or alignment the hardware cannot watch).

    :param slots: debug registers (slots) for data watchpoints.
    :param types: the watch types the hardware has, among ``x``, ``w``, ``r``, ``rw``.
    :param lengths: lengths a data watchpoint may have, in bytes.
    :param aligned: a data watchpoint's address must be a multiple of its length.
    :param window: the watched range may not cross a multiple of this (ppc64's
        512-byte DAWR rule; ARM's byte-select within one aligned word); None: no such rule.
    :param exec_lengths: lengths an execute (``x``) watchpoint may have.
    :param exec_slots: a separate pool of slots for ``x`` (ARM's breakpoint
        registers); None when ``x`` shares ``slots`` (x86's DR0-DR3).
    :param source: where the numbers come from.
    """

    slots: int
    types: frozenset[str]
    lengths: tuple[int, ...]
    aligned: bool = True
    window: int | None = None
    exec_lengths: tuple[int, ...] = ()
    exec_slots: int | None = None
    source: str = ""


@dataclass(frozen=True)
class InsnRules:
    """How kpsdk judges and follows an instruction: every backend gives these two.

    :param classify: whether a copy of the instruction may run out of line
        (*boostable*: it neither reads nor writes the pc), and why the kernel
        would refuse to probe it (``None``: it would not).
    :param successors: where execution can go right after the instruction,
        given the registers now (branch targets, return addresses): kpsdk's
        software single-step for post_handlers and watchpoints; ``None`` where
        the backend cannot tell (a trap).
    """

    classify: Classify
    successors: Successors


@dataclass(frozen=True)
class AccessGate:
    """A register by which a kernel forbids itself (and so the debugger) user memory
    outside its user-access windows; kpsdk opens it for one read during a hit and puts
    the guest's value back before anything runs (the guest never sees the change).

    :param register: gdb's name of the register (ppc64's ``amr``: KUAP on radix MMUs,
        where QEMU's debug translation applies the Authority Mask to kernel accesses of
        non-privileged pages exactly as the CPU does).
    :param open_value: the value that allows every access the page tables allow.
    :param source: where the rule comes from.
    """

    register: str
    open_value: int
    source: str


#: what :attr:`TaskCode.field` says of one instruction using current: ``("load", offset, size)``
#: (a field read from ``current + offset``) or ``("address", offset, 0)`` (``&current->field``)
FieldUse = tuple[Literal["load", "address"], int, int]


@dataclass(frozen=True)
class TaskCode:
    """How a kernel built without BTF shows where ``current`` is and where ``task_struct``
    keeps ``pid`` and ``comm``: in the code of a function that prints them
    (:mod:`kpsdk.kernel.taskcode`).  ``dump_stack_print_info`` (lib/dump_stack.c) prints
    ``current->pid`` (a 32-bit load from current) and ``current->comm`` (the only field
    whose address it takes), on every kernel since 2.6 and on every arch.

    :param function: the kernel function read.
    :param loads_current: ``insn -> (register, where)`` when the instruction puts ``current``
        in a register: ``where`` is the per-cpu (or PACA) offset it is read from, or 0 where
        :attr:`KernelTasks.current_register` holds current itself.
    :param field: ``(insn, register) -> FieldUse | None``: what the instruction does with
        ``current`` held in ``register`` (capstone's name of it).
    :param not_pid: 32-bit fields of current the function also reads that are not the pid
        (arm: ``thread_info.cpu``, raw_smp_processor_id's source there).
    """

    function: str
    loads_current: Callable[[capstone.CsInsn], tuple[str, int] | None]
    field: Callable[[capstone.CsInsn, str], FieldUse | None]
    not_pid: tuple[int, ...] = ()


@dataclass(frozen=True)
class KernelTasks:
    """Where a kernel on this arch keeps the running task (``current``): the trace line's
    ``comm-pid`` prefix on a live kernel.

    :param percpu_register: gdb's name of the register that holds this CPU's per-cpu
        offset while the kernel runs (x86_64: ``gs_base``, which the kernel's ``swapgs``
        loads on entry); "" where ``current_register`` holds the task itself.
    :param current: the per-cpu variable holding the task pointer, in the order kernels
        have spelled it (``SYM``, or ``SYM.member`` read through the kernel's BTF): the
        first the kernel's symbols have is used.
    :param flags_register: the register whose bits say whether interrupts are off ("": no
        register says it, as on ppc64, whose kernel masks interrupts in software: the
        irqs-off flag then prints as ``.``).
    :param irqs_disabled: from that register's value: the ``d`` of the prefix's flags.
    :param preempt_count: the per-cpu preempt count, spelled as ``current`` (empty: the
        prefix's need-resched, irq and preempt-depth flags print as ``.``).
    :param need_resched_bit: TIF_NEED_RESCHED, the bit of ``task_struct.thread_info.flags``.
    :param preempt_need_resched_inverted: the bit of the per-cpu preempt count that is
        *clear* when a preemption is needed (x86's folded PREEMPT_NEED_RESCHED), or 0.
    :param current_register: gdb's name of a register that holds ``current`` itself while
        the kernel runs (riscv: ``tp``); then ``percpu_register`` and ``current`` are not used.
    :param code: where a kernel without BTF (Debian's i386, armhf, ppc64el) shows current
        and task_struct's pid and comm in its code; None: BTF only.
    """

    percpu_register: str
    current: tuple[str, ...]
    flags_register: str
    irqs_disabled: Callable[[int], bool]
    preempt_count: tuple[str, ...] = ()
    need_resched_bit: int | None = None
    preempt_need_resched_inverted: int = 0
    current_register: str | None = None
    code: TaskCode | None = None


@dataclass(frozen=True)
class Conditions:
    """Conditional execution (ARM): an instruction whose condition fails is skipped,
    handlers and all, as the kernel's ARM kprobe_handler does.

    :param of: the instruction's condition code, ``None`` when it always executes.
    :param passes: ``(condition, read_reg) -> bool`` with the CPU's flags now.
    """

    of: Callable[[capstone.CsInsn], int | None]
    passes: Callable[[int, ReadReg], bool]


@dataclass(frozen=True)
class OutOfLine:
    """Code kpsdk writes into its own area of an emulated target (Unicorn).

    :param jump_back: a jump from ``at`` to ``target`` that reaches anywhere (or
        ``None``): what follows an instruction copied out of line, the kprobe
        booster.  Without it every probe runs through a code hook.
    :param return_jump: ``(at, iset, sp_word) -> (code, hook offset, word offset)``:
        the kretprobe trampoline, which stores sp at ``sp_word`` and jumps
        through the word at the returned offset (see ``kpsdk/targets/unicorn/target.py``).
        Without it, return probes on Unicorn are refused.
    """

    jump_back: Jump
    return_jump: Callable[[int, InstructionSet, int], tuple[bytes, int, int]] | None = None


@dataclass(frozen=True)
class DetourCode:
    """Return probes' entries in guest code on Unicorn (``kpsdk/targets/unicorn/detour.py``).

    :param near_jump: the short jump written over a function entry (``None`` out of reach).
    :param entry: ``(at, iset, EntryDetour) -> (code, hook offset)``, see :class:`EntryDetour`.
    :param ret: ``(at, iset, ReturnDetour) -> (code, short offset, general offset)``,
        see :class:`ReturnDetour`.
    :param scratch: registers the entry code clobbers, which the psABI leaves free at a call.
    :param flags: the status-flags register the code clobbers (``None``: the planner does
        not watch the flags).
    :param reads_flags: ``(insn, registers read) -> bool`` when reading the flags is more
        than naming ``flags`` (ARM's conditional instructions).
    :param writes_flags: likewise for writing them.
    :param regs_access: ``insn -> (registers read, registers written)`` by name, where
        capstone's own ``regs_access`` is not enough.
    :param data_endian: the byte order the code reads and writes kpsdk's data words in
        (the count, records and jump words), which must be the host's; None: the guest's.
        A big-endian guest with byte-reversing loads and stores (ppc64's ``ldbrx`` and
        ``stdbrx``) keeps them little-endian.
    """

    near_jump: Jump
    entry: Callable[[int, InstructionSet, EntryDetour], tuple[bytes, int]]
    ret: Callable[[int, InstructionSet, ReturnDetour], tuple[bytes, int, int]]
    scratch: tuple[str, ...] = ()
    flags: str | None = None
    reads_flags: Callable[[capstone.CsInsn, set[str]], bool] | None = None
    writes_flags: Callable[[capstone.CsInsn, set[str]], bool] | None = None
    regs_access: Callable[[capstone.CsInsn], tuple[set[str], set[str]]] | None = None
    data_endian: Literal["little", "big"] | None = None


@dataclass(frozen=True)
class ModeBit:
    """A bit of a register that says which instruction set the CPU runs (ARM's CPSR.T).

    :param register: the register's name.
    :param mask: the bit.
    :param iset: the instruction set it selects when set.
    """

    register: str
    mask: int
    iset: str


@dataclass(frozen=True)
class KernelClock:
    """A counter of the board that the kernel's ``sched_clock`` (the trace clock ``local``)
    reads, which kpsdk can read too: at a physical address, through QEMU's gdbstub in its
    physical memory mode.  With it, a trace's timestamps are the guest's own
    (:mod:`kpsdk.kernel.guestclock`).

    :param counter: the counter's physical address; ``size`` its bytes.
    :param reader: the kernel function ``sched_clock`` calls to read it once registered
        (``cd.read_data[].read_sched_clock``, kernel/time/sched_clock.c).
    :param source: where the address comes from.
    """

    counter: int
    size: int
    reader: str
    source: str


@dataclass(frozen=True)
class QemuMachine:
    """How ``qemu-system`` runs a whole machine of this architecture (the qemu-system target).

    :param binary: the QEMU program (``qemu-system-x86_64``).
    :param package: the Debian package that has it.
    :param machine: ``-M`` (``virt``, ``pseries``); None: QEMU's default board.
    :param cpu: ``-cpu``; None: the board's default.
    :param console: the kernel's console device on that board (``ttyS0``,
        ``ttyAMA0``, ``hvc0``): ``console=`` is added to a command line that names none.
    :param args: anything else the board needs on QEMU's command line.
    :param memory: ``-m`` unless the user gives ``memory=``.
    :param clock: the board's counter behind the kernel's sched_clock, where kpsdk can read
        it (None: a trace's timestamps are the host's).
    """

    binary: str
    package: str
    machine: str | None = None
    cpu: str | None = None
    console: str = "ttyS0"
    args: tuple[str, ...] = ()
    #: ``-m``: what the board's kernels need to boot with an initramfs (pseries wants 1G)
    memory: str = "512M"
    clock: KernelClock | None = None

    def command(self) -> list[str]:
        """The board's part of QEMU's command line (after the binary)."""
        out = [] if self.machine is None else ["-M", self.machine]
        out += [] if self.cpu is None else ["-cpu", self.cpu]
        return out + list(self.args)


@dataclass(frozen=True)
class PltTable:
    """Where a linker puts the stubs that calls to another object's functions go through,
    so they can be named ``SYM@plt`` as gdb, objdump and perf name them (BFD's synthetic
    symbols): stub ``i`` serves relocation ``i`` of ``.rela.plt`` (``.rel.plt``), at
    ``start + header + i * entry``.

    :param section: the section of the stubs (``.plt``, x86's ``.plt.sec`` with IBT);
        its size must be ``header + count * entry`` or the table is not used (a layout
        kpsdk does not know is not guessed at).  "" when ``dynamic_tag`` places them.
    :param header: bytes before the first stub (the lazy-binding trampoline, PLT0).
    :param entry: bytes of one stub.
    :param dynamic_tag: a ``.dynamic`` tag whose value is ``start`` (ppc64's
        ``DT_PPC64_GLINK``: the glink stubs sit inside ``.text``, no section of their own).
    :param name: the table's name in ``kpsdk list`` (default: ``section``).
    :param e_flags: ``(mask, value)``: used only for files whose ``e_flags & mask == value``
        (ppc64's ELF ABI version); None: any file.
    :param by_slot: stub ``i`` serves the ``i``-th GOT slot (relocations sorted by
        ``r_offset``), not the ``i``-th relocation: the linker allocates a stub and its slot
        together but may write the relocations in another order (binutils' x86 linker puts
        a library's ``R_*_IRELATIVE`` last).
    :param prefix: the first bytes of a stub's optional prefix of ``prefix_size`` bytes
        (ARM: ``bx pc`` and a branch, the Thumb entry of a stub that Thumb code branches to
        without switching to ARM); the stub's name goes after it, on the code every
        caller runs (a Thumb caller falls through the prefix into it).
    :param source: where the layout is documented.
    """

    section: str
    header: int
    entry: int
    dynamic_tag: int | None = None
    name: str = ""
    e_flags: tuple[int, int] | None = None
    by_slot: bool = False
    prefix: bytes = b""
    prefix_size: int = 0
    source: str = ""

    @property
    def label(self) -> str:
        return self.name or self.section


@dataclass(frozen=True)
class PltGotTable:
    """x86's ``.plt.got``: stubs for functions bound at load time (their address is taken as
    well as called: ``R_*_GLOB_DAT``), one per GOT slot, in no relocation's order; each is
    named by the relocation of the slot its jump reads, as binutils' x86
    ``get_synthetic_symtab`` does.

    :param section: the stubs' section.
    :param entry: bytes of one stub; ``ibt_entry`` when the file has ``ibt_section``
        (``-fcf-protection``: an ``endbr`` first).
    :param slot: ``(stub bytes, stub address, address of .got.plt) -> the GOT slot its
        jump reads``, None for a stub it does not recognise (then left unnamed).
    """

    section: str
    entry: int
    ibt_entry: int
    ibt_section: str
    slot: Callable[[bytes, int, int], int | None]
    source: str = ""


@dataclass(frozen=True)
class DebianPort:
    """Where Debian builds a kernel and a static busybox for this architecture: what
    ``python -m kpsdk.fixtures.kernel --arch ARCH`` fetches to boot under qemu-system.

    :param arch: Debian's architecture name (``armhf``, ``ppc64el``).
    :param suite: the release with a kernel for it (Debian 12 has no riscv64 kernel: trixie).
    :param kernel: the metapackage naming the current kernel (``linux-image-armmp``).
    :param image: the kernel file in the package's ``boot/`` (``vmlinuz-*``; ppc64el ships
        ``vmlinux-*``, an ELF with its ``.symtab``).
    """

    arch: str
    suite: str
    kernel: str
    image: str = "vmlinuz-*"


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
