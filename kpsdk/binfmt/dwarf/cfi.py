"""Call frame information (``.eh_frame``, ``.debug_frame``): the CFA and the saved registers at
any pc, and the unwinder that walks a stack with them.

pyelftools parses the entries and runs each FDE's instructions into a table (a row per pc
range: the CFA rule and a rule per register, DWARF 5 section 6.4); :class:`FrameTable` finds
the FDE for a pc (a sorted list, built on first use) and the row inside it, and applies the
rules to a CPU (:meth:`FrameTable.caller`): the CFA is ``register + offset`` or an
expression; a register saved at ``CFA + N`` is read there, one kept in another register is
taken from it; the return-address column gives the caller's pc, and the CFA is the caller's
stack pointer.  A register no rule mentions keeps its value (the callee did not touch it: the
ABI's callee-saved registers are saved by a rule when they are changed).

:func:`unwind` chains these through any number of files: for each frame it asks the caller's
``tables(pc)`` for the table (and load bias) of whichever ELF maps that pc, so a stack through
a library is walked with the library's own CFI.  ``.eh_frame`` and ``.debug_frame`` number
some registers differently (PowerPC), so each table knows which it came from.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from elftools.dwarf.callframe import CIE, FDE, CallFrameInfo, CFARule, RegisterRule
from elftools.dwarf.structs import DWARFStructs

from kpsdk.binfmt.dwarf.expr import Context, InMemory, NotStatic, Sym, _Unavailable, evaluate
from kpsdk.binfmt.dwarf.primitives import Numbers

if TYPE_CHECKING:
    from kpsdk.arch import DwarfRegisters
    from kpsdk.binfmt.dwarf.cpu import Cpu
    from kpsdk.binfmt.elfimage import ElfFile


#: a rule that leaves a register as it is in the frame below
_KEEP = -1


class _UnwindStop(Exception):
    """The walk cannot go further (no CFI for the pc, an undefined return address)."""


@dataclass
class _Fde:
    low: int
    high: int
    entry: FDE
    eh_frame: bool


class FrameTable:
    """The call frame information of one ELF file (its ``.eh_frame`` and, from its debug file,
    ``.debug_frame``), in the file's addresses."""

    def __init__(self, regs: DwarfRegisters, address_size: int, little_endian: bool, pc: str, sp: str) -> None:
        self.regs = regs
        self.address_size = address_size
        self.num = Numbers(little_endian)
        self.pc_name = pc
        self.sp_name = sp
        self._sources: list[tuple[CallFrameInfo, bool]] = []
        self._fdes: list[_Fde] | None = None
        self._lows: list[int] = []

    @classmethod
    def from_files(cls, regs: DwarfRegisters, pc: str, sp: str, *files: ElfFile) -> FrameTable:
        """The table of a program from its ``.eh_frame`` and ``.debug_frame`` sections, taken from
        ``files`` (the program, its separate debug file) where they have contents."""
        first = files[0]
        table = cls(regs, first.elf_class // 8, first.endian == "little", pc, sp)
        for elf in files:
            for name, eh in ((".eh_frame", True), (".debug_frame", False)):
                section = elf.section(name)
                if section is None or section.header["sh_type"] == "SHT_NOBITS" or not section.header["sh_size"]:
                    continue
                with elf.pyelftools(name):
                    data = elf.elf.get_section(section.number).data()
                table.add(data, section.header["sh_addr"], eh)
        return table

    def add(self, data: bytes, address: int, eh_frame: bool) -> None:
        """Add a section's bytes (``address`` is where an ``.eh_frame`` is loaded: its pointers
        are relative to it)."""
        structs = DWARFStructs(little_endian=self.num.little, dwarf_format=32, address_size=self.address_size)
        cfi = CallFrameInfo(io.BytesIO(data), len(data), address, structs, for_eh_frame=eh_frame)
        self._sources.append((cfi, eh_frame))
        self._fdes = None

    def _index(self) -> list[_Fde]:
        if self._fdes is None:
            fdes = []
            for cfi, eh in self._sources:
                for entry in cfi.get_entries():
                    if isinstance(entry, FDE):
                        low = entry["initial_location"]
                        fdes.append(_Fde(low, low + entry["address_range"], entry, eh))
            fdes.sort(key=lambda f: f.low)
            self._fdes = fdes
            self._lows = [f.low for f in fdes]
        return self._fdes

    def fde_at(self, pc: int) -> _Fde | None:
        """The FDE covering ``pc`` (``.eh_frame``'s first, as the sections were added)."""
        fdes = self._index()
        i = bisect.bisect_right(self._lows, pc)
        for f in reversed(fdes[max(0, i - 4):i]):  # FDEs do not overlap, but empty ones may share a start
            if f.low <= pc < f.high:
                return f
        return None

    def row_at(self, pc: int) -> tuple[dict[str, object], _Fde] | None:
        """The decoded row for ``pc``: ``{'cfa': CFARule, regnum: RegisterRule, ...}`` and its FDE."""
        fde = self.fde_at(pc)
        if fde is None:
            return None
        rows = fde.entry.get_decoded().table
        best = None
        for row in rows:
            if row["pc"] <= pc:
                best = row
            else:
                break
        return (best, fde) if best is not None else None

    def _name(self, number: int, eh: bool) -> str:
        name = self.regs.name(number, eh)
        if name is None:
            raise _Unavailable(f"DWARF register {number} in the call frame information is not one kpsdk reads")
        return name

    def _ctx(self, cpu: Cpu, eh: bool) -> Context:
        return Context(cpu, self.address_size, self.num, lambda n: self.regs.name(n, eh))

    def cfa(self, pc: int, cpu: Cpu) -> int:
        """The canonical frame address at ``pc`` (the caller's stack pointer before the call)."""
        found = self.row_at(pc)
        if found is None:
            raise _Unavailable(f"no call frame information for {pc:#x}")
        row, fde = found
        return self._cfa(row["cfa"], cpu, fde.eh_frame)  # type: ignore[arg-type]

    def _cfa(self, rule: CFARule, cpu: Cpu, eh: bool) -> int:
        if rule.expr is not None:
            loc = evaluate(bytes(rule.expr), self._ctx(cpu, eh))
            if not isinstance(loc, InMemory) or not isinstance(loc.address, int):
                raise _Unavailable("a CFA expression kpsdk cannot evaluate")
            return loc.address
        if rule.reg is None:
            raise _Unavailable("no CFA rule")
        try:
            base = cpu.read_register(self._name(rule.reg, eh))
        except LookupError as e:
            raise _Unavailable(str(e)) from None
        if isinstance(base, Sym):  # a static answer: "rsp + 16"
            return Sym(base.base, base.offset + (rule.offset or 0))  # type: ignore[return-value]
        return (base + (rule.offset or 0)) & ((1 << (8 * self.address_size)) - 1)

    def return_column(self, fde: _Fde) -> int:
        cie = fde.entry.cie
        assert isinstance(cie, CIE)
        return int(cie["return_address_register"])

    def caller(self, pc: int, cpu: Cpu) -> tuple[int, dict[str, int], set[str], int]:
        """One step up: ``(cfa, recovered registers, registers made unknown, caller's pc)``."""
        found = self.row_at(pc)
        if found is None:
            raise _UnwindStop(f"no call frame information for {pc:#x}")
        row, fde = found
        eh = fde.eh_frame
        cfa = self._cfa(row["cfa"], cpu, eh)  # type: ignore[arg-type]
        mask = (1 << (8 * self.address_size)) - 1
        recovered: dict[str, int] = {}
        unknown: set[str] = set()
        ra_column = self.return_column(fde)
        ra: int | None = None
        for number, rule in row.items():
            if not isinstance(number, int) or not isinstance(rule, RegisterRule):
                continue
            name = self.regs.name(number, eh)
            try:
                value = self._apply(rule, cfa, cpu, eh, mask)
            except (_Unavailable, NotStatic, LookupError):
                value = None
            if number == ra_column:
                if rule.type == RegisterRule.UNDEFINED:
                    raise _UnwindStop("the return address is undefined here: the outermost frame")
                ra = None if value == _KEEP else value
            if name is None or value == _KEEP:
                continue
            if value is None:
                unknown.add(name)
            else:
                recovered[name] = value
        if ra is None:
            rule = row.get(ra_column)  # type: ignore[call-overload]
            if isinstance(rule, RegisterRule) and rule.type != RegisterRule.SAME_VALUE:
                raise _UnwindStop("the return address cannot be recovered")
            ra = cpu.read_register(self._name(ra_column, eh))
        recovered.setdefault(self.sp_name, cfa)
        return cfa, recovered, unknown, ra & mask

    def _apply(self, rule: RegisterRule, cfa: int, cpu: Cpu, eh: bool, mask: int) -> int | None:
        kind, arg = rule.type, rule.arg
        size = self.address_size
        if kind == RegisterRule.OFFSET:
            return self.num.read(cpu.read_memory((cfa + int(arg)) & mask, size), 0, size)  # type: ignore[arg-type]
        if kind == RegisterRule.VAL_OFFSET:
            return (cfa + int(arg)) & mask  # type: ignore[arg-type]
        if kind == RegisterRule.REGISTER:
            return cpu.read_register(self._name(int(arg), eh))  # type: ignore[arg-type]
        if kind in (RegisterRule.EXPRESSION, RegisterRule.VAL_EXPRESSION):
            loc = evaluate(bytes(arg), self._ctx(cpu, eh), [cfa])  # type: ignore[arg-type]
            if not isinstance(loc, InMemory) or not isinstance(loc.address, int):
                return None
            if kind == RegisterRule.VAL_EXPRESSION:
                return loc.address
            return self.num.read(cpu.read_memory(loc.address, size), 0, size)
        if kind in (RegisterRule.SAME_VALUE, RegisterRule.ARCHITECTURAL):
            return _KEEP
        return None


class FrameCpu:
    """The CPU as a caller's frame sees it: the recovered registers, the unknown ones, the rest
    as in the frame below (``inner``), and the same memory."""

    def __init__(self, inner: Cpu, recovered: dict[str, int], unknown: set[str]) -> None:
        self.inner = inner
        self.recovered = recovered
        self.unknown = unknown - set(recovered)

    def read_register(self, name: str) -> int:
        if name in self.recovered:
            return self.recovered[name]
        if name in self.unknown:
            raise LookupError(f"register {name} was not saved by the callee")
        return self.inner.read_register(name)

    def read_memory(self, address: int, size: int) -> bytes:
        return self.inner.read_memory(address, size)


@dataclass
class Frame:
    """One frame of an unwound stack, innermost first: ``pc`` (a return address for every frame
    but the first), ``cfa`` (None when the walk ended there), ``registers`` the ones the CFI
    recovered for it, ``cpu`` a view of the CPU in this frame (for its variables)."""

    pc: int
    cfa: int | None
    cpu: Cpu
    registers: dict[str, int] = field(default_factory=dict)


def unwind(cpu: Cpu, pc: int, tables: Callable[[int], tuple[FrameTable, int] | None], *, max_frames: int = 256,
           thumb: bool = False, return_address: Callable[[int, int], int] | None = None) -> Iterator[Frame]:
    """The frames of the stack ``cpu`` is stopped in at ``pc``, innermost first.

    :param tables: the :class:`FrameTable` of the ELF mapping a pc and its load bias (the
        runtime address minus the file's), or None where no file with CFI maps it.
    :param thumb: addresses may carry ARM's Thumb bit: it is cleared (the frames' pcs are the
        instructions' addresses, as gdb shows them).
    :param return_address: ``(return address, CFA of the frame that returns there) -> the real
        one``: a return address the stack holds that is not the caller's (a kretprobe
        trampoline standing in for it) is replaced before the walk goes on from it.
    """
    strip = ~1 if thumb else ~0
    frame = Frame(pc, None, cpu)
    previous_cfa: int | None = None
    for depth in range(max_frames):
        found = tables(frame.pc & strip)
        if found is None:
            yield frame
            return
        table, bias = found
        # a caller's pc is a return address: look up the call instruction's row, one byte before
        lookup = (frame.pc & strip) - bias - (1 if depth else 0)
        try:
            cfa, recovered, unknown, ra = table.caller(lookup, frame.cpu)
        except (_UnwindStop, _Unavailable, LookupError):
            yield frame
            return
        frame.cfa = cfa
        yield frame
        if ra & strip == 0 or (previous_cfa is not None and cfa < previous_cfa) or \
                (previous_cfa == cfa and ra == frame.pc):
            return
        previous_cfa = cfa
        if return_address is not None:
            ra = return_address(ra, cfa)
        recovered[table.pc_name] = ra & strip
        frame = Frame(ra & strip, None, FrameCpu(frame.cpu, recovered, unknown), recovered)
