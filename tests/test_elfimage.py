"""kpsdk.binfmt.elfimage reads what pyelftools reads.

Symbol tables are decoded in bulk (:class:`~kpsdk.binfmt.elfimage.BulkEntries`) from pyelftools' own
``Elf_Sym`` structure: the entries must equal those of pyelftools' ``iter_symbols()``, field
for field, on every fixture and in every ELF class and byte order.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from elftools.elf.structs import ELFStructs

from kpsdk import fixtures
from kpsdk.binfmt.elfimage import BulkEntries, ElfFile

FIXTURE_ELFS = sorted((Path(fixtures.__file__).parent / "bin").glob("*.elf"))


def pyelftools_symbols(data: bytes) -> list[tuple[str, dict[str, object]]]:
    section = ELFFile(io.BytesIO(data)).get_section_by_name(".symtab")
    assert isinstance(section, SymbolTableSection)
    return [(sym.name, dict(sym.entry)) for sym in section.iter_symbols()]


def kpsdk_symbols(data: bytes, path: Path) -> list[tuple[str, dict[str, object]]]:
    elf = ElfFile(data, path)
    symtab = elf.section(".symtab")
    assert symtab is not None
    return [(sym.name, dict(sym.entry)) for sym in elf.symbols(symtab)]


@pytest.mark.parametrize("path", FIXTURE_ELFS, ids=[p.name for p in FIXTURE_ELFS])
def test_symbols_are_pyelftools_symbols(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = path.read_bytes()
    expected = pyelftools_symbols(data)
    assert len(expected) > 10
    assert kpsdk_symbols(data, path) == expected
    monkeypatch.setattr(BulkEntries, "of", classmethod(lambda cls, structure: None))  # entry by entry
    assert kpsdk_symbols(data, path) == expected


@pytest.mark.parametrize("elf_class", [32, 64])
@pytest.mark.parametrize("little_endian", [True, False])
def test_every_symbol_layout_is_read_in_bulk(elf_class: int, little_endian: bool) -> None:
    structs = ELFStructs(little_endian=little_endian, elfclass=elf_class)
    structs.create_basic_structs()
    structs.create_advanced_structs()
    bulk = BulkEntries.of(structs.Elf_Sym)
    assert bulk is not None and bulk.layout.size == structs.Elf_Sym.sizeof()
    raw = bytes(range(1, 1 + 2 * bulk.layout.size))  # two entries, every field non-zero
    ours = list(bulk.entries(raw))
    theirs = [structs.Elf_Sym.parse(raw[i : i + bulk.layout.size]) for i in (0, bulk.layout.size)]
    assert ours == theirs
