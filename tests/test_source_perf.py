"""perf probe's syntax in kpsdk, against ``perf probe`` itself (from Debian's ``linux-perf``).

- ``-D``: every definition of a set (each function with three of its variables, ``%return
  $retval``, ``$vars``, ``$params``, each probeable line as ``FUNC:N`` and ``FILE:LINE``, member
  paths, casts) translated by :func:`kpsdk.binfmt.dwarf.perfdefs.translate` must be the lines
  ``perf probe -x PROG -D`` prints, line for line, wherever perf prints some; where perf refuses
  a point (a line sharing its address with another), kpsdk must refuse it too.  The
  differences that remain are perf 6.1's mistakes, each recognised and counted apart
  (:func:`explained`): a bitfield's offset (perf prints DWARF 4's ``DW_AT_bit_offset``, counted
  from the most significant bit, where the kernel's ``b<w>@<o>/<s>`` counts from the least),
  and a variable whose location is a computation that starts with a register (perf reads the
  memory at the register, the first operation only; kpsdk says it cannot be a fetch argument).
- ``kpsdk list -V``/``-L`` and ``kpsdk trace --definition`` print what perf prints, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk.binfmt.dwarf import DebugInfo, function_lines
from kpsdk.binfmt.dwarf.perfdefs import translate
from kpsdk.cli import app
from kpsdk.errors import KpsdkError, NotStaticError
from tests.dwarfcorpus import FIXTURE_FUNCTIONS, Corpus, perf, shared_corpus

runner = CliRunner()
#: member paths and casts, on the fixture's parse_line (struct buffer *buf, const char *line, int len)
MEMBER_DEFINITIONS = (
    "parse_line buf->size buf->used:u32 line:string buf->data:string c=buf->data[2] buf->color buf->w.f",
    "parse_line buf->w.bytes[1] x=buf->fl.tag:u8 len:x n=len:s16 $comm",
    "ev=parse_line len", "grp:ev=parse_line%return $retval", "parse_line +8(%di):u64",
    "walk o->in.b o->name:string o->next col w.u f.tag",
    "main argc argv[0]:string", "fact n:x32", "parse_line buf->fl.mode buf->fl.delta buf->fl.ready",
)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return shared_corpus(tmp_path_factory)


def definitions(dbg: DebugInfo, functions: tuple[str, ...], lines: bool = True) -> list[str]:
    out = []
    for name in functions:
        copies = dbg.functions(name)
        fn = next((c for c in copies if not c.inlined), copies[0])
        names = list(dict.fromkeys(v.name for v in dbg.scope(fn.entry).variables))[:3]
        out += [f"{name} {' '.join(names)}", f"{name}%return $retval", f"{name} $vars", f"{name} $params"]
        if lines:
            for line in function_lines(dbg, fn):
                out += [f"{name}:{line - fn.line}", f"{os.path.basename(fn.file)}:{line}"]
    return out


def perf_definition(program: Path, definition: str) -> list[str] | None:
    """``perf probe -x PROGRAM -D DEFINITION``'s lines; None when perf refuses it."""
    r = subprocess.run([perf(), "probe", "-x", str(program), "-D", definition], capture_output=True, text=True,
                       timeout=120)
    lines = [line for line in r.stdout.splitlines() if line.startswith(("p:", "r:"))]
    return lines or None


def explained(theirs: list[str], ours: list[str] | Exception) -> str | None:
    """Why perf 6.1's lines differ from kpsdk's, when it is one of perf's known mistakes."""
    if isinstance(ours, NotStaticError):
        return "first operation only"  # perf reads memory at the register a computation starts with
    if isinstance(ours, list) and len(ours) == len(theirs) and all(
            _subsequence(b.split(), a.split()) for a, b in zip(theirs, ours, strict=True)) and ours != theirs and \
            all(len(a.split()) >= len(b.split()) for a, b in zip(theirs, ours, strict=True)) and \
            any(len(a.split()) > len(b.split()) for a, b in zip(theirs, ours, strict=True)):
        return "first operation only ($vars)"  # kpsdk leaves out what perf would read wrong
    if isinstance(ours, list) and len(ours) == len(theirs):
        for a, b in zip(theirs, ours, strict=True):
            wa, wb = a.split(), b.split()
            if len(wa) != len(wb):
                return None
            for x, y in zip(wa, wb, strict=True):
                if x != y and not (":b" in x and ":b" in y and x.split("@")[0] == y.split("@")[0]):
                    return None
        return "bitfield offset"
    return None


def _subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def compare(program: Path, defs: list[str]) -> tuple[int, int, dict[str, int], list[str]]:
    """(equal, compared, explained differences by kind, other differences)."""
    dbg = DebugInfo.open(program)
    equal = compared = 0
    known: dict[str, int] = {}
    diffs = []
    for definition in defs:
        theirs = perf_definition(program, definition)
        ours: list[str] | Exception
        try:
            ours = [str(line) for line in translate(dbg, definition, os.path.abspath(program))]
        except KpsdkError as e:
            ours = e
        if theirs is None:
            if isinstance(ours, list) and ours and (":" in definition.split()[0] and "%" not in definition):
                # perf refused a line kpsdk resolved: only a refusal kpsdk shares is right
                diffs.append(f"{definition}: perf refuses it, kpsdk gives {ours}")
            continue
        compared += 1
        if ours == theirs:
            equal += 1
            continue
        why = explained(theirs, ours)
        if why is not None:
            known[why] = known.get(why, 0) + 1
        else:
            diffs.append(f"{definition}\n  perf:  {theirs}\n  kpsdk: {ours}")
    return equal, compared, known, diffs


