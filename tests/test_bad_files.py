"""Files that are not what they claim to be: each gives kpsdk's own error, naming the file and
what is wrong in it, at once.

The corrupt ELF files are the bundled fixtures with one field overwritten (``tests/badfiles.py``);
the paths that are no files at all (``/dev/zero``, a FIFO without a writer, a directory) go
through every way kpsdk reads a program or a symbol file.  A deadline turns a hang (reading a
FIFO or ``/dev/zero`` forever) into a failure.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.common.exceptions import ELFError, ELFParseError
from elftools.elf.sections import StringTableSection
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.binfmt import elfimage
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.binfmt.files import MAX_FILE_SIZE
from kpsdk.cli import app
from kpsdk.errors import ImageFormatError, KprobeError, KpsdkError
from kpsdk.kernel.kallsyms import load_kernel_symbols
from kpsdk.targets.unicorn.loader import MAX_LOAD
from tests.badfiles import ElfPatch, deadline


def patched(tmp_path: Path, arch: str, edit: Callable[[ElfPatch], None], name: str = "bad.elf") -> Path:
    elf = ElfPatch(fixtures.path(arch).read_bytes())
    edit(elf)
    path = tmp_path / name
    path.write_bytes(bytes(elf.data))
    return path


def open_error(path: Path, *, match: str) -> ImageFormatError:
    """The ImageFormatError ``kpsdk.open("elf:...")`` raises for ``path``, within 10 s; it names the file."""
    with deadline(10), pytest.raises(ImageFormatError, match=match) as info:
        kpsdk.open(f"elf:{path}")
    assert str(path) in str(info.value)
    return info.value


def cli(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


def assert_cli_error(result, path: Path, match: str) -> None:  # type: ignore[no-untyped-def]
    """Exit 1 and one ``error:`` line naming the file, no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], result.stderr
    assert match in lines[0], lines[0]


# -- corrupt ELF files --------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 3, 15, 40, 63, 100, 0x400, -1])
def test_truncated_elf(tmp_path: Path, keep: int) -> None:
    data = fixtures.path("x86_64").read_bytes()
    path = tmp_path / "truncated.elf"
    path.write_bytes(data[:keep])
    err = open_error(path, match="not an ELF file|runs past the end of the file")
    assert err.path == str(path)
    assert_cli_error(cli("list", str(path)), path, "ELF" if 0 <= keep < 16 else "runs past the end of the file")


@pytest.mark.parametrize("entsize", [0, 7, 48])
def test_symbol_table_with_a_wrong_entry_size(tmp_path: Path, entsize: int) -> None:
    path = patched(tmp_path, "x86_64", lambda e: e.set("shdr", e.section_index(".symtab"), "sh_entsize", entsize))
    open_error(path, match=f"section .symtab: sh_entsize is {entsize}, but an ELF64 symbol is 24 bytes")


@pytest.mark.parametrize(("arch", "field", "value", "match"), [
    ("x86_64", "p_filesz", 2**63, "p_filesz 0x8000000000000000 is larger than p_memsz"),
    ("x86_64", "p_memsz", 0, "p_filesz 0x4fe is larger than p_memsz 0x0"),
    ("x86_64", "p_offset", 2**40, "p_offset 0x10000000000 \\+ p_filesz 0x4fe runs past the end of the file"),
    ("x86_64", "p_vaddr", 2**64 - 0x100, "runs past the end of the 64-bit address space"),
    ("i386", "p_vaddr", 2**32 - 0x100, "runs past the end of the 32-bit address space"),
])
def test_segment_the_file_cannot_hold(tmp_path: Path, arch: str, field: str, value: int, match: str) -> None:
    path = patched(tmp_path, arch, lambda e: e.set("phdr", e.load_index(0), field, value))
    open_error(path, match=match)
    assert_cli_error(cli("list", str(path)), path, "program header")


@pytest.mark.parametrize("memsz", [2**33, MAX_LOAD + 0x1000])
def test_huge_bss_is_refused_at_once(tmp_path: Path, memsz: int) -> None:
    """A PT_LOAD of 8 GiB (once mapped and written page by page: over 30 s and GBs of memory)."""
    path = patched(tmp_path, "x86_64", lambda e: e.set("phdr", e.load_index(1), "p_memsz", memsz))
    start = time.perf_counter()
    open_error(path, match="more than an elf: target maps")
    assert time.perf_counter() - start < 2
    result = cli("list", str(path))  # listing maps nothing: the file itself is well formed
    assert result.exit_code == 0 and "add" in result.stdout


