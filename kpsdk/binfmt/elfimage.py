"""Reading ELF executables with pyelftools: segments, entry, symbols.

One module, because every field is checked before it is used, in one pass over the file;
split, each part would check the headers again.

Kept apart from any target so the Unicorn loader, the qemu-user launcher, uprobes and the
CLI's ``list`` command read a file the same way.  The architecture's backend says what a
symbol's value means beyond an address: bit 0 selecting an instruction set (ARM's Thumb,
``InstructionSet.thumb_bit``), a function descriptor (ppc64 ELFv1, ``Arch.function_descriptors``);
each is turned into the address the code really starts at, and its instruction set.
pyelftools parses the bytes :func:`load_elf` read through :func:`kpsdk.binfmt.files.read_regular`
(a regular file, at most ``MAX_FILE_SIZE``), from an :class:`io.BytesIO`: it opens no file.

The file is the user's, so it may be anything: truncated, fuzzed, hostile.  pyelftools reads
it, and trusts what it reads: it seeks wherever an offset says (an offset of 2**63 is an
``OverflowError``), reads a ``SHT_NOBITS`` section as ``sh_size`` zero bytes, and building
one section or segment can build others (a ``PT_DYNAMIC`` segment builds every section to
find its string table).  So :class:`ElfFile` asks it for one thing at a time, and checks the
fields that thing depends on first, through the structures pyelftools parsed
(``elf.header``, each table entry's header):

- the identification bytes and the header's size, before ``ELFFile`` parses the header;
- the program and section header tables inside the file, with the entry sizes of the ELF
  class (at most 64 KiB of program headers, as Linux), before their entries are parsed;
- a section's contents inside the file and stored uncompressed, a string table's last byte
  a NUL (pyelftools reads a string up to the next NUL in the file), and a symbol table's
  entry size, size and string table link, before pyelftools builds the section;
- each name's offset (a section's, a symbol's) inside its string table, before the name is
  read;
- a ``PT_LOAD``'s bytes inside the file, ``p_filesz <= p_memsz`` and the segment inside the
  address space of the class, before its data is read;
- ppc64 ``.opd`` descriptors inside ``.opd``.

A file that fails raises :class:`~kpsdk.errors.ImageFormatError` naming the file and the
field.  Only what kpsdk uses is built, so a corrupt section kpsdk never reads is no error.
pyelftools' own exceptions (:class:`~elftools.common.exceptions.ELFError`), raised by the
calls into it, become an ``ImageFormatError`` too, with the original as ``__cause__``.

Symbol table entries are decoded in bulk by :class:`BulkEntries`, from pyelftools' own
``Elf_Sym`` structure and into the same entries: pyelftools parses them one at a time, about
25 µs each (5 s for a vmlinux's 200,000 symbols).
"""

from __future__ import annotations

import functools
import io
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.construct import Construct, ConstructError, Container, Struct
from elftools.construct.core import FormatField
from elftools.elf.constants import SH_FLAGS, SHN_INDICES
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section, StringTableSection, SymbolTableSection
from elftools.elf.sections import Symbol as ElfSymbol
from elftools.elf.segments import Segment as ElfSegment
from elftools.elf.structs import ELFStructs

from kpsdk.binfmt.archs import arch_for
from kpsdk.binfmt.files import read_regular
from kpsdk.binfmt.ifunc import irelative_slots
from kpsdk.binfmt.pltstubs import plt_symbols
from kpsdk.binfmt.symbols import Symbol, SymbolTable
from kpsdk.errors import ImageFormatError, TargetError

if TYPE_CHECKING:
    from kpsdk.arch import Arch, ArchRegistry

#: e_phnum saying "the count is section 0's sh_info"
PN_XNUM = 0xFFFF
#: Linux refuses a program header table larger than this (load_elf_phdrs, fs/binfmt_elf.c).
MAX_PHDR_TABLE = 65536
#: the section types :meth:`ElfFile.symbols` reads
SYMBOL_TABLES = ("SHT_SYMTAB", "SHT_DYNSYM")


class SectionHeader(NamedTuple):
    """One entry of the section header table, checked: its number, its name and its fields as
    pyelftools parsed them (``header["sh_type"]`` is a name such as ``"SHT_SYMTAB"``, or the
    number for a type pyelftools has no name for)."""

    number: int  #: its index in the section header table
    name: str
    header: Container


