"""Reading ELF executables with pyelftools: segments, entry, symbols.

Kept apart from any target so the Unicorn loader, the qemu-user launcher and the
CLI's ``list`` command read a file the same way.  ARM Thumb symbols (odd
values) and ppc64 ELFv1 function descriptors are turned into the address the
code really starts at.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
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

    @property
    def thumb_entry(self) -> bool:
        return self.machine == "EM_ARM" and bool(self.entry & 1)


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
        Segment(seg["p_vaddr"], seg["p_memsz"], seg.data(), seg["p_flags"])
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
    return ElfImage(path, machine, elf.elfclass, endian, entry, segments, table)
