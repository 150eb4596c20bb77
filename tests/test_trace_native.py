"""Trace events run in C (kpsdk.fetchprog, the Unicorn target's native hook) give the Python path's records.

The Python path (the compiled closures of :mod:`kpsdk.trace.compile`, themselves checked
against the interpreter in tests/test_trace_compiled.py) is the reference: the same
definitions traced both ways, on every Unicorn arch, must give the same files, byte for byte
once the host's clock is taken out: text with and without the prefix, jsonl, perfetto, through
a list sink (records) and through the writers' own per-event paths (``sink=writer.write``, as
``kpsdk trace`` does).  The table covers registers, ``$argN``, ``$stackN``, dereference
chains, strings and string arrays, bitfields, signed and unsigned sizes, arrays, symbols,
``$comm``, immediates and faults; here too strings longer than the cap and strings that run
into unmapped memory, filters evaluated in C, a program with threads (the prefix's comm and
pid from the target's task_info), and the fallback without a C compiler.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.targets.unicorn import nativetrace
from kpsdk.targets.unicorn.layout import STACK_TOP
from kpsdk.trace import native as native_module
from kpsdk.trace.events import TraceRecord
from kpsdk.trace.output import WriterContext, make_writer
from tests.conftest import UNICORN_ARCHS, first_fixture, require_tool
from tests.test_trace_compiled import TIMES, definitions
from tests.test_trace_run import PUT_ARGS

FILTERS = [None, 'v > 100 && name ~ "f*"', "vs < 0 || c == 0x61", 'name == "add" || !(arr & 1)',
           'u != "sub" && lo >= 2', "n == 3"]
FORMATS = (("text", True), ("text", False), ("jsonl", True), ("perfetto", True))
#: where the extra strings go: in the stack's mapping, far below what the program uses
LONG_AT = STACK_TOP - 0x10000
#: a string whose NUL would be past the stack's end: reading it faults
EDGE_AT = STACK_TOP - 16
#: a string that is not UTF-8 (Python writes its line), and one with the characters text escapes
BAD_AT, ESCAPED_AT = LONG_AT - 64, LONG_AT - 32


def extra_definitions(arch: str) -> list[str]:
    name, _ = PUT_ARGS[arch]
    return [f"p:edges put long=@{LONG_AT:#x}:string edge=@{EDGE_AT:#x}:string w32=@{LONG_AT:#x}:x32 "
            f"nb=+0({name}):b1@7/8 s16=@{LONG_AT:#x}:s16",
            f"p:odd sum7 bad=@{BAD_AT:#x}:string esc=@{ESCAPED_AT:#x}:string a=$arg1:x16"]


def traced(arch: str, native: bool, filter_expr: str | None, writer_path: bool) -> tuple[dict[str, str], Any]:
    """Each format's file of one whole run; ``writer_path``: each format traced on its own run
    through the writer's ``write`` (the per-event path), else records written afterwards."""
    out: dict[str, str] = {}
    natives: Any = None
    runs: tuple[tuple[str | None, bool], ...] = FORMATS if writer_path else ((None, True),)
    for fmt, prefix in runs:
        records: list[TraceRecord] = []
        stream = io.StringIO()
        with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
            s.write_memory(LONG_AT, b"A" * 5000 + b"\0")
            s.write_memory(EDGE_AT, b"B" * 16)
            s.write_memory(BAD_AT, b"ok\xff\xc0\x80no\0")
            s.write_memory(ESCAPED_AT, b'q"\\\nz\xc3\xa9\0')
            context = WriterContext(target=arch, prefix=prefix, notes=("n",))
            writer = make_writer(fmt, stream, context) if fmt is not None else None
            trace = s.trace(definitions(arch) + extra_definitions(arch),
                            sink=writer.write if writer is not None else records, filter=filter_expr)
            natives = {e.name for e in trace.events if trace.native is not None and trace.native.is_native(e)}
            assert s.run(timeout=20) == 0
            s.call("fact", 4)
            if writer is not None:
                writer.close()
                out[f"{fmt}{'' if prefix else '-bare'}"] = stream.getvalue()
        if fmt is None:
            for name, prefix2 in FORMATS:
                stream = io.StringIO()
                w = make_writer(name, stream, WriterContext(target=arch, prefix=prefix2, notes=("n",)))
                for record in records:
                    w.write(record)
                w.close()
                out[f"{name}{'' if prefix2 else '-bare'}"] = stream.getvalue()
    return {k: TIMES.sub(lambda m: (m[1] or m[2]) + "0" + (m[3] or ""), v) for k, v in out.items()}, natives


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
@pytest.mark.parametrize("filter_expr", FILTERS)
def test_native_records_are_the_python_paths(arch: str, filter_expr: str | None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    native, which = traced(arch, True, filter_expr, writer_path=False)
    if filter_expr is None:
        assert {"put", "bump", "sum7", "loop", "edges", "odd"} <= which  # the p events run in C; fact returns in Python
    monkeypatch.setattr(native_module, "ENABLED", False)
    python, none = traced(arch, False, filter_expr, writer_path=False)
    assert none == set()
    assert native["jsonl"].count("\n") > 3
    for name, text in native.items():
        assert text == python[name], name


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_native_writer_paths_write_the_python_paths_bytes(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    native, _ = traced(arch, True, None, writer_path=True)
    monkeypatch.setattr(native_module, "ENABLED", False)
    python, _ = traced(arch, False, None, writer_path=True)
    for name, text in native.items():
        assert text == python[name], name
    assert '"long": "' + "A" * 4096 + '"' in native["jsonl"]  # cut at the cap, as the kernel's MAX_STRING_SIZE
    assert "edge=(fault)" in native["text"]
    assert 'bad="ok\ufffd\ufffd\ufffdno"' in native["text"] and 'esc="q\\"\\\\\\nz\u00e9"' in native["text"]


def test_without_a_compiler_every_event_keeps_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nativetrace, "_tried", True)
    monkeypatch.setattr(nativetrace, "_library", None)
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None)
    fallback, which = traced("x86_64", False, None, writer_path=False)
    assert which == set()
    monkeypatch.undo()
    native, _ = traced("x86_64", True, None, writer_path=False)
    assert fallback == native


