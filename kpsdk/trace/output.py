"""Output formats for trace records: ftrace text, JSON lines, a Perfetto (Chrome JSON) trace.

One module, because the three writers share the record's rendering (the ftrace line's
values, names, escapes) that text, jsonl and perfetto each build on.

A format is an :class:`OutputFormat` (a name and a factory of :class:`Writer`)
that a plugin returns from the ``kpsdk_trace_formats`` hook; kpsdk's own three
come from :mod:`kpsdk.trace.formats` the same way, so ``--output NAME`` and
:func:`make_writer` know only what the plugins loaded.

- ``text``: the kernel's trace line, ``EVENT: (sym+0x0/0xSIZE) name=value ...``
  and for returns ``EVENT: (caller+0xOFF/0xSIZE <- sym) ...``, values printed
  the way ``trace_probe.c`` prints each type (``%u``, ``%d``, ``0x%x``,
  ``'c'``, ``"string"``, ``{a,b}`` for arrays, ``(fault)``).
- ``jsonl``: one JSON object per record (:meth:`TraceRecord.as_dict`), its ``stack``
  the frames of a stack entry (``null`` without one).
- ``perfetto``: the Trace Event Format that ui.perfetto.dev and
  chrome://tracing load.  A return with its entry time is a complete slice
  (``"ph": "X"``) named after the function, its arguments those of the return
  event and, when a ``p`` event on the same function fired at that call, the
  entry's too; other ``p`` hits are instant events (``"ph": "i"``).  Each task
  is a thread.  Stacks (``--stack``, ``stacktrace`` triggers) are the format's
  ``stackFrames`` table (:class:`StackFrames`) and each event's args.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from kpsdk.binfmt.symbols import shown_name
from kpsdk.errors import UnknownNameError

# declared in the core beside the hook that returns them (kpsdk/outputformat.py); read here too
from kpsdk.outputformat import FORMAT_NAME as FORMAT_NAME
from kpsdk.outputformat import OutputFormat as OutputFormat
from kpsdk.outputformat import WriterContext as WriterContext
from kpsdk.outputformat import check_formats as check_formats

if TYPE_CHECKING:
    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.fetch import HitContext, Value
    from kpsdk.trace.grammar import ArgType, ProbeDef

FAULT = "(fault)"


def format_value(value: Any, argtype: ArgType | None) -> str:
    """One field as the kernel prints it."""
    if isinstance(value, list):
        return "{" + ",".join(_scalar(v, argtype) for v in value) + "}"
    return _scalar(value, argtype)


def _scalar(value: Any, argtype: ArgType | None) -> str:
    if value is None:
        return FAULT
    display = argtype.display if argtype is not None else "x"
    if isinstance(value, str):
        if display == "symbol":
            return value
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if display == "x":
        return f"{value:#x}"
    if display == "char":
        char = chr(value)
        return f"'{char}'" if char.isprintable() else f"'\\x{value:02x}'"
    return str(value)


#: per definition (by id, with the definition to tell a reused id): its field types by name and
#: each field's text formatter, made once: every record of an event asks for them
_FIELDS: dict[int, tuple[ProbeDef, dict[str, ArgType], dict[str, Callable[[Any], str]]]] = {}


def _fields_of(definition: ProbeDef) -> tuple[ProbeDef, dict[str, ArgType], dict[str, Callable[[Any], str]]]:
    known = _FIELDS.get(id(definition))
    if known is None or known[0] is not definition:
        types = {a.name: a.type for a in definition.args}
        known = _FIELDS[id(definition)] = (definition, types,
                                           {name: value_formatter(t) for name, t in types.items()})
    return known


def field_types(definition: ProbeDef | None) -> dict[str, ArgType]:
    """The types of a definition's fields, by name (empty without a definition)."""
    return _fields_of(definition)[1] if definition is not None else {}


def value_formatter(argtype: ArgType | None) -> Callable[[Any], str]:
    """:func:`format_value` for one type, with the integer case (most fields) decided once."""
    display = argtype.display if argtype is not None else "x"
    if display == "x":
        return lambda value: f"{value:#x}" if type(value) is int else format_value(value, argtype)
    if display in ("char", "symbol"):
        return lambda value: format_value(value, argtype)
    # decimal integers, and strings with _scalar's escapes without its calls
    return lambda value: int.__repr__(value) if type(value) is int else \
        '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"' if type(value) is str \
        else format_value(value, argtype)


def format_text(record: TraceRecord) -> str:
    """The ftrace line's body for one record: ``EVENT: (where) name=value...``."""
    formatters = _fields_of(record.definition)[2] if record.definition is not None else {}
    parts = [f"{record.event}: ({record.where})"]
    for name, value in record.fields.items():
        formatter = formatters.get(name)
        parts.append(f" {name}={formatter(value) if formatter is not None else format_value(value, None)}")
    return "".join(parts)


