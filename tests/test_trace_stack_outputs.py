"""Stack traces (``--stack``, ``stacktrace`` triggers) in the ``jsonl`` and ``perfetto`` outputs.

The ground truth is the fixture program's own code, read by each arch's ``objdump -d``:
``fact(5)`` recurses down to ``fact(1)``, so at the entry of ``fact(n)`` the stack is
``fact+0x0``, then ``5 - n`` return addresses after a call of ``fact`` inside ``fact``, one
after the call of ``fact`` in ``main``, and one after the call of ``main`` in ``_start``
(a return address is the instruction after its call).  Each format must carry those frames,
and the same ones as the text output's ``=>`` lines of the same run.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.trace.output import JSONL_SCHEMA, STACK_ARG
from tests.conftest import require_tool

runner = CliRunner()
#: per arch: its objdump, the Debian package with it, and the first argument's register
ARCHS = {
    "x86_64": ("objdump", "binutils", "%di"),
    "i386": ("i686-linux-gnu-objdump", "binutils-i686-linux-gnu", "+4($stack)"),
    "arm": ("arm-linux-gnueabihf-objdump", "binutils-arm-linux-gnueabihf", "%r0"),
    "thumb": ("arm-linux-gnueabihf-objdump", "binutils-arm-linux-gnueabihf", "%r0"),
    "riscv64": ("riscv64-linux-gnu-objdump", "binutils-riscv64-linux-gnu", "%a0"),
    "ppc64": ("powerpc64-linux-gnu-objdump", "binutils-powerpc64-linux-gnu", "%r3"),
    "aarch64": ("aarch64-linux-gnu-objdump", "binutils-aarch64-linux-gnu", "%x0"),
}
#: ``0000000000401202 <fact>:`` (ppc64's ELFv1 code symbols are ``.fact``)
LABEL = re.compile(r"^([0-9a-f]+) <\.?([\w.]+)>:$")
#: an instruction line: ``  401220:\te8 dd ff ff ff \tcall   401202 <fact>``
INSN = re.compile(r"^\s+([0-9a-f]+):\t")
CALLS = ("call", "bl", "blx", "jal")


def return_sites(path: Path, objdump: str, callee: str) -> set[str]:
    """``caller+0xoff`` of each instruction that follows a call of ``callee`` (its return address)."""
    text = subprocess.run([objdump, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    out: set[str] = set()
    function, start, pending = "", 0, False
    for line in text.splitlines():
        label = LABEL.match(line)
        if label:
            function, start, pending = label[2], int(label[1], 16), False
            continue
        insn = INSN.match(line)
        if not insn:
            continue
        if pending:
            out.add(f"{function}+{int(insn[1], 16) - start:#x}")
            pending = False
        words = line.split("\t")
        mnemonic = words[2].split()[0] if len(words) > 2 and words[2].split() else ""
        pending = mnemonic in CALLS and re.search(rf"<\.?{callee}>", line) is not None
    return out


def without_size(frame: str) -> str:
    return frame.rsplit("/", 1)[0]


def check_stack(frames: list[str], n: int, sites: dict[str, set[str]]) -> None:
    """``frames`` (innermost first) are fact(n)'s stack at its entry, as the program's code says."""
    names = [without_size(f) for f in frames]
    depth = 5 - n
    assert names[0] == "fact+0x0", frames
    assert len(names) == depth + 3, frames
    assert all(name in sites["fact"] and name.startswith("fact+") for name in names[1:1 + depth]), (frames, sites)
    assert names[1 + depth] in sites["fact"] and names[1 + depth].startswith("main+"), (frames, sites)
    assert names[2 + depth] in sites["main"] and names[2 + depth].startswith("_start+"), (frames, sites)


def text_stacks(text: str) -> list[list[str]]:
    """The frames of each ``<stack trace>`` entry of the text output."""
    out: list[list[str]] = []
    for line in text.splitlines():
        if line.endswith("<stack trace>"):
            out.append([])
        elif line.startswith(" => "):
            out[-1].append(line[4:])
    return out


@pytest.mark.parametrize("arch", list(ARCHS))
def test_jsonl_and_perfetto_carry_the_stack_the_code_makes(arch: str, tmp_path: Path) -> None:
    objdump, package, arg = ARCHS[arch]
    require_tool(objdump, package)
    path = fixtures.path(arch)
    sites = {callee: return_sites(path, objdump, callee) for callee in ("fact", "main")}
    assert sites["fact"] and sites["main"], sites
    definition = ["-e", f"p:f fact n={arg}:s32"]

    text = runner.invoke(app, ["trace", arch, *definition, "--stack", "--no-prefix"])
    jsonl = runner.invoke(app, ["trace", arch, *definition, "--stack", "-o", "jsonl"])
    out = tmp_path / "trace.json"
    perfetto = runner.invoke(app, ["trace", arch, *definition, "--stack", "-o", "perfetto", "--out", str(out)])
    for result in (text, jsonl, perfetto):
        assert result.exit_code == 0, result.output

    lines = [json.loads(line) for line in jsonl.stdout.splitlines()]
    for line in lines:
        jsonschema.validate(line, JSONL_SCHEMA)
    records = lines[1:]
    assert [r["fields"]["n"] for r in records] == [5, 4, 3, 2, 1]
    for record in records:
        check_stack(record["stack"], record["fields"]["n"], sites)
    # the same frames as the text's stack entries, sizes included
    assert [r["stack"] for r in records] == text_stacks(text.stdout)

    trace = json.loads(out.read_text())
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert [e["args"]["n"] for e in instants] == [5, 4, 3, 2, 1]
    for event, record in zip(instants, records, strict=True):
        assert event["args"][STACK_ARG] == record["stack"]
        assert frames_of(trace["stackFrames"], event["sf"]) == record["stack"]


def frames_of(table: dict[str, dict[str, Any]], node: str) -> list[str]:
    """A ``stackFrames`` node's frames, innermost first (following ``parent``)."""
    out = []
    at: str | None = node
    while at is not None:
        out.append(table[at]["name"])
        at = table[at].get("parent")
    return out


