"""``kpsdk trace`` on live targets (qemu-user through gdb) and with uprobes (``PATH:OFFSET``).

ppc64 runs only under QEMU, so its values are checked here, against what the same program prints
under qemu-user without kpsdk.  Uprobe definitions name the file and a file offset computed from
the ELF program headers with pyelftools, as ``uprobe_events`` users compute them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.cli import app
from tests.conftest import QEMU, require_tool
from tests.test_trace_run import PUT_ARGS, qemu_lines

runner = CliRunner()


def need_live(arch: str) -> None:
    require_tool(QEMU[arch], "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")


def file_offset(path: Path, name: str) -> int:
    """A function's offset in its file: what a uprobe definition names (``PATH:OFFSET``)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        value = next(s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == name)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_filesz"]:
                return int(value - seg["p_vaddr"] + seg["p_offset"])
    raise AssertionError(name)


def by_event(lines: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        record = json.loads(line)
        if "schema" in record:  # the first line: what the lines are
            continue
        out.setdefault(record["event"], []).append(record)
    return out


def test_ppc64_values_under_qemu_user_match_the_program() -> None:
    need_live("ppc64")
    truth = qemu_lines("ppc64")
    name, value = PUT_ARGS["ppc64"]
    result = runner.invoke(app, [
        "trace", "qemu-user:ppc64", "--output", "jsonl",
        "-e", f"p:put put name=+0({name}):string v={value}:s32 c=+0({name}):char[2] lo=+0({name}):b4@0/8 "
              f"w=+0({name}):u16",
        "-e", "r:fact fact n=$arg1:s64 r=$retval:s64 neg=$retval:s8",
        "-e", "p:bump bump by=$arg1:s32 now=@counter:s32 comm=$comm"])
    assert result.exit_code == 0, result.output
    events = by_event(result.stdout.splitlines())
    puts = [r["fields"] for r in events["put"]]
    assert [(f["name"], f["v"]) for f in puts] == truth
    for f, (text, _) in zip(puts, truth, strict=True):
        raw = text.encode()
        assert f["c"] == list(raw[:2]) and f["lo"] == raw[0] & 0xF
        assert f["w"] == int.from_bytes(raw[:2], "big")  # big-endian
    assert [(r["fields"]["n"], r["fields"]["r"]) for r in events["fact"]] == [(1, 1), (2, 2), (3, 6), (4, 24),
                                                                            (5, 120)]
    assert events["fact"][-1]["fields"]["neg"] == 120 and events["fact"][-1]["func"] == "fact"
    assert [(r["fields"]["by"], r["fields"]["now"]) for r in events["bump"]] == [(1, 0), (2, 1), (39, 3)]
    assert {r["fields"]["comm"] for r in events["bump"]} == {"prog-ppc64.elf"}


def test_uprobe_events_in_unicorn() -> None:
    path = fixtures.path("x86_64")
    put, fact, sub = file_offset(path, "put"), file_offset(path, "fact"), file_offset(path, "sub")
    with kpsdk.open(f"elf:{path}") as s:
        trace = s.trace([f"p:uput {path}:{put:#x} name=+0(%di):string v=%si:s64",
                         f"r:ufact {path}:{fact:#x} n=$arg1:s64 r=$retval:s64",
                         f"p {path}:{sub:#x}%return $retval:s32"])
        assert s.run(timeout=20) == 0
    assert trace.events[0].definition.group == "uprobes"
    assert [(r.fields["name"], r.fields["v"]) for r in trace.records if r.event == "uput"] == qemu_lines("x86_64")
    assert [(r.fields["n"], r.fields["r"]) for r in trace.records if r.event == "ufact"] == [
        (1, 1), (2, 2), (3, 6), (4, 24), (5, 120)]
    # the kernel's default name for a uprobe: p_<file name up to its first . - or _>_<offset>
    assert [r.fields for r in trace.records if r.event == f"p_prog_{sub:#x}"] == [{"arg1": dict(qemu_lines(
        "x86_64"))["sub"]}]


def test_uprobe_and_count_on_qemu_user(tmp_path: Path) -> None:
    need_live("riscv64")
    path = fixtures.path("riscv64")
    put = file_offset(path, "put")
    defs = tmp_path / "defs"
    defs.write_text(f"p:uput {path}:{put:#x} name=+0(%a0):string v=%a1:s64\n")
    result = runner.invoke(app, ["trace", "qemu-user:riscv64", "-f", str(defs), "--count", "3", "--profile",
                                 "--no-prefix"])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("uput:")]
    assert lines == [f'uput: (put+0x0/0x72) name="{n}" v={v}' for n, v in qemu_lines("riscv64")[:3]]


def test_qemu_user_prefix_is_the_programs_comm_and_pid() -> None:
    """Under qemu-user the guest program is the QEMU process (its pid is the program's, as
    getpid() answers it): the prefix shows the file name as comm and that pid."""
    need_live("riscv64")
    path = fixtures.path("riscv64")
    s = kpsdk.open(f"qemu-user:{path}")
    try:
        t = s.trace(["p:put put v=%a1:s64", "r:fact fact r=$retval:s64"])
        s.run(timeout=60)
        pid = s.target.processes[0].pid
    finally:
        s.close()
    assert len(t.records) > 5
    assert {(r.comm, r.pid, r.cpu, r.flags) for r in t.records} == {(path.name[:15], pid, 0, ".....")}
    assert "thread id" in t.tasks_note