def format_prefix(record: TraceRecord) -> str:
    """What the kernel's ``trace_print_context`` (kernel/trace/trace_output.c) puts before
    the body: ``"%16s-%-7d "`` comm and pid, ``"[%03d] "`` the CPU, the five flag
    characters of ``trace_print_lat_fmt`` (:func:`kpsdk.kernel.tasks.lat_flags`) and
    ``" %5lu.%06lu: "`` the time.
    """
    usecs = max(0, round(record.time * 1_000_000))
    secs, usec = divmod(usecs, 1_000_000)
    return f"{shown_name(record.comm):>16}-{record.pid:<7} [{record.cpu:03d}] {record.flags} {secs:5d}.{usec:06d}: "


#: the column legend of the kernel's ``trace`` file (print_func_help_header_irq in kernel/trace/trace.c)
HEADER_LEGEND = """\
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
"""


def format_stack(prefix: str, frames: tuple[str, ...]) -> str:
    """A stack entry as ftrace prints it (``trace_stack_print``): the prefix and
    ``<stack trace>``, then `` => sym+0xoff/0xsize`` per frame (the ``sym-offset`` option's form)."""
    return f"{prefix}<stack trace>\n" + "".join(f" => {frame}\n" for frame in frames)


def text_header(notes: tuple[str, ...] = ()) -> str:
    """The kernel's ``trace`` header: ``# tracer: nop``, then (where the kernel counts the
    entries, which a stream cannot know yet) kpsdk's notes on where the columns come
    from, then the legend."""
    lines = "".join(f"# kpsdk: {note}\n" for note in notes)
    return f"# tracer: nop\n#\n{lines}#\n{HEADER_LEGEND}"


@dataclass(frozen=True)
class EventShape:
    """What a writer's per-event path (:meth:`Writer.event_writer`) knows of an event when it is
    made, at the event's first hit: all that does not change from hit to hit.

    :param fetches: each fetch argument's name and compiled value (``fetch(hit)``), in order.
    :param event_id: the event's id (``common_type``).
    """

    event: str
    group: str
    kind: str
    definition: ProbeDef
    fetches: tuple[tuple[str, Callable[[HitContext], Value]], ...]
    event_id: int = 0


#: a writer's per-event path: ``emit(time, ip, where, hit, task, task_id, entry_sp, caller, func,
#: entry_time)``, the fields of the :class:`~kpsdk.trace.events.TraceRecord` the event would have
#: made, but ``fields``: the writer fetches them itself from ``hit`` (``entry_sp`` only where the
#: writer asks for it, :attr:`Writer.needs_entry_sp`; else None)
EventWrite = Callable[[float, int, str, "HitContext", "TaskInfo", int, "int | None", "int | None", "str | None",
                       "float | None"], None]


class Writer:
    """Base: ``write(record)`` for each record, ``close()`` at the end, ``flush()`` when a run
    ends in an error (what was written so far reaches the file; nothing is finished).

    kpsdk's writers leave the stream's buffer to write in blocks: a flush per record
    was a system call per event.  ``close()`` flushes.

    A writer may also give a per-event path (:meth:`event_writer`): a function made once
    per event that writes a hit's bytes without a :class:`~kpsdk.trace.events.TraceRecord`.
    A trace whose sink is the writer's own ``write`` uses it where nothing else wants the
    record (no filter on the event, no trigger, no ``--stack``); it must write exactly the
    bytes ``write`` would (``tests/test_trace_event_writers.py``).
    """

    #: the per-event path wants the hit's stack pointer at a function's entry (perfetto pairs by it)
    needs_entry_sp = False

    def write(self, record: TraceRecord) -> None:
        raise NotImplementedError

    def event_writer(self, shape: EventShape) -> EventWrite | None:
        """The per-event path for ``shape``; None (the default): records only."""
        return None

    def record_limit(self) -> int | None:
        """How many records this writer takes before it stops the run (``kpsdk trace --count``);
        None (the default): no limit.  Events run in C stay on the Python path under a limit: the
        run must stop at the hit of the last record, not at the next batch."""
        return None

    def text_lines(self) -> tuple[TextWriter, Callable[[], None] | None] | None:
        """The plain :class:`TextWriter` whose lines this writer writes unchanged, which native
        trace events may format in C a batch at a time (:mod:`kpsdk.trace.nativetext`), and what
        to call when its reader went away (``BrokenPipeError``); None (the default): no such writer."""
        return None

    def flush(self) -> None:
        """Nothing buffered by default."""

    def close(self) -> None:
        """Nothing to finish by default (text and JSON lines are written as they come)."""


