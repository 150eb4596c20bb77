"""``s.trace()`` and ``kpsdk trace`` on Unicorn, against ground truth on x86_64, i386, arm, thumb, riscv64.

The truth comes from outside kpsdk: what the fixture program prints when qemu-user runs it (the
``name=value`` lines, each a ``put(name, value)`` call), what its C source passes (``sub(3, 5)``
is -2, ``bump`` gets 1, 2, 39, ``sum7`` gets 1..7), and bytes and call sites read from the ELF file
itself with pyelftools and capstone.  Perfetto output is checked against a JSON schema written from
the Trace Event Format specification, as no trace processor installs here without downloading a
binary.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import capstone
import jsonschema
import pytest
from elftools.elf.elffile import ELFFile
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.trace.events import TraceRecord
from kpsdk.trace.hist import Histogram, bucket_label, log2_bucket
from kpsdk.trace.output import JSONL_SCHEMA, JSONL_VERSION
from tests.conftest import QEMU, UNICORN_ARCHS, require_tool

runner = CliRunner()

#: put(const char *name, long value)'s two arguments, as the kernel spells the registers.  i386: put
#: is a static function, and gcc passes a local function's arguments in eax/edx (regparm), as main's
#: code shows (mov eax, "add"; mov edx, result; call put)
PUT_ARGS = {"x86_64": ("%di", "%si"), "i386": ("%ax", "%dx"), "arm": ("%r0", "%r1"), "thumb": ("%r0", "%r1"),
            "riscv64": ("%a0", "%a1"), "ppc64": ("%r3", "%gpr4"), "ppc64le": ("%r3", "%gpr4"),
            "aarch64": ("%x0", "%x1")}


@functools.cache
def qemu_lines(arch: str) -> list[tuple[str, int]]:
    """What the program prints under qemu-user, without kpsdk: (name, value) per put() call."""
    qemu = require_tool(QEMU[arch], "qemu-user")
    done = subprocess.run([qemu, str(fixtures.path(arch))], capture_output=True, text=True, timeout=60, check=True)
    return [(k, int(v)) for k, v in (line.split("=") for line in done.stdout.splitlines())]


def elf_bytes(arch: str, addr: int, size: int) -> bytes:
    """Bytes of the ELF file at a virtual address (pyelftools, not kpsdk's loader)."""
    with open(fixtures.path(arch), "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= addr < seg["p_vaddr"] + seg["p_filesz"]:
                return seg.data()[addr - seg["p_vaddr"]:addr - seg["p_vaddr"] + size]
    raise AssertionError(f"{addr:#x} not in the file")


def return_addresses_of_calls(arch: str, caller: str, callee: str) -> list[int]:
    """Where each call to ``callee`` in ``caller`` returns to (x86; decoded from the file)."""
    with open(fixtures.path(arch), "rb") as f:
        elf = ELFFile(f)
        syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
    start, size, target = syms[caller]["st_value"], syms[caller]["st_size"], syms[callee]["st_value"]
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if arch == "x86_64" else capstone.CS_MODE_32)
    return [i.address + i.size for i in md.disasm(elf_bytes(arch, start, size), start)
            if i.mnemonic == "call" and i.op_str == hex(target)]


@pytest.fixture(params=UNICORN_ARCHS)
def tarch(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_strings_arrays_bitfields_signed_match_the_program_output(tarch: str) -> None:
    name, value = PUT_ARGS[tarch]
    truth = qemu_lines(tarch)
    with kpsdk.open(f"elf:{fixtures.path(tarch)}") as s:
        trace = s.trace(f"p:put put name=+0({name}):string v={value}:s32 first=+0({name}):char[3] "
                        f"lo=+0({name}):b4@0/8 hi=+0({name}):b4@4/8 c=+0({name}):s8 w=+1({name}):u16 comm=$comm")
        assert s.run(timeout=20) == 0
    got = [r.fields for r in trace.records]
    assert [(f["name"], f["v"]) for f in got] == truth
    for f, (text, _) in zip(got, truth, strict=True):
        raw = text.encode()
        assert f["first"] == list(raw[:3])
        assert (f["lo"], f["hi"]) == (raw[0] & 0xF, raw[0] >> 4)
        assert f["c"] == raw[0]  # ASCII: the same as signed
        assert f["w"] == int.from_bytes(raw[1:3], s.arch.endian)
        assert f["comm"] == fixtures.path(tarch).name[:15]  # task->comm: the file name, 15 characters


def test_return_values_signed_and_entry_args_at_the_return(tarch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(tarch)}") as s:
        trace = s.trace("r:subret sub ret=$retval:s32 u=$retval:u8 x=$retval:x32 a=$arg1:s32 b=$arg2:s32 "
                        "neg=$retval:s8")
        assert s.call("sub", 3, 5, restype="int") == -2
        assert s.call("sub", 7, 3, restype="int") == 4
    first, second = (r.fields for r in trace.records)
    assert first == {"ret": -2, "u": 254, "x": 0xFFFFFFFE, "a": 3, "b": 5, "neg": -2}  # sub(3, 5) is 3 - 5
    assert second == {"ret": 4, "u": 4, "x": 4, "a": 7, "b": 3, "neg": 4}
    assert all(r.kind == "r" and r.func == "sub" and r.duration is not None and r.duration >= 0
               for r in trace.records)


def test_arguments_memory_and_returns_over_a_whole_run(tarch: str) -> None:
    truth = dict(qemu_lines(tarch))
    with kpsdk.open(f"elf:{fixtures.path(tarch)}") as s:
        trace = s.trace([
            "p:bump bump by=$arg1:s32 before=@counter:s32",
            "r:fact fact n=$arg1:s64 ret=$retval:s64",
            "p:sum7 sum7 " + " ".join(f"{c}=$arg{i + 1}:s64" for i, c in enumerate("abcdefg")),
            "p:loop loop n=$arg1:u32",
        ])
        assert s.run(timeout=20) == 0
    by: dict[str, list[dict[str, Any]]] = {}
    for r in trace.records:
        by.setdefault(r.event, []).append(r.fields)
    assert [f["by"] for f in by["bump"]] == [1, 2, 39]  # main: bump(1); bump(2); bump(39)
    assert [f["before"] for f in by["bump"]] == [0, 1, 3]
    assert by["bump"][-1]["before"] + by["bump"][-1]["by"] == truth["counter"]
    assert [(f["n"], f["ret"]) for f in by["fact"]] == [(1, 1), (2, 2), (3, 6), (4, 24), (5, 120)]
    assert by["fact"][-1]["ret"] == truth["fact"]
    (args,) = by["sum7"]
    assert [args[c] for c in "abcdefg"] == [1, 2, 3, 4, 5, 6, 7]  # stack arguments on i386, x86_64, arm
    assert sum((i + 1) * args[c] for i, c in enumerate("abcdefg")) == truth["sum7"]
    assert by["loop"] == [{"n": 100}] and truth["loop"] == sum(i + 1 for i in range(100))
    assert [(e, h, m) for e, h, m in trace.profile_rows()] == [("bump", 3, 0), ("fact", 5, 0), ("sum7", 1, 0),
                                                               ("loop", 1, 0)]


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_stack_nested_dereference_and_symbol(arch: str) -> None:
    returns = return_addresses_of_calls(arch, "main", "add")
    assert len(returns) == 1
    ret = returns[0]
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        trace = s.trace("p:add add ra=$stack0 sym=$stack0:symbol code=+0(+0($stack)):u8 code4=+0(+0($stack)):x32 "
                        "sp=$stack")
        assert s.run(timeout=20) == 0
        main = s.symbols.get("main")
    (f,) = [r.fields for r in trace.records]
    assert f["ra"] == ret
    assert f["sym"] == f"main+{ret - main.address:#x}/{main.size:#x}"
    assert f["code"] == elf_bytes(arch, ret, 1)[0]
    assert f["code4"] == int.from_bytes(elf_bytes(arch, ret, 4), "little")


def test_filter_count_and_clear() -> None:
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        trace = s.trace(["p:put put name=+0(%di):string v=%si:s64", "p:bump bump by=%di:s32"],
                        filter="v > 100 && name ~ \"f*\"")
        assert s.run(timeout=20) == 0
    assert [(r.event, r.fields.get("name")) for r in trace.records] == [
        ("put", "fact"), ("bump", None), ("bump", None), ("bump", None)]  # bump has no v: not filtered
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        trace = s.trace(["p:a add", "p:b sub", "-:a"])
        assert [e.name for e in trace.events] == ["b"]
        s.trace("-:kprobes/b")
        assert trace.events == [] and s.list() == ""
        with pytest.raises(kpsdk.KprobeError):
            s.trace("-:nosuch")
        s.trace("p:a add")
        with pytest.raises(kpsdk.KpsdkError) as e:
            s.trace("p:a sub")
        assert e.value.code == "EVENT_EXIST"  # type: ignore[attr-defined]
        with pytest.raises(kpsdk.KpsdkError) as e:
            s.trace("p:c nosuchfn")
        assert e.value.code == "BAD_PROBE_ADDR"  # type: ignore[attr-defined]
        with pytest.raises(kpsdk.KpsdkError) as e:
            s.trace("p:d add x=@nosuchvar")
        assert (e.value.code, e.value.column) == ("BAD_MEM_ADDR", 10)  # type: ignore[attr-defined]


def test_counts_outlive_removed_events_and_the_events_do_not() -> None:
    """``Trace.counts`` keeps the records of events removed (``-:EVENT``, ``remove``) and closed;
    the trace holds no removed event (a long session that adds and removes events stays flat)."""
    import gc
    import weakref

    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        trace = s.trace("p:keep fact n=%di:s32")
        gone = []
        for _ in range(20):
            event, = trace.add("p:tmp add a=%di:s32")
            assert s.call("add", 2, 3) == 5
            gone.append(weakref.ref(event))
            trace.remove(event)
            del event
        assert s.call("fact", 3) == 6
        assert trace.counts == {"tmp": 20, "keep": 3}
        assert [e.name for e in trace.events] == ["keep"]
        gc.collect()
        assert all(ref() is None for ref in gone)
        trace.close()
        assert trace.counts == {"tmp": 20, "keep": 3} and trace.events == []


def test_all_or_nothing_registration() -> None:
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        before = s.list()
        with pytest.raises(kpsdk.KprobeError):
            s.trace(["p:a add", "p:b add+1"])  # add+1 is inside an instruction: EILSEQ
        assert s.list() == before


def test_comm_on_a_target_without_tasks_is_a_clear_error() -> None:
    with kpsdk.open("unicorn:x86_64") as s:
        with pytest.raises(kpsdk.KpsdkError) as e:
            s.trace("p 0x1000 c=$comm")
    assert "$comm" in str(e.value) and e.value.column == 11  # type: ignore[attr-defined]


# -- the command ------------------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["trace", *args])


def test_cli_text_is_the_ftrace_line_shape() -> None:
    result = invoke("riscv64", "-e", "p:put put name=+0(%a0):string v=%a1:s32", "-e", "r fact $retval:s64",
                    "-e", "p:fact fact n=%a0:u64 nn=%x10:s8", "--count", "5", "--no-prefix")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == 'put: (put+0x0/0x72) name="add" v=5'
    assert lines[1] == 'put: (put+0x0/0x72) name="sub" v=4'
    assert lines[2] == "fact: (fact+0x0/0x2a) n=5 nn=5"
    assert lines[3].startswith("fact: (fact+0x0/0x2a) n=4")
    assert len(lines) == 5  # --count 5


#: the kernel's trace line: "%16s-%-7d [%03d] FFFFF %5lu.%06lu: BODY" (kernel/trace/trace_output.c)
PREFIXED = re.compile(r"^ *(\S+)-(\d+) +\[(\d{3})\] (\S{5}) +(\d+\.\d{6}): (.*)$")


@pytest.mark.parametrize("extra", [[], ["--comm", "cat", "--pid", "85"]])
def test_cli_text_has_the_kernels_prefix_and_header(extra: list[str]) -> None:
    """The same bodies as --no-prefix, each after the task/CPU/flags/time prefix, below the
    kernel's header; Unicorn's task is the program's name and the pid its getpid() gives (1000:
    tests/test_linux_programs.py checks the two agree), or what --comm/--pid say."""
    events = ["-e", "p:put put name=+0(%a0):string v=%a1:s32", "-e", "r fact $retval:s64"]
    bare = invoke("riscv64", *events, "--no-prefix")
    result = invoke("riscv64", *events, *extra)
    assert bare.exit_code == 0 and result.exit_code == 0, result.output
    header = [line for line in result.stdout.splitlines() if line.startswith("#")]
    body = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert header[:2] == ["# tracer: nop", "#"]
    assert header[-2:] == ["#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION",
                           "#              | |         |   |||||     |         |"]
    assert any(line.startswith("# kpsdk: TIMESTAMP:") for line in header)
    matches = [PREFIXED.match(line) for line in body]
    assert all(matches), body
    assert [m[6] for m in matches if m] == bare.stdout.splitlines()
    comm, pid = (extra[1], extra[3]) if extra else (fixtures.path("riscv64").name[:15], "1000")
    assert {(m[1], m[2], m[3], m[4]) for m in matches if m} == {(comm, pid, "000", ".....")}
    assert all(line.index("[") == 25 for line in body)  # "%16s-%-7d ": the column the kernel's is at
    times = [float(m[5]) for m in matches if m]
    assert times == sorted(times)


def test_cli_returns_show_the_caller() -> None:
    result = invoke("x86_64", "-e", "r:subret sub $retval:s32", "--call", "sub 3 5", "--no-prefix")
    assert result.exit_code == 0, result.output
    # called by kpsdk: the return address is the sentinel in kpsdk's own area, outside every symbol
    assert result.stdout.startswith("subret: (0x") and result.stdout.endswith(" <- sub) arg1=-2\n")
    result = invoke("arm", "-e", "r fact $retval:s32", "--no-prefix")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("r_fact_0: (fact+0x") and " <- fact) arg1=1" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("r_fact_0: (main+0x") and result.stdout.endswith("arg1=120\n")


def test_cli_jsonl_filter_profile() -> None:
    result = invoke("thumb", "-e", "p:put put name=+0(%r0):string v=%r1:s32", "--filter", "v >= 42 && v < 5051",
                    "--output", "jsonl", "--profile")
    assert result.exit_code == 0, result.output
    head, *records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    for line in (head, *records):
        jsonschema.validate(line, JSONL_SCHEMA)
    assert head["schema"] == "kpsdk-trace" and head["version"] == JSONL_VERSION
    truth = [(n, v) for n, v in qemu_lines("thumb") if 42 <= v < 5051]
    assert [(r["fields"]["name"], r["fields"]["v"]) for r in records] == truth
    assert all(r["event"] == "put" and r["group"] == "kprobes" and r["kind"] == "p" for r in records)
    assert "kprobe_profile" in result.stderr and "put" in result.stderr and "10" in result.stderr


def test_cli_definition_error_shows_the_caret() -> None:
    result = invoke("x86_64", "-e", "p:add add a=%di b=$arg0")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "error: trace_kprobe: Invalid argument number" in result.stderr
    assert "  Command: p:add add a=%di b=$arg0\n" + " " * (len("  Command: ") + 18) + "^" in result.stderr


def test_cli_definitions_from_a_file_and_bad_options(tmp_path: Path) -> None:
    defs = tmp_path / "probes.txt"
    defs.write_text("# the entry and the return of fact\np:f fact n=$arg1:s64\nr:fr fact r=$retval:s64\n")
    result = invoke("i386", "-f", str(defs))
    assert result.exit_code == 0, result.output
    assert result.stdout.count("f: (fact+0x0/") == 5 and result.stdout.count("fr: (") == 5
    assert invoke("x86_64").exit_code == 2  # no definition
    assert invoke("x86_64", "-e", "p add", "--output", "xml").exit_code == 2
    assert invoke("x86_64", "-e", "p add", "--plot", "x.png").exit_code == 2  # --plot needs a histogram
    result = invoke("x86_64", "-e", "p add", "--filter", "a >")
    assert result.exit_code == 1 and "filter: a value expected" in result.stderr


def test_cli_hist_latency_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "h.png"
    result = invoke("x86_64", "-e", "p:put put v=%si:s64", "-e", "r fact", "--hist", "v", "--latency",
                    "--plot", str(png))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "@v[put]:" in out and "@latency_us[fact]:" in out
    # the values the program printed (5 4 120 140 42 5050 0 1 11 3), in log2 buckets
    rows = {line.split("|")[0].rsplit(None, 1)[0].strip(): int(line.split("|")[0].split()[-1])
            for line in out.split("@v[put]:")[1].split("@latency")[0].strip().splitlines()}
    assert rows == {"[0]": 1, "[1]": 1, "[2, 4)": 1, "[4, 8)": 2, "[8, 16)": 1, "[16, 32)": 0, "[32, 64)": 1,
                    "[64, 128)": 1, "[128, 256)": 1, "[256, 512)": 0, "[512, 1K)": 0, "[1K, 2K)": 0,
                    "[2K, 4K)": 0, "[4K, 8K)": 1}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_log2_buckets_as_bpftrace() -> None:
    assert [log2_bucket(v) for v in (-5, 0, 1, 2, 3, 4, 1023, 1024)] == [-1, 0, 1, 2, 2, 3, 10, 11]
    assert [bucket_label(b) for b in (-1, 0, 1, 2, 3, 11, 21)] == ["(..., 0)", "[0]", "[1]", "[2, 4)", "[4, 8)",
                                                                 "[1K, 2K)", "[1M, 2M)"]
    h = Histogram("@x")
    for v in (1, 2, 3, 8):
        h.add(v)
    assert h.render().splitlines()[1:] == [
        "[1]                        1 |" + "@" * 26 + " " * 26 + "|",
        "[2, 4)                     2 |" + "@" * 52 + "|",
        "[4, 8)                     0 |" + " " * 52 + "|",
        "[8, 16)                    1 |" + "@" * 26 + " " * 26 + "|",
    ]


# -- Perfetto ---------------------------------------------------------------------------------------

#: The Trace Event Format (the "Trace Event Format" document that chrome://tracing and Perfetto's JSON
#: importer follow): an object with traceEvents, each event with name, ph, pid, tid, ts (us); X needs
#: dur, i takes a scope s in g/p/t, M names a process or thread.
TRACE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "$defs": {
        "event": {
            "type": "object",
            "required": ["name", "ph", "pid", "tid"],
            "properties": {
                "name": {"type": "string"}, "cat": {"type": "string"},
                "ph": {"enum": ["B", "E", "X", "i", "I", "M", "C", "b", "e", "n", "s", "t", "f"]},
                "pid": {"type": "integer"}, "tid": {"type": "integer"},
                "ts": {"type": "number", "minimum": 0}, "dur": {"type": "number", "minimum": 0},
                "s": {"enum": ["g", "p", "t"]}, "args": {"type": "object"},
            },
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur"]}},
                {"if": {"properties": {"ph": {"enum": ["i", "I", "B", "E"]}}}, "then": {"required": ["ts"]}},
                {"if": {"properties": {"ph": {"const": "M"}}},
                 "then": {"properties": {"name": {"enum": ["process_name", "thread_name", "process_sort_index",
                                                           "thread_sort_index", "process_labels"]}},
                          "required": ["args"]}},
            ],
        },
    },
}


