"""Helpers of the bad-input tests: byte-level edits of ELF files, and a deadline.

Fields of the ELF header, the program headers, the section headers and the symbols are set
by name, at the offsets the ELF specification gives, independently of kpsdk's reader: a test
that corrupts ``p_filesz`` corrupts exactly that field, whatever kpsdk thinks of the file.
Where the tables are is read once from the well-formed file, so a series of edits (a fuzzer's)
keeps hitting the same fields even after one of them moved a table's offset.
"""

from __future__ import annotations

import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: (offset, struct format) of each field, per table and ELF class.
FIELDS: dict[str, dict[int, dict[str, tuple[int, str]]]] = {
    "header": {
        32: {"e_type": (16, "H"), "e_machine": (18, "H"), "e_version": (20, "I"), "e_entry": (24, "I"),
             "e_phoff": (28, "I"), "e_shoff": (32, "I"), "e_flags": (36, "I"), "e_ehsize": (40, "H"),
             "e_phentsize": (42, "H"), "e_phnum": (44, "H"), "e_shentsize": (46, "H"), "e_shnum": (48, "H"),
             "e_shstrndx": (50, "H")},
        64: {"e_type": (16, "H"), "e_machine": (18, "H"), "e_version": (20, "I"), "e_entry": (24, "Q"),
             "e_phoff": (32, "Q"), "e_shoff": (40, "Q"), "e_flags": (48, "I"), "e_ehsize": (52, "H"),
             "e_phentsize": (54, "H"), "e_phnum": (56, "H"), "e_shentsize": (58, "H"), "e_shnum": (60, "H"),
             "e_shstrndx": (62, "H")},
    },
    "phdr": {
        32: {"p_type": (0, "I"), "p_offset": (4, "I"), "p_vaddr": (8, "I"), "p_paddr": (12, "I"),
             "p_filesz": (16, "I"), "p_memsz": (20, "I"), "p_flags": (24, "I"), "p_align": (28, "I")},
        64: {"p_type": (0, "I"), "p_flags": (4, "I"), "p_offset": (8, "Q"), "p_vaddr": (16, "Q"),
             "p_paddr": (24, "Q"), "p_filesz": (32, "Q"), "p_memsz": (40, "Q"), "p_align": (48, "Q")},
    },
    "shdr": {
        32: {"sh_name": (0, "I"), "sh_type": (4, "I"), "sh_flags": (8, "I"), "sh_addr": (12, "I"),
             "sh_offset": (16, "I"), "sh_size": (20, "I"), "sh_link": (24, "I"), "sh_info": (28, "I"),
             "sh_addralign": (32, "I"), "sh_entsize": (36, "I")},
        64: {"sh_name": (0, "I"), "sh_type": (4, "I"), "sh_flags": (8, "Q"), "sh_addr": (16, "Q"),
             "sh_offset": (24, "Q"), "sh_size": (32, "Q"), "sh_link": (40, "I"), "sh_info": (44, "I"),
             "sh_addralign": (48, "Q"), "sh_entsize": (56, "Q")},
    },
    "sym": {
        32: {"st_name": (0, "I"), "st_value": (4, "I"), "st_size": (8, "I"), "st_info": (12, "B"),
             "st_other": (13, "B"), "st_shndx": (14, "H")},
        64: {"st_name": (0, "I"), "st_info": (4, "B"), "st_other": (5, "B"), "st_shndx": (6, "H"),
             "st_value": (8, "Q"), "st_size": (16, "Q")},
    },
}
SYM_SIZE = {32: 16, 64: 24}


class ElfPatch:
    """A mutable copy of a well-formed ELF file whose fields can be read and overwritten by name."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)
        self.elf_class = 32 if data[4] == 1 else 64
        self.order = "<" if data[5] == 1 else ">"
        self._bases: dict[str, tuple[int, int]] = {"header": (0, 0)}
        self._bases["phdr"] = (self.get("header", 0, "e_phoff"), self.get("header", 0, "e_phentsize"))
        self._bases["shdr"] = (self.get("header", 0, "e_shoff"), self.get("header", 0, "e_shentsize"))
        self._counts = {"header": 1, "phdr": self.get("header", 0, "e_phnum"), "shdr": self.get("header", 0, "e_shnum")}
        symtab = self.section_index(".symtab")
        self._bases["sym"] = (self.get("shdr", symtab, "sh_offset"), SYM_SIZE[self.elf_class])
        self._counts["sym"] = self.get("shdr", symtab, "sh_size") // SYM_SIZE[self.elf_class]
        self._strtab = self.get("shdr", self.get("shdr", symtab, "sh_link"), "sh_offset")

    def _where(self, table: str, index: int, field: str) -> tuple[int, str]:
        offset, fmt = FIELDS[table][self.elf_class][field]
        base, size = self._bases[table]
        return base + index * size + offset, self.order + fmt

    def get(self, table: str, index: int, field: str) -> int:
        offset, fmt = self._where(table, index, field)
        return int(struct.unpack_from(fmt, self.data, offset)[0])

    def set(self, table: str, index: int, field: str, value: int) -> None:
        """Overwrite a field; ``value`` is cut to the field's width (a fuzzer may pass anything)."""
        offset, fmt = self._where(table, index, field)
        struct.pack_into(fmt, self.data, offset, value & ((1 << (8 * struct.calcsize(fmt))) - 1))

    def count(self, table: str) -> int:
        """How many entries a table had in the well-formed file."""
        return self._counts[table]

    def section_name(self, index: int) -> str:
        names = self.get("shdr", self.get("header", 0, "e_shstrndx"), "sh_offset")
        start = names + self.get("shdr", index, "sh_name")
        return self.data[start : self.data.index(b"\0", start)].decode()

    def section_index(self, name: str) -> int:
        return next(i for i in range(self.count("shdr")) if self.section_name(i) == name)

    def symbol_index(self, name: str) -> int:
        for i in range(self.count("sym")):
            start = self._strtab + self.get("sym", i, "st_name")
            if self.data[start : self.data.index(b"\0", start)] == name.encode():
                return i
        raise KeyError(name)

    def replace_symbols(self, functions: list[tuple[str, int, int]]) -> None:
        """Give the file a new ``.symtab`` of global functions in ``.text`` (``(name, value, size)``,
        in the order given) and a new string table, both appended at the end of the file."""
        symtab = self.section_index(".symtab")
        text = self.section_index(".text")
        strings, entries = bytearray(b"\0"), bytearray(SYM_SIZE[self.elf_class])  # entry 0: the null symbol
        for name, value, size in functions:
            entry = bytearray(SYM_SIZE[self.elf_class])
            fields = {"st_name": len(strings), "st_value": value, "st_size": size, "st_info": 0x12, "st_shndx": text}
            for field, number in fields.items():
                offset, fmt = FIELDS["sym"][self.elf_class][field]
                struct.pack_into(self.order + fmt, entry, offset, number)
            entries += entry
            strings += name.encode() + b"\0"
        self.data += bytes(-len(self.data) % 8)
        for section, contents in ((symtab, entries), (self.get("shdr", symtab, "sh_link"), strings)):
            self.set("shdr", section, "sh_offset", len(self.data))
            self.set("shdr", section, "sh_size", len(contents))
            self.data += contents

    def load_index(self, n: int) -> int:
        """The program header index of the ``n``-th PT_LOAD."""
        loads = [i for i in range(self.count("phdr")) if self.get("phdr", i, "p_type") == 1]
        return loads[n]


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail with TimeoutError when the body runs longer than ``seconds``: a hang (reading a FIFO
    or ``/dev/zero`` forever) becomes a failure.  Main thread only (SIGALRM)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