@pytest.mark.parametrize(("arch", "opt", "dwarf"), [("x86_64", "0", ""), ("x86_64", "2", ""), ("x86_64", "2", "4"),
                                                    ("x86_64", "0", "4")])
def test_definitions_equal_perfs(corpus: Corpus, arch: str, opt: str, dwarf: str) -> None:
    program = corpus.fixture(arch, opt, dwarf)
    dbg = DebugInfo.open(program)
    equal, compared, known, diffs = compare(program, definitions(dbg, FIXTURE_FUNCTIONS) + list(MEMBER_DEFINITIONS))
    print(f"{arch} -O{opt} {'DWARF ' + dwarf if dwarf else 'DWARF 5'}: perf -D equal for {equal}/{compared} "
          f"definitions; perf's mistakes: {known}")
    assert compared >= 60
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("arch", ["i386", "arm", "aarch64", "ppc64le"])
def test_other_arches_definitions_equal_perfs(corpus: Corpus, arch: str) -> None:
    """Function entries and member paths on the architectures perf 6.1 reads (its register names:
    ``%r0``, ``%x0``, ``%gpr3``, and i386's ``$stack`` for the stack pointer)."""
    program = corpus.fixture(arch, "2")
    dbg = DebugInfo.open(program)
    equal, compared, known, diffs = compare(program, definitions(dbg, FIXTURE_FUNCTIONS, lines=False)
                                            + list(MEMBER_DEFINITIONS[:3]))
    print(f"{arch} -O2: perf -D equal for {equal}/{compared}; perf's mistakes: {known}")
    assert compared >= 20
    assert not diffs, "\n".join(diffs)


def test_lz4_definitions_equal_perfs(corpus: Corpus) -> None:
    """A real project at -O2: every function LZ4's driver calls, with three variables each."""
    program = corpus.lz4("x86_64", "2")
    dbg = DebugInfo.open(program)
    names = ("LZ4_compress_default", "LZ4_compress_fast", "LZ4_compress_HC", "LZ4_decompress_safe",
             "LZ4F_compressFrame", "LZ4F_compressFrame_usingCDict", "LZ4_compress_fast_extState", "XXH32",
             "LZ4F_compressBegin_usingCDict", "LZ4F_compressUpdate", "main")
    equal, compared, known, diffs = compare(program, definitions(dbg, names, lines=False))
    print(f"lz4 -O2: perf -D equal for {equal}/{compared}; perf's mistakes: {known}")
    assert compared >= 30
    assert (equal + sum(known.values())) / compared >= 0.95, "\n".join(diffs)


# -- the commands ------------------------------------------------------------------------------------


def test_list_prints_what_perf_prints(corpus: Corpus) -> None:
    program = corpus.fixture("x86_64", "0")
    for option, perf_option, what in (("-V", "-V", "parse_line:5"), ("-V", "-V", "main"),
                                      ("-L", "-L", "parse_line"), ("-L", "-L", "fact")):
        ours = runner.invoke(app, ["list", str(program), option, what])
        theirs = subprocess.run([perf(), "probe", "-x", str(program), perf_option, what], capture_output=True,
                                text=True, timeout=120)
        assert ours.exit_code == 0, ours.output
        assert ours.output == theirs.stdout, (option, what)


def test_list_vars_lists_the_globals(corpus: Corpus) -> None:
    result = runner.invoke(app, ["list", str(corpus.fixture("x86_64", "0")), "--vars"])
    assert result.exit_code == 0, result.output
    assert "\t\tstruct buffer\tglobal_buf\n" in result.output and "\t\tint\tcounter\n" in result.output


def test_trace_definition_prints_what_perf_prints(corpus: Corpus) -> None:
    program = corpus.fixture("x86_64", "0")
    defs = ["parse_line:5 len buf->size line:string", "fact%return $retval", "main argc"]
    ours = runner.invoke(app, ["trace", "-x", str(program), "--definition", *[a for d in defs for a in ("-e", d)]])
    assert ours.exit_code == 0, ours.output
    theirs = [line for d in defs for line in perf_definition(Path(os.path.abspath(program)), d) or []]
    assert ours.output.splitlines() == theirs


def test_trace_runs_perf_definitions(corpus: Corpus) -> None:
    """The lines run: ftrace's format with perf's names (a point at two places gets perf's _1)."""
    program = corpus.fixture("x86_64", "0")
    result = runner.invoke(app, ["trace", str(program), "--sysroot", "/", "--no-prefix", "--duration", "60",
                                 "-e", "parse_line:5 len buf->size line:string", "-e", "fact%return $retval"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert 'parse_line_L5: (parse_line+0x24/0xc0) len=7 size=0x10 line_string="a b c d"' in lines
    assert any(line.startswith("parse_line_L5_1: (parse_line+0x31/0xc0) len=7") for line in lines)
    assert any(line.startswith("fact__return: (main+") and line.endswith("arg1=0x18") for line in lines)
