"""Reading ELF executables with pyelftools: segments, entry, symbols.

Kept apart from any target so the Unicorn loader, the qemu-user launcher and the
CLI's ``list`` command read a file the same way.  ARM Thumb symbols (odd
values) and ppc64 ELFv1 function descriptors are turned into the address the
code really starts at.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from kpsdk.errors import TargetError
from kpsdk.symbols import Symbol, SymbolTable


@dataclass(frozen=True)
class Segment:
    vaddr: int
    memsz: int
    data: bytes
    flags: int  # PF_X=1 PF_W=2 PF_R=4
    #: p_offset: where the segment's bytes start in the file (uprobes map file offsets through it)
    offset: int = 0

    @property
    def executable(self) -> bool:
        return bool(self.flags & 1)


@dataclass
class ElfImage:
    path: Path
    machine: str
    elf_class: int
    endian: str
    entry: int
    segments: list[Segment]
    symbols: SymbolTable
    #: e_type: "ET_EXEC", or "ET_DYN" for a position-independent executable loaded at a bias
    kind: str = "ET_EXEC"
    #: e_entry as the file has it (ppc64 ELFv1: the descriptor, not the code); a run's
    #: load bias is its AT_ENTRY minus this
    raw_entry: int = 0
    #: what was added to every address of the file (0 as linked)
    bias: int = 0

    @property
    def thumb_entry(self) -> bool:
        return self.machine == "EM_ARM" and bool(self.entry & 1)

    def relocated(self, bias: int) -> ElfImage:
        """The image as a run loaded at ``bias`` sees it: segments, entry and symbols moved.

        Only meaningful without dynamic relocations (kpsdk's static-pie fixtures):
        nothing inside the segments is patched.
        """
        if bias == 0:
            return self
        table = SymbolTable([replace(sym, address=sym.address + bias) for sym in self.symbols])
        return replace(self, entry=self.entry + bias, symbols=table, bias=self.bias + bias,
                       segments=[replace(seg, vaddr=seg.vaddr + bias) for seg in self.segments])

    def offset_to_vaddr(self, offset: int) -> int | None:
        """The address of file offset ``offset`` in an executable PT_LOAD, else None."""
        for seg in self.segments:
            if seg.executable and seg.offset <= offset < seg.offset + len(seg.data):
                return seg.vaddr + offset - seg.offset
        return None

    def vaddr_to_offset(self, vaddr: int) -> int | None:
        """The file offset of ``vaddr`` when an executable PT_LOAD holds it, else None."""
        for seg in self.segments:
            if seg.executable and seg.vaddr <= vaddr < seg.vaddr + len(seg.data):
                return seg.offset + vaddr - seg.vaddr
        return None


def load_elf(path: str | Path) -> ElfImage:
    """Parse an executable; a clear error for anything that is not one."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TargetError(f"cannot read {path}: {e.strerror}") from e
    import io

    try:
        elf = ELFFile(io.BytesIO(raw))
    except ELFError as e:
        raise TargetError(f"{path} is not an ELF file: {e}") from e
    endian = "little" if elf.little_endian else "big"
    segments = [
        Segment(seg["p_vaddr"], seg["p_memsz"], seg.data(), seg["p_flags"], seg["p_offset"])
        for seg in elf.iter_segments()
        if seg["p_type"] == "PT_LOAD"
    ]
    if not segments:
        raise TargetError(f"{path} has no PT_LOAD segments: not an executable")
    machine = elf["e_machine"]
    table = SymbolTable()
    opd = elf.get_section_by_name(".opd") if machine == "EM_PPC64" else None

    def deref_opd(value: int) -> int:
        if opd is not None and opd["sh_addr"] <= value < opd["sh_addr"] + opd["sh_size"]:
            off = value - opd["sh_addr"]
            return int(struct.unpack(">Q", opd.data()[off : off + 8])[0])
        return value

    symtab = elf.get_section_by_name(".symtab")
    if isinstance(symtab, SymbolTableSection):
        for sym in symtab.iter_symbols():
            kind = sym["st_info"]["type"]
            if kind not in ("STT_FUNC", "STT_OBJECT") or not sym.name or sym["st_shndx"] == "SHN_UNDEF":
                continue
            value = sym["st_value"]
            thumb = machine == "EM_ARM" and kind == "STT_FUNC" and bool(value & 1)
            if thumb:
                value &= ~1
            if kind == "STT_FUNC":
                value = deref_opd(value)
            table.add(Symbol(sym.name, value, sym["st_size"], "func" if kind == "STT_FUNC" else "object", thumb))
    entry = deref_opd(elf["e_entry"])
    return ElfImage(path, machine, elf.elfclass, endian, entry, segments, table, kind=elf["e_type"],
                    raw_entry=elf["e_entry"])
