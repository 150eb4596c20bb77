"""The DWARF reader's answers on the fixture (tests/programs/dwfix.c), its errors, and its files.

What gdb and perf judge wholesale (tests/test_dwarf_gdb.py, tests/test_dwarf_perf.py) is
checked here case by case: functions and inlined copies, types and their C names, bitfields in
both DWARF forms, member paths (static and evaluated), location expressions one operation at
a time, the errors a user meets (each naming what was wrong and what there is instead), the
separate debug file search, compressed sections, and the index cache.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import kpsdk.binfmt.dwarf.scan as scan_module
from kpsdk.arch_backends.x86 import X86_64
from kpsdk.binfmt.dwarf import (
    DebugInfo,
    DictCpu,
    InMemory,
    InRegister,
    MemoryStore,
    Sym,
    function_lines,
    lazy_lines,
    line_addresses,
    probe_address,
    relative_line,
)
from kpsdk.binfmt.dwarf.expr import Computed, Context, Implicit, OptimizedOut, Pieces, evaluate
from kpsdk.binfmt.dwarf.primitives import Numbers
from kpsdk.binfmt.dwarf.probepoints import format_variables, parse_point, resolve_points
from kpsdk.cache import PrivateStore
from kpsdk.errors import (
    MemberPathError,
    NoDebugInfoError,
    NoSuchFunctionError,
    NoSuchLineError,
    NotInScopeError,
    OptimizedOutError,
    SourceNotFoundError,
)
from tests.dwarfcorpus import FIXTURE, TOOLCHAINS, Corpus, build, shared_corpus, split_debug


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return shared_corpus(tmp_path_factory)


class FileCpu:
    """Registers from a dict, memory from the ELF file's loadable segments (the initial values of
    globals): enough to read file-scope variables without running anything."""

    def __init__(self, program: Path) -> None:
        from elftools.elf.elffile import ELFFile

        self.data = program.read_bytes()
        with program.open("rb") as f:
            self.segments = [(s["p_vaddr"], s["p_filesz"], s["p_offset"]) for s in ELFFile(f).iter_segments()
                             if s["p_type"] == "PT_LOAD"]

    def read_register(self, name: str) -> int:
        raise LookupError(name)

    def read_memory(self, address: int, size: int) -> bytes:
        for vaddr, filesz, offset in self.segments:
            if vaddr <= address and address + size <= vaddr + filesz:
                return self.data[offset + address - vaddr:offset + address - vaddr + size]
        raise LookupError(f"{address:#x} is not in the file")


@pytest.fixture(scope="module")
def o0(corpus: Corpus) -> DebugInfo:
    return DebugInfo.open(corpus.fixture("x86_64", "0"))


@pytest.fixture(scope="module")
def o2(corpus: Corpus) -> DebugInfo:
    return DebugInfo.open(corpus.fixture("x86_64", "2"))


# -- functions, lines ----------------------------------------------------------------------------


def test_functions_and_inlined_copies(o2: DebugInfo) -> None:
    (fact,) = o2.functions("fact")
    assert not fact.inlined and fact.file == str(FIXTURE) and fact.line == 58 and fact.external
    scale = o2.functions("scale")
    assert [(f.inlined, f.caller, f.call_line) for f in scale] == [(True, "use_inline", 105)]
    assert o2.function_at(scale[0].entry).name == "use_inline"
    assert [f.name for f in o2.inlined_at(scale[0].entry)] == ["scale"]
    with pytest.raises(NoSuchFunctionError, match="similar: fact"):
        o2.functions("fakt")


def test_probe_address_follows_perf(o0: DebugInfo, o2: DebugInfo) -> None:
    """Unoptimized code: past the prologue (the second line's address), where the parameters are
    in their stack slots; optimized code: the entry."""
    (fn0,) = o0.functions("parse_line")
    assert probe_address(o0, fn0) > fn0.entry
    assert probe_address(o0, fn0, with_variables=False) == fn0.entry
    (fn2,) = o2.functions("parse_line")
    assert probe_address(o2, fn2) == fn2.entry


def test_lines(o0: DebugInfo) -> None:
    (fn,) = o0.functions("parse_line")
    assert relative_line(o0, fn, 4) == line_addresses(o0, "dwfix.c", 69)[:1]
    assert line_addresses(o0, str(FIXTURE), 69) == line_addresses(o0, "programs/dwfix.c", 69)
    with pytest.raises(NoSuchLineError, match="probeable lines: 0, 2, 4"):
        relative_line(o0, fn, 3)  # "int i;" has no code
    with pytest.raises(NoSuchLineError, match="no such source file"):
        line_addresses(o0, "nosuch.c", 1)
    assert [n - fn.line for n in lazy_lines(o0, fn, "total +=*")] == [10]
    with pytest.raises(NoSuchLineError):
        lazy_lines(o0, fn, "*no such text*")
    assert [p.where for p in resolve_points(o0, "parse_line;if (buf->used*")] == \
        [p.where for p in resolve_points(o0, "parse_line:8")]


def test_a_lazy_pattern_without_its_source_says_where_it_looked(tmp_path: Path) -> None:
    source = tmp_path / "gone.c"
    source.write_text(FIXTURE.read_text())
    program = build(TOOLCHAINS["x86_64"], [source], tmp_path / "gone", "0")
    source.unlink()
    dbg = DebugInfo.open(program)
    (fn,) = dbg.functions("fact")
    with pytest.raises(SourceNotFoundError, match="gone.c"):
        lazy_lines(dbg, fn, "*return*")
    elsewhere = tmp_path / "src"
    elsewhere.mkdir()
    (elsewhere / "gone.c").write_text(FIXTURE.read_text())
    found = DebugInfo.open(program, source_dir=elsewhere)
    assert lazy_lines(found, found.functions("fact")[0], "return 1;")


def test_perf_point_syntax() -> None:
    assert parse_point("f:3").relline == 3
    assert parse_point("f@a.c;x*").pattern == "x*" and parse_point("f@a.c;x*").file == "a.c"
    assert parse_point("a.c:12").line == 12 and parse_point("f%return").is_return
    assert parse_point("f+0x10").offset == 16


def test_format_variables_prints_as_perf(o2: DebugInfo) -> None:
    assert format_variables(o2, "walk") == ("Available variables at walk\n\t@<walk+0>\n\t\tenum color\tcol\n"
                                            "\t\tstruct flags\tf\n\t\tstruct outer*\to\n\t\tunion word\tw\n")


# -- scopes, types, paths ----------------------------------------------------------------------------


def test_scope_and_its_errors(o2: DebugInfo) -> None:
    (fn,) = o2.functions("parse_line")
    scope = o2.scope(fn.entry)
    assert [(v.name, v.kind, v.available) for v in scope.variables] == [
        ("buf", "parameter", True), ("line", "parameter", True), ("len", "parameter", True),
        ("total", "local", False), ("i", "local", False)]
    with pytest.raises(NotInScopeError, match=r"no variable 'nope' in scope at parse_line\+0x0 .*in scope: i, total"):
        o2.locate(fn.entry, "nope")
    with pytest.raises(OptimizedOutError, match="'total' at parse_line"):
        o2.locate(fn.entry, "total")
    with pytest.raises(MemberPathError, match="column 6: 'struct buffer' has no member 'nope'; members: size, used"):
        o2.locate(fn.entry, "buf->nope")
    with pytest.raises(MemberPathError, match="use '->'"):
        o2.locate(fn.entry, "buf.size")
    with pytest.raises(MemberPathError, match="column 4"):
        o2.locate(fn.entry, "buf-size")
    with pytest.raises(NotInScopeError):
        o2.scope(0)


def test_static_locations_are_fetch_argument_forms(o0: DebugInfo, o2: DebugInfo) -> None:
    (fn,) = o2.functions("parse_line")
    assert o2.locate(fn.entry, "len").location == InRegister("rdx")
    size = o2.locate(fn.entry, "buf->size")
    assert size.location == InMemory(Sym("rdi", 0)) and size.type.c_name == "size_t"
    mode = o2.locate(fn.entry, "buf->fl.mode")
    assert (mode.location, mode.bit_size, mode.bit_offset) == (InMemory(Sym("rdi", 32)), 3, 1)
    assert o2.locate(fn.entry, "buf->data[3]").location == InMemory(Sym("rdi", 19))
    # unoptimized: the frame base is the CFA (rbp + 16 past the prologue): a stack slot, then a pointer in it
    (fn0,) = o0.functions("parse_line")
    at = probe_address(o0, fn0)
    # perf probe -D 'parse_line buf buf->used': buf=-24(%bp):u64 buf_used=+8(-24(%bp)):u64
    assert o0.locate(at, "buf").location == InMemory(Sym("rbp", -24))
    assert o0.locate(at, "buf->used").location == InMemory(Sym(Sym("rbp", -24), 8))


def test_types_and_their_c_names(o0: DebugInfo) -> None:
    (main,) = o0.functions("main")
    scope = o0.scope(main.entry)
    types = {v.name: v.type for v in scope.variables}
    assert types["argv"].c_name == "char **" and types["text"].c_name == "const char *"
    assert types["buf"].c_name == "struct buffer" and types["buf"].size == 72
    grid = types["buf"].member("grid")
    assert grid is not None and grid.type.c_name == "int [2][3]" and grid.type.dims == (2, 3)
    color = types["buf"].member("color")
    assert color is not None and color.type.enumerators == (("RED", 0), ("GREEN", 5), ("BLUE", 6))
    w = types["buf"].member("w")
    assert w is not None and w.type.kind == "union" and w.type.member_names() == ["u", "f", "bytes"]
    (many,) = o0.functions("many_locals")
    l7 = o0.scope(many.entry).lookup("l7")
    assert l7 is not None and l7.type.kind == "typedef" and l7.type.strip().c_name == "unsigned int"
    assert l7.type.perf_name == "u32" and types["text"].perf_name == "char*"


@pytest.mark.parametrize("dwarf", ["", "4"])
def test_globals_and_bitfields_read_from_the_file(corpus: Corpus, dwarf: str) -> None:
    """DWARF 5 says where a bitfield is with DW_AT_data_bit_offset, DWARF 4 (as GCC writes it)
    with DWARF 2's DW_AT_bit_offset from the storage unit's top: both read the same values."""
    program = corpus.fixture("x86_64", "0", dwarf)
    dbg = DebugInfo.open(program)
    cpu = FileCpu(program)
    assert {v.name for v in dbg.globals()} >= {"global_buf", "greeting", "counter", "sink"}
    value = dbg.global_value
    assert [int(value(f"global_buf.fl.{m}", cpu)) for m in ("ready", "mode", "delta")] == [1, 5, -3]
    assert str(value("global_buf.fl.tag", cpu)) == "122 'z'"
    assert str(value("global_buf.color", cpu)) == "GREEN"
    assert int(value("global_buf.grid[1][2]", cpu)) == 6 and int(value("global_buf.w.bytes[0]", cpu)) == 0x44
    assert value("global_buf.data", cpu).string() == b"abc"
    assert value("greeting", cpu).string() == b"hello"
    assert int(value("counter", cpu)) == 7
    buf = value("global_buf", cpu).members()
    assert int(buf["size"]) == 16 and int(buf["w"].members()["u"]) == 0x41424344
    with pytest.raises(NotInScopeError, match="global_buf"):
        value("nope", cpu)


# -- expressions -------------------------------------------------------------------------------------


def _ctx(registers: dict[str, int], memory: dict[int, bytes] | None = None) -> Context:
    mem = memory or {}

    def read(address: int, size: int) -> bytes:
        for base, data in mem.items():
            if base <= address and address + size <= base + len(data):
                return data[address - base:address - base + size]
        raise LookupError(address)

    assert X86_64.dwarf is not None
    return Context(DictCpu(registers, read), 8, Numbers(True), X86_64.dwarf.name, frame_base=lambda: 0x1000,
                   cfa=lambda: 0x2000, entry_value=lambda inner: 77)


@pytest.mark.parametrize(("expr", "want"), [
    ("55", InRegister("rdi")),                                        # DW_OP_reg5
    ("7708", InMemory(0x108)),                                        # breg7 8 (rsp = 0x100)
    ("9170", InMemory(0x1000 - 16)),                                  # fbreg -16
    ("9c", InMemory(0x2000)),                                         # call_frame_cfa
    ("0300100000000000009f", Computed(0x1000)),                       # addr; stack_value
    ("3435229f", Computed(9)),                                        # lit4 lit5 plus
    ("3a341c9f", Computed(6)),                                        # lit10 lit4 minus
    ("37321e9f", Computed(14)),                                       # lit7 lit2 mul
    ("0aff0f33249f", Computed(0xFFF << 3)),                           # const2u 0xfff; lit3; shl
    ("0811341b9f", Computed(4)),                                      # const1u 17; lit4; div
    ("11761f9f", Computed(10)),                                       # consts -10; neg
    ("3334299f", Computed(0)), ("33332e9f", Computed(0)),             # eq, ne
    ("312801003536" "9f", Computed(6)),                               # lit1; bra +1 (taken, over lit5); lit6
    ("3028010035" "9f", Computed(5)),                                 # lit0; bra +1 (not taken); lit5
    ("7700230806", InMemory(0x1234)),                                 # breg7 0; plus_uconst 8; deref
    ("9e0401020304", Implicit(b"\x01\x02\x03\x04")),                  # implicit_value 4
    ("a301559f", Computed(77)),                                       # entry_value(reg5); stack_value
    ("", OptimizedOut()),
    ("e0", OptimizedOut("a thread-local variable (TLS addresses are not resolved)")),
])
def test_expression_operations(expr: str, want: object) -> None:
    ctx = _ctx({"rsp": 0x100, "rdi": 5}, {0x108: (0x1234).to_bytes(8, "little")})
    assert evaluate(bytes.fromhex(expr), ctx) == want


def test_pieces_and_unreadable_registers() -> None:
    ctx = _ctx({"rdi": 1})
    loc = evaluate(bytes.fromhex("559304" "9304"), ctx)  # reg5 piece 4; (empty) piece 4
    assert isinstance(loc, Pieces) and loc.parts[0].location == InRegister("rdi") and loc.parts[1].location is None
    assert evaluate(bytes.fromhex("9011"), ctx) == InRegister("xmm0")  # regx 17: a name, read if the CPU can
    assert isinstance(evaluate(bytes.fromhex("9080019f"), ctx), OptimizedOut)  # regx 128: no such register


def test_the_cfa_at_an_entry_is_the_stack_pointer_plus_a_word(o2: DebugInfo) -> None:
    from kpsdk.binfmt.dwarf import SymbolicCpu

    (fn,) = o2.functions("fact")
    assert o2.frame_table.cfa(fn.entry, SymbolicCpu()) == Sym("rsp", 8)


# -- files ---------------------------------------------------------------------------------------------


def test_separate_debug_files_by_link_build_id_and_debug_dir(corpus: Corpus, tmp_path: Path) -> None:
    program = tmp_path / "prog"
    shutil.copy(corpus.fixture("x86_64", "2"), program)
    stripped, debug = split_debug(program)
    assert DebugInfo.open(stripped).debug.path == debug              # beside it, CRC checked
    # elsewhere, by build ID under a debug directory
    store = tmp_path / "debug"
    bid = DebugInfo.open(program).debug.build_id
    target = store / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    target.parent.mkdir(parents=True)
    debug.rename(target)
    moved = DebugInfo.open(stripped, debug_dir=store)
    assert moved.debug.path == target and moved.functions("fact")
    # nowhere: the error lists every place searched
    with pytest.raises(NoDebugInfoError) as info:
        DebugInfo.open(stripped)
    looked = "\n".join(info.value.looked)
    assert f"{stripped}: no .debug_info section" in looked and ".build-id" in looked and "prog.debug" in looked
    # a debug file that is not this one (its CRC differs) is named as such
    (tmp_path / "prog.debug").write_bytes(target.read_bytes() + b"x")
    with pytest.raises(NoDebugInfoError, match="CRC-32"):
        DebugInfo.open(stripped)


@pytest.mark.parametrize("how", ["zlib", "zlib-gnu"])
def test_compressed_debug_sections(corpus: Corpus, tmp_path: Path, how: str) -> None:
    """SHF_COMPRESSED sections (zlib) and the older .zdebug_* ones (zlib-gnu) read the same."""
    program = tmp_path / "prog"
    subprocess.run(["objcopy", f"--compress-debug-sections={how}", str(corpus.fixture("x86_64", "2")), str(program)],
                   check=True)
    plain, packed = DebugInfo.open(corpus.fixture("x86_64", "2")), DebugInfo.open(program)
    (fn,) = packed.functions("parse_line")
    assert [v.name for v in packed.scope(fn.entry).variables] == [v.name for v in plain.scope(fn.entry).variables]
    assert packed.locate(fn.entry, "buf->size").location == InMemory(Sym("rdi", 0))


def test_the_index_is_kept_by_build_id(corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    program = corpus.fixture("x86_64", "2")
    first = DebugInfo.open(program, store=PrivateStore("dwarf"))
    assert first.functions("fact")
    saved = list((tmp_path / "cache" / "dwarf").iterdir())
    assert [p.name for p in saved] == [f"{first.debug.build_id}.index"]

    def no_scan(self: object) -> None:
        raise AssertionError("the index was built again")

    monkeypatch.setattr(scan_module.Scanner, "run", no_scan)
    again = DebugInfo.open(program, store=PrivateStore("dwarf"))
    assert again.functions("fact") == first.functions("fact")
    # a damaged entry is ignored and the index built anew
    saved[0].write_bytes(saved[0].read_bytes()[:-10])
    monkeypatch.undo()
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    rebuilt = DebugInfo.open(program, store=PrivateStore("dwarf"))
    assert rebuilt.functions("fact") == first.functions("fact")
    memory = MemoryStore()
    assert DebugInfo.open(program, store=memory).index.functions
    assert list(memory.entries) == [f"{first.debug.build_id}.index"]


def test_split_dwarf_is_refused_by_name(tmp_path: Path) -> None:
    from kpsdk.errors import SplitDwarfError

    program = build(TOOLCHAINS["x86_64"], [FIXTURE], tmp_path / "split", "2", extra=("-gsplit-dwarf",))
    with pytest.raises(SplitDwarfError, match=".dwo"):
        DebugInfo.open(program).functions("main")


@pytest.mark.parametrize("seed", range(12))
def test_damaged_dwarf_is_a_format_error(corpus: Corpus, tmp_path: Path, seed: int) -> None:
    """Bytes of .debug_info, .debug_abbrev or .debug_line overwritten: every answer is either
    right or a DwarfFormatError naming the file, never another exception."""
    import random

    from elftools.elf.elffile import ELFFile

    from kpsdk.errors import DebugInfoError

    program = corpus.fixture("x86_64", "2")
    data = bytearray(program.read_bytes())
    with program.open("rb") as f:
        sections = {s.name: (s["sh_offset"], s["sh_size"]) for s in ELFFile(f).iter_sections()}
    rng = random.Random(seed)
    name = (".debug_info", ".debug_abbrev", ".debug_line", ".debug_loclists")[seed % 4]
    offset, size = sections[name]
    for _ in range(1 + seed):
        data[offset + rng.randrange(size)] = rng.randrange(256)
    damaged = tmp_path / "damaged"
    damaged.write_bytes(bytes(data))
    try:
        dbg = DebugInfo.open(damaged)
        for fn in dbg.functions("parse_line") + dbg.functions("main"):
            scope = dbg.scope(fn.entry)
            for var in scope.variables:
                assert var.type.c_name and (var.type.size is None or var.type.size >= 0)
            dbg.locate(fn.entry, "buf")
            lines = function_lines(dbg, fn)
            assert lines is not None
    except DebugInfoError:
        pass