#: task parts of the prefix a text writer keeps (a kernel has many tasks; a program one)
TASK_PREFIXES = 4096


class TextWriter(Writer):
    """The kernel's trace file: its header, then each line with the task/CPU/flags/time
    prefix; ``prefix=False``: the bodies only, no header."""

    def __init__(self, stream: IO[str], prefix: bool = False, notes: tuple[str, ...] = ()) -> None:
        self.stream = stream
        self.prefix = prefix
        self._header = text_header(notes) if prefix else ""
        #: the prefix's task part (comm, pid, CPU, flags) by what it shows: few tasks, many records
        self._tasks: dict[tuple[str, int, int, str], str] = {}

    def _start(self) -> None:
        if self._header:
            self.stream.write(self._header)
            self._header = ""

    def _prefix(self, record: TraceRecord) -> str:
        """:func:`format_prefix`, its task part made once per task."""
        key = (record.comm, record.pid, record.cpu, record.flags)
        task = self._tasks.get(key)
        if task is None:
            if len(self._tasks) >= TASK_PREFIXES:
                self._tasks.clear()
            task = self._tasks[key] = \
                f"{shown_name(record.comm):>16}-{record.pid:<7} [{record.cpu:03d}] {record.flags} "
        usecs = max(0, round(record.time * 1_000_000))
        return f"{task}{usecs // 1_000_000:5d}.{usecs % 1_000_000:06d}: "

    def write(self, record: TraceRecord) -> None:
        if self._header:
            self._start()
        prefix = self._prefix(record) if self.prefix else ""
        text = prefix + format_text(record) + "\n"
        if record.stack is not None:
            stack = format_stack(prefix, record.stack)
            where = record.stack_where or ("after",)
            text = stack * where.count("before") + text + stack * where.count("after")
        self.stream.write(text)

    def event_writer(self, shape: EventShape) -> EventWrite | None:
        """:meth:`write`'s line for one event, made once: the fields' labels and formatters
        bound, the task part of the prefix kept from one hit to the next while the task is
        the same object (always, where the target has no tasks), no record."""
        if type(self).write is not TextWriter.write:  # a subclass writes its own way
            return None
        formatters = _fields_of(shape.definition)[2]
        parts = tuple((f" {name}=", fetch, formatters.get(name) or _untyped) for name, fetch in shape.fetches)
        head = f"{shape.event}: ("
        write, prefix, tasks = self.stream.write, self.prefix, self._tasks
        last: list[Any] = [None, ""]

        def emit(now: float, ip: int, where: str, hit: HitContext, task: TaskInfo, task_id: int,
                 entry_sp: int | None, caller: int | None, func: str | None, entry_time: float | None) -> None:
            if self._header:
                self._start()
            body = head + where + ")" + "".join([label + formatter(fetch(hit)) for label, fetch, formatter in parts])
            if prefix:
                if task is last[0]:
                    task_part = last[1]
                else:
                    key = (task.comm, task.pid, task.cpu, task.flags)
                    task_part = tasks.get(key)
                    if task_part is None:
                        if len(tasks) >= TASK_PREFIXES:
                            tasks.clear()
                        task_part = tasks[key] = \
                            f"{shown_name(task.comm):>16}-{task.pid:<7} [{task.cpu:03d}] {task.flags} "
                    last[0], last[1] = task, task_part
                usecs = round(now * 1_000_000)
                if usecs < 0:
                    usecs = 0
                write(f"{task_part}{usecs // 1_000_000:5d}.{usecs % 1_000_000:06d}: {body}\n")
            else:
                write(body + "\n")

        return emit

    def text_lines(self) -> tuple[TextWriter, Callable[[], None] | None] | None:
        return (self, None) if type(self) is TextWriter else None

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        """A trace without records still has its header, as the kernel's empty trace file."""
        self._start()
        self.stream.flush()