@pytest.mark.parametrize("entry_first", [True, False])
def test_perfetto_trace_is_valid_and_pairs_entries_with_returns(tmp_path: Path, entry_first: bool) -> None:
    """Entries pair with their returns whichever event was defined first (the newest
    probe's handler runs first at an address, K5, so the two orders differ)."""
    out = tmp_path / "trace.json"
    entry, ret = ["-e", "p:fact fact n=$arg1:s32"], ["-e", "r:factret fact r=$retval:s32"]
    result = invoke("arm", *(entry + ret if entry_first else ret + entry),
                    "-e", "p:bump bump by=$arg1:s32", "--output", "perfetto", "--out", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    jsonschema.validate(data, TRACE_EVENT_SCHEMA)
    events = data["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert [(e["name"], e["args"]["entry"]["n"], e["args"]["return"]["r"]) for e in slices] == [
        (("fact"), 5, 120), ("fact", 4, 24), ("fact", 3, 6), ("fact", 2, 2), ("fact", 1, 1)]  # sorted by start
    for outer, inner in zip(slices, slices[1:], strict=False):  # recursion: each call inside its caller
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    instants = [e for e in events if e["ph"] == "i"]
    assert [e["args"]["by"] for e in instants] == [1, 2, 39]
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)
    assert [e["ts"] for e in events if e["ph"] != "M"] == sorted(e["ts"] for e in events if e["ph"] != "M")


