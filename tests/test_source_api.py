"""Source-level probing through kpsdk's API and CLI, on the corpus fixture (tests/programs/dwfix.c)
run in Unicorn: where probes go, what ``regs.var`` gives and says, separate debug files found
through ``debug_dir=``/``--debug-dir``, and what ``kpsdk probe`` prints.  The values themselves
are judged against gdb in tests/test_source_gdb.py, the translations against perf in
tests/test_source_perf.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk.binfmt.dwarf import DebugInfo
from kpsdk.binfmt.dwarf.values import ScalarValue
from kpsdk.cli import app
from kpsdk.probe import ProbeSet
from tests.dwarfcorpus import Corpus, shared_corpus, split_debug

runner = CliRunner()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return shared_corpus(tmp_path_factory)


def test_a_function_inlined_in_places_gets_a_probe_on_each_copy(corpus: Corpus) -> None:
    """LZ4_compress_HC: its out-of-line copy and the copies inlined in callers, one probe each."""
    program = corpus.lz4("x86_64", "2")
    dbg = DebugInfo.open(program)
    copies = dbg.functions("LZ4_compress_HC")
    assert len(copies) >= 2 and any(f.inlined for f in copies)
    s = kpsdk.open(f"elf:{program}", sysroot="/")
    seen: list[str] = []
    probes = s.kprobe("LZ4_compress_HC")(lambda p, regs: seen.append(s.symbols.format(regs.ip)) or 0)
    assert isinstance(probes, ProbeSet) and len(probes) == len({f.entry for f in copies})
    s.run(timeout=120)
    assert probes.hits == len(seen) > 0
    s.close()


def test_one_kprobe_goes_on_one_place(corpus: Corpus) -> None:
    """A line with code in two places: a Kprobe says where, the decorator puts one on each."""
    s = kpsdk.open(f"elf:{corpus.fixture('x86_64', '0')}", sysroot="/")
    with pytest.raises(kpsdk.KprobeError) as info:
        s.register_kprobe(kpsdk.Kprobe(symbol_name="parse_line:5"))
    assert info.value.errno == 22 and "parse_line+36" in str(info.value) and "parse_line+49" in str(info.value)
    probe = s.register_kprobe(kpsdk.Kprobe(symbol_name="parse_line:2"))  # one statement row: one address
    assert s.symbols.format(s.target.manager.point_of(probe).addr) == "parse_line+0x13"
    assert len(s.kprobe("parse_line:5")(lambda p, regs: 0)) == 2
    s.close()


def test_regs_var_reads_typed_values_and_says_what_is_not_there(corpus: Corpus) -> None:
    program = corpus.fixture("x86_64", "0")
    s = kpsdk.open(f"elf:{program}", sysroot="/")
    got: dict[str, Any] = {}

    @s.kprobe("parse_line:5")  # char c = line[i]: the loop's first statement
    def on_line(p: Any, regs: Any) -> int:
        if got:
            return 0
        length = regs.var("len")
        got.update(len=length, size=regs.var("buf->size"), line=regs.var("line").string(),
                   mode=regs.var("buf->fl.mode"), color=str(regs.var("buf->color")), fl=str(regs.var("buf->fl")),
                   params=sorted(regs.vars("$params")), cell=regs.var("buf->grid[1][2]"))
        with pytest.raises(kpsdk.NotInScopeError) as info:
            regs.var("lenght")
        got["in_scope"] = info.value.in_scope
        with pytest.raises(kpsdk.MemberPathError):
            regs.var("buf->nope")
        return 0

    s.run(timeout=60)
    s.close()
    assert isinstance(got["len"], ScalarValue) and got["len"] == 7 and got["len"].type.c_name == "int"
    assert got["len"] + 1 == 8 and f"{got['len']:#x}" == "0x7"
    assert got["size"] == 16 and got["size"].type.c_name == "size_t"
    assert got["line"] == b"a b c d"
    assert got["mode"] == 3 and got["color"] == "BLUE"
    assert got["fl"] == "{ready = 0, mode = 3, delta = -2, tag = 113 'q'}"
    assert got["params"] == ["buf", "len", "line"] and got["cell"] == 0
    assert {"len", "line", "buf", "c", "i", "total"} <= set(got["in_scope"])


def test_optimized_out_is_said_with_why(corpus: Corpus) -> None:
    program = corpus.fixture("x86_64", "2")
    s = kpsdk.open(f"elf:{program}", sysroot="/")
    errors: list[Exception] = []

    @s.kprobe("parse_line")
    def at_entry(p: Any, regs: Any) -> int:
        try:
            regs.var("total")
        except kpsdk.OptimizedOutError as e:
            errors.append(e)
        values = regs.vars()
        assert isinstance(values["total"], kpsdk.OptimizedOutError) and values["len"] == 7
        return 0

    s.run(timeout=60)
    s.close()
    assert errors and "no location at this pc" in str(errors[0]) and "parse_line+0x0" in str(errors[0])


def test_uprobe_by_source_and_a_separate_debug_file_in_debug_dir(corpus: Corpus, tmp_path: Path) -> None:
    """A stripped program whose debug file is not beside it: found in debug_dir= by build ID."""
    copy = tmp_path / "prog"
    shutil.copy(corpus.fixture("x86_64", "2"), copy)
    stripped, debug = split_debug(copy)
    store = tmp_path / "debug"
    build = DebugInfo.open(stripped).debug.build_id
    (store / ".build-id" / build[:2]).mkdir(parents=True)
    debug.rename(store / ".build-id" / build[:2] / f"{build[2:]}.debug")
    s = kpsdk.open(f"elf:{stripped}", sysroot="/", debug_dir=store)
    seen: list[int] = []
    s.uprobe(f"{stripped}:fact")(lambda p, regs: seen.append(int(regs.var("n"))) or 0)
    s.run(timeout=60)
    s.close()
    assert seen and seen[0] == 4  # main's fact(4)
    with pytest.raises(kpsdk.NoDebugInfoError):  # without it: no DWARF, said where it was looked for
        kpsdk.open(f"elf:{stripped}", sysroot="/").debug_info()


def test_cli_probe_prints_variables_and_stacks(corpus: Corpus) -> None:
    program = corpus.fixture("x86_64", "0")
    result = runner.invoke(app, ["probe", str(program), "--sysroot", "/", "--uprobe", "parse_line:5 c i line",
                                 "--kprobe", "fact n", "--stack", "--timeout", "60"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(" dwfix.c:70 c=97 'a' i=1 line=0x" in line and "a b c d" in line for line in lines), result.output
    assert any("fact+0x" in line and " n=4" in line for line in lines)
    assert any(line.strip().startswith("=> main+0x") for line in lines)


def test_cli_probe_refuses_a_point_with_no_code(corpus: Corpus) -> None:
    result = runner.invoke(app, ["probe", str(corpus.fixture("x86_64", "0")), "--sysroot", "/",
                                 "--kprobe", "parse_line:99 len", "--timeout", "30"])
    assert result.exit_code == 1 and "no code comes from this line" in result.output