class ElfFile:
    """An ELF file in memory, read by pyelftools (:attr:`elf`) where kpsdk has checked it.

    The header, the section headers (:attr:`sections`, with their names) and the program
    headers (:attr:`program_headers`: pyelftools segments, nothing read from them yet) are
    parsed and checked at once; symbols and section contents when asked for, by
    :meth:`symbols` and :meth:`contents`, which check what they read first.  Every failure
    is an :class:`~kpsdk.errors.ImageFormatError` naming ``path`` and the field.  Whoever
    asks :attr:`elf` for more checks the fields it depends on first, and makes the call
    inside :meth:`pyelftools`.
    """

    def __init__(self, data: bytes, path: str | os.PathLike[str]) -> None:
        self.path, self.size, self._data = path, len(data), data
        if data[:4] != b"\x7fELF":
            raise self.error(f"not an ELF file (it starts {data[:4]!r}, not b'\\x7fELF')")
        if len(data) < 16:
            raise self.error(f"the ELF identification (16 bytes) runs past the end of the file ({len(data)} bytes)")
        if data[4] not in (1, 2):
            raise self.error(f"EI_CLASS is {data[4]}: neither 1 (32-bit) nor 2 (64-bit)")
        if data[5] not in (1, 2):
            raise self.error(f"EI_DATA is {data[5]}: neither 1 (little-endian) nor 2 (big-endian)")
        self.elf_class = 32 if data[4] == 1 else 64
        self.endian: Literal["little", "big"] = "little" if data[5] == 1 else "big"
        basic = ELFStructs(little_endian=data[5] == 1, elfclass=self.elf_class)
        basic.create_basic_structs()
        self._inside("the ELF header", 0, 1, basic.Elf_Ehdr.sizeof())
        with self.pyelftools("the ELF header"):
            self.elf = ELFFile(io.BytesIO(data))
        header = self.elf.header
        self.entry: int = header["e_entry"]
        #: e_type and e_machine by name ("ET_DYN", "EM_X86_64"), ET_0x.../EM_... for numbers without one
        self.type = _named(header["e_type"], "ET_{:#x}")
        self.machine = _named(header["e_machine"], "EM_{}")
        self.sections = self._section_headers()
        self.program_headers = self._program_headers()

    def error(self, problem: str) -> ImageFormatError:
        return ImageFormatError(self.path, problem)

    @contextmanager
    def pyelftools(self, what: str) -> Iterator[None]:
        """Around a call into pyelftools: its exceptions become an ImageFormatError about ``what``."""
        try:
            yield
        except ELFError as e:
            raise self.error(f"{what}: {e}") from e

    # -- checks, then the tables ------------------------------------------------------------------

    def _inside(self, what: str, offset: int, count: int, entsize: int) -> None:
        """``count`` entries of ``entsize`` bytes from file offset ``offset`` lie inside the file."""
        if offset + count * entsize > self.size:
            raise self.error(f"{what} ({count} x {entsize} bytes at file offset {offset:#x}) runs past the end "
                             f"of the file ({self.size} bytes)")

    def _entry_size(self, field: str, value: int, size: int, what: str) -> int:
        if value != size:
            raise self.error(f"{field} is {value}, but an ELF{self.elf_class} {what} is {size} bytes")
        return size

    def _parse(self, what: str, structure: Struct, offset: int) -> Container:
        """One entry of a table already placed inside the file, parsed by pyelftools."""
        with self.pyelftools(what):
            return struct_parse(structure, self.elf.stream, stream_pos=offset)

    def _has_contents(self, what: str, header: Container) -> bool:
        """Whether a section kpsdk reads has bytes in the file (it is not SHT_NOBITS); they must
        lie inside it, stored as they are (pyelftools would read a compression header first)."""
        if header["sh_type"] == "SHT_NOBITS":
            return False
        offset, size = header["sh_offset"], header["sh_size"]
        if offset + size > self.size:
            raise self.error(f"{what}: {size} bytes at file offset {offset:#x} run past the end of the file "
                             f"({self.size} bytes)")
        if header["sh_flags"] & SH_FLAGS.SHF_COMPRESSED:
            raise self.error(f"{what}: sh_flags has SHF_COMPRESSED, but kpsdk reads this section only uncompressed")
        return True

    def _string_table(self, what: str, header: Container, name: str = "") -> StringTableSection | None:
        """A string table section as pyelftools reads it (None: it has no bytes), once its bytes
        are inside the file and end with a NUL: pyelftools reads a string up to the next NUL,
        wherever that is, so the last string of an unterminated table would run on through
        the rest of the file."""
        if not self._has_contents(what, header):
            return None
        offset, size = header["sh_offset"], header["sh_size"]
        if size and self._data[offset + size - 1] != 0:
            raise self.error(f"{what}: the string table does not end with a NUL byte")
        with self.pyelftools(what):
            return StringTableSection(header, name, self.elf)

    def _section_headers(self) -> list[SectionHeader]:
        header = self.elf.header
        shoff = header["e_shoff"]
        if shoff == 0:
            return []
        shdr = self.elf.structs.Elf_Shdr
        size = self._entry_size("e_shentsize", header["e_shentsize"], shdr.sizeof(), "section header")
        self._inside("section header 0", shoff, 1, size)
        with self.pyelftools("section header 0"):
            count = self.elf.num_sections()  # e_shnum, or section 0's sh_size (SHN_LORESERVE or more)
            names_index = self.elf.get_shstrndx()  # e_shstrndx, or section 0's sh_link (SHN_XINDEX)
        self._inside("the section header table", shoff, count, size)
        headers = [self._parse(f"section header {i}", shdr, shoff + i * size) for i in range(count)]
        names = None
        if names_index != SHN_INDICES.SHN_UNDEF:
            if names_index >= count:
                raise self.error(f"e_shstrndx is {names_index}, but there are {count} sections")
            names = self._string_table(f"section {names_index} (the section name table)", headers[names_index])
        return [SectionHeader(i, self._string(names, h["sh_name"], f"the name of section {i}"), h)
                for i, h in enumerate(headers)]

    def _string(self, table: StringTableSection | None, offset: int, what: str) -> str:
        """The string at ``offset`` of a string table (None: a table with no bytes), read by
        pyelftools once ``offset`` is inside the table."""
        size = 0 if table is None else table["sh_size"]
        if offset == 0 and size == 0:
            return ""
        if table is None or offset >= size:
            raise self.error(f"{what}: string offset {offset:#x} is outside its string table ({size} bytes)")
        with self.pyelftools(what):
            return table.get_string(offset)

    def _program_headers(self) -> list[ElfSegment]:
        header = self.elf.header
        count = header["e_phnum"]
        if count == PN_XNUM:
            # The count is section 0's sh_info, read from its checked header: pyelftools'
            # num_segments() would build section 0, and whatever its type links it to.
            if not self.sections:
                raise self.error("e_phnum is PN_XNUM but there is no section 0 to hold the count")
            count = self.sections[0].header["sh_info"]
        if count == 0:
            return []
        phdr = self.elf.structs.Elf_Phdr
        size = self._entry_size("e_phentsize", header["e_phentsize"], phdr.sizeof(), "program header")
        if count * size > MAX_PHDR_TABLE:
            raise self.error(f"{count} program headers ({count * size} bytes): more than Linux loads "
                             f"({MAX_PHDR_TABLE} bytes)")
        phoff = header["e_phoff"]
        self._inside("the program header table", phoff, count, size)
        # Plain segments whatever their type: ELFFile.get_segment() builds a PT_DYNAMIC's
        # every section, to find its string table.
        return [ElfSegment(self._parse(f"program header {i}", phdr, phoff + i * size), self.elf.stream)
                for i in range(count)]

    # -- what kpsdk reads -----------------------------------------------------------------------

    def section(self, name: str) -> SectionHeader | None:
        """The first section called ``name``."""
        return next((s for s in self.sections if s.name == name), None)

    @staticmethod
    def describe(section: SectionHeader) -> str:
        return f"section {section.name or section.number}"

    def contents(self, section: SectionHeader) -> bytes:
        """A section's bytes as the file stores them (none for SHT_NOBITS), all inside the file."""
        what = self.describe(section)
        if not self._has_contents(what, section.header):
            return b""
        with self.pyelftools(what):
            return Section(section.header, section.name, self.elf).data()

    def symbols(self, section: SectionHeader) -> Iterator[ElfSymbol]:
        """The entries of a symbol table section (:data:`SYMBOL_TABLES`), as pyelftools symbols
        (``sym.name``, ``sym["st_value"]``, ``sym["st_info"]["type"] == "STT_FUNC"``), named
        from the string table the section links to."""
        what = self.describe(section)
        header = section.header
        if header["sh_type"] not in SYMBOL_TABLES:
            raise self.error(f"{what}: sh_type {header['sh_type']} is not a symbol table")
        size = self._entry_size(f"{what}: sh_entsize", header["sh_entsize"], self.elf.structs.Elf_Sym.sizeof(),
                                "symbol")
        self._has_contents(what, header)
        if header["sh_size"] % size:
            raise self.error(f"{what}: sh_size {header['sh_size']:#x} is not a multiple of sh_entsize {size}")
        link = header["sh_link"]
        if not 0 < link < len(self.sections) or self.sections[link].header["sh_type"] != "SHT_STRTAB":
            raise self.error(f"{what}: sh_link {link} is not a string table")
        strtab = self.sections[link]
        strings = self._string_table(self.describe(strtab), strtab.header, strtab.name)
        assert strings is not None  # an SHT_STRTAB is never SHT_NOBITS
        with self.pyelftools(what):
            table = SymbolTableSection(header, section.name, self.elf, strings)
            count = table.num_symbols()
        strings_size = strtab.header["sh_size"]
        # SymbolTableSection.iter_symbols(), with each st_name checked before the name is read
        bulk = BulkEntries.of(self.elf.structs.Elf_Sym)
        if bulk is not None:
            with self.pyelftools(what):
                entries = bulk.entries(table.data())
        else:
            start, stream = header["sh_offset"], self.elf.stream
            entries = (struct_parse(self.elf.structs.Elf_Sym, stream, stream_pos=start + i * size)
                       for i in range(count))
        for i in range(count):
            try:
                entry = next(entries)
            except ELFError as e:
                raise self.error(f"{what}: symbol {i}: {e}") from e
            offset = entry["st_name"]
            if offset >= strings_size and (offset or strings_size):
                raise self.error(f"{what}: symbol {i}: string offset {offset:#x} is outside its string table "
                                 f"({strings_size} bytes)")
            try:
                name = strings.get_string(offset) if strings_size else ""
            except ELFError as e:
                raise self.error(f"{what}: symbol {i}: {e}") from e
            yield ElfSymbol(entry, name)


