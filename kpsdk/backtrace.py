"""Backtraces that see through kretprobe trampolines.

Under a live kretprobe the return address of a hooked call is a trampoline,
so a naive stack trace (and ``__builtin_return_address``) shows the
trampoline instead of the caller (kprobes.rst, "Kprobes Features and Limitations").  :func:`backtrace`
reports the real return addresses, mapping each trampoline it meets to the
hooked call it stands for (:mod:`kpsdk.rethook` knows them).

Two ways to walk, chosen per instruction set from the arch data:

* **frame-pointer walk** where code keeps frame pointers
  (:class:`~kpsdk.arch.FrameRecord`: x86, ARM, RISC-V): frame 0's state is
  read from its prologue (frame set up yet? leaf layout?), then the chain of
  saved frame pointers is followed;
* **stack scan** elsewhere (Thumb): the link register at a function entry or
  in a leaf, then every stack word that is a return address, which is
  validated the way kernel unwinders guess: the instruction before it must
  be a call.  A scan may skip a frame or show a stale address; the walk
  does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import capstone

from kpsdk.errors import TargetError, TargetFault

if TYPE_CHECKING:
    from collections.abc import Callable

    from kpsdk.arch import FrameRecord, InstructionSet
    from kpsdk.regs import PtRegs
    from kpsdk.target import Target

#: how far up the stack a scan looks
SCAN_BYTES = 0x10000


@dataclass(frozen=True)
class Frame:
    """One frame of a backtrace, innermost first.

    ``pc`` is where the frame executes: the current pc for frame 0, the return
    address into it for the others (the real one: ``trampoline`` says the
    stack held a kretprobe trampoline there, mapped back).  ``where`` is
    ``sym+0xoff``.
    """

    pc: int
    where: str
    trampoline: bool = False

    @property
    def function(self) -> str:
        """The symbol name alone (``"fact"``), or the hex address outside symbols."""
        return self.where.partition("+")[0]

    def __str__(self) -> str:
        return f"{self.pc:#x} {self.where}{'  [kretprobe]' if self.trampoline else ''}"


class _Walker:
    def __init__(self, target: Target, regs: PtRegs) -> None:
        self.target = target
        self.arch = target.arch
        self.regs = regs
        self.word = self.arch.word_size
        self.strip = ~1 if self.arch.has_thumb else ~0
        rethook = target.rethook
        self.trampolines = rethook.trampolines if rethook is not None else set()
        task = target.current_task()
        #: hooked calls, innermost first: the n-th trampoline met stands for the n-th of them
        self.hooked = ([n for n in reversed(rethook.in_flight(task)) if not n.chained]
                       if rethook is not None else [])
        self.next_hooked = 0

    # -- reading -----------------------------------------------------------------------

    def word_at(self, addr: int) -> int | None:
        try:
            return self.target.read_word(addr)
        except Exception:  # noqa: BLE001 - an unmapped frame pointer ends the walk
            return None

    def reg(self, name: str) -> int:
        return int(getattr(self.regs, name))

    def iset(self, pc: int) -> InstructionSet:
        sym = self.target.symbols.containing(pc & self.strip)
        return self.target.iset_at(pc, sym)

    # -- validation ----------------------------------------------------------------------

    def is_return_address(self, value: int) -> bool:
        """Code whose previous instruction is a call."""
        addr = value & self.strip
        sym = self.target.symbols.containing(addr)
        if sym is None or sym.kind != "func" or addr == sym.address:
            return False
        iset = self.target.iset_at(value, sym)
        return _call_before(self.target, iset, addr, sym.address)

    def resolve(self, value: int, read_at: int) -> tuple[int, bool] | None:
        """The real return address behind ``value`` read at stack address ``read_at``,
        and whether it was a trampoline; None when it is no return address."""
        if value not in self.trampolines:
            return (value, False) if self.is_return_address(value) else None
        hooked = self.hooked
        while self.next_hooked < len(hooked) and hooked[self.next_hooked].frame < read_at:
            self.next_hooked += 1
        if self.next_hooked == len(hooked):
            return None
        node = hooked[self.next_hooked]
        self.next_hooked += 1
        return (node.ret_addr, True) if self.is_return_address(node.ret_addr) else None

    def resolve_peek(self, value: int) -> int | None:
        """Like :meth:`resolve` without taking a hooked call: is ``value`` a return address?"""
        if value in self.trampolines:
            return value
        return value if self.is_return_address(value) else None

    # -- walking -------------------------------------------------------------------------

    def frame(self, value: int, trampoline: bool = False) -> Frame:
        return Frame(value, self.target.symbols.format(value & self.strip), trampoline)

    def walk(self, limit: int) -> list[Frame]:
        pc = self.regs.ip
        frames = [self.frame(pc)]
        iset = self.iset(pc)
        record = iset.frame_record
        if iset.prologue is not None:
            self.prologue_walk(iset.prologue, pc, frames, limit)
        elif record is not None and record.back_chain:
            self.chain_walk(record, pc, frames, limit)
        elif record is not None:
            self.fp_walk(record, pc, frames, limit)
        else:
            self.scan(pc, frames, limit)
        return frames

    def fp_walk(self, rec: FrameRecord, pc: int, frames: list[Frame], limit: int) -> None:
        sp = self.regs.sp
        fp = self.reg(rec.fp)
        link = self.arch.link
        state = _frame_state(self.target, pc & self.strip, rec)
        if state == "framed":
            ret, at, caller_fp = self.word_at(fp + rec.saved_ret), fp + rec.saved_ret, self.word_at(fp + rec.saved_fp)
            if rec.leaf_saved_fp is not None and link and (ret is None or self.resolve_peek(ret) is None):
                ret, at, caller_fp = self.reg(link), sp, self.word_at(fp + rec.leaf_saved_fp)
        elif state == "saved":  # x86 between push rbp and mov rbp, rsp
            ret, at, caller_fp = self.word_at(sp + self.word), sp + self.word, fp
        else:
            ret, at = (self.reg(link), sp) if link else (self.word_at(sp), sp)
            caller_fp = fp
        while ret is not None and len(frames) < limit:
            found = self.resolve(ret, at)
            if found is None:
                return
            frames.append(self.frame(*found))
            if not caller_fp or caller_fp < at:
                return
            fp = caller_fp
            at = fp + rec.saved_ret
            ret, caller_fp = self.word_at(at), self.word_at(fp + rec.saved_fp)

    def chain_walk(self, rec: FrameRecord, pc: int, frames: list[Frame], limit: int) -> None:
        """PowerPC's back chain (:attr:`~kpsdk.arch.FrameRecord.back_chain`).  A return
        address is looked up by the stack pointer of the frame holding it, which is
        the hooked call's entry sp (its ``frame``), as on the other arches."""
        sp = self.regs.sp
        link = self.arch.link
        assert link is not None, "a back chain goes with a link register"
        sym = self.target.symbols.containing(pc & self.strip)
        leaf = sym is not None and sym.kind == "func" and _is_leaf(self.target, sym.address, sym.size,
                                                                   self.iset(pc))
        if _frame_state(self.target, pc & self.strip, rec) == "framed":
            fp = self.word_at(sp + rec.saved_fp)  # the caller's frame
            if fp is None or fp <= sp:
                return
            ret = self.reg(link) if leaf else self.word_at(fp + rec.saved_ret)
        else:  # no frame of its own (yet, or any more): sp is the caller's, lr holds the return
            fp, ret = sp, self.reg(link)
        while ret is not None and len(frames) < limit:
            found = self.resolve(ret, fp)
            if found is None:
                return
            frames.append(self.frame(*found))
            caller = self.word_at(fp + rec.saved_fp)
            if not caller or caller <= fp:
                return
            fp, ret = caller, self.word_at(caller + rec.saved_ret)

    def prologue_walk(self, prologue: Callable[[bytes, int], tuple[int, int | None]], pc: int,
                      frames: list[Frame], limit: int) -> None:
        """Frames as each function's prologue set them up (:attr:`InstructionSet.prologue
        <kpsdk.arch.InstructionSet.prologue>`): frame 0's return address is in the link
        register until its prologue saves it; every caller's was saved (it made a call).  A
        return address is looked up by the entry stack pointer of the frame that holds it,
        the hooked call's ``frame``."""
        sp = self.regs.sp
        link = self.arch.link
        assert link is not None, "a prologue walk goes with a link register"
        first = True
        while len(frames) < limit:
            sym = self.target.symbols.containing(pc & self.strip)
            if sym is None or sym.kind != "func":
                return
            try:
                code = self.target.read_memory(sym.address, (pc & self.strip) - sym.address)
            except Exception:  # noqa: BLE001 - unreadable code ends the walk
                return
            size, saved = prologue(code, sym.address)
            if saved is None and not first:
                return  # a caller without a saved return address: not a frame this walk knows
            ret = self.reg(link) if saved is None else self.word_at(sp + saved)
            if ret is None:
                return
            found = self.resolve(ret, sp + size)
            if found is None:
                return
            frames.append(self.frame(*found))
            sp, pc, first = sp + size, found[0], False

    def scan(self, pc: int, frames: list[Frame], limit: int) -> None:
        sp = self.regs.sp
        link = self.arch.link
        if link:
            lr = self.reg(link)
            sym = self.target.symbols.containing(pc & self.strip)
            at_entry = sym is not None and pc & self.strip == sym.address
            if at_entry or (sym is not None and _is_leaf(self.target, sym.address, sym.size, self.iset(pc))):
                found = self.resolve(lr, sp)
                if found is not None:
                    frames.append(self.frame(*found))
        addr = sp - sp % self.word
        end = sp + SCAN_BYTES
        while addr < end and len(frames) < limit:
            value = self.word_at(addr)
            if value is None:
                return
            found = self.resolve(value, addr)
            if found is not None:
                frames.append(self.frame(*found))
            addr += self.word


