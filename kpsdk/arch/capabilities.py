"""What an architecture may do beyond its data: instruction rules and the optional capabilities.

:class:`~kpsdk.arch.model.Arch` holds these as typed fields.  ``insn`` (:class:`InsnRules`)
is required; the others are optional, and a feature that needs one a backend lacks says
so by name (:meth:`Arch.require <kpsdk.arch.model.Arch.require>`).  Each is data or a few
functions a backend writes once for its instruction set: classifying and following
instructions, running copies out of line, detours for return probes, conditional
execution, the frame-pointer chain, debug-register rules and the linker's PLT layouts
(which the ELF reader, :mod:`kpsdk.binfmt.pltstubs`, names stubs with).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import capstone

    from kpsdk.arch.insn import ReadMem, ReadReg
    from kpsdk.arch.model import InstructionSet

#: ``classify(insn) -> (boostable, refused reason or None)``
Classify = Callable[["capstone.CsInsn"], tuple[bool, "str | None"]]
#: ``successors(insn, read_reg, read_mem, word_size) -> addresses, or None where it cannot be followed``
Successors = Callable[["capstone.CsInsn", "ReadReg", "ReadMem", int], "set[int] | None"]
#: ``jump(at, target, iset) -> code, or None where ``target`` is out of its reach``
Jump = Callable[[int, int, "InstructionSet"], "bytes | None"]


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
    :param in_context: ``(code before, address) -> refused reason or None``: a rule the
        kernel applies to an instruction by the ones before it in its function (``code
        before`` ends at the instruction, and starts at the function's start or at most
        :attr:`context_bytes` before it: arm64's "no probe inside an exclusive load/store
        sequence"); None: none.
    :param context_bytes: how far back ``in_context`` looks.
    """

    classify: Classify
    successors: Successors
    in_context: Callable[[bytes, int], str | None] | None = None
    context_bytes: int = 0


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
class Conditions:
    """Conditional execution (ARM): an instruction whose condition fails is skipped,
    handlers and all, as the kernel's ARM kprobe_handler does.

    :param of: the instruction's condition code, ``None`` when it always executes.
    :param passes: ``(condition, read_reg) -> bool`` with the CPU's flags now.
    """

    of: Callable[[capstone.CsInsn], int | None]
    passes: Callable[[int, ReadReg], bool]


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
    :param masked: ``(smallest, largest)``: a data watchpoint may also be any power of two
        between these, naturally aligned, which ``lengths`` and ``window`` do not then
        restrict (AArch64's MASK field: 8 bytes to 2 GiB); None: no such ranges.
    :param source: where the numbers come from.
    """

    slots: int
    types: frozenset[str]
    lengths: tuple[int, ...]
    aligned: bool = True
    window: int | None = None
    exec_lengths: tuple[int, ...] = ()
    exec_slots: int | None = None
    masked: tuple[int, int] | None = None
    source: str = ""

    def is_masked(self, length: int) -> bool:
        """Whether ``length`` is one of the :attr:`masked` ranges' (a power of two in range)."""
        return (self.masked is not None and self.masked[0] <= length <= self.masked[1]
                and length & (length - 1) == 0)


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
