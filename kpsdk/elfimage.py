"""Reading ELF executables: segments, entry, symbols.

Kept apart from any target so the Unicorn loader, the qemu-user launcher, uprobes and the
CLI's ``list`` command read a file the same way.  ARM Thumb symbols (odd values) and ppc64
ELFv1 function descriptors are turned into the address the code really starts at.

The file is the user's, so it may be anything: truncated, fuzzed, hostile.  :class:`ElfFile`
reads the few tables kpsdk uses with :mod:`struct` and checks every field against the file
before using it: tables inside the file, entry sizes those of the ELF class, links pointing
at tables of the right type, loadable segments inside the address space.  A file that fails
raises :class:`~kpsdk.errors.ImageFormatError` naming the file and the field.  (A general
ELF library parses every section and follows every link, so a corrupt section kpsdk never
needs, or a 2**63 segment size, surfaced as that library's exceptions or Python's.)
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from elftools.elf.enums import ENUM_E_MACHINE, ENUM_E_TYPE

from kpsdk.errors import ImageFormatError, TargetError
from kpsdk.files import read_regular
from kpsdk.symbols import Symbol, SymbolTable

PT_LOAD = 1
SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS = 2, 3, 8
STT_NOTYPE, STT_OBJECT, STT_FUNC = 0, 1, 2
STB_LOCAL = 0
SHN_UNDEF, SHN_LORESERVE, SHN_XINDEX = 0, 0xFF00, 0xFFFF
PN_XNUM = 0xFFFF
#: Linux refuses a program header table larger than this (load_elf_phdrs, fs/binfmt_elf.c).
MAX_PHDR_TABLE = 65536

_MACHINES = {value: name for name, value in ENUM_E_MACHINE.items() if isinstance(value, int)}
_TYPES = {value: name for name, value in ENUM_E_TYPE.items() if isinstance(value, int)}


class _Formats(NamedTuple):
    """The struct layouts of one ELF class (after the 16 identification bytes for the header)."""

    header: str
    phdr: str
    shdr: str
    sym: str


#: Field order differs between the classes (Elf64_Phdr moves p_flags, Elf64_Sym st_value);
#: the readers below name the fields, so only these strings differ.
_FORMATS = {
    32: _Formats("HHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", "IIIBBH"),
    64: _Formats("HHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", "IBBHQQ"),
}


class ProgramHeader(NamedTuple):
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class SectionHeader(NamedTuple):
    number: int  #: its index in the section header table
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


class RawSymbol(NamedTuple):
    """One ``.symtab`` entry as the file has it (``type``/``bind`` are the STT_/STB_ numbers)."""

    name: str
    value: int
    size: int
    type: int
    bind: int
    shndx: int


class ElfFile:
    """The header, program headers, section headers and symbols of an ELF file in memory, checked.

    Nothing is read that the checks have not placed inside the file; every failure is an
    :class:`~kpsdk.errors.ImageFormatError` naming ``path`` and the field.
    """

    def __init__(self, data: bytes, path: str | os.PathLike[str]) -> None:
        self.data, self.path = data, path
        if len(data) < 16 or data[:4] != b"\x7fELF":
            raise self.error(f"not an ELF file (it starts {data[:4]!r}, not b'\\x7fELF')")
        if data[4] not in (1, 2):
            raise self.error(f"EI_CLASS is {data[4]}: neither 1 (32-bit) nor 2 (64-bit)")
        if data[5] not in (1, 2):
            raise self.error(f"EI_DATA is {data[5]}: neither 1 (little-endian) nor 2 (big-endian)")
        self.elf_class = 32 if data[4] == 1 else 64
        self.endian = "little" if data[5] == 1 else "big"
        self._order = "<" if data[5] == 1 else ">"
        self._formats = _FORMATS[self.elf_class]
        fields = self._table("the ELF header", 16, 1, struct.calcsize(self._order + self._formats.header),
                             self._formats.header)[0]
        e_type, e_machine, _version, self.entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, \
            shnum, shstrndx = fields
        self.type = _TYPES.get(e_type, f"ET_{e_type:#x}")
        self.machine = _MACHINES.get(e_machine, f"EM_{e_machine}")
        self.sections = self._sections(shoff, shentsize, shnum, shstrndx)
        self.program_headers = self._program_headers(phoff, phentsize, phnum)

    def error(self, problem: str) -> ImageFormatError:
        return ImageFormatError(self.path, problem)

    def _table(self, what: str, offset: int, count: int, entsize: int, fmt: str) -> list[tuple[int, ...]]:
        """``count`` entries of ``fmt``, ``entsize`` bytes apart from file offset ``offset``."""
        if offset + count * entsize > len(self.data):
            raise self.error(f"{what} ({count} x {entsize} bytes at file offset {offset:#x}) runs past the end "
                             f"of the file ({len(self.data)} bytes)")
        layout = struct.Struct(self._order + fmt)
        return [layout.unpack_from(self.data, offset + i * entsize) for i in range(count)]

    def _entry_size(self, field: str, value: int, fmt: str, what: str) -> int:
        size = struct.calcsize(self._order + fmt)
        if value != size:
            raise self.error(f"{field} is {value}, but an ELF{self.elf_class} {what} is {size} bytes")
        return size

    def _sections(self, shoff: int, shentsize: int, shnum: int, shstrndx: int) -> list[SectionHeader]:
        if shoff == 0:
            return []
        fmt = self._formats.shdr
        size = self._entry_size("e_shentsize", shentsize, fmt, "section header")
        first = self._table("section header 0", shoff, 1, size, fmt)[0]
        count = shnum or first[5]  # SHN_LORESERVE or more sections: the count is section 0's sh_size
        raw = self._table("the section header table", shoff, count, size, fmt)
        if shstrndx == SHN_XINDEX:
            shstrndx = first[6]  # ...and the name table's index its sh_link
        names = b""
        if shstrndx != SHN_UNDEF:
            if shstrndx >= count:
                raise self.error(f"e_shstrndx is {shstrndx}, but there are {count} sections")
            names = self._bytes(raw[shstrndx][4], raw[shstrndx][5], raw[shstrndx][1],
                                f"section {shstrndx} (the section name table)")
        return [
            SectionHeader(i, self._string(names, sh[0], f"the name of section {i}"), sh[1], sh[2], sh[3], sh[4],
                          sh[5], sh[6], sh[7], sh[9])
            for i, sh in enumerate(raw)
        ]

    def _program_headers(self, phoff: int, phentsize: int, phnum: int) -> list[ProgramHeader]:
        if phnum == PN_XNUM:  # the count is section 0's sh_info
            if not self.sections:
                raise self.error("e_phnum is PN_XNUM but there is no section 0 to hold the count")
            phnum = self.sections[0].info
        if phnum == 0:
            return []
        fmt = self._formats.phdr
        size = self._entry_size("e_phentsize", phentsize, fmt, "program header")
        if phnum * size > MAX_PHDR_TABLE:
            raise self.error(f"{phnum} program headers ({phnum * size} bytes): more than Linux loads "
                             f"({MAX_PHDR_TABLE} bytes)")
        out = []
        for ph in self._table("the program header table", phoff, phnum, size, fmt):
            if self.elf_class == 32:
                p_type, offset, vaddr, _paddr, filesz, memsz, flags, _align = ph
            else:
                p_type, flags, offset, vaddr, _paddr, filesz, memsz, _align = ph
            out.append(ProgramHeader(p_type, flags, offset, vaddr, filesz, memsz))
        return out

    def _bytes(self, offset: int, size: int, sh_type: int, what: str) -> bytes:
        """A section's contents (none for SHT_NOBITS), all inside the file."""
        if sh_type == SHT_NOBITS:
            return b""
        if offset + size > len(self.data):
            raise self.error(f"{what}: {size} bytes at file offset {offset:#x} run past the end of the file "
                             f"({len(self.data)} bytes)")
        return self.data[offset : offset + size]

    def _string(self, table: bytes, offset: int, what: str) -> str:
        """The NUL-terminated string at ``offset`` of a string table (Latin-1: every byte a character)."""
        if offset == 0 and not table:
            return ""
        if offset >= len(table):
            raise self.error(f"{what}: string offset {offset:#x} is outside its string table ({len(table)} bytes)")
        end = table.find(b"\0", offset)
        return table[offset : end if end >= 0 else len(table)].decode("latin-1")

    def contents(self, section: SectionHeader) -> bytes:
        return self._bytes(section.offset, section.size, section.type, f"section {section.name or section.number}")

    def section(self, name: str) -> SectionHeader | None:
        """The first section called ``name``."""
        return next((s for s in self.sections if s.name == name), None)

    def symbols(self, section: SectionHeader) -> Iterator[RawSymbol]:
        """The entries of a symbol table section, names from the string table it links to."""
        what = f"section {section.name or section.number}"
        fmt = self._formats.sym
        size = self._entry_size(f"{what}: sh_entsize", section.entsize, fmt, "symbol")
        table = self.contents(section)
        if not 0 < section.link < len(self.sections) or self.sections[section.link].type != SHT_STRTAB:
            raise self.error(f"{what}: sh_link {section.link} is not a string table")
        strings = self.contents(self.sections[section.link])
        for i, sym in enumerate(struct.iter_unpack(self._order + fmt, table[: len(table) - len(table) % size])):
            if self.elf_class == 32:
                name, value, sym_size, info, _other, shndx = sym
            else:
                name, info, _other, shndx, value, sym_size = sym
            yield RawSymbol(self._string(strings, name, f"{what}: symbol {i}"), value, sym_size, info & 0xF,
                            info >> 4, shndx)


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
    #: ``(st_dev, st_ino)`` of the file the bytes were read from (None: not read from a file)
    identity: tuple[int, int] | None = None

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
    """Read and parse an executable; a clear error for anything that is not one."""
    path = Path(path)
    try:
        raw, st = read_regular(path)
    except OSError as e:
        raise TargetError(f"cannot read {path}: {e.strerror}") from e
    return parse_elf(raw, path, (st.st_dev, st.st_ino))