def backtrace(target: Target, regs: PtRegs, limit: int = 64) -> list[Frame]:
    """The frames of the stopped CPU, innermost first, real return addresses only: from the call
    frame information where the code at the pc has some (:func:`cfi_walk`), else by the
    frame-pointer walk or the stack scan."""
    walker = _Walker(target, regs)
    frames = cfi_walk(walker, limit)
    return frames if frames is not None else walker.walk(limit)


def cfi_walk(walker: _Walker, limit: int) -> list[Frame] | None:
    """The frames as the call frame information of each file says (``.eh_frame``,
    ``.debug_frame``, a separate debug file's: :meth:`kpsdk.debuginfo.SessionDebug.frame_table`),
    as gdb unwinds without frame pointers; a kretprobe trampoline met on the stack is mapped back
    to the hooked call's return address and the walk goes on from there.  None when the code at
    the pc has no call frame information (or no session knows its file): the caller falls back.
    """
    from kpsdk.binfmt.dwarf.cfi import unwind
    from kpsdk.debuginfo import HitCpu

    target = walker.target
    session = getattr(target, "session", None)
    if session is None or target.arch.dwarf is None:
        return None
    tables = session.debug.frame_table
    pc = walker.regs.ip
    if tables(pc & walker.strip) is None:
        return None
    # the hooked call's entry sp: where x86's call left the return address (CFA - a word), the
    # CFA itself where a link register holds it
    pushed = 0 if target.arch.link else walker.word
    rethook = target.rethook
    mapped: set[int] = set()

    def real(ra: int, cfa: int) -> int:
        if ra not in walker.trampolines or rethook is None:
            return ra
        value = rethook.real_return_address(ra, cfa - pushed)
        if value != ra:
            mapped.add(value)
        return value

    frames: list[Frame] = []
    try:
        for frame in unwind(HitCpu(walker.regs, target.read_memory), pc, tables, max_frames=limit,
                            thumb=target.arch.has_thumb, return_address=real):
            frames.append(walker.frame(frame.pc, bool(frames) and frame.pc in mapped))
    except (TargetFault, TargetError):
        pass  # a frame's memory cannot be read: the walk ends with the frames found
    if len(frames) <= 1:
        return None
    return frames


