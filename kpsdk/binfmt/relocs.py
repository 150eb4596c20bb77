"""Dynamic relocations (``.rela.dyn``, ``.rela.plt``; ``.rel.*`` on i386 and ARM), read checked.

Shared by :mod:`kpsdk.binfmt.pltstubs` (which stub calls which function) and :mod:`kpsdk.binfmt.ifunc`
(which GOT slot the loader fills with an IFUNC resolver's choice).  Each field is checked
as :mod:`kpsdk.binfmt.elfimage` checks the rest of a file: the entry size of the ELF class, the
contents inside the file, the symbol table link and each symbol index, else an
:class:`~kpsdk.errors.ImageFormatError` naming the file and the field.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfFile, SectionHeader

#: the relocation section types, and whether their entries carry an addend
RELOCATION_TYPES = {"SHT_RELA": True, "SHT_REL": False}


class Relocation(NamedTuple):
    offset: int  #: r_offset: the address (as linked) the loader writes
    type: int  #: ELF64_R_TYPE / ELF32_R_TYPE
    symbol: str  #: the dynamic symbol's name ("" for none: index 0)
    addend: int | None  #: r_addend (None for a REL entry: the addend is the word at ``offset``)


def dynamic_relocation_sections(elf: ElfFile) -> list[SectionHeader]:
    """The file's relocation sections that the loader applies (linked to ``.dynsym``)."""
    return [s for s in elf.sections if s.header["sh_type"] in RELOCATION_TYPES and s.name.startswith(".rel")
            and 0 < s.header["sh_link"] < len(elf.sections)
            and elf.sections[s.header["sh_link"]].header["sh_type"] == "SHT_DYNSYM"]


def read_relocations(elf: ElfFile, section: SectionHeader) -> list[Relocation]:
    """Every entry of a relocation section, in its order, with its symbol's name."""
    what = elf.describe(section)
    header = section.header
    rela = RELOCATION_TYPES.get(header["sh_type"])
    if rela is None:
        raise elf.error(f"{what}: sh_type {header['sh_type']} is not a relocation table")
    word = elf.elf_class // 8
    size = word * (3 if rela else 2)
    if header["sh_entsize"] != size:
        raise elf.error(f"{what}: sh_entsize is {header['sh_entsize']}, but an ELF{elf.elf_class} relocation "
                        f"{'with' if rela else 'without'} addend is {size} bytes")
    data = elf.contents(section)
    if len(data) % size:
        raise elf.error(f"{what}: sh_size {len(data):#x} is not a multiple of sh_entsize {size}")
    link = header["sh_link"]
    if not 0 < link < len(elf.sections) or elf.sections[link].header["sh_type"] != "SHT_DYNSYM":
        raise elf.error(f"{what}: sh_link {link} is not the dynamic symbol table")
    symbols = [sym.name for sym in elf.symbols(elf.sections[link])]
    big = elf.endian == "big"
    unsigned, signed = ("Q", "q") if word == 8 else ("I", "i")
    layout = struct.Struct((">" if big else "<") + unsigned * 2 + (signed if rela else ""))
    shift, mask = (32, 0xFFFFFFFF) if word == 8 else (8, 0xFF)
    out = []
    for i, entry in enumerate(layout.iter_unpack(data)):
        index = entry[1] >> shift
        if index >= len(symbols):
            raise elf.error(f"{what}: relocation {i} names symbol {index}, but the dynamic symbol table has "
                            f"{len(symbols)}")
        out.append(Relocation(entry[0], entry[1] & mask, symbols[index], entry[2] if rela else None))
    return out