def test_records_as_dicts_are_json() -> None:
    r = TraceRecord("e", "kprobes", "r", 0.5, 0x10, "main+0x4/0x10 <- f", {"a": 1, "s": None, "l": [1, 2]},
                    caller=0x14, func="f", entry_time=0.25)
    assert json.loads(json.dumps(r.as_dict()))["duration"] == 0.25


def test_jsonl_keeps_64_bit_values_exact_and_every_key() -> None:
    """Hex-typed fields and addresses as "0x..." strings, u64/s64 beyond 2**53 as decimal strings
    (jq reads numbers as doubles), absent keys as null: checked against the text line's values."""
    defs = ["-e", "p:put put v=%si:s64 raw=%si big=%si:u64 neg=%si:s8 name=+0(%di):string c=+0(%di):char[2]",
            "-e", "r:fact fact r=$retval:u64"]
    jsonl = invoke("x86_64", *defs, "--output", "jsonl", "--call", "put 0 -1", "--count", "1")
    text = invoke("x86_64", *defs, "--call", "put 0 -1", "--count", "1", "--no-prefix")
    assert jsonl.exit_code == 0 and text.exit_code == 0, jsonl.output + text.output
    lines = [json.loads(line) for line in jsonl.stdout.splitlines()]
    for line in lines:
        jsonschema.validate(line, JSONL_SCHEMA)
    (record,) = lines[1:]
    values = dict(word.split("=", 1) for word in text.stdout.split(") ", 1)[1].split())
    f = record["fields"]
    assert f["raw"] == values["raw"] == "0xffffffffffffffff"      # x64: the text's hex
    assert f["big"] == values["big"] == str(2**64 - 1)             # beyond 2**53: a decimal string
    assert f["v"] == int(values["v"]) == -1 and f["neg"] == -1     # small: numbers
    assert f["name"] is None and values["name"] == "(fault)"       # address 0: a fault is null
    assert f["c"] is None and values["c"] == "(fault)"
    assert record["ip"] == hex(int(record["ip"], 16))
    assert record["caller"] is record["func"] is record["entry_time"] is record["duration"] is None  # a p event
