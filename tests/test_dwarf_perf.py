"""kpsdk's DWARF answers against ``perf probe``'s, on the corpus (tests/dwarfcorpus.py).

- ``-V FUNC``: at every probe point perf reports for every function of the program, the
  variables kpsdk lists there (:func:`kpsdk.binfmt.dwarf.probepoints.perf_variables`) must be
  perf's (as sets of (type, name): perf prints a name twice in rare cases).  Goal: >= 95% of
  the points equal; measured on the fixture for every architecture and on LZ4 (x86_64,
  ``-O0`` and ``-O2``).
- ``-L FUNC``: the probeable lines of each function, on unoptimized builds (where perf's
  answer is exact; at ``-O2`` perf's ``-L`` loses lines that have code, as for the fixture's
  ``use_inline``, whose lines 104-106 have statement rows it does not list).

The differences that remain are explained where they are allowed (:data:`KNOWN_V`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kpsdk.binfmt.dwarf import DebugInfo, probeable_lines
from kpsdk.binfmt.dwarf.probepoints import perf_variables, resolve_points
from kpsdk.errors import DebugInfoError
from tests.dwarfcorpus import TOOLCHAINS, Corpus, perf_lines, perf_vars_many, shared_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return shared_corpus(tmp_path_factory)


#: (function, perf's probe point) -> why kpsdk differs there
KNOWN_V = {
    ("LZ4HC_compress_generic_internal", "@<LZ4HC_compress_generic_noDictCtx+0>"):
        "an inlined copy whose only range is empty ([a, a)): perf lists cLevel there from a location-list "
        "entry kpsdk does not see as covering the pc (no code is there to probe)",
}


def compare_vars(program: Path) -> tuple[int, int, list[str]]:
    """(points equal, points compared, differences) over every function of ``program``."""
    dbg = DebugInfo.open(program)
    equal = total = 0
    diffs = []
    names = dbg.function_names()
    all_theirs = perf_vars_many(program, names)
    for name in names:
        theirs = all_theirs.get(name)
        if theirs is None:
            continue  # perf found no probe point (and said why on stderr): nothing to compare
        try:
            points = resolve_points(dbg, name, with_variables=False)
        except DebugInfoError as e:
            diffs.append(f"{name}: {e}")
            total += len(theirs)
            continue
        ours = {f"@<{p.where}>": set(perf_variables(dbg, p)) for p in points}
        # perf sometimes names a point after another function, with its offset cut to 16 bits
        # (SQLite: a copy inlined in sqlite3Pragma shown as @<sqlite3Update.constprop.0+8219>):
        # the points no name matches are paired in order (both in DIE order)
        by_die = [f"@<{p.where}>" for p in sorted(points, key=lambda p: p.function.die)]
        unmatched_ours = [w for w in by_die if w not in theirs]
        unmatched_theirs = [w for w in theirs if w not in ours]
        pairs: dict[str, str] = {}
        if len(unmatched_ours) == len(unmatched_theirs):
            pairs = dict(zip(unmatched_theirs, unmatched_ours, strict=True))
        for where, listed in theirs.items():
            total += 1
            mine = ours.get(where, ours.get(pairs.get(where, ""), {("(no point)", "")}))
            if mine == set(listed) or (name, where) in KNOWN_V:
                equal += 1
            else:
                diffs.append(f"{name} {where}: perf {sorted(listed)}, kpsdk {sorted(mine)}")
    return equal, total, diffs


#: arches perf probe cannot answer for on this host: perf 6.1 has no DWARF register table for MIPS
#: ("Failed to get call frame", then "Failed to find the address of main"); gdb judges them instead
#: (tests/test_dwarf_gdb.py)
PERF_CANNOT = frozenset({"mips", "mipsel", "mips64el"})


@pytest.mark.parametrize("arch", sorted(set(TOOLCHAINS) - PERF_CANNOT))
@pytest.mark.parametrize("opt", ["0", "2"])
def test_fixture_variables_equal_perfs(corpus: Corpus, arch: str, opt: str) -> None:
    equal, total, diffs = compare_vars(corpus.fixture(arch, opt))
    assert total >= 9
    assert equal == total, "\n".join(diffs)


@pytest.mark.parametrize("opt", ["0", "2"])
def test_fixture_dwarf4_variables_equal_perfs(corpus: Corpus, opt: str) -> None:
    equal, total, diffs = compare_vars(corpus.fixture("x86_64", opt, "4"))
    assert equal == total, "\n".join(diffs)


@pytest.mark.parametrize("opt", ["0", "2"])
def test_lz4_variables_equal_perfs(corpus: Corpus, opt: str) -> None:
    """A real project: LZ4 (its 1,600 probe points at -O2, inlined copies included)."""
    equal, total, diffs = compare_vars(corpus.lz4("x86_64", opt))
    print(f"lz4 -O{opt}: perf -V equal at {equal}/{total} points")
    assert total > 500
    assert equal / total >= 0.95, "\n".join(diffs[:20])
    assert not diffs, "\n".join(diffs[:20])


def compare_lines(program: Path, every: int = 1) -> tuple[int, int, list[str]]:
    """(functions equal, functions compared, differences), over every ``every``-th function."""
    dbg = DebugInfo.open(program)
    equal = total = 0
    diffs = []
    for name in dbg.function_names()[::every]:
        theirs = perf_lines(program, name)
        if theirs is None:
            continue
        copies = dbg.functions(name)
        fn = next((f for f in copies if not f.inlined), copies[0])
        total += 1
        ours = probeable_lines(dbg, fn)
        if ours == theirs:
            equal += 1
        else:
            diffs.append(f"{name}: perf {theirs}, kpsdk {ours}")
    return equal, total, diffs


@pytest.mark.parametrize("arch", ["x86_64", "arm", "riscv64", "ppc64le"])
def test_fixture_lines_equal_perfs(corpus: Corpus, arch: str) -> None:
    equal, total, diffs = compare_lines(corpus.fixture(arch, "0"))
    assert total >= 10
    assert equal == total, "\n".join(diffs)


def test_lz4_lines_equal_perfs(corpus: Corpus) -> None:
    """One function in three (perf -L reads the whole DWARF for each: 0.15 s a function)."""
    equal, total, diffs = compare_lines(corpus.lz4("x86_64", "0"), every=3)
    print(f"lz4 -O0: perf -L equal for {equal}/{total} functions")
    # two of LZ4's force-inlined helpers: perf keeps lines of code inlined from elsewhere that
    # kpsdk attributes to the inlined function (LZ4_compress_generic, LZ4HC_InsertAndGetWiderMatch)
    assert equal / total >= 0.99, "\n".join(diffs)


@pytest.mark.parametrize("opt", ["0", "2"])
def test_probe_addresses_equal_perf_definitions(corpus: Corpus, opt: str) -> None:
    """``perf probe -D 'FUNC VAR'``: the address perf puts a probe reading a variable on (past the
    prologue in unoptimized code) is :func:`probe_address`'s (x86_64: file offsets are the
    addresses in these programs)."""
    import re
    import subprocess

    from kpsdk.binfmt.dwarf import probe_address
    from tests.dwarfcorpus import perf

    program = corpus.fixture("x86_64", opt)
    dbg = DebugInfo.open(program)
    checked = 0
    for name in ("parse_line", "many_locals", "walk", "fact", "deep1", "main"):
        (fn,) = dbg.functions(name, inlined=False)
        variable = dbg.scope(fn.entry).variables[0].name
        r = subprocess.run([perf(), "probe", "-x", str(program), "-D", f"{name} {variable}"], capture_output=True,
                           text=True, timeout=60)
        m = re.search(r":0x([0-9a-f]+) ", r.stdout)
        assert m, r.stdout + r.stderr
        assert int(m.group(1), 16) == probe_address(dbg, fn), name
        checked += 1
    assert checked == 6