class BulkEntries:
    """The entries of a table of one fixed-size pyelftools structure (``Elf_Sym``), decoded in bulk.

    pyelftools parses each entry of a symbol table through its ``construct`` structures, about
    25 µs an entry: 5 s for the 200,000 symbols of a vmlinux (eliben/pyelftools#653 proposes
    to do it as here).  :meth:`entries` reads a whole table with one :class:`struct.Struct`
    made from the structure's own fields: an integer field (``FormatField``) with its own
    ``struct`` code, any other (``st_info``, ``st_other``: bit fields; ``st_shndx``: an
    enumeration) as its bytes, which pyelftools' sub-structure parses once per distinct value.
    The entries equal pyelftools' own, field for field (``tests/test_elfimage.py`` compares
    them); entries share their parsed sub-structures, so they are for reading only.
    """

    def __init__(self, layout: struct.Struct, names: list[str],
                 parsers: list[tuple[int, Callable[[bytes], object]]]) -> None:
        self.layout, self.names, self.parsers = layout, names, parsers

    @classmethod
    def of(cls, structure: Struct) -> BulkEntries | None:
        """The bulk reader of ``structure``; None when a field is not of fixed size or the integer
        fields disagree on their byte order (then parse entry by entry)."""
        orders: set[str] = set()
        codes: list[str] = []
        names: list[str] = []
        parsers: list[tuple[int, Callable[[bytes], object]]] = []
        for i, field in enumerate(structure.subcons):
            if field.name is None:
                return None
            names.append(field.name)
            if isinstance(field, FormatField):
                orders.add(field.packer.format[0])
                codes.append(field.packer.format[1:])
                continue
            try:
                width = field.sizeof()
            except ConstructError:  # its size depends on the data: not a table of one entry size
                return None
            codes.append(f"{width}s")
            parsers.append((i, functools.cache(functools.partial(_parse_bytes, field))))
        if len(orders) != 1:
            return None
        layout = struct.Struct(orders.pop() + "".join(codes))
        return cls(layout, names, parsers) if layout.size == structure.sizeof() else None

    def entries(self, table: bytes) -> Iterator[Container]:
        """The entries of ``table``, a whole number of them, as pyelftools' structure parses them."""
        names, parsers = self.names, self.parsers
        for row in self.layout.iter_unpack(table):
            values = list(row)
            for i, parse in parsers:
                values[i] = parse(values[i])
            yield Container(**dict(zip(names, values, strict=True)))


