"""Trace events whose fetches and filter run in C at the hit, their records drained in batches.

Where the target runs fetch programs (:meth:`Target.native_tracer
<kpsdk.target.Target.native_tracer>`: the Unicorn target, :mod:`kpsdk.targets.unicorn.nativetrace`),
a ``p`` event that needs nothing of Python at the hit is compiled by :mod:`kpsdk.fetchprog`
and its probe carries the program (``probe.native_fetch``): the target arms the point with
a hook in C that writes binary records into the trace's ring.  This module reads them back
(:meth:`NativeTrace.consume`) into exactly what the Python path makes: the writers' own
per-event paths get the field values in order (the same bytes as the Python path's, text,
jsonl and perfetto alike), other sinks a :class:`~kpsdk.trace.events.TraceRecord` each.

What keeps an event on the Python path (its ``on_hit``, the reference the native records
are tested against, ``tests/test_trace_native.py``): a return event (``r``, ``%return``), a
``--stack`` trace or a ``stacktrace`` trigger, a hist trigger, a filter that reads a common
field (``common_pid``, ``comm``) or compares in a way C does not (a glob with ``?`` or
``[``, a symbol), a field with no native form (an array of bitfields, a kernel's live
``$comm``), a guest clock, a target without native tracing (no gcc, a live target).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from kpsdk.fetchprog import FetchProgram, _NotNative, compile_fetches, with_filter
from kpsdk.trace.nativetext import TextLines, text_lines

if TYPE_CHECKING:
    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.trace.events import Trace, TraceEvent
    from kpsdk.trace.nativehist import NativeHist
    from kpsdk.trace.output import EventWrite

#: a record's header (tracehook.c, kpsdk's QEMU plugin): program id, length, CLOCK_MONOTONIC ns, ip, sp,
#: task stamp, fault mask
RECORD = struct.Struct("<IIQQQI4xQ")
_VAR = struct.Struct("<II")
_FAULT_STRING = 0xFFFFFFFF


def _string(data: memoryview) -> str:
    return str(data, "utf-8", "replace")


class NativeEvent:
    """One event's program, and how its records turn into field values."""

    def __init__(self, event: TraceEvent, program: FetchProgram) -> None:
        from kpsdk.trace.fetch import format_symbol

        self.event = event
        self.program = program
        session = event.trace.session
        self._scalars = struct.Struct("<" + "".join("q" if p[2] else "Q" for p in program.fields if p[0] == "int"))
        self._vars = [p for p in program.fields if p[0] in ("str", "arr", "strarr")]
        nscalar = program.nscalar
        consts: list[Any] = []
        order: list[int] = []
        for arg, plan in zip(event.args, program.fields, strict=True):
            if plan[0] == "int":
                order.append(plan[1])
            elif plan[0] == "const":
                order.append(nscalar + len(self._vars) + len(consts))
                consts.append(arg.comm if arg.arg.fetch.kind == "comm" else arg.arg.fetch.text)
            else:
                order.append(nscalar + plan[1])
        self._consts = tuple(consts)
        self._pick = itemgetter(*order) if len(order) > 1 else (lambda src: (src[order[0]],)) if order else \
            (lambda src: ())
        #: fields shown as symbols (``:symbol``, ``:symstr``): formatted here, as the Python path does
        self._symbols = [i for i, a in enumerate(event.args) if a.type.display == "symbol" or a.type.name == "symstr"]
        self._format_symbol = lambda addr: format_symbol(session, addr)
        self._where: dict[int, str] = {}
        #: the writer's per-event path (None: records); made at the first record, renewed with the writers
        self.fast: EventWrite | None | object = _UNMADE
        #: its hist trigger, counted in C (kpsdk.trace.nativehist)
        self.hist: NativeHist | None = None
        self.fast_sp = False

    def values(self, data: memoryview, at: int, faults: int) -> list[Any]:
        """The fields of the output at ``at``: what the event's compiled fetches would give."""
        src = self._scalars.unpack_from(data, at)
        p = at + 8 * self.program.nscalar
        if self._vars:
            extra: list[Any] = []
            for plan in self._vars:
                nbytes, count = _VAR.unpack_from(data, p)
                p += 8
                kind = plan[0]
                if kind == "str":
                    extra.append(_string(data[p:p + nbytes]))
                    p += (nbytes + 7) & ~7
                elif kind == "arr":
                    code = "q" if plan[2] else "Q"
                    extra.append(list(struct.unpack_from(f"<{count}{code}", data, p)))
                    p += nbytes
                else:
                    end = p + nbytes
                    items: list[str | None] = []
                    while p < end:
                        length, _ = _VAR.unpack_from(data, p)
                        p += 8
                        if length == _FAULT_STRING:
                            items.append(None)
                            continue
                        items.append(_string(data[p:p + length]))
                        p += (length + 7) & ~7
                    p = end
                    extra.append(items)
            src = src + tuple(extra)
        values = list(self._pick(src + self._consts))
        if faults:
            for i in range(len(values)):
                if faults >> i & 1:
                    values[i] = None
        for i in self._symbols:
            v = values[i]
            if v is not None:
                values[i] = [self._format_symbol(x) for x in v] if isinstance(v, list) else self._format_symbol(v)
        return values

    def where(self, ip: int) -> str:
        where = self._where.get(ip)
        if where is None:
            from kpsdk.trace.fetch import format_symbol

            where = self._where[ip] = format_symbol(self.event.trace.session, ip)
        return where


