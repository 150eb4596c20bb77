"""Compiled fetch arguments give what the interpreter gives, hit by hit, on every Unicorn arch.

:mod:`kpsdk.trace.compile` turns each fetch argument into closures once; the
interpreter (:meth:`BoundArg.interpret`, which reads strings in 64-byte pieces
through ``read_memory`` as kpsdk always did) walks the tree at each hit.  Here
every argument of a broad table (registers, ``$argN``, ``$stackN``, nested
``+OFF(...)`` dereferences, ``@SYM``, strings, symbols, hex and signed sizes,
bitfields, arrays, ``$comm``, ``$retval``, immediates, faults) is evaluated both
ways on the same hit, and the records of whole runs are written by each output
format with either evaluation: the files must be the same bytes once the
host's clock (time stamps) is taken out.  Both on the Python path: the events that would run in
C (tests/test_trace_native.py compares those with this path) are kept in Python here.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.trace import native
from kpsdk.trace.events import Trace, TraceRecord, json_value
from kpsdk.trace.output import (
    WriterContext,
    format_prefix,
    format_text,
    format_value,
    make_writer,
    perfetto_trace,
)
from tests.conftest import UNICORN_ARCHS
from tests.test_trace_run import PUT_ARGS


@pytest.fixture(autouse=True)
def python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subject here is the Python path's closures: no event runs in C."""
    monkeypatch.setattr(native, "ENABLED", False)


def definitions(arch: str) -> list[str]:
    """The table: each kind of fetch and type on the fixture's functions."""
    name, value = PUT_ARGS[arch]
    return [
        f"p:put put name=+0({name}):string u=+0({name}):ustring v={value}:s32 vx={value}:x64 vs={value}:s8 "
        f"first=+0({name}):char[3] lo=+0({name}):b4@0/8 hi=+0({name}):b4@4/8 c=+0({name}):s8 w=+1({name}):u16 "
        f"arr=+0({name}):u8[4] x16=+2({name}):x16 sym={name}:symbol sstr={name}:symstr comm=$comm "
        f"deep=+0(+0($stack)):x32 s0=$stack0 s1=$stack1:s64 sp=$stack imm=\\42 imms=\\\"hi\" "
        f"strs=+0($stack):string[2] wide=+0({name}):u64 nul=+0(\\0):u32 neg=-8({name}):x8",
        "p:bump bump by=$arg1:s32 before=@counter:s32 cx=@counter:x8 csym=@counter:symbol bits=@counter:b3@1/32",
        "r:fact fact n=$arg1:s64 ret=$retval:s64 r8=$retval:u8 rs=$retval:symbol",
        "p:sum7 sum7 " + " ".join(f"{c}=$arg{i + 1}:s64" for i, c in enumerate("abcdefg")) + " g16=$arg7:x16",
        "p:loop loop n=$arg1:u32 ns=$arg1:s16",
    ]


class Both:
    """Each argument evaluated compiled and interpreted at every hit; differences kept."""

    def __init__(self, trace: Trace) -> None:
        self.diffs: list[tuple[str, str, Any, Any]] = []
        self.evaluations = 0
        for event in trace.events:
            for arg in event.args:
                arg.value = self._wrap(event.name, arg)  # type: ignore[method-assign]

    def _wrap(self, event: str, arg: Any) -> Any:
        compiled = arg.value

        def both(hit: Any) -> Any:
            got, want = compiled(hit), arg.interpret(hit)
            self.evaluations += 1
            if got != want or type(got) is not type(want):
                self.diffs.append((event, arg.name, got, want))
            return got

        return both


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_every_fetch_compiled_equals_interpreted(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        trace = s.trace(definitions(arch))
        both = Both(trace)
        assert s.run(timeout=20) == 0
        s.call("fact", 3)
    assert both.evaluations > 100
    assert both.diffs == []
    fields = [r.fields for r in trace.records if r.event == "put"]
    assert fields and all(f["imm"] == 42 and f["imms"] == "hi" and f["nul"] is None for f in fields)
    assert all(f["name"] == f["u"] and isinstance(f["name"], str) for f in fields)


#: what differs between two runs of one program: the host's clock
TIMES = re.compile(r'("(?:time|entry_time|duration|ts|dur)": )[0-9.e-]+|(\] \.\.\.\.\. +)[0-9.]+(: )')


def run_outputs(arch: str, interpreted: bool, filter_expr: str | None) -> dict[str, str]:
    """Each format's file of one whole run, with compiled or interpreted fetches."""
    records: list[TraceRecord] = []
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        trace = s.trace(definitions(arch), sink=records, filter=filter_expr)
        if interpreted:
            for event in trace.events:
                for arg in event.args:
                    arg.value = arg.interpret  # type: ignore[method-assign]
        assert s.run(timeout=20) == 0
        s.call("fact", 4)
    out = {}
    for fmt in ("text", "jsonl", "perfetto"):
        for prefix in (True, False) if fmt == "text" else (True,):
            stream = io.StringIO()
            writer = make_writer(fmt, stream, WriterContext(target=arch, prefix=prefix, notes=("n",)))
            for record in records:
                writer.write(record)
            writer.close()
            out[f"{fmt}{'' if prefix else '-bare'}"] = TIMES.sub(lambda m: (m[1] or m[2]) + "0" + (m[3] or ""),
                                                                 stream.getvalue())
    return out


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
@pytest.mark.parametrize("filter_expr", [None, "v > 100 && name ~ \"f*\""])
def test_outputs_compiled_equal_interpreted(arch: str, filter_expr: str | None) -> None:
    compiled = run_outputs(arch, False, filter_expr)
    interpreted = run_outputs(arch, True, filter_expr)
    assert compiled["jsonl"].count("\n") > 5
    for name, text in compiled.items():
        assert text == interpreted[name], name
    json.loads(compiled["perfetto"])


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_writers_write_what_the_generic_formatting_gives(arch: str) -> None:
    """The writers' per-definition formatters and one-encoder JSON against the plain way
    (format_value per field, json.dumps / json.dump per record), on every record of the table."""
    records: list[TraceRecord] = []
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        s.trace(definitions(arch), sink=records)
        assert s.run(timeout=20) == 0
    assert len(records) > 5
    for record in records:
        types = {a.name: a.type for a in record.definition.args} if record.definition is not None else {}
        plain = f"{record.event}: ({record.where})" + "".join(
            f" {name}={format_value(value, types.get(name))}" for name, value in record.fields.items())
        assert format_text(record) == plain
        as_dict = record.as_dict()["fields"]
        assert json.dumps(as_dict) == json.dumps({n: json_value(v, types.get(n)) for n, v in record.fields.items()})
        record.pid, record.cpu, record.time = 12345678, 3, 1234.5678915  # wider than the columns
        text = io.StringIO()
        writer = make_writer("text", text, WriterContext(prefix=True))
        writer.write(record)
        header, line = text.getvalue().split("#              | |         |   |||||     |         |\n")
        assert line == format_prefix(record) + plain + "\n"
    jsonl, perfetto = io.StringIO(), io.StringIO()
    for fmt, stream in (("jsonl", jsonl), ("perfetto", perfetto)):
        writer = make_writer(fmt, stream, WriterContext(target=arch, process_name="p"))
        for record in records:
            writer.write(record)
        writer.close()
    assert jsonl.getvalue().splitlines()[1:] == [json.dumps(r.as_dict(), ensure_ascii=False) for r in records]
    plain_perfetto = io.StringIO()
    json.dump(perfetto_trace(records, "p"), plain_perfetto, ensure_ascii=False)
    assert perfetto.getvalue() == plain_perfetto.getvalue() + "\n"