def parse_elf(raw: bytes, path: Path, identity: tuple[int, int] | None = None) -> ElfImage:
    """An executable's loadable segments, entry and function/object symbols, from its bytes."""
    elf = ElfFile(raw, path)
    segments = _segments(elf)
    if not segments:
        raise elf.error("no PT_LOAD segment with memory: not an executable")
    deref = _Descriptors(elf)
    return ElfImage(path, elf.machine, elf.elf_class, elf.endian, deref("e_entry", elf.entry), segments,
                    _symbols(elf, deref), kind=elf.type, raw_entry=elf.entry, identity=identity)


def _segments(elf: ElfFile) -> list[Segment]:
    """The PT_LOAD segments that occupy memory, each checked as Linux's loader would.

    Its bytes are inside the file, it holds no more bytes than it occupies in memory
    (``p_filesz <= p_memsz``) and it ends inside the address space of the ELF class.
    """
    space = 1 << elf.elf_class
    out = []
    for i, ph in enumerate(elf.program_headers):
        if ph.type != PT_LOAD:
            continue
        what = f"program header {i} (PT_LOAD at {ph.vaddr:#x})"
        if ph.filesz > ph.memsz:
            raise elf.error(f"{what}: p_filesz {ph.filesz:#x} is larger than p_memsz {ph.memsz:#x}")
        if ph.memsz == 0:
            continue  # occupies nothing (Linux maps nothing for it either)
        if ph.vaddr + ph.memsz > space:
            raise elf.error(f"{what}: p_memsz {ph.memsz:#x} runs past the end of the {elf.elf_class}-bit "
                            "address space")
        if ph.offset + ph.filesz > len(elf.data):
            raise elf.error(f"{what}: p_offset {ph.offset:#x} + p_filesz {ph.filesz:#x} runs past the end of "
                            f"the file ({len(elf.data)} bytes)")
        out.append(Segment(ph.vaddr, ph.memsz, elf.data[ph.offset : ph.offset + ph.filesz], ph.flags, ph.offset))
    return out