#: the version of the ``jsonl`` lines' layout, on the first line; it grows when a key
#: changes meaning or goes away (new keys may come without a new version)
JSONL_VERSION = 1
_HEX = {"type": "string", "pattern": "^0x[0-9a-f]+$"}
_INT = {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^-?[0-9]+$"}]}
#: a field's value: an integer (or its hex or decimal string), a string, null (a fault)
_VALUE = {"anyOf": [_HEX, _INT, {"type": "string"}, {"type": "null"}]}
#: JSON Schema (draft 2020-12) of the ``jsonl`` output: the first line, then one record a line
JSONL_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "oneOf": [
        {"type": "object", "required": ["schema", "version", "target", "notes"], "additionalProperties": False,
         "properties": {"schema": {"const": "kpsdk-trace"}, "version": {"const": JSONL_VERSION},
                        "target": {"type": "string"}, "notes": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "additionalProperties": False,
         "required": ["event", "group", "kind", "time", "ip", "where", "comm", "pid", "cpu", "flags", "task",
                      "fields", "caller", "func", "entry_time", "duration", "stack"],
         "properties": {
             "event": {"type": "string"}, "group": {"type": "string"}, "kind": {"enum": ["p", "r"]},
             "time": {"type": "number", "minimum": 0}, "ip": _HEX, "where": {"type": "string"},
             "comm": {"type": "string"}, "pid": {"type": "integer", "minimum": 0},
             "cpu": {"type": "integer", "minimum": 0}, "flags": {"type": "string", "minLength": 5, "maxLength": 5},
             "task": {"type": "integer", "minimum": 1},
             "fields": {"type": "object", "additionalProperties": {
                 "anyOf": [*_VALUE["anyOf"], {"type": "array", "items": _VALUE}]}},
             "caller": {"oneOf": [_HEX, {"type": "null"}]}, "func": {"type": ["string", "null"]},
             "entry_time": {"type": ["number", "null"]}, "duration": {"type": ["number", "null"]},
             "stack": {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}}},
    ],
}


def _json_encoder() -> Callable[[Any], str]:
    """``json.dumps(obj, ensure_ascii=False)`` for the dicts the writers encode, the same bytes,
    with its C encoder made once: ``dumps`` with an option makes a ``JSONEncoder`` per call,
    and ``JSONEncoder.encode`` a C encoder per call (~1.5 us of a record's ~5)."""
    plain = json.JSONEncoder(ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the _json accelerator
        return plain.encode
    # json.encoder's own arguments for dumps' defaults: no circular check needed for records
    chunks = make(None, plain.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True)

    def encode(obj: Any) -> str:
        return "".join(chunks(obj, 0))

    return encode


_ENCODE = _json_encoder()
#: a str in JSON as the encoder writes it (``ensure_ascii=False``), quotes included
_encode_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _encode_value(value: Any) -> str:
    """One converted field value in JSON, as :data:`_ENCODE` writes it inside a record:
    the common kinds (str, int, null) without the encoder's set-up."""
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return _ENCODE(value)


def _untyped(value: Any) -> str:
    return format_value(value, None)


def _rounded_repr(value: float, places: int, low: float, high: float) -> str:
    """``repr(round(value, places))``, the same text, at half its cost where that is sure:
    for ``low <= value < high`` the fixed-point rendering without its trailing zeros is the
    shortest text of the rounded double (decimals ``10**-places`` apart are far coarser than
    doubles there) and in ``repr``'s positional range; elsewhere as :data:`_ENCODE` writes
    the rounded double (``repr``, and ``Infinity``/``NaN`` as JSON has them)."""
    if low <= value < high:
        text = f"{value:.{places}f}".rstrip("0")
        return text + "0" if text[-1] == "." else text
    return _ENCODE(round(value, places))


def _seconds_text(seconds: float) -> str:
    """``_ENCODE(round(seconds, 9))``: a JSON line's time (from 0.1 ms to ~11 days: the fast way)."""
    return _rounded_repr(seconds, 9, 1e-4, 1e6)


def _us_text(seconds: float) -> str:
    """``_ENCODE(_us(seconds))``: a Trace Event time stamp in JSON (below ~27 hours: the fast way)."""
    return _rounded_repr(seconds * 1e6, 3, 1e-3, 1e11)


def _json_piece(argtype: ArgType | None) -> Callable[[Any], str]:
    """A field's value as JSON text, as :data:`_ENCODE` writes it inside a record's ``fields``
    (:func:`~kpsdk.trace.events.json_value`, then the encoder), with the common cases decided
    once: hex integers (``"0x..."`` needs no escape), decimal integers a double holds, strings."""
    from kpsdk.trace.events import JSON_SAFE_INT, json_converter

    convert = json_converter(argtype)
    display = argtype.display if argtype is not None else "x"
    if display == "x":
        return lambda value: f'"{value:#x}"' if type(value) is int else _encode_value(convert(value))
    if display == "symbol":
        return lambda value: _encode_value(convert(value))
    return lambda value: int.__repr__(value) if type(value) is int and -JSON_SAFE_INT <= value <= JSON_SAFE_INT \
        else _encode_string(value) if type(value) is str else _encode_value(convert(value))


class JsonlWriter(Writer):
    """One JSON object a line: first ``{"schema": "kpsdk-trace", "version": N, ...}``, then
    each record's :meth:`~kpsdk.trace.events.TraceRecord.as_dict` (see :data:`JSONL_SCHEMA`)."""

    def __init__(self, stream: IO[str], context: WriterContext | None = None) -> None:
        self.stream = stream
        context = context or WriterContext()
        self._head: dict[str, Any] | None = {"schema": "kpsdk-trace", "version": JSONL_VERSION,
                                             "target": context.target, "notes": list(context.notes)}

    def _start(self) -> None:
        if self._head is not None:
            self.stream.write(json.dumps(self._head, ensure_ascii=False) + "\n")
            self._head = None

    def write(self, record: TraceRecord) -> None:
        self._start()
        self.stream.write(_ENCODE(record.as_dict()) + "\n")

    def event_writer(self, shape: EventShape) -> EventWrite | None:
        """:meth:`write`'s line for one event, made once: the keys and every value that does
        not change from hit to hit encoded once (per event, per ``ip``/``where`` and per task),
        each field's value encoded alone (:func:`_encode_value`), the pieces joined as
        ``json.dumps`` would write the record's :meth:`~kpsdk.trace.events.TraceRecord.as_dict`."""
        if type(self).write is not JsonlWriter.write:
            return None
        types = field_types(shape.definition)
        parts = tuple((('"' if i == 0 else ', "') + _encode_string(name)[1:] + ": ", fetch,
                       _json_piece(types.get(name))) for i, (name, fetch) in enumerate(shape.fetches))
        head = '{"event": ' + _ENCODE(shape.event) + ', "group": ' + _ENCODE(shape.group) + ', "kind": ' + \
            _ENCODE(shape.kind) + ', "time": '
        write = self.stream.write
        places: dict[tuple[int, str], str] = {}
        last: list[Any] = [None, 0, ""]

        def emit(now: float, ip: int, where: str, hit: HitContext, task: TaskInfo, task_id: int,
                 entry_sp: int | None, caller: int | None, func: str | None, entry_time: float | None) -> None:
            if self._head is not None:
                self._start()
            place = places.get((ip, where))
            if place is None:
                if len(places) >= TASK_PREFIXES:
                    places.clear()
                place = places[(ip, where)] = f', "ip": "{ip:#x}", "where": ' + _ENCODE(where)
            if task is last[0] and task_id == last[1]:
                who = last[2]
            else:
                who = ', "comm": ' + _ENCODE(task.comm) + f', "pid": {int(task.pid)!r}, "cpu": {int(task.cpu)!r}, ' \
                    '"flags": ' + _ENCODE(task.flags) + f', "task": {int(task_id)!r}, "fields": {{'
                last[0], last[1], last[2] = task, task_id, who
            line = [head, _seconds_text(now), place, who]
            for label, fetch, piece in parts:
                line.append(label)
                line.append(piece(fetch(hit)))
            if caller is None and func is None and entry_time is None:  # a p event
                line.append('}, "caller": null, "func": null, "entry_time": null, "duration": null, "stack": null}\n')
            elif entry_time is None:
                line.append('}, "caller": ' + (f'"{caller:#x}"' if caller is not None else "null") + ', "func": '
                            + (_ENCODE(func) if func is not None else "null")
                            + ', "entry_time": null, "duration": null, "stack": null}\n')
            else:
                line.append('}, "caller": ' + (f'"{caller:#x}"' if caller is not None else "null") + ', "func": '
                            + (_ENCODE(func) if func is not None else "null")
                            + ', "entry_time": ' + _seconds_text(entry_time) + ', "duration": '
                            + _seconds_text(now - entry_time) + ', "stack": null}\n')
            write("".join(line))

        return emit

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        """A trace without records is still a file that says what it is."""
        self._start()
        self.stream.flush()


class PerfettoWriter(Writer):
    """One Trace Event Format JSON object, streamed: its ``traceEvents`` array is written event by
    event as records come (:class:`_PerfettoEvents` says which and when), the rest of the object
    at :meth:`close`.  Memory stays flat however long the trace: a few thousand events wait to be
    written in time order, and the ``p`` entries of calls that have not returned yet."""

    needs_entry_sp = True

    def __init__(self, stream: IO[str], process_name: str = "kpsdk trace") -> None:
        self.stream = stream
        self.process_name = process_name
        self._started = False
        self._events = _PerfettoEvents(process_name, self._put, as_text=True)

    def _put(self, event: Any) -> None:
        if self._started:
            self.stream.write(", " + event)
        else:
            self.stream.write('{"traceEvents": [' + event)
            self._started = True

    def write(self, record: TraceRecord) -> None:
        self._events.add(record)

    def event_writer(self, shape: EventShape) -> EventWrite | None:
        """A hit as a tuple of what its record would hold (its fields' values in order): an
        instant event is written from it without a record; a slice's end makes its record."""
        if type(self).write is not PerfettoWriter.write:
            return None
        fetches = tuple(fetch for _, fetch in shape.fetches)
        add = self._events.add

        def emit(now: float, ip: int, where: str, hit: HitContext, task: TaskInfo, task_id: int,
                 entry_sp: int | None, caller: int | None, func: str | None, entry_time: float | None) -> None:
            add((shape, now, ip, where, [fetch(hit) for fetch in fetches], task, task_id, entry_sp, caller,
                 func, entry_time))

        return emit

    def flush(self) -> None:
        """The events written so far reach the file (an unfinished JSON object: the run failed)."""
        self.stream.flush()

    def close(self) -> None:
        self._events.finish()
        if not self._started:
            self.stream.write('{"traceEvents": [')
        # json.dump would encode in pure Python, piece by piece (~3x the C encoder's time per record)
        rest = _ENCODE(_perfetto_document([], self._events.records, self._events.frames))
        self.stream.write("]" + rest[len('{"traceEvents": []'):] + "\n")
        self.stream.flush()


def _record_of(make: type[TraceRecord], shape: EventShape, now: float, ip: int, where: str, values: list[Any],
               task: TaskInfo, task_id: int, entry_sp: int | None, caller: int | None, func: str | None,
               entry_time: float | None) -> TraceRecord:
    """The record an event would have made for a hit the per-event path kept."""
    return make(shape.event, shape.group, shape.kind, now, ip, where,
                dict(zip((name for name, _ in shape.fetches), values, strict=True)), caller, func, entry_time,
                task_id, shape.definition, entry_sp, task.comm, task.pid, task.cpu, task.flags, shape.event_id)


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _json_args(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields as Perfetto args: values kept, faults spelled out."""
    return {k: (FAULT if v is None else v) for k, v in fields.items()}


#: the args key of an event's stack frames: ftrace's own word for the entry, and no field's name
#: (a fetch argument's name is an identifier), so it never hides a field
STACK_ARG = "<stack trace>"


class StackFrames:
    """The Trace Event Format's ``stackFrames`` table: one node per frame *in its stack*, its
    ``parent`` the caller's node, so that stacks sharing their outer frames share nodes; an
    event names its innermost frame's node (``"sf"``; a slice's end ``"esf"``), as the format's
    specification describes for catapult's viewer (chrome://tracing).  Whether ui.perfetto.dev's
    JSON importer shows it was not checked, so the frames are in the event's args as well
    (:data:`STACK_ARG`)."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, str]] = {}
        self._ids: dict[tuple[str | None, str], str] = {}

    def node(self, frames: tuple[str, ...]) -> str | None:
        """The id of the innermost frame of ``frames`` (innermost first); None for no frames."""
        parent: str | None = None
        for frame in reversed(frames):
            known = self._ids.get((parent, frame))
            if known is None:
                known = self._ids[(parent, frame)] = str(len(self._ids) + 1)
                entry = {"category": "kpsdk", "name": frame}
                if parent is not None:
                    entry["parent"] = parent
                self.table[known] = entry
            parent = known
        return parent


def _with_stack(event: dict[str, Any], record: TraceRecord, frames: StackFrames, key: str = "sf") -> None:
    """``record``'s stack on its Trace Event: the frame node (``sf``; ``esf`` for a slice's end)
    and the frames themselves in its args (:data:`STACK_ARG`, innermost first, as the text
    prints them; a slice's end: in ``args.return``)."""
    if record.stack is None:
        return
    node = frames.node(record.stack)
    if node is not None:
        event[key] = node
    args = event["args"]
    if key == "esf":
        args = args.setdefault("return", {})
    args[STACK_ARG] = list(record.stack)


def perfetto_trace(records: Iterable[Any], process_name: str = "kpsdk trace") -> dict[str, Any]:
    """The Trace Event Format object (``{"traceEvents": [...]}``) for these records (or a
    :class:`PerfettoWriter`'s per-event hits), as the writer writes it; with a ``stackFrames``
    table when records have stacks (``--stack``, a ``stacktrace`` trigger)."""
    events: list[Any] = []
    maker = _PerfettoEvents(process_name, events.append, as_text=False)
    for record in records:
        maker.add(record)
    maker.finish()
    return _perfetto_document(events, maker.records, maker.frames)


def _perfetto_document(events: list[Any], records: int, frames: StackFrames) -> dict[str, Any]:
    trace: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ns",
                             "otherData": {"generator": "kpsdk trace", "records": records}}
    if frames.table:
        trace["stackFrames"] = frames.table
    return trace


_FAULT_JSON = _encode_string(FAULT)
#: an event whose instants are made as dicts (see _PerfettoEvents._instant_of_entry)
_AS_DICT: tuple[str, tuple[str, ...]] = ("", ())
#: events held back to be written in time order: a slice is complete only when its function
#: returns, after the events inside it, and is written at its entry's time.  Within this many
#: events the array is in time order (as before it was streamed); a slice longer than that is
#: written later than events after its start, which the format allows ("The events do not have
#: to be in timestamp-sorted order") and ui.perfetto.dev and chrome://tracing sort
REORDER_WINDOW = 4096
#: entries of one function's calls open at once on one task (recursion) kept for their returns;
#: an older one is written as an instant (its slice then has no entry fields)
MAX_OPEN_CALLS = 4096
#: the per-where text of instant events kept (as TASK_PREFIXES)
_WHERES = 4096


class _PerfettoEvents:
    """The Trace Event Format's events of records and of per-event hits (tuples,
    :meth:`PerfettoWriter.event_writer`), made as they come and given to ``emit`` (dicts, or
    their JSON text with ``as_text``): the process and thread names first, then each event in
    time order within :data:`REORDER_WINDOW`.

    A return with its entry time is a slice from entry to return; a ``p`` hit on the same
    function at that call is its entry (its fields in the slice's args), found by the stack
    pointer at the function's entry: the newest open entry of that task at that address with
    the return's entry ``sp``; entries above it (deeper calls whose return was never seen,
    ``longjmp``) are dropped.  A ``p`` hit waits for its return while its call may be open:
    until a hit at the same address and task comes at the same or a shallower stack pointer
    (the call is over: stacks grow down), or :meth:`finish`; then it is an instant event.
    """

    def __init__(self, process_name: str, emit: Callable[[Any], None], as_text: bool,
                 window: int = REORDER_WINDOW) -> None:
        from kpsdk.trace.events import TraceRecord  # (the events module imports this one)

        self._make = TraceRecord
        self.pid = 1
        self.frames = StackFrames()
        self.records = 0
        self._emit, self._as_text, self._window = emit, as_text, window
        self._process_name: str | None = process_name
        self._tasks: set[int] = set()
        self._unnamed: set[int] = set()  # tasks seen whose thread_name is not written yet
        self._open: dict[tuple[int, int], list[Any]] = {}  # (task, ip) -> entries, oldest first
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        # an instant event's text, made from a hit's tuple as _ENCODE writes _instant's dict: per event its
        # head and labels (by id: the shape lives in the hits), per where its args' start
        self._heads: dict[int, tuple[Any, tuple[str, tuple[str, ...]]]] = {}
        self._wheres: dict[str, str] = {}

    def add(self, record: Any) -> None:
        """One record, or one per-event hit (a tuple)."""
        self.records += 1
        hit = type(record) is tuple
        task = record[6] if hit else record.task
        if task not in self._tasks:
            self._tasks.add(task)
            self._unnamed.add(task)
        if (record[0].kind if hit else record.kind) == "p":
            self._entry(record, hit, task)
            return
        made: TraceRecord = _record_of(self._make, *record) if hit else record
        if made.entry_time is not None:
            self._slice(made)
        else:
            self._push(_instant(made, self.pid, self.frames))

    def finish(self) -> None:
        """Every entry still open is an instant event; every event held is given out."""
        for stack in self._open.values():
            for entry in stack:
                self._push(self._instant_of_entry(entry))
        self._open.clear()
        self._names()
        while self._heap:
            self._emit(heapq.heappop(self._heap)[2])

    def _entry(self, record: Any, hit: bool, task: int) -> None:
        key = (task, record[2] if hit else record.ip)
        sp = record[7] if hit else record.entry_sp
        stack = self._open.get(key)
        if stack is None:
            stack = self._open[key] = []
        if sp is not None:  # a call at this stack position or above it: the ones at it or deeper are over
            done = []
            while stack and (top := _entry_sp(stack[-1])) is not None and top <= sp:
                done.append(stack.pop())
            for entry in reversed(done):
                self._push(self._instant_of_entry(entry))
        stack.append(record)
        if len(stack) > MAX_OPEN_CALLS:
            self._push(self._instant_of_entry(stack.pop(0)))

    def _slice(self, record: TraceRecord) -> None:
        key = (record.task, record.ip)
        stack = self._open.get(key)
        entry = _entry_of(record, stack) if stack else None
        if stack is not None and not stack:
            del self._open[key]
        entry_time = record.entry_time or 0.0
        args: dict[str, Any] = {"return": {"event": record.event, "caller": record.where.split(" <- ")[0],
                                           **_json_args(record.fields)}}
        slice_event = {"ph": "X", "name": record.func or record.event, "cat": record.group, "pid": self.pid,
                       "tid": record.task, "ts": _us(entry_time), "dur": _us(record.time - entry_time),
                       "args": args}
        if entry is not None:
            args["entry"] = {"event": entry.event, **_json_args(entry.fields)}
            if entry.stack is not None:  # the stack at the entry: the slice's start
                node = self.frames.node(entry.stack)
                if node is not None:
                    slice_event["sf"] = node
                args["entry"][STACK_ARG] = list(entry.stack)
        _with_stack(slice_event, record, self.frames, "esf")
        self._push(slice_event)

    def _instant_of_entry(self, entry: Any) -> Any:
        """A ``p`` record or hit that no return paired: an instant event (a hit's, as its time and
        text, written without a dict: a dict and its encoding per event were most of its cost)."""
        if type(entry) is not tuple:
            return _instant(entry, self.pid, self.frames)
        if not self._as_text:
            return _instant(_record_of(self._make, *entry), self.pid, self.frames)
        shape = entry[0]
        known = self._heads.get(id(shape))
        if known is None or known[0] is not shape:
            made = (
                '{"ph": "i", "s": "t", "name": ' + _encode_string(shape.event) + ', "cat": '
                + _encode_string(shape.group) + f', "pid": {self.pid!r}, "tid": ',
                tuple(", " + _encode_string(name) + ": " for name, _ in shape.fetches)) \
                if all(name != "where" for name, _ in shape.fetches) else _AS_DICT
            known = self._heads[id(shape)] = (shape, made)
        made = known[1]
        if made is _AS_DICT:  # a field named where: in the dict it takes the where key's place
            return _instant(_record_of(self._make, *entry), self.pid, self.frames)
        head, labels = made
        place = self._wheres.get(entry[3])
        if place is None:
            if len(self._wheres) >= _WHERES:
                self._wheres.clear()
            place = self._wheres[entry[3]] = ', "args": {"where": ' + _encode_string(entry[3])
        ts = _us_text(entry[1])
        text = [head, int.__repr__(entry[6]), ', "ts": ', ts, place]
        for label, value in zip(labels, entry[4], strict=True):
            text.append(label)
            text.append(_FAULT_JSON if value is None else _encode_value(value))
        text.append("}}")
        return (float(ts), "".join(text))

    def _push(self, event: Any) -> None:
        """Hold an event (a dict, or a hit's ``(ts, text)``); give out the oldest beyond the window."""
        if type(event) is tuple:
            ts, item = event
        else:
            ts, item = event["ts"], _ENCODE(event) if self._as_text else event
        heapq.heappush(self._heap, (ts, next(self._seq), item))
        if len(self._heap) > self._window:
            self._names()
            self._emit(heapq.heappop(self._heap)[2])

    def _names(self) -> None:
        """The process's name, then each task's thread name, before the first event that names it."""
        meta: list[dict[str, Any]] = []
        if self._process_name is not None:
            meta.append({"ph": "M", "pid": self.pid, "tid": 0, "name": "process_name",
                         "args": {"name": self._process_name}})
            self._process_name = None
        for task in sorted(self._unnamed):
            meta.append({"ph": "M", "pid": self.pid, "tid": task, "name": "thread_name",
                         "args": {"name": f"task {task}"}})
        self._unnamed.clear()
        for event in meta:
            self._emit(_ENCODE(event) if self._as_text else event)


def _entry_sp(entry: Any) -> int | None:
    return entry[7] if type(entry) is tuple else entry.entry_sp  # type: ignore[no-any-return]


def _entry_of(ret: TraceRecord, stack: list[Any]) -> TraceRecord | None:
    """The ``p`` record of the call ``ret`` returns from, taken off ``stack`` (the entries
    at that function, oldest first: records or per-event hits) with the entries above it: deeper
    calls whose return was never seen (``longjmp``).  The call is the newest entry at its entry
    stack pointer; the handlers of one hit run in whatever order the probes were
    registered (K5), so times alone cannot tell it from a deeper one."""
    for i in range(len(stack) - 1, -1, -1):
        if _entry_sp(stack[i]) == ret.entry_sp:
            entry = stack[i]
            del stack[i:]
            return _record_of(type(ret), *entry) if type(entry) is tuple else entry  # type: ignore[no-any-return]
    return None


def _instant(record: TraceRecord, pid: int, frames: StackFrames) -> dict[str, Any]:
    event = {"ph": "i", "s": "t", "name": record.event, "cat": record.group, "pid": pid, "tid": record.task,
             "ts": _us(record.time), "args": {"where": record.where, **_json_args(record.fields)}}
    _with_stack(event, record, frames)
    return event


def output_format(name: str) -> OutputFormat[Writer]:
    """The loaded format called ``name``; :class:`UnknownNameError` lists the others."""
    from kpsdk.registry import get_registry

    formats = get_registry().trace_formats
    if name not in formats:
        raise UnknownNameError("output format", name, list(formats))
    return formats[name]


def make_writer(fmt: str, stream: IO[Any], context: WriterContext | None = None) -> Writer:
    """A writer of the loaded format ``fmt`` on ``stream`` (binary for a binary format)."""
    return output_format(fmt).open(stream, context or WriterContext())
