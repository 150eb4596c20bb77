"""The writers' per-event path writes what their record path writes, byte for byte.

A trace whose sink is a writer's own ``write`` hands each hit straight to the
writer's per-event function (:meth:`kpsdk.trace.output.Writer.event_writer`),
without a :class:`~kpsdk.trace.events.TraceRecord`; a sink that wraps the
writer gets records, as before.  Here one program runs twice, once each way,
with the host's clock replaced by one that ticks by a fixed odd step (so the
time stamps, their rounding included, are compared too, not taken out), for
a table of every fetch and type kind (strings, symbols, faults, ``$retval``
and ``$argN`` on return events, a function with both a ``p`` and an ``r`` event
so that perfetto pairs them into slices), with and without a filter, with a
stacktrace trigger, in every format, and for ``text`` with and without the prefix.  On the
Python path (the replaced clock is Python's): tests/test_trace_native.py compares the events run
in C with it.
"""

from __future__ import annotations

import collections
import io
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk import fixtures
from kpsdk.trace import events as trace_events
from kpsdk.trace import native, output
from kpsdk.trace.output import WriterContext, make_writer
from tests.conftest import UNICORN_ARCHS
from tests.test_trace_compiled import definitions as fetch_table

#: each tick of the replaced clock: odd digits down to the ns, so the prefix's and JSON's rounding show
TICK = 0.0012345678915


@pytest.fixture(autouse=True)
def python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event on the Python path, whose writers' two paths are compared here."""
    monkeypatch.setattr(native, "ENABLED", False)


def table(arch: str) -> list[str]:
    """test_trace_compiled's table of fetches, plus fixed-address strings and a ``p`` event on ``fact``
    (whose ``r`` event is in the table) for perfetto's slices."""
    return [*fetch_table(arch),
            "p:factin fact n=$arg1:s64 cs=@counter:string cu=@counter:ustring cx=@counter:x64 s1=$stack1:x32",
            "r:bumped bump", "p:named inc where=$arg1:s32"]  # perfetto: a field named like its where key


def run(arch: str, fmt: str, direct: bool, monkeypatch: pytest.MonkeyPatch, *, prefix: bool = True,
        filter_expr: str | None = None, triggers: tuple[str, ...] = ()) -> tuple[str, dict[str, bool]]:
    """The output of one run, with the writer's own ``write`` as the sink (``direct``) or a
    function around it; and which events took the per-event path.  The trace's counts of
    records per event are checked against the text written, before and after its close()."""
    ticks = itertools.count(1)

    def clock() -> float:
        return next(ticks) * TICK

    with monkeypatch.context() as patch:
        patch.setattr(trace_events, "perf_counter", clock)
        patch.setattr(trace_events.time, "perf_counter", clock)
        stream = io.StringIO()
        writer = make_writer(fmt, stream, WriterContext(target=arch, prefix=prefix, notes=("a note",)))
        with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
            sink: Any = writer.write if direct else (lambda record: writer.write(record))
            trace = s.trace(table(arch), sink=sink, filter=filter_expr, triggers=triggers)
            assert s.run(timeout=30) == 0
            s.call("fact", 4)
            took = {e.name: e.fast is not None and e.fast is not trace_events.UNMADE for e in trace.events}
            counts = trace.counts
            trace.close()
            assert trace.counts == counts and not trace.events
        writer.close()
    out = stream.getvalue()
    if fmt == "text":  # one line a record (stack lines start with " =>" or "<stack trace>")
        bodies = [line.split(": ", 2)[1] if prefix else line for line in out.split("\n")
                  if line and not line.startswith("#") and "<stack trace>" not in line and " => " not in line]
        assert counts == collections.Counter(body.split(":")[0] for body in bodies), counts
    return out, took