def _parse_bytes(field: Construct, raw: bytes) -> object:
    return struct_parse(field, io.BytesIO(raw))


def _named(value: str | int, unnamed: str) -> str:
    """An enumerated header field as pyelftools gives it: its name, or a number it has none for."""
    return value if isinstance(value, str) else unnamed.format(value)


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
    #: where the program headers are in memory, as linked (0: in no PT_LOAD), their size
    #: and count: the AT_PHDR, AT_PHENT and AT_PHNUM a Linux process gets
    phdr: tuple[int, int, int] = (0, 0, 0)
    #: PT_INTERP: the program interpreter a dynamically linked program names (None: static)
    interp: str | None = None
    #: IFUNC resolver -> the GOT slots (as linked) the loader fills with its choice (:mod:`kpsdk.binfmt.ifunc`)
    ifunc_slots: dict[int, tuple[int, ...]] = dataclass_field(default_factory=dict)

    def contains(self, vaddr: int) -> bool:
        """Whether a segment of the file occupies ``vaddr`` (as linked)."""
        return any(seg.vaddr <= vaddr < seg.vaddr + seg.memsz for seg in self.segments)

    def relocated(self, bias: int) -> ElfImage:
        """The image as a run loaded at ``bias`` sees it: segments, entry and symbols moved.

        Only meaningful without dynamic relocations (kpsdk's static-pie fixtures):
        nothing inside the segments is patched.
        """
        if bias == 0:
            return self
        table = SymbolTable([replace(sym, address=sym.address + bias,
                                     descriptor=sym.descriptor + bias if sym.descriptor else 0)
                             for sym in self.symbols])
        phdr = (self.phdr[0] + bias if self.phdr[0] else 0, *self.phdr[1:])
        return replace(self, entry=self.entry + bias, symbols=table, bias=self.bias + bias, phdr=phdr,
                       segments=[replace(seg, vaddr=seg.vaddr + bias) for seg in self.segments])

    def read(self, vaddr: int, size: int) -> bytes | None:
        """``size`` bytes of the file's contents at ``vaddr`` (None: not all of them are in a
        segment's file bytes), for what must be known of the code before it is in memory."""
        for seg in self.segments:
            if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + len(seg.data):
                return seg.data[vaddr - seg.vaddr: vaddr - seg.vaddr + size]
        return None

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