def test_largest_bss_an_elf_target_maps_works(tmp_path: Path) -> None:
    """Just under the limit: one mapping, not a page at a time, so it opens at once and runs."""
    path = patched(tmp_path, "x86_64", lambda e: e.set("phdr", e.load_index(1), "p_memsz", MAX_LOAD - 0x10000))
    start = time.perf_counter()
    with kpsdk.open(f"elf:{path}") as s:
        assert time.perf_counter() - start < 2
        assert s.call("add", 2, 3) == 5


def test_segments_leave_no_room_for_kpsdk(tmp_path: Path) -> None:
    path = patched(tmp_path, "i386", lambda e: e.set("phdr", e.load_index(0), "p_vaddr", 0xFFFF0000 - 0x1000))
    open_error(path, match="no room for kpsdk's area in the 32-bit address space")


def test_program_header_table_beyond_linux_limit(tmp_path: Path) -> None:
    path = patched(tmp_path, "x86_64", lambda e: e.set("header", 0, "e_phnum", 2000))
    open_error(path, match="2000 program headers .* more than Linux loads")


@pytest.mark.parametrize(("field", "value", "match"), [
    ("e_shentsize", 12, "e_shentsize is 12, but an ELF64 section header is 64 bytes"),
    ("e_shstrndx", 200, "e_shstrndx is 200, but there are"),
    ("e_shoff", 2**62, "section header 0 .* at file offset 0x4000000000000000\\) runs past the end of the file"),
    ("e_shnum", 500, "the section header table \\(500 x 64 bytes at file offset 0x810\\) runs past the end"),
    ("e_phentsize", 1, "e_phentsize is 1, but an ELF64 program header is 56 bytes"),
])
def test_header_fields(tmp_path: Path, field: str, value: int, match: str) -> None:
    open_error(patched(tmp_path, "x86_64", lambda e: e.set("header", 0, field, value)), match=match)


def test_symtab_linked_to_no_string_table(tmp_path: Path) -> None:
    path = patched(tmp_path, "x86_64", lambda e: e.set("shdr", e.section_index(".symtab"), "sh_link", 1))
    open_error(path, match="section .symtab: sh_link 1 is not a string table")


def test_ppc64_descriptor_outside_opd(tmp_path: Path) -> None:
    """ELFv1 function symbols point into .opd; one in its last 4 bytes has no 8-byte descriptor."""

    def edit(e: ElfPatch) -> None:
        opd = e.section_index(".opd")
        end = e.get("shdr", opd, "sh_addr") + e.get("shdr", opd, "sh_size")
        e.set("sym", e.symbol_index("loop"), "st_value", end - 4)

    path = patched(tmp_path, "ppc64", edit)
    with pytest.raises(ImageFormatError, match="symbol 'loop' .* past the end of the contents of .opd"):
        load_elf(path)
    assert_cli_error(cli("list", str(path)), path, ".opd")
    assert_cli_error(cli("disasm", str(path), "sum7"), path, ".opd")


def test_ppc64_opd_past_the_end_of_the_file(tmp_path: Path) -> None:
    path = patched(tmp_path, "ppc64", lambda e: e.set("shdr", e.section_index(".opd"), "sh_size", 0x100000))
    with pytest.raises(ImageFormatError, match="section .opd: 1048576 bytes at file offset 0x848 run past the end"):
        load_elf(path)


def test_many_symbols_out_of_address_order(tmp_path: Path) -> None:
    """200,000 symbols in falling address order (inserted one at a time into the sorted table,
    they took over 30 s; a hostile file needs only 5 MB for that)."""
    n = 200_000
    path = patched(tmp_path, "x86_64", lambda e: e.replace_symbols(
        [(f"f{i}", 0x400000 + 16 * (n - i), 16) for i in range(n)]))
    # CPU time, not wall time: a loaded machine stretches the wall clock, not the work done
    # (5-7 s of CPU here; the one-at-a-time insertion took over 30 s)
    start = time.process_time()
    with deadline(120):
        image = load_elf(path)
    assert time.process_time() - start < 20
    assert len(image.symbols) == n
    assert image.symbols.lookup(0x400000 + 16 * n + 4) == ("f0", 4, 16)
    assert image.symbols.get("f1").address == 0x400000 + 16 * (n - 1)