def test_hits_profile_and_list_of_native_events() -> None:
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        trace = s.trace(["p:loop loop n=$arg1:u32"], filter="n > 1000000")
        assert "[OPTIMIZED]" in s.list()
        s.call("loop", 7)
        s.call("loop", 3)
        assert trace.events[0].hits == 2 and trace.counts["loop"] == 0  # hit, filtered out
        assert "loop" in trace.profile()
        trace.close()
        assert "loop" not in s.list()


@pytest.mark.parametrize("trigger", ["loop:stacktrace", "loop:hist:keys=n:vals=hitcount if n > 1",
                                     "loop:hist:keys=common_pid,n:name=shared"])
def test_a_trigger_c_does_not_count_moves_the_event_back_to_python(trigger: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        trace = s.trace(["p:loop loop n=$arg1:u32"], triggers=[trigger])
        assert trace.native is not None and not trace.native.is_native(trace.events[0])
        s.call("loop", 7)
        assert trace.counts["loop"] == 1


def task_lines(exe: Path, mode: str, events: list[str]) -> str:
    from kpsdk.trace.output import TextWriter

    stream = io.StringIO()
    writer = TextWriter(stream, prefix=True)
    with kpsdk.open(f"elf:{exe}", args=[mode]) as s:
        s.trace(events, sink=writer.write)
        assert s.run(timeout=300) == 0
    writer.close()
    return TIMES.sub(lambda m: (m[1] or m[2]) + "0" + (m[3] or ""), stream.getvalue())


@pytest.fixture(scope="module")
def tasks_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/tasks.c, static with -pthread, for x86_64."""
    fixture = first_fixture("x86_64")
    cc = fixture.compilers[0]
    require_tool(cc, fixture.libc_packages)
    exe = tmp_path_factory.mktemp("tasks") / "tasks"
    subprocess.run([cc, "-static", "-O1", "-pthread", "-o", str(exe),
                    str(Path(__file__).parent / "programs" / "tasks.c")], check=True, capture_output=True)
    return exe


def test_a_threaded_programs_prefix_is_its_tasks(tasks_exe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tasks.c's racy mode: four threads; each line's comm-pid is the thread's, as on the Python path."""
    events = ["p:racer racer who=$arg1:s64", "p:yield sched_yield"]
    native = task_lines(tasks_exe, "racy", events)
    monkeypatch.setattr(native_module, "ENABLED", False)
    python = task_lines(tasks_exe, "racy", events)
    assert native == python
    pids = {line.split("[")[0].strip() for line in native.splitlines() if not line.startswith("#")}
    assert len(pids) >= 4, pids  # the main thread's and each racer's


def test_fork_and_exec_keep_the_prefix_and_the_probes(tasks_exe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tasks.c's exec mode: a child forks and execs the program again; main's event fires in
    each process, the prefix the process's (the comm after exec), as on the Python path."""
    events = ["p:main main argc=$arg1:s32", "p:wait waitpid pid=$arg1:s32"]
    native = task_lines(tasks_exe, "exec", events)
    monkeypatch.setattr(native_module, "ENABLED", False)
    python = task_lines(tasks_exe, "exec", events)
    assert native == python
    assert native.count("main: (main+") == 2, native


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_kpsdk_trace_writes_the_python_paths_bytes(fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command itself (its sink is a writer behind the run's limits): the same file both ways."""
    from tests.test_trace_run import invoke

    def cli(out: Path) -> str:
        events = [a for d in definitions("riscv64") for a in ("-e", d)]
        result = invoke("riscv64", *events, "--output", fmt, "--out", str(out))
        assert result.exit_code == 0, result.output
        return TIMES.sub(lambda m: (m[1] or m[2]) + "0" + (m[3] or ""), out.read_text())

    native = cli(tmp_path / "native")
    monkeypatch.setattr(native_module, "ENABLED", False)
    assert native == cli(tmp_path / "python")
    assert native.count("put: (put+") >= 5 or native.count('"event": "put"') >= 5


HIST_TRIGGERS = ["inc:hist:keys=x:vals=hitcount:size=128", "loop:hist:keys=n.log2", "sum7:hist:keys=a,b:vals=c,g",
                 "bump:hist:keys=common_pid.execname:vals=by", "put:hist:keys=vs.buckets=2:vals=w:sort=w.descending",
                 "fact:hist:keys=n.log2:vals=ret", "odd:hist:keys=a.hex:vals=a"]


def hists(arch: str) -> tuple[str, set[str]]:
    """The hist files of the table's events (one trigger each) after a run and calls."""
    name, value = PUT_ARGS[arch]
    defs = [d for d in definitions(arch) if not d.startswith("p:put")] + [
        f"p:put put vs={value}:s8 w=+1({name}):u16", "p:inc inc x=$arg1:s32", "p:odd bump a=$arg1:s16"]
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        trace = s.trace(defs, sink=lambda record: None, triggers=HIST_TRIGGERS)
        counted = {e.name for e in trace.events
                   if trace.native is not None and trace.native.is_native(e) and e.triggers.hists}
        assert s.run(timeout=20) == 0
        s.call("loop", 300)  # 300 keys in a table of 128: dropped
        s.call("fact", 5)
        return trace.hist_text(), counted


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_hist_tables_counted_in_c_are_pythons(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    native, counted = hists(arch)
    assert {"inc", "loop", "sum7", "bump", "put", "odd"} <= counted  # fact is a return event: Python's
    monkeypatch.setattr(native_module, "ENABLED", False)
    python, _ = hists(arch)
    assert native == python
    assert "Dropped: 172" in native and "~ 2^" in native


def _libc_malloc_hist() -> tuple[str, int]:
    """The hist file of a hist trigger on libc's malloc in /bin/echo, and the records seen."""
    records: list[TraceRecord] = []
    with kpsdk.open("elf:/bin/echo", sysroot="/", args=["hi"]) as s:
        trace = s.trace(["p:m libc.so.6:malloc size=$arg1:u64"], sink=records.append,
                        triggers=["m:hist:keys=size.log2"])
        assert s.run(timeout=60) == 0
        return trace.hist_text(), len(records)


def test_a_hist_counted_in_c_keeps_the_hits_of_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event whose hits come through the hook path (a library's uprobe) while its trigger
    is counted in C: the table holds those hits (settling C's table wrote over them: Hits: 0)."""
    native, records = _libc_malloc_hist()
    monkeypatch.setattr(native_module, "ENABLED", False)
    python, python_records = _libc_malloc_hist()
    assert records == python_records > 0
    assert native == python
    assert f"Hits: {records}" in native


def test_kpsdk_trace_count_keeps_the_python_path(tmp_path: Path) -> None:
    """--count stops the run at the N-th record's hit: events stay on the Python path for it."""
    from tests.test_trace_run import invoke

    out = tmp_path / "out"
    result = invoke("x86_64", "-e", "p:inc inc x=$arg1:s32", "--count", "3", "--out", str(out), "--no-prefix")
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and [line.rsplit(" ", 1)[1] for line in lines] == ["x=0", "x=1", "x=2"]


def test_without_the_text_lines_helper_the_writers_path_writes_the_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Native records whose text lines C cannot format (textlines.c not built) go through the
    writer's per-event path: the same file."""
    from kpsdk.trace import nativetext

    native, _ = traced("riscv64", True, None, writer_path=True)
    monkeypatch.setattr(nativetext, "_tried", True)
    monkeypatch.setattr(nativetext, "_library", None)
    without, which = traced("riscv64", True, None, writer_path=True)
    assert "put" in which and without == native


def uprobe_and_later_events(native: bool) -> tuple[list[str], set[str]]:
    """A uprobe event and events added after a first run, two traces on one function: lines."""
    from tests.test_trace_live import file_offset

    path = fixtures.path("x86_64")
    put = file_offset(path, "put")
    out: list[Any] = []
    with kpsdk.open(f"elf:{path}") as s:
        one = s.trace([f"p:uput {path}:{put:#x} name=+0(%di):string v=%si:s64"], sink=out.append)
        two = s.trace(["p:also put v=%si:u8"], sink=out.append)
        assert s.run(timeout=20) == 0
        one.add("p:later inc x=%di:s32")
        s.call("loop", 3)
        which = {e.name for t in (one, two) for e in t.events if t.native is not None and t.native.is_native(e)}
    return [f"{r.event} {r.where} {r.fields} {r.comm}-{r.pid}" for r in out], which


def test_uprobes_later_events_and_two_traces_on_one_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same records; two traces' records reach their sinks a batch per trace (each in order)."""
    native, which = uprobe_and_later_events(True)
    assert which == {"uput", "also", "later"}
    monkeypatch.setattr(native_module, "ENABLED", False)
    python, _ = uprobe_and_later_events(False)
    assert sorted(native) == sorted(python) and len(native) > 10


def post_handler_into_native_point() -> tuple[int, list[int]]:
    """A post_handler on loop's call to inc (its step ends at inc, where a native event is)."""
    import capstone

    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        sym = s.symbols.get("loop")
        code = s.read_memory(sym.address, sym.size)
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        call = next(i.address for i in md.disasm(code, sym.address) if i.mnemonic == "call")
        posts: list[int] = []
        s.register_kprobe(kpsdk.Kprobe(addr=call, post_handler=lambda p, regs, flags: posts.append(int(regs.ip))))
        records: list[Any] = []
        s.trace(["p:inc inc x=%di:s32"], sink=records)
        s.call("loop", 5)
        return len(posts), [r.fields["x"] for r in records]


def test_a_step_that_ends_on_a_native_point_runs_its_post_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    native = post_handler_into_native_point()
    monkeypatch.setattr(native_module, "ENABLED", False)
    assert native == post_handler_into_native_point() == (5, [0, 1, 2, 3, 4])