def load_elf(path: str | Path, archs: ArchRegistry | None = None) -> ElfImage:
    """Read and parse an executable; a clear error for anything that is not one.  ``archs``:
    the architectures its machine is matched against (None: the loaded backends',
    :mod:`kpsdk.binfmt.archs`)."""
    path = Path(path)
    try:
        raw, st = read_regular(path)
    except OSError as e:
        raise TargetError(f"cannot read {path}: {e.strerror}") from e
    key = (str(path), st.st_dev, st.st_ino, id(archs))
    known = _parsed.get(key)
    if known is not None and known[0] == raw and known[1] is archs:  # the same bytes: the same image (a copy)
        return own_copy(known[2])
    image = parse_elf(raw, path, (st.st_dev, st.st_ino), archs)
    if len(_parsed) >= MAX_PARSED:
        _parsed.pop(next(iter(_parsed)))
    _parsed[key] = (raw, archs, image)  # archs kept: its id is in the key
    return own_copy(image)


def own_copy(image: ElfImage) -> ElfImage:
    """A copy of a kept image whose changeable parts are its own: a session adds to its symbol
    table (kretprobe trampolines, PLT names) and must not add them to the next session's."""
    symbols = image.symbols.copy() if type(image.symbols) is SymbolTable else image.symbols
    return replace(image, symbols=symbols, segments=list(image.segments), ifunc_slots=dict(image.ifunc_slots))