def test_symbol_table_not_a_whole_number_of_entries(tmp_path: Path) -> None:
    def edit(e: ElfPatch) -> None:
        symtab = e.section_index(".symtab")
        e.set("shdr", symtab, "sh_size", e.get("shdr", symtab, "sh_size") + 5)

    open_error(patched(tmp_path, "x86_64", edit),
               match="section .symtab: sh_size 0x[0-9a-f]+ is not a multiple of sh_entsize 24")


@pytest.mark.parametrize(("field", "value", "match"), [
    ("sh_offset", 2**63, r"\d+ bytes at file offset 0x8000000000000000 run past the end of the file"),
    ("sh_flags", 0x800, "sh_flags has SHF_COMPRESSED, but kpsdk reads this section only uncompressed"),
])
def test_section_name_table_checked_before_it_is_read(tmp_path: Path, field: str, value: int, match: str) -> None:
    """Unchecked, pyelftools would seek to 2**63 (OverflowError) to read a name, or read a
    compression header first."""
    path = patched(tmp_path, "x86_64", lambda e: e.set("shdr", e.get("header", 0, "e_shstrndx"), field, value))
    open_error(path, match=r"section \d+ \(the section name table\): " + match)


def test_compressed_string_table(tmp_path: Path) -> None:
    def edit(e: ElfPatch) -> None:
        strtab = e.get("shdr", e.section_index(".symtab"), "sh_link")
        e.set("shdr", strtab, "sh_flags", e.get("shdr", strtab, "sh_flags") | 0x800)

    open_error(patched(tmp_path, "x86_64", edit), match="section .strtab: sh_flags has SHF_COMPRESSED")


@pytest.mark.parametrize(("table", "match"), [
    ("strtab", "section .strtab"),
    ("shstrtab", r"section \d+ \(the section name table\)"),
])
def test_string_table_without_its_last_nul(tmp_path: Path, table: str, match: str) -> None:
    """One byte shorter, a table ends inside its last string: pyelftools would read that string on
    to the next NUL in the file, however far."""

    def edit(e: ElfPatch) -> None:
        if table == "strtab":
            index = e.get("shdr", e.section_index(".symtab"), "sh_link")
        else:
            index = e.get("header", 0, "e_shstrndx")
        e.set("shdr", index, "sh_size", e.get("shdr", index, "sh_size") - 1)

    open_error(patched(tmp_path, "x86_64", edit), match=match + ": the string table does not end with a NUL byte")


def test_string_offsets_outside_their_tables(tmp_path: Path) -> None:
    path = patched(tmp_path, "x86_64", lambda e: e.set("sym", e.symbol_index("add"), "st_name", 0xFFFFFFF0))
    open_error(path, match=r"section .symtab: symbol \d+: string offset 0xfffffff0 is outside its string table "
                           r"\(\d+ bytes\)")
    path = patched(tmp_path, "x86_64", lambda e: e.set("shdr", e.section_index(".text"), "sh_name", 0xFFFFFFF0),
                   "bad-name.elf")
    open_error(path, match=r"the name of section \d+: string offset 0xfffffff0 is outside its string table")


def test_extended_section_and_segment_numbering(tmp_path: Path) -> None:
    """e_shnum 0, e_shstrndx SHN_XINDEX and e_phnum PN_XNUM: the section count, the name table's
    index and the program header count are in section 0 (sh_size, sh_link, sh_info), as in files
    with 65280 or more sections or 65535 or more program headers."""

    def edit(e: ElfPatch) -> None:
        for field, value, in_section_0 in (("e_shnum", 0, "sh_size"), ("e_shstrndx", 0xFFFF, "sh_link"),
                                           ("e_phnum", 0xFFFF, "sh_info")):
            e.set("shdr", 0, in_section_0, e.get("header", 0, field))
            e.set("header", 0, field, value)

    path = patched(tmp_path, "x86_64", edit)
    assert load_elf(path).symbols.get("add") == load_elf(fixtures.path("x86_64")).symbols.get("add")
    with kpsdk.open(f"elf:{path}") as s:
        assert s.call("add", 2, 3) == 5
    no_sections = patched(tmp_path, "x86_64", lambda e: (edit(e), e.set("header", 0, "e_shoff", 0)), "no-sections.elf")
    open_error(no_sections, match="e_phnum is PN_XNUM but there is no section 0 to hold the count")