def test_perfetto_slices_carry_the_entry_and_the_return_stacks(tmp_path: Path) -> None:
    """A slice starts with its entry's stack (``sf``) and ends with the return's (``esf``): at the
    return, the stack is the caller's, the frame the return address names first."""
    objdump, package, _ = ARCHS["x86_64"]
    require_tool(objdump, package)
    sites = return_sites(fixtures.path("x86_64"), objdump, "fact")
    out = tmp_path / "trace.json"
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact n=%di:s64", "-e", "r:fr fact", "--stack",
                                 "-o", "perfetto", "--out", str(out)])
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [s["args"]["entry"]["n"] for s in slices] == [5, 4, 3, 2, 1]
    for s in slices:
        entry = frames_of(trace["stackFrames"], s["sf"])
        assert entry == s["args"]["entry"][STACK_ARG]
        check_stack(entry, s["args"]["entry"]["n"], {"fact": sites, "main": return_sites(
            fixtures.path("x86_64"), objdump, "main")})
        end = frames_of(trace["stackFrames"], s["esf"])
        assert end == s["args"]["return"][STACK_ARG] == entry[1:]  # back in the caller: the entry's frames but fact+0x0
        assert without_size(end[0]) == without_size(s["args"]["return"]["caller"])


def test_records_without_a_stack_say_null_and_add_no_table(tmp_path: Path) -> None:
    jsonl = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact", "-o", "jsonl"])
    out = tmp_path / "trace.json"
    perfetto = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact", "-o", "perfetto", "--out", str(out)])
    assert jsonl.exit_code == perfetto.exit_code == 0, jsonl.output + perfetto.output
    records = [json.loads(line) for line in jsonl.stdout.splitlines()][1:]
    assert len(records) == 5 and all(r["stack"] is None for r in records)
    trace = json.loads(out.read_text())
    assert "stackFrames" not in trace
    assert not any("sf" in e or STACK_ARG in e.get("args", {}) for e in trace["traceEvents"])


def test_a_stacktrace_trigger_stacks_only_the_hits_it_fires_on() -> None:
    jsonl = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact n=%di:s64", "--trigger", "f:stacktrace if n < 3",
                                "-o", "jsonl"])
    assert jsonl.exit_code == 0, jsonl.output
    records = [json.loads(line) for line in jsonl.stdout.splitlines()][1:]
    assert [(r["fields"]["n"], r["stack"] is not None) for r in records] == \
        [(5, False), (4, False), (3, False), (2, True), (1, True)]
