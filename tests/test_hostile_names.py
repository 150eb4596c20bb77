"""Hostile symbol names (issue 36, item 12): an ELF whose ``.strtab`` names functions with a
newline, a tab, ``]`` and an ESC sequence (a terminal title change, OSC 0).  Every writer and
the CLI's listings show such a name escaped (:func:`kpsdk.binfmt.symbols.shown_name`): no
record splits in two, no control character reaches the terminal or a file, and trace.dat's
kallsyms table keeps one name a line, one word each.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk import fixtures
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.binfmt.symbols import Symbol, SymbolTable, shown_name, unescaped_name
from kpsdk.cli import app
from tests.badfiles import ElfPatch

#: old name -> hostile name of the same length or shorter (patched in place in .strtab)
HOSTILE = {"put": "p\nt", "fact": "f\ta]", "try_escape": "\x1b]0;pwn\x07x"}
SHOWN = {"put": "p\\x0at", "fact": "f\\x09a]", "try_escape": "\\x1b]0;pwn\\x07x"}
#: any control character but the newline that ends a line (C0, DEL, C1)
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")

runner = CliRunner()


@pytest.fixture(scope="module")
def hostile_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    patch = ElfPatch(fixtures.path("x86_64").read_bytes())
    for old, new in HOSTILE.items():
        start = patch._strtab + patch.get("sym", patch.symbol_index(old), "st_name")
        assert len(new) <= len(old)
        patch.data[start:start + len(old)] = new.encode().ljust(len(old), b"\0")
    path = tmp_path_factory.mktemp("hostile") / "prog-x86_64.elf"
    path.write_bytes(bytes(patch.data))
    path.chmod(0o755)
    return path


def _addr(elf: Path, name: str) -> int:
    return load_elf(elf).symbols.get(HOSTILE[name]).address


def _defs(elf: Path) -> list[str]:
    return ["-e", f"p:e1 {_addr(elf, 'put'):#x}", "-e", f"r:e2 {_addr(elf, 'fact'):#x}",
            "-e", f"p:e3 {_addr(elf, 'try_escape'):#x}"]


def test_the_helper_escapes_what_is_not_printable() -> None:
    for old, new in HOSTILE.items():
        assert shown_name(new) == SHOWN[old] and unescaped_name(SHOWN[old]) == new
    assert shown_name("do_sys_openat2") == "do_sys_openat2"
    assert shown_name("caf\u00e9 x") == "caf\u00e9 x" and shown_name("a b", blanks=True) == "a\\x20b"
    assert shown_name("a\\x0ab") == "a\\\\x0ab" and unescaped_name("a\\\\x0ab") == "a\\x0ab"
    assert shown_name("x\u202ey\u2028") == "x\\u202ey\\u2028"
    table = SymbolTable([Symbol("p\nt", 0x1000, 0x10, "func")])
    assert table.format(0x1004) == "p\\x0at+0x4" and table.get("p\\x0at").address == 0x1000


def test_text_records_stay_one_line_each(hostile_elf: Path) -> None:
    result = runner.invoke(app, ["trace", str(hostile_elf), *_defs(hostile_elf), "--no-prefix"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines and all(re.match(r"e[123]: \(", line) for line in lines), lines
    assert not CONTROL.search(result.stdout)
    assert "e1: (p\\x0at+0x0/" in result.stdout
    assert re.search(r"e2: \(main\+0x[0-9a-f]+/0x[0-9a-f]+ <- f\\x09a\]\)", result.stdout), result.stdout
    assert "e3: (\\x1b]0;pwn\\x07x+0x0/" in result.stdout


def test_stacks_and_prefixed_lines(hostile_elf: Path) -> None:
    result = runner.invoke(app, ["trace", str(hostile_elf), *_defs(hostile_elf), "--stack"])
    assert result.exit_code == 0, result.output
    assert not CONTROL.search(result.stdout)
    body = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert all(line.startswith(" => ") or re.match(r"\s*\S+-\d+\s+\[\d{3}\] ", line) for line in body), body
    assert " => f\\x09a]+0x" in result.stdout  # fact's recursion: its frames name it escaped


def test_jsonl_and_perfetto_hold_the_escaped_names(hostile_elf: Path, tmp_path: Path) -> None:
    for fmt in ("jsonl", "perfetto"):
        out = tmp_path / fmt
        result = runner.invoke(app, ["trace", str(hostile_elf), *_defs(hostile_elf), "-o", fmt, "--out", str(out)])
        assert result.exit_code == 0, result.output
        text = out.read_text()
        assert "\\\\x0a" in text and "p\\n" not in text  # the shown name, JSON-encoded: p\\x0at
        if fmt == "jsonl":
            assert all(json.loads(line) for line in text.splitlines())
        else:
            json.loads(text)


def test_trace_dat_kallsyms_keep_one_word_a_line(hostile_elf: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.dat"
    result = runner.invoke(app, ["trace", str(hostile_elf), *_defs(hostile_elf), "-o", "trace-dat", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    lines = re.findall(rb"\n?([0-9a-f]{16}) T ([^\n]*)\n", data)
    names = {name.decode() for _, name in lines}
    assert {"p\\x0at", "\\x1b]0;pwn\\x07x", "f\\x09a]"} <= names, names
    assert all(re.fullmatch(r"\S+", name) and not CONTROL.search(name) for name in names), names
    assert b"p\nt" not in data and b"\x1b]0" not in data


def test_kpsdk_list_shows_them_escaped(hostile_elf: Path) -> None:
    result = runner.invoke(app, ["list", str(hostile_elf)])
    assert result.exit_code == 0, result.output
    assert not CONTROL.search(result.stdout)
    for shown in ("p\\x0at", "f\\x09a]", "\\x1b]0;pwn\\x07x"):
        assert shown in result.stdout, result.stdout


def test_a_kernel_symbol_list_is_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / "System.map").write_text("ffffffff81000000 T start\nffffffff81000010 T bad\x1b[31mred\n"
                                         "ffffffff81000020 T end\n")
    result = runner.invoke(app, ["list", str(tmp_path / "System.map")])
    assert result.exit_code == 0, result.output
    assert "bad\\x1b[31mred" in result.stdout and not CONTROL.search(result.stdout)