_UNMADE = object()


class NativeTrace:
    """A trace's native side: its ring on the target, its events by program id, its tasks."""

    def __init__(self, trace: Trace, host: Any) -> None:
        self.trace = trace
        self.host = host
        self.events: dict[int, NativeEvent] = {}
        #: the tasks hits ran in, by the number records carry (:meth:`task_stamp`)
        self._tasks: list[tuple[TaskInfo, int]] = []
        self._stamps: dict[tuple[str, int, int, str, int], int] = {}
        #: the C formatter of a plain text writer's lines (nativetext), made at the first batch
        self._lines: TextLines | None | object = _UNMADE
        self.ring = host.new_ring(self.consume, self.task_stamp)
        self.ring.settle = self.settle

    # -- compiling ----------------------------------------------------------------------------

    def prepare(self, event: TraceEvent) -> None:
        """Give ``event``'s probe a native program where it can have one (see the module's docstring)."""
        program = self._program(event)
        if program is None or event.probe is None:
            return
        native = self.host.program(self.ring, program.code)
        self.events[native.ident] = NativeEvent(event, program)
        self._lines = _UNMADE  # described again with this event
        event.probe.native_fetch = native  # type: ignore[attr-defined]

    def _program(self, event: TraceEvent) -> FetchProgram | None:
        trace = self.trace
        d = event.definition
        from kpsdk.trace.events import writer_of

        clock_ok = trace.guest_clock is None or self.host.clock_is_trace_clock
        writer = writer_of(trace._sink)
        if d.is_return or trace.stack or not clock_ok or len({a.name for a in event.args}) != \
                len(event.args) or any(a.comm_live for a in event.args) or \
                (writer is not None and writer.record_limit() is not None):
            return None
        session = trace.session
        arch = session.arch
        abi = arch.abi(getattr(session.target, "abi_kind", "user"))
        try:
            program = compile_fetches(arch, abi, self.host.register_id,
                                      [(a.name, a.arg.fetch, a.type, a.symbol_address) for a in event.args])
            if event.filtered:
                if event._filter_common or trace.filter is None or trace.filter.tree is None:
                    return None
                kinds = {a.name: _kind(a.type) for a in event.args}
                program = with_filter(arch, program, trace.filter.tree, kinds)
        except _NotNative:
            return None
        return program

    def triggers_changed(self, event: TraceEvent) -> None:
        """A trigger was added to ``event``: its hist trigger counted in C
        (:mod:`kpsdk.trace.nativehist`) where one can be, else its records go to Python."""
        from kpsdk.trace.nativehist import native_hist

        ident = self._ident_of(event)
        if ident is None:
            return
        native = self.events[ident]
        hists = event.triggers.hists
        if native.hist is not None or event.triggers.stacks or len(hists) != 1 or \
                not getattr(self.host, "counts_hists", False):
            self.withdraw(event)
            return
        counted = native_hist(native, hists[0], self.trace.session.arch.word_size)
        if counted is None:
            self.withdraw(event)
            return
        native.hist = counted
        program = event.probe.native_fetch  # type: ignore[union-attr]
        program.hist = counted.c
        self._resync(event)

    def _ident_of(self, event: TraceEvent) -> int | None:
        return next((ident for ident, n in self.events.items() if n.event is event), None)

    def _resync(self, event: TraceEvent) -> None:
        target = self.trace.session.target
        point = target.manager.point_of(event.probe) if event.probe is not None else None
        if point is not None:
            target.sync_point(point)

    def withdraw(self, event: TraceEvent) -> None:
        """``event`` wants its records in Python from now on (a trigger was added): what its
        hist counted so far is settled, and its probe's point armed again without the program."""
        probe = event.probe
        program = getattr(probe, "native_fetch", None)
        if probe is None or program is None:
            return
        self.drain()
        self.settle()
        probe.native_fetch = None  # type: ignore[attr-defined]
        self.events.pop(program.ident, None)
        self._lines = _UNMADE
        self._resync(event)

    def settle(self) -> None:
        """The hist tables counted in C into their triggers (after each run or call)."""
        for native in self.events.values():
            if native.hist is not None:
                native.hist.settle(self._tasks)

    def forget(self, event: TraceEvent) -> None:
        """``event`` leaves the trace: its records so far are written, then it is let go."""
        self.drain()
        for ident, native in list(self.events.items()):
            if native.event is event:
                del self.events[ident]
                self._lines = _UNMADE

    def is_native(self, event: TraceEvent) -> bool:
        return getattr(event.probe, "native_fetch", None) is not None

    def renew(self) -> None:
        """The sink's writer changed: the writers' paths are made again at the next record."""
        for native in self.events.values():
            native.fast = _UNMADE
        self._lines = _UNMADE

    # -- hits ---------------------------------------------------------------------------------

    def task_stamp(self) -> int:
        """The number records carry for the task running now (the target asks at each slice's
        start and after each system call): the trace's task_info and task_id, as on_hit reads them."""
        trace = self.trace
        if trace.tasks_fixed:
            task, task_id = trace.fixed_task, 1
        else:
            task, task_id = trace.task_info(), trace.task_id()
        key = (task.comm, task.pid, task.cpu, task.flags, task_id)
        stamp = self._stamps.get(key)
        if stamp is None:
            stamp = self._stamps[key] = len(self._tasks)
            self._tasks.append((task, task_id))
        return stamp

    def drain(self) -> None:
        """The records written so far to the writers (before a Python-path record: they came first)."""
        self.host.drain_ring(self.ring)

    def consume(self, data: memoryview, address: int) -> None:
        """Records from the ring (``data``, at ``address``), oldest first, to the trace's sink:
        a plain text writer's lines formatted in C (:mod:`kpsdk.trace.nativetext`), else each
        record through the writer's per-event path or as a TraceRecord."""
        from kpsdk.trace.events import writer_of

        trace = self.trace
        writer = writer_of(trace._sink)
        if self._lines is _UNMADE:
            self._lines = self._make_lines(writer)
        lines = self._lines
        if lines is None:
            at, end = 0, len(data)
            while at < end:
                at = self._one(data, at, writer)
            return
        assert isinstance(lines, TextLines)
        lines.tasks(self._tasks)
        for ident, n in lines.write(data, self._start(), lambda at: self._one(data, at, writer), address):
            native = self.events.get(ident)
            if native is not None:
                native.event.recorded += n

    def _start(self) -> float:
        """What a record's clock is counted from: the trace's start (the host's clock since
        then), or nothing where the records carry the trace's own clock (the QEMU plugin's)."""
        return 0.0 if self.host.clock_is_trace_clock else self.trace.start_time

    def _make_lines(self, writer: Any) -> TextLines | None:
        lines = text_lines(writer) if writer is not None else None
        if lines is not None:
            manager = self.trace.session.target.manager
            ips = {}
            for ident, native in self.events.items():
                point = manager.point_of(native.event.probe) if native.event.probe is not None else None
                if point is not None:
                    ips[ident] = point.addr
            lines.describe(self.events, ips)
        return lines

    def _one(self, data: memoryview, at: int, writer: Any) -> int:
        """The record at ``at`` to the sink; returns where the next one starts."""
        from kpsdk.trace.events import TraceRecord
        from kpsdk.trace.output import EventShape

        ident, length, ns, ip, sp, stamp, faults = RECORD.unpack_from(data, at)
        native = self.events.get(ident)
        if native is None:  # an event let go since: its records go with it
            return at + length
        trace = self.trace
        values = native.values(data, at + RECORD.size, faults)
        event = native.event
        task, task_id = self._tasks[stamp]
        now = ns / 1e9 - self._start()
        fast = native.fast
        if fast is _UNMADE:
            fast = None
            if writer is not None:
                shape = EventShape(event.name, event.group, "p", event.definition,
                                   tuple((a.name, cast(Callable[..., Any], itemgetter(i)))
                                         for i, a in enumerate(event.args)), event.id)
                fast = writer.event_writer(shape)
                # the record has the stack pointer: given wherever the writer wants it (perfetto then
                # closes each entry at the next hit of its call site, not 4,096 hits later)
                native.fast_sp = writer.needs_entry_sp
            native.fast = fast
        event.recorded += 1
        if fast is not None:
            fast(now, ip, native.where(ip), values, task, task_id,  # type: ignore[operator]
                 sp if native.fast_sp else None, None, None, None)
        else:
            trace.deliver(TraceRecord(event.name, event.group, "p", now, ip, native.where(ip),
                                      dict(zip([a.name for a in event.args], values, strict=True)), None, None,
                                      None, task_id, event.definition, sp, task.comm, task.pid, task.cpu,
                                      task.flags, event.id))
        return at + length

    def close(self) -> None:
        self.host.close_ring(self.ring)


def _kind(argtype: Any) -> str:
    """What a filter compares a field as: ``int`` (a plain integer), ``str`` (a string), or
    ``other`` (a symbol's text, an array: no native comparison)."""
    if argtype.count or argtype.display == "symbol" or argtype.name == "symstr":
        return "other"
    if argtype.is_string:
        return "str"
    return "int"


#: False: every event takes the Python path (the tests and the bench compare the two; a
#: program's environment is the caller's, so a variable would change what it does)
ENABLED = os.environ.get("KPSDK_TRACE_NATIVE", "1") != "0"


def native_trace(trace: Trace) -> NativeTrace | None:
    """The trace's native side where its target runs fetch programs (None: Python for every
    event; so too where :data:`ENABLED` is False, ``KPSDK_TRACE_NATIVE=0`` at import)."""
    if not ENABLED:
        return None
    host = trace.session.target.native_tracer()
    return None if host is None else NativeTrace(trace, host)