def test_sections_kpsdk_does_not_read_may_be_corrupt(tmp_path: Path) -> None:
    """A position-independent executable (it has a PT_DYNAMIC) whose dynamic symbol table, hash
    table and dynamic section are broken still opens: kpsdk builds only what it reads.  (Asked for
    its segments or sections, pyelftools builds the PT_DYNAMIC's sections and their links, and
    fails on the hash table's.)"""
    elf = ElfPatch(fixtures.pie_path("x86_64").read_bytes())
    elf.set("shdr", elf.section_index(".gnu.hash"), "sh_link", elf.section_index(".gnu.hash"))
    elf.set("shdr", elf.section_index(".dynamic"), "sh_link", 0xFFFF)
    elf.set("shdr", elf.section_index(".dynsym"), "sh_offset", 2**63)
    path = tmp_path / "pie.elf"
    path.write_bytes(bytes(elf.data))
    assert load_elf(path).kind == "ET_DYN"
    with kpsdk.open(f"elf:{path}") as s:
        assert s.call("add", 2, 3) == 5


def test_pyelftools_errors_become_image_format_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where kpsdk calls pyelftools, its exceptions reach the user as ImageFormatError naming the
    file and what was read, with pyelftools' exception as the cause."""
    failure = ELFParseError("expected 4, found 2")

    def get_string(self: StringTableSection, offset: int) -> str:
        raise failure

    monkeypatch.setattr(StringTableSection, "get_string", get_string)
    monkeypatch.setattr(elfimage, "_parsed", {})  # parsed again, not load_elf's copy of an earlier parse
    path = fixtures.path("x86_64")
    with pytest.raises(ImageFormatError, match=r"the name of section 0: expected 4, found 2") as info:
        load_elf(path)
    assert info.value.path == str(path) and info.value.__cause__ is failure
    assert isinstance(info.value.__cause__, ELFError)
    assert_cli_error(cli("list", str(path)), path, "expected 4, found 2")


# -- paths that are not regular files ------------------------------------------------------------


@pytest.fixture(params=["dev-zero", "fifo", "directory"])
def not_a_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A path that would make a plain read hang or fail oddly, and the kind the error names."""
    if request.param == "dev-zero":
        return Path("/dev/zero"), "a character device"
    if request.param == "fifo":
        fifo = tmp_path / "prog.fifo"
        os.mkfifo(fifo)
        return fifo, "a FIFO"
    return tmp_path, "a directory"


def test_not_a_regular_file_as_a_program(not_a_file: tuple[Path, str]) -> None:
    path, kind = not_a_file
    with deadline(5):
        open_error(path, match=f"not a regular file \\({kind}\\)")
        with pytest.raises(ImageFormatError, match=kind):
            kpsdk.open(f"qemu-user:{path}")  # refused before anything is started
        with pytest.raises(KprobeError, match=f"not a regular file \\({kind}\\)") as info:
            kpsdk.register_uprobe(kpsdk.Uprobe(path=str(path), offset=0))
        assert info.value.errno == errno.EINVAL
        assert_cli_error(cli("list", str(path)), path, kind)
        assert_cli_error(cli("disasm", str(path), "add"), path, kind)


def test_not_a_regular_file_as_symbols(not_a_file: tuple[Path, str]) -> None:
    path, kind = not_a_file
    with deadline(5):
        with pytest.raises(ImageFormatError, match=kind):
            kpsdk.open("gdb://127.0.0.1:9", arch="x86_64", symbols=str(path))  # nothing is connected to
        with pytest.raises(ImageFormatError, match=kind):
            load_kernel_symbols(path)


def test_file_larger_than_kpsdk_reads(tmp_path: Path) -> None:
    huge = tmp_path / "huge.elf"
    with open(huge, "wb") as f:
        f.write(fixtures.path("x86_64").read_bytes())
        f.truncate(MAX_FILE_SIZE + 1)  # sparse: takes no disk space
    with deadline(5):
        err = open_error(huge, match="more than kpsdk reads from one file")
    assert isinstance(err, KpsdkError)


def test_a_kept_parse_is_each_callers_own() -> None:
    """load_elf keeps what it parsed, and each caller gets a copy of its own: what a session adds
    to its program's symbols (a kretprobe's trampolines) is not in the next load's table."""
    path = fixtures.path("x86_64")
    before = {s.name for s in load_elf(path).symbols}
    with kpsdk.open(f"elf:{path}") as s:
        s.kretprobe("fact")(lambda ri, regs: None)
        s.run(timeout=10)
        added = {sym.name for sym in s.symbols} - before
    assert added  # the session's own names (its trampolines), in its table
    assert {sym.name for sym in load_elf(path).symbols} == before