#: the images :func:`load_elf` parsed, by path, file and arch registry, with the bytes they were
#: parsed from: a session of a dynamic program parses libc (~70 ms, most of a warm start-up)
#: and every later session of the process gets it back for a comparison of its bytes
_parsed: dict[tuple[str, int, int, int], tuple[bytes, ArchRegistry | None, ElfImage]] = {}
MAX_PARSED = 32


def parse_elf(raw: bytes, path: Path, identity: tuple[int, int] | None = None,
              archs: ArchRegistry | None = None) -> ElfImage:
    """An executable's loadable segments, entry and function/object symbols, from its bytes
    (``archs`` as :func:`load_elf` takes them)."""
    elf = ElfFile(raw, path)
    segments = _segments(elf)
    if not segments:
        raise elf.error("no PT_LOAD segment with memory: not an executable")
    arch = arch_for(elf.machine, elf.elf_class, elf.endian, archs)
    deref = _Descriptors(elf, arch)
    symbols = _symbols(elf, deref, arch, segments)
    ifuncs = any(sym.kind == "ifunc" for sym in symbols)
    return ElfImage(path, elf.machine, elf.elf_class, elf.endian, deref("e_entry", elf.entry), segments,
                    symbols, kind=elf.type, raw_entry=elf.entry, identity=identity,
                    phdr=_phdr(elf, segments), interp=_interp(elf),
                    ifunc_slots=irelative_slots(elf, arch, segments, deref) if ifuncs else {})


def _phdr(elf: ElfFile, segments: list[Segment]) -> tuple[int, int, int]:
    """AT_PHDR/AT_PHENT/AT_PHNUM as Linux's load_elf_binary computes them: the table's
    file offset moved into the PT_LOAD whose file bytes hold it (fs/binfmt_elf.c)."""
    header = elf.elf.header
    phoff, count = header["e_phoff"], len(elf.program_headers)
    size = elf.elf.structs.Elf_Phdr.sizeof()
    addr = next((seg.vaddr + phoff - seg.offset for seg in segments
                 if seg.offset <= phoff and phoff + count * size <= seg.offset + len(seg.data)), 0)
    return addr, size, count


#: the longest PT_INTERP Linux takes (PATH_MAX, fs/binfmt_elf.c)
MAX_INTERP = 4096


def _interp(elf: ElfFile) -> str | None:
    """The PT_INTERP path, checked as Linux does: inside the file, at most PATH_MAX bytes,
    ending with a NUL, the path the string up to its first (fs/binfmt_elf.c, load_elf_binary:
    MIPS's libc.so.6 pads its ``.interp`` with NULs to 16 bytes)."""
    for i, seg in enumerate(elf.program_headers):
        ph = seg.header
        if ph["p_type"] != "PT_INTERP":
            continue
        offset, size = ph["p_offset"], ph["p_filesz"]
        what = f"program header {i} (PT_INTERP)"
        if not 2 <= size <= MAX_INTERP or offset + size > elf.size:
            raise elf.error(f"{what}: {size} bytes at {offset:#x} is not a path inside the file")
        with elf.pyelftools(what):
            raw = seg.data()
        if raw[-1:] != b"\0" or raw[:1] == b"\0":
            raise elf.error(f"{what}: the path is not a NUL-terminated string")
        return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    return None


def _segments(elf: ElfFile) -> list[Segment]:
    """The PT_LOAD segments that occupy memory, each checked as Linux's loader would.

    Its bytes are inside the file, it holds no more bytes than it occupies in memory
    (``p_filesz <= p_memsz``) and it ends inside the address space of the ELF class;
    only then does pyelftools read its bytes.
    """
    space = 1 << elf.elf_class
    out = []
    for i, seg in enumerate(elf.program_headers):
        ph = seg.header
        if ph["p_type"] != "PT_LOAD":
            continue
        vaddr, offset, filesz, memsz = ph["p_vaddr"], ph["p_offset"], ph["p_filesz"], ph["p_memsz"]
        what = f"program header {i} (PT_LOAD at {vaddr:#x})"
        if filesz > memsz:
            raise elf.error(f"{what}: p_filesz {filesz:#x} is larger than p_memsz {memsz:#x}")
        if memsz == 0:
            continue  # occupies nothing (Linux maps nothing for it either)
        if vaddr + memsz > space:
            raise elf.error(f"{what}: p_memsz {memsz:#x} runs past the end of the {elf.elf_class}-bit "
                            "address space")
        if offset + filesz > elf.size:
            raise elf.error(f"{what}: p_offset {offset:#x} + p_filesz {filesz:#x} runs past the end of "
                            f"the file ({elf.size} bytes)")
        with elf.pyelftools(what):
            data = seg.data()
        out.append(Segment(vaddr, memsz, data, ph["p_flags"], offset))
    return out


