"""kpsdk's DWARF values and CFI backtraces against gdb's, at the same breakpoint stops.

The program runs under gdb (natively on x86_64; under ``qemu-<arch> -g`` and gdb-multiarch
elsewhere).  At every stop (each function's probe address and the first address of each of
its probeable lines), tests/dwarf_gdbcheck.py asks gdb for every variable kpsdk has in scope,
flattened to its scalars (``buf.fl.mode``, ``buf.grid[1][2]``), and evaluates the same paths
with kpsdk from the registers and memory gdb reports there; it also unwinds the stack with
kpsdk's CFI unwinder and takes gdb's ``bt`` (its physical frames).

Goals: values equal on >= 99% of the reads gdb does not call optimized out; backtraces equal
frame for frame (gdb stops at ``main``: kpsdk's walk must agree up to there).  Excluded from
the count, as gdb itself has no value there: pointers gdb calls ``<synthetic pointer>``
(``DW_OP_implicit_pointer``: the object was never in memory).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from kpsdk.binfmt.dwarf import DebugInfo, function_lines, probe_address
from tests.dwarfcorpus import FIXTURE_FUNCTIONS, TOOLCHAINS, Corpus, gdb_check, shared_corpus, split_debug


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return shared_corpus(tmp_path_factory)



def stops_of(program: Path, names: tuple[str, ...] | None = None) -> list[int]:
    """Each function's probe address and the first address of each of its lines."""
    dbg = DebugInfo.open(program)
    stops: set[int] = set()
    for name in names or tuple(dbg.function_names()):
        for fn in dbg.functions(name):
            stops.add(probe_address(dbg, fn))
            for addresses in function_lines(dbg, fn).values():
                stops.add(addresses[0])
    return sorted(stops)


def _same(theirs: Any, ours: Any) -> bool:
    if isinstance(theirs, float) and isinstance(ours, float):
        return theirs == ours or (math.isnan(theirs) and math.isnan(ours))
    return bool(theirs == ours)


def judge(result: dict[str, Any], min_reads: int = 100) -> tuple[int, int, list[str]]:
    """(equal reads, reads gdb has a value for, differences); asserts the backtraces."""
    reads = [v for v in result["values"] if v["gdb"] is not None and v["gdb"] != "synthetic"]
    equal = [v for v in reads if _same(v["gdb"], v["ours"])]
    diffs = [f"{v['pc']:#x} {v['function']} {v['path']}: gdb {v['gdb']}, kpsdk {v['ours']}"
             for v in reads if not _same(v["gdb"], v["ours"])]
    assert len(reads) >= min_reads, f"only {len(reads)} reads: {result['hits']} stops hit"
    bad = [u for u in result["unwinds"] if [pc for pc, _ in u["gdb"]] != u["ours"][:len(u["gdb"])]]
    assert result["unwinds"], "no stop was hit"
    assert not bad, "backtraces differ:\n" + "\n".join(map(str, bad[:5]))
    return len(equal), len(reads), diffs


@pytest.mark.parametrize(("arch", "opt"), [("x86_64", "0"), ("x86_64", "2"), ("arm", "2"), ("thumb", "2"),
                                           ("riscv64", "2"), ("riscv64", "0"), ("i386", "2"), ("ppc64", "2"),
                                           ("ppc64le", "2"), ("mips", "2"), ("mipsel", "2"), ("mips64el", "2"),
                                           ("aarch64", "2"), ("aarch64", "0")])
def test_fixture_values_and_backtraces_equal_gdbs(corpus: Corpus, tmp_path: Path, arch: str, opt: str) -> None:
    program = corpus.fixture(arch, opt)
    result = gdb_check(TOOLCHAINS[arch], program, stops_of(program, FIXTURE_FUNCTIONS), tmp_path)
    equal, total, diffs = judge(result)
    print(f"{arch} -O{opt}: {equal}/{total} values equal gdb's, {len(result['unwinds'])} backtraces equal")
    assert equal / total >= 0.99, "\n".join(diffs)


def test_stripped_program_with_a_debug_file(corpus: Corpus, tmp_path: Path) -> None:
    """objcopy --only-keep-debug + --add-gnu-debuglink: kpsdk finds the debug file by its link
    (and CRC) beside the stripped program, and answers as with the original."""
    program = corpus.fixture("x86_64", "2")
    copy = tmp_path / "prog"
    copy.write_bytes(program.read_bytes())
    copy.chmod(0o755)
    stripped, debug = split_debug(copy)
    dbg = DebugInfo.open(stripped)
    assert dbg.debug.separate and dbg.debug.path == debug
    result = gdb_check(TOOLCHAINS["x86_64"], stripped, stops_of(program, FIXTURE_FUNCTIONS), tmp_path)
    equal, total, diffs = judge(result)
    assert equal / total >= 0.99, "\n".join(diffs)


def test_backtraces_through_libc(corpus: Corpus, tmp_path: Path) -> None:
    """Stops inside the C library (its .eh_frame, at its load bias) unwind to main as gdb's do."""
    program = corpus.fixture("x86_64", "2")
    result = gdb_check(TOOLCHAINS["x86_64"], program, [], tmp_path, library_breaks=("printf", "write"))
    inside = [u for u in result["unwinds"] if u["library"]]
    assert inside, result
    for u in inside:
        # gdb's walk goes on past _start into whatever the stack holds (0x1, an argv pointer):
        # the CFI of _start marks its return address undefined, where kpsdk stops
        names = [name for _, name in u["gdb"]]
        theirs = [pc for pc, _ in u["gdb"]][:names.index("_start") + 1 if "_start" in names else None]
        assert u["ours"][:len(theirs)] == theirs
    assert any("main" in [name for _, name in u["gdb"]] or "__libc_start_call_main" in [n for _, n in u["gdb"]]
               for u in inside)


def test_lz4_values_and_backtraces_equal_gdbs(corpus: Corpus, tmp_path: Path) -> None:
    """A real project at -O2: LZ4's functions the driver calls, at their entries and lines."""
    program = corpus.lz4("x86_64", "2")
    names = ("main", "LZ4_compress_default", "LZ4_compress_fast", "LZ4_compress_HC", "LZ4_decompress_safe",
             "LZ4F_compressFrame", "LZ4F_compressFrame_usingCDict", "LZ4HC_compress_generic_noDictCtx",
             "LZ4_compress_fast_extState", "XXH32", "LZ4F_compressBegin_usingCDict", "LZ4F_compressUpdate")
    result = gdb_check(TOOLCHAINS["x86_64"], program, stops_of(program, names), tmp_path)
    equal, total, diffs = judge(result)
    print(f"lz4 -O2: {equal}/{total} values equal gdb's, {len(result['unwinds'])} backtraces equal")
    assert equal / total >= 0.99, "\n".join(diffs[:20])