class _Descriptors:
    """ppc64 ELFv1: a function symbol (and e_entry) is the address of its descriptor in ``.opd``,
    whose first doubleword is the code's address.  Other files: the identity."""

    def __init__(self, elf: ElfFile) -> None:
        self.elf = elf
        opd = elf.section(".opd") if elf.machine == "EM_PPC64" else None
        self.start = opd.addr if opd is not None else 0
        self.data = elf.contents(opd) if opd is not None else b""
        self.end = self.start + (opd.size if opd is not None else 0)

    def __call__(self, what: str, value: int) -> int:
        if not self.start <= value < self.end:
            return value
        off = value - self.start
        if off + 8 > len(self.data):
            raise self.elf.error(f"{what} ({value:#x}) points at a function descriptor past the end of the "
                                 f"contents of .opd ({len(self.data)} bytes at {self.start:#x})")
        return int.from_bytes(self.data[off : off + 8], "big")


def _symbols(elf: ElfFile, deref: _Descriptors) -> SymbolTable:
    """The defined function and object symbols of ``.symtab`` (none without one)."""
    symtab = elf.section(".symtab")
    if symtab is None or symtab.type != SHT_SYMTAB:
        return SymbolTable()
    found: list[Symbol] = []
    for sym in elf.symbols(symtab):
        if sym.type not in (STT_FUNC, STT_OBJECT) or not sym.name or sym.shndx == SHN_UNDEF:
            continue
        value = sym.value
        func = sym.type == STT_FUNC
        thumb = elf.machine == "EM_ARM" and func and bool(value & 1)
        if thumb:
            value &= ~1
        if func:
            value = deref(f"symbol {sym.name!r}", value)
        found.append(Symbol(sym.name, value, sym.size, "func" if func else "object", thumb))
    return SymbolTable(found)