def _frame_state(target: Target, pc: int, rec: FrameRecord) -> str:
    """Has the function at ``pc`` set up its frame record yet?  ``"framed"``,
    ``"saved"`` (x86: fp pushed, not yet pointed at the frame) or ``"none"``
    (before the prologue, after the epilogue, or on a shrink-wrapped path).

    Decodes the function linearly from its start to ``pc``; code outside any
    function symbol is taken as framed.
    """
    sym = target.symbols.containing(pc)
    if sym is None or sym.kind != "func":
        return "framed"
    md = target.arch.disassembler(target.iset_at(sym.address, sym))
    sets, restores = re.compile(rec.sets_fp), re.compile(rec.restores_fp)
    saves = re.compile(rec.saves_fp) if rec.saves_fp else None
    state = "none"
    for insn in md.disasm(target.read_memory(sym.address, pc - sym.address), sym.address):
        text = f"{insn.mnemonic} {insn.op_str}"
        if sets.match(text):
            state = "framed"
        elif saves is not None and saves.match(text):
            state = "saved"
        elif restores.match(text):
            state = "none"
    return state


def _call_before(target: Target, iset: InstructionSet, addr: int, start: int) -> bool:
    """Whether a call instruction ends exactly at ``addr`` (and starts at or after ``start``),
    or a delay slot before it (MIPS: a call returns past the instruction after it)."""
    for size in range(iset.min_insn, iset.max_call + 1, iset.min_insn):
        at = addr - iset.delay_slot - size
        if at < start:
            break
        try:
            code = target.read_memory(at, size)
        except Exception:  # noqa: BLE001 - unreadable: not a call
            return False
        if _is_call(iset.capstone, iset.is_call, code, at):
            return True
    return False


def is_call(iset: InstructionSet, insn: capstone.CsInsn) -> bool:
    """Whether ``insn`` is a call: capstone's CALL group, or the instruction set's own rule."""
    return _calls(iset.is_call, insn)


def _calls(rule: Callable[[capstone.CsInsn], bool] | None, insn: capstone.CsInsn) -> bool:
    return capstone.CS_GRP_CALL in insn.groups or (rule is not None and rule(insn))


@lru_cache(maxsize=4096)
def _is_call(engine: tuple[int, int], rule: Callable[[capstone.CsInsn], bool] | None, code: bytes,
             at: int) -> bool:
    """``code`` is exactly one call instruction (decoded at ``at``: capstone's CALL group, or
    the instruction set's ``is_call``)."""
    md = _disassembler(engine)
    for insn in md.disasm(code, at, 1):
        return insn.size == len(code) and _calls(rule, insn)
    return False


@lru_cache(maxsize=16)
def _disassembler(engine: tuple[int, int]) -> capstone.Cs:
    md = capstone.Cs(*engine)
    md.detail = True
    return md


def _is_leaf(target: Target, start: int, size: int, iset: InstructionSet) -> bool:
    """A function with no call instruction keeps its return address in the link register."""
    md = target.arch.disassembler(iset)
    return not any(is_call(iset, insn) for insn in md.disasm(target.read_memory(start, size), start))