CASES = [("text", True), ("text", False), ("jsonl", True), ("perfetto", True)]


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_event_writers_write_the_records_bytes(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for fmt, prefix in CASES:
        direct, took = run(arch, fmt, True, monkeypatch, prefix=prefix)
        generic, took_generic = run(arch, fmt, False, monkeypatch, prefix=prefix)
        assert all(took.values()), took  # every event wrote through the per-event path
        assert not any(took_generic.values())
        assert direct == generic, (fmt, prefix)
        assert direct.count("\n") > (20 if fmt != "perfetto" else 0)
    perfetto = json.loads(direct)
    slices = [e for e in perfetto["traceEvents"] if e["ph"] == "X" and "entry" in e["args"]]
    assert slices and {e["args"]["entry"]["event"] for e in slices} == {"factin", "bump"}


@pytest.mark.parametrize("arch", ["x86_64", "arm", "riscv64"])
def test_filtered_and_triggered_events_keep_the_record_path(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter on some events and a trigger on one: those events take records (the filter and
    the trigger want them), the others the per-event path, in one file, in hit order."""
    for fmt, prefix in CASES:
        filt = 'v > 100 && name ~ "f*"'
        direct, took = run(arch, fmt, True, monkeypatch, prefix=prefix, filter_expr=filt,
                           triggers=("sum7:stacktrace",))
        generic, _ = run(arch, fmt, False, monkeypatch, prefix=prefix, filter_expr=filt,
                         triggers=("sum7:stacktrace",))
        assert took["put"] is False and took["sum7"] is False and took["loop"] is True, took
        assert direct == generic, (fmt, prefix)
        if fmt == "text":
            assert "<stack trace>" in direct


def cli_run(fmt: str, keep: bool, monkeypatch: pytest.MonkeyPatch, out: Any) -> tuple[str, int]:
    """``kpsdk trace`` of the arm table into ``out`` (with ``--hist``: the records are kept),
    the clock replaced; its file, and how many records the run made."""
    from tests.test_trace_run import invoke

    ticks = itertools.count(1)
    records: list[Any] = []

    class Counted(trace_events.TraceRecord):
        __slots__ = ()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            records.append(self)

    def clock() -> float:
        return next(ticks) * TICK

    with monkeypatch.context() as patch:
        patch.setattr(trace_events, "TraceRecord", Counted)
        patch.setattr(trace_events, "perf_counter", clock)
        patch.setattr(trace_events.time, "perf_counter", clock)
        result = invoke("arm", *(a for d in table("arm") for a in ("-e", d)), "--output", fmt, "--out", str(out),
                        "--count", "17", *(("--hist", "v") if keep else ()))
    assert result.exit_code == 0, result.output
    return out.read_text(), len(records)


@pytest.mark.parametrize("fmt", ["text", "jsonl", "perfetto"])
def test_kpsdk_trace_writes_the_same_with_and_without_records(fmt: str, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Any) -> None:
    """``kpsdk trace`` takes the per-event path (through its --count limit) unless a report keeps
    the records (``--hist``): the files of both runs are the same bytes, and --count still counts."""
    direct, made_direct = cli_run(fmt, False, monkeypatch, tmp_path / "direct")
    kept, made_kept = cli_run(fmt, True, monkeypatch, tmp_path / "kept")
    assert direct == kept
    assert made_kept >= 17  # --hist: every hit written is a record
    if fmt != "perfetto":  # (perfetto makes the records of its slices at the end)
        assert made_direct == 0
    if fmt == "jsonl":
        assert len(direct.splitlines()) == 1 + 17  # the schema line, then --count records
    if fmt == "text":
        assert sum(1 for line in direct.splitlines() if not line.startswith("#")) == 17


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.floats(min_value=0, max_value=2e6), st.floats(min_value=1e4, max_value=1e11),
                 st.floats(min_value=-1, max_value=1e-3), st.floats()))
def test_time_stamps_are_the_rounded_doubles_json(seconds: float) -> None:
    """The writers' time stamps: the JSON of the rounded double (``json.dumps(round(...))``, as the
    record path writes it), by their faster way where it is sure (jsonl: seconds to 9 places;
    perfetto: microseconds to 3), the encoder's elsewhere (``Infinity``, ``NaN``)."""
    assert output._seconds_text(seconds) == json.dumps(round(seconds, 9))
    assert output._us_text(seconds) == json.dumps(round(seconds * 1e6, 3))


@pytest.mark.parametrize("arch", ["x86_64", "arm"])
def test_perfetto_trace_of_a_writers_hits_is_its_file(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``perfetto_trace`` of what a perfetto writer was given (its per-event hits) is the object
    its file holds, every event a dict; the writer itself keeps none of them."""
    ticks = itertools.count(1)
    kept: list[Any] = []
    with monkeypatch.context() as patch:
        patch.setattr(trace_events, "perf_counter", lambda: next(ticks) * TICK)
        stream = io.StringIO()
        writer = make_writer("perfetto", stream, WriterContext(target=arch))
        events = writer._events  # type: ignore[attr-defined]
        add = events.add
        patch.setattr(events, "add", lambda record: (kept.append(record), add(record)))
        with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
            s.trace(table(arch), sink=writer.write)
            assert s.run(timeout=30) == 0
        writer.close()
    assert not hasattr(writer, "records")
    assert any(type(r) is tuple for r in kept)
    trace = output.perfetto_trace(kept, "kpsdk trace")
    assert all(type(e) is dict for e in trace["traceEvents"])
    assert json.dumps(trace, ensure_ascii=False) + "\n" == stream.getvalue()
    named = [e for e in trace["traceEvents"] if e.get("name") == "named"]
    assert named and all(list(e["args"]) == ["where"] and type(e["args"]["where"]) is int for e in named)