class _Descriptors:
    """Function descriptors (:attr:`kpsdk.arch.Arch.function_descriptors`, ppc64 ELFv1's ``.opd``):
    a function symbol (and e_entry) is the address of its descriptor, whose first word is the
    code's address.  Files of other architectures: the identity."""

    def __init__(self, elf: ElfFile, arch: Arch | None) -> None:
        self.elf = elf
        self.word = elf.elf_class // 8
        name = arch.function_descriptors if arch is not None else None
        opd = elf.section(name) if name else None
        self.start = opd.header["sh_addr"] if opd is not None else 0
        self.data = elf.contents(opd) if opd is not None else b""
        self.end = self.start + (opd.header["sh_size"] if opd is not None else 0)

    def __call__(self, what: str, value: int) -> int:
        if not self.start <= value < self.end:
            return value
        off = value - self.start
        if off + self.word > len(self.data):
            raise self.elf.error(f"{what} ({value:#x}) points at a function descriptor past the end of the "
                                 f"contents of .opd ({len(self.data)} bytes at {self.start:#x})")
        return int.from_bytes(self.data[off : off + self.word], self.elf.endian)


#: symbol types kept, and the kind each becomes
_KINDS = {"STT_FUNC": "func", "STT_OBJECT": "object", "STT_GNU_IFUNC": "ifunc", "STT_LOOS": "ifunc"}


def _symbols(elf: ElfFile, deref: _Descriptors, arch: Arch | None, segments: list[Segment]) -> SymbolTable:
    """The defined function, object and IFUNC symbols of ``.symtab``, else of ``.dynsym``.

    A stripped program or shared library has only ``.dynsym`` (what the dynamic loader
    links against); ``.symtab``, when there is one, holds every symbol of ``.dynsym`` and
    the local ones, so ``.dynsym`` is then not read (a corrupt one does not matter,
    as for every section kpsdk does not read).  pyelftools names dynamic symbols
    without their version (``malloc``, not ``malloc@@GLIBC_2.2.5``);
    :meth:`SymbolTable.get` takes either form.  The PLT's stubs follow, named ``SYM@plt``
    (:mod:`kpsdk.binfmt.pltstubs`).
    """
    # an instruction set selected by bit 0 of an address (ARM's Thumb: InstructionSet.thumb_bit)
    odd = next((iset for iset in arch.isets if iset.thumb_bit), None) if arch is not None else None
    found: list[Symbol] = []
    seen: set[tuple[str, int]] = set()
    for table_name, table_type in ((".symtab", "SHT_SYMTAB"), (".dynsym", "SHT_DYNSYM")):
        table = elf.section(table_name)
        if table is None or table.header["sh_type"] != table_type:
            continue
        if found:
            break  # .symtab had symbols: .dynsym's are among them
        for sym in elf.symbols(table):
            kind = _KINDS.get(sym["st_info"]["type"])
            if kind is None or not sym.name or sym["st_shndx"] == "SHN_UNDEF":
                continue
            value = sym["st_value"]
            code = kind != "object"
            iset = odd.name if odd is not None and code and value & 1 else ""
            if iset:
                value &= ~1
            descriptor = 0
            if code:
                descriptor, value = value, deref(f"symbol {sym.name!r}", value)
                descriptor = descriptor if descriptor != value else 0
            if (sym.name, value) in seen:
                continue
            seen.add((sym.name, value))
            found.append(Symbol(sym.name, value, sym["st_size"], kind, iset, table_name, descriptor))
    found += plt_symbols(elf, arch, segments)
    return SymbolTable(found)
