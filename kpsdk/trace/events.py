"""Trace events on a session: definitions become probes, hits become records.

One module, because ``Trace`` and ``TraceEvent`` are one object model: events register,
record and leave through their trace.

``s.trace("p:add a=%di b=%si", sink=print)`` parses each definition with the
session's arch (:mod:`kpsdk.trace.grammar`), binds its fetch arguments
(:mod:`kpsdk.trace.fetch`) and registers one probe per event, all or none (K8):

======================  =========================================================
definition              probe
======================  =========================================================
``p SYM[+off]|ADDR``    :class:`kpsdk.Kprobe` with a pre_handler
``r SYM``, ``%return``  :class:`kpsdk.Kretprobe`: entry_handler (time, ``$argN``)
                        and handler
``p PATH:OFFSET``       ``kpsdk.Uprobe(path=, offset=, pre_handler=)``
``r PATH:OFFSET``       ``kpsdk.Uretprobe(path=, offset=, handler=)``
``-:[GRP/]EVENT``       unregisters an event defined before
======================  =========================================================

Each hit makes a :class:`TraceRecord` and hands it to the sink (a callable,
or a list to append to; by default :attr:`Trace.records`).  A return record
carries its call's entry time, so latency needs no second probe.
"""

from __future__ import annotations

import errno
import inspect
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any

from kpsdk.binfmt.symbols import did_you_mean
from kpsdk.errors import ArgumentError, KprobeError, KpsdkError, TriggerError, shown
from kpsdk.kernel.tasks import NO_FLAGS, UNKNOWN_COMM, TaskInfo, check_comm, check_pid, program_comm
from kpsdk.target import Target
from kpsdk.trace.common import ANY_EVENT_FIELDS, FIRST_EVENT_ID, common_values
from kpsdk.trace.fetch import BoundArg, HitContext, Value, entry_args, format_symbol
from kpsdk.trace.filter import Filter, parse_filter
from kpsdk.trace.grammar import BTF_ARGS_VERSION, Parser, ProbeDef, TraceDefinitionError, arg_error
from kpsdk.trace.histtrigger import register
from kpsdk.trace.native import NativeTrace, native_trace
from kpsdk.trace.output import EventShape, EventWrite, Writer, field_types
from kpsdk.trace.triggers import STACK_DEPTH, EventTriggers, StackTrigger, matches, parse_trigger, split_trigger

if TYPE_CHECKING:
    from kpsdk.probe import Probe
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session
    from kpsdk.trace.btfargs import BtfArgs
    from kpsdk.trace.histtrigger import HistTrigger

Sink = Callable[["TraceRecord"], Any] | list["TraceRecord"]


#: what the timestamps are where the target has no guest clock kpsdk reads (the trace header)
HOST_TIME_NOTE = ("TIMESTAMP: seconds since the trace started, on the host's monotonic clock "
                  "(not the guest's clock)")


@dataclass(slots=True)
class TraceRecord:
    """One event: what the kernel's trace buffer holds for a hit, as a Python object.

    :param event: the event name (``p_add_0``); ``group`` its group (``kprobes``).
    :param kind: ``p`` (a probe hit) or ``r`` (a function returned).
    :param time: seconds: the guest's own trace clock where the target has one kpsdk reads
        (a riscv64 kernel's sched_clock: seconds since its boot), else since the trace
        started (``time.perf_counter``); :attr:`Trace.time_note` says which.
    :param ip: the probed address (``p``) or the function's address (``r``).
    :param where: ``add+0x0/0x14`` (``p``), or ``main+0x1c/0x80 <- add`` (``r``).
    :param fields: each fetch argument's value by name: an int (signed types
        negative), a str (strings, ``symbol``), a list (arrays), None (fault).
    :param caller: ``r``: the return address.  ``entry_time``: ``r``: when that call entered.
    :param task: a small number per task seen (1, 2...): the program, or a kernel stack.
    :param entry_sp: the stack pointer at the function's entry: of the hit (``p``), of the
        returning call's entry (``r``).  It tells which ``p`` record a return belongs to
        (``perfetto`` slices), whatever order the handlers of one hit ran in.
    :param comm: ``pid``, ``cpu``, ``flags``: the task the hit ran in, as the kernel's
        trace line prefix shows it (``cat-85 [000] .....``; see :mod:`kpsdk.kernel.tasks`).
    """

    event: str
    group: str
    kind: str
    time: float
    ip: int
    where: str
    fields: dict[str, Value]
    caller: int | None = None
    func: str | None = None
    entry_time: float | None = None
    task: int = 1
    definition: ProbeDef | None = field(default=None, repr=False, compare=False)
    entry_sp: int | None = field(default=None, repr=False, compare=False)
    comm: str = UNKNOWN_COMM
    pid: int = 0
    cpu: int = 0
    flags: str = NO_FLAGS
    #: the event's id (``common_type``, the ``ID:`` of its ``format``; :mod:`kpsdk.trace.common`); 0: none
    event_id: int = field(default=0, repr=False, compare=False)
    #: the stack at the hit (``--stack``, a ``stacktrace`` trigger): ``sym+0xoff/0xsize`` per frame, innermost first
    stack: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    #: one ``after`` per stack entry the trace shows after the event's line (``--stack``, each
    #: stacktrace trigger that fired: the kernel writes one entry for each)
    stack_where: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def duration(self) -> float | None:
        """Seconds from the call's entry to this return (``r`` records with an entry time)."""
        return None if self.entry_time is None else self.time - self.entry_time

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: one ``jsonl`` line (schema :data:`kpsdk.trace.output.JSONL_SCHEMA`).

        Every key is always there (``null`` where it does not apply: ``stack`` is the
        frames of ``--stack`` or a ``stacktrace`` trigger, innermost first); addresses and
        hex-typed fields are ``"0x..."`` strings, and integers JSON readers cannot hold
        exactly (beyond 2**53: jq's doubles) decimal strings.
        """
        converters = json_fields(self.definition)
        return {"event": self.event, "group": self.group, "kind": self.kind, "time": round(self.time, 9),
                "ip": f"{self.ip:#x}", "where": self.where, "comm": self.comm, "pid": self.pid, "cpu": self.cpu,
                "flags": self.flags, "task": self.task,
                "fields": {name: converters[name](value) if name in converters else json_value(value, None)
                           for name, value in self.fields.items()},
                "caller": f"{self.caller:#x}" if self.caller is not None else None, "func": self.func,
                "entry_time": round(self.entry_time, 9) if self.entry_time is not None else None,
                "duration": round(self.time - self.entry_time, 9) if self.entry_time is not None else None,
                "stack": list(self.stack) if self.stack is not None else None}


#: the largest integer a JSON reader that uses doubles (jq, JavaScript) holds exactly
JSON_SAFE_INT = 2**53


def json_value(value: Value, argtype: Any) -> Any:
    """A field's value in JSON: hex-typed integers as ``"0x..."`` (as the text line prints
    them), other integers as numbers when a double holds them exactly, else decimal
    strings; strings as they are; arrays element by element; a fault as null."""
    if isinstance(value, list):
        return [json_value(v, argtype) for v in value]
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    display = argtype.display if argtype is not None else "x"
    if display == "x":
        return f"{value:#x}"
    return value if -JSON_SAFE_INT <= value <= JSON_SAFE_INT else str(value)


def json_converter(argtype: Any) -> Callable[[Value], Any]:
    """:func:`json_value` for one type, with the integer case (most fields) decided once."""
    display = argtype.display if argtype is not None else "x"
    if display == "x":
        return lambda v: f"{v:#x}" if type(v) is int else json_value(v, argtype)
    return lambda v: ((v if -JSON_SAFE_INT <= v <= JSON_SAFE_INT else str(v)) if type(v) is int
                      else json_value(v, argtype))


#: per definition (by id, with the definition to tell a reused id): each field's JSON converter
_JSON_FIELDS: dict[int, tuple[ProbeDef, dict[str, Callable[[Value], Any]]]] = {}


def json_fields(definition: ProbeDef | None) -> dict[str, Callable[[Value], Any]]:
    """Each field's JSON converter (:func:`json_converter`) by name, made once per definition."""
    if definition is None:
        return {}
    known = _JSON_FIELDS.get(id(definition))
    if known is None or known[0] is not definition:
        known = _JSON_FIELDS[id(definition)] = (definition, {name: json_converter(t) for name, t in
                                                             field_types(definition).items()})
    return known[1]


class TraceEvent:
    """One defined event: its definition, bound arguments, probe and counts."""

    def __init__(self, trace: Trace, definition: ProbeDef, args: list[BoundArg]) -> None:
        self.trace = trace
        self.definition = definition
        self.args = args
        self.name = definition.event
        self.group = definition.group
        self.probe: Probe | None = None
        self.recorded = 0
        self._where: dict[int, str] = {}
        #: per kretprobe instance in flight: (entry time, the $argN values, the function's address)
        self._entries: dict[int, tuple[float, dict[int, int | None] | None, int]] = {}
        #: the event's id (``common_type``): given when the trace takes the event (:meth:`Trace.add`)
        self.id = 0
        names = {a.name for a in args}
        self.filtered = trace.filter is not None and trace.filter.applies_to(names | ANY_EVENT_FIELDS)
        #: the filter reads a common or generic field (``common_pid``, ``comm``...): it sees those too
        self._filter_common = self.filtered and trace.filter is not None and not trace.filter.applies_to(names)
        self._arg_numbers = sorted({n.index for a in definition.args for n in a.fetch.walk() if n.kind == "arg"})
        self.triggers = EventTriggers()
        #: the sink writer's per-event path (:meth:`Writer.event_writer`), made at the first hit
        #: (:meth:`_event_writer`); None: records.  Set back to unmade when a trigger is added.
        self.fast: EventWrite | None | object = UNMADE
        #: the per-event path wants the entry's stack pointer
        self._fast_sp = False
        #: what a p hit's fetches read (its registers, no entry values): the target hands the
        #: same registers object to every hit, so it is made again only when that changes
        self._hit = HitContext(None)  # type: ignore[arg-type]

    @property
    def hits(self) -> int:
        return int(getattr(self.probe, "hits", 0))

    @property
    def missed(self) -> int:
        return int(getattr(self.probe, "nmissed", 0))

    # -- handlers -----------------------------------------------------------------------------

    def _values(self, hit: HitContext) -> dict[str, Value]:
        return {a.name: a.value(hit) for a in self.args}

    def _emit(self, record: TraceRecord, regs: PtRegs) -> None:
        trace = self.trace
        if self.filtered and trace.filter is not None and \
                not trace.filter(common_values(record) if self._filter_common else record.fields):
            return
        self.recorded += 1
        # every stacktrace trigger sees the hit (each counts its own N down) and writes its own
        # stack entry after the event's, filtered or not, as Debian's 6.1 kernel does
        # (tests/test_trace_triggers_kernel.py)
        stacks = self.triggers.stacks
        if stacks or trace.stack:
            where = ["after" for t in stacks if t.wants(record)]
            if trace.stack:
                where.append("after")
            if where:
                record.stack = trace.stack_of(regs)
                record.stack_where = tuple(where)
        trace.deliver(record)
        hists = self.triggers.hists
        if hists:
            for hist in hists:
                hist.hit(record)

    def _event_writer(self) -> EventWrite | None:
        """The sink writer's per-event path, where nothing but the writer wants this event's
        records: no filter on it, no trigger, no ``--stack``, the sink a :class:`Writer`'s own
        ``write`` (not a function around it: that one may want the record)."""
        trace = self.trace
        fast: EventWrite | None = None
        writer = writer_of(trace._sink)
        if writer is not None and not self.filtered and not trace.stack and not self.triggers.stacks \
                and not self.triggers.hists and len({a.name for a in self.args}) == len(self.args):
            fast = writer.event_writer(EventShape(self.name, self.group, "r" if self.definition.is_return else "p",
                                                  self.definition, tuple((a.name, a.value) for a in self.args),
                                                  self.id))
            # a p hit's stack pointer pairs it with a return of the same call: wanted only where
            # this trace has return events (a register read per hit; trace.add renews the paths)
            self._fast_sp = writer.needs_entry_sp and any(e.definition.is_return for e in trace.events)
        self.fast = fast
        return fast

    def on_hit(self, p: Any, regs: PtRegs) -> int:
        """pre_handler of ``p`` events (kprobes and uprobes)."""
        trace = self.trace
        if trace.native is not None:  # records of native events written before this hit come first
            trace.native.drain()
        now = perf_counter() - trace.start_time if trace.guest_clock is None else trace.now()
        ip = int(regs.ip)
        where = self._where.get(ip)
        if where is None:
            where = self._where[ip] = format_symbol(trace.session, ip)
        if trace.tasks_fixed:
            task, task_id = trace.fixed_task, 1
        else:
            task, task_id = trace.task_info(), trace.task_id()
        hit = self._hit
        if hit.regs is not regs:  # one context a hit, kept while the target hands the same registers
            hit = self._hit = HitContext(regs)
        fast = self.fast
        if fast is UNMADE:
            fast = self._event_writer()
        if fast is not None:
            self.recorded += 1
            fast(now, ip, where, hit, task, task_id,  # type: ignore[operator]
                 int(regs.sp) if self._fast_sp else None, None, None, None)
            return 0
        record = TraceRecord(self.name, self.group, "p", now, ip, where, {a.name: a.value(hit) for a in self.args},
                             None, None, None, task_id, self.definition, int(regs.sp),
                             task.comm, task.pid, task.cpu, task.flags, self.id)
        self._emit(record, regs)
        return 0

    def on_entry(self, ri: Any, regs: PtRegs) -> int:
        """entry_handler of ``r`` events: the entry time and the ``$argN`` a return fetches."""
        args = entry_args(regs, self._arg_numbers) if self._arg_numbers else None
        self._entries[id(ri)] = (self.trace.now(), args, int(regs.ip))
        return 0

    def on_return(self, *handler_args: Any) -> None:
        """handler of ``r`` events: ``(ri, regs)`` for kretprobes, and what Uretprobe passes."""
        regs: PtRegs = handler_args[-1]
        ri = handler_args[0] if len(handler_args) > 1 else None
        if self.trace.native is not None:
            self.trace.native.drain()
        now = self.trace.now()
        entry_time, entry_args, entry_ip = self._entries.pop(id(ri), (None, None, None))
        if self._arg_numbers and entry_args is None:
            entry_args = {}
        session = self.trace.session
        caller = getattr(ri, "ret_addr", None)
        if caller is None:
            caller = int(regs.ip)
        func_addr = entry_ip if entry_ip is not None else self.func_addr
        func = format_symbol(session, func_addr, with_offset=False) if func_addr is not None else "?"
        where = f"{format_symbol(session, caller)} <- {func}"
        hit = HitContext(regs, entry_args)
        task = self.trace.task_info()
        fast = self.fast
        if fast is UNMADE:
            fast = self._event_writer()
        if fast is not None:
            self.recorded += 1
            fast(now, func_addr or 0, where, hit, task, self.trace.task_id(),  # type: ignore[operator]
                 getattr(ri, "frame", None), caller, func, entry_time)
            return
        record = TraceRecord(self.name, self.group, "r", now, func_addr or 0, where, self._values(hit),
                             caller=caller, func=func, entry_time=entry_time, task=self.trace.task_id(),
                             definition=self.definition, entry_sp=getattr(ri, "frame", None),
                             comm=task.comm, pid=task.pid, cpu=task.cpu, flags=task.flags, event_id=self.id)
        self._emit(record, regs)

    @property
    def func_addr(self) -> int | None:
        """The probed function's address, once registered."""
        probe = self.probe
        if probe is None:
            return None
        manager = self.trace.session.target.manager
        point = manager.point_of(probe)
        if point is not None:
            return int(point.addr)
        addr = getattr(probe, "addr", None)
        return int(addr) if addr is not None else None


#: :attr:`TraceEvent.fast` before the event's first hit
UNMADE = object()


def writer_of(sink: Sink | None) -> Writer | None:
    """The :class:`Writer` whose own ``write`` the sink is (``sink=writer.write``), else None."""
    writer = getattr(sink, "__self__", None)
    if isinstance(writer, Writer) and getattr(sink, "__func__", None) is type(writer).write:
        return writer
    return None


#: the events alive on each session, by ``group/event``: EVENT_EXIST and ``-:`` look here
_ALIVE: weakref.WeakKeyDictionary[Any, dict[str, TraceEvent]] = weakref.WeakKeyDictionary()


def alive_events(session: Session) -> dict[str, TraceEvent]:
    return _ALIVE.setdefault(session, {})


class Trace:
    """Events registered on a session by :meth:`Session.trace`; :meth:`close` removes them."""

    def __init__(self, session: Session, sink: Sink | None = None, filter: str | Filter | None = None,  # noqa: A002
                 comm: str | None = None, pid: int | None = None, stack: bool = False) -> None:
        if filter is not None and not isinstance(filter, str | Filter):
            raise ArgumentError(f"filter={shown(filter)}: want an expression (str) or a Filter")
        if sink is not None and not (isinstance(sink, list) or callable(sink)):
            raise ArgumentError(f"sink={shown(sink)}: want a callable or a list")
        self.session = session
        self.records: list[TraceRecord] = []
        self.filter: Filter | None = parse_filter(filter) if isinstance(filter, str) else filter
        self.events: list[TraceEvent] = []
        #: records of the events this trace took and let go (:meth:`remove`, :meth:`close`), by
        #: name: :attr:`counts` adds them to the live events' own counts
        self._retired: Counter[str] = Counter()
        self.start_time = time.perf_counter()
        target_type = type(session.target)
        #: the target has no tasks of its own (Unicorn): every hit is task 1, :attr:`fixed_task`,
        #: known without asking the target at each hit
        self.tasks_fixed = target_type.current_task is Target.current_task and \
            target_type.task_info is Target.task_info
        #: every record gets its stack (``--stack``, ftrace's ``options/stacktrace``)
        self.stack = bool(stack)
        #: the next event's id (``common_type``)
        self._next_id = FIRST_EVENT_ID
        #: the first hist trigger of each ``name=NAME``, whose table later ones of that name share
        self._named: dict[str, HistTrigger] = {}
        self._sink = sink
        self._tasks: dict[int, int] = {}
        self._task_of: Callable[[], int] | None = getattr(session.target, "current_task", None)
        files = session.target.mapped_files()
        #: the task of targets without tasks of their own (Unicorn): the program's name and the
        #: pid the program is told (1000 for a Linux program), else 1
        self.fixed_task = TaskInfo(check_comm(comm) if comm is not None else
                                   program_comm(files[0].path) if files else "kpsdk",
                                   check_pid(pid) if pid is not None else session.target.program_pid() or 1)
        #: the target kernel's version, whose rules the definitions follow (None: not a kernel)
        self.kernel = _kernel_of(session)
        #: that kernel's BTF, where it takes BTF fetch arguments (since 6.5) and its image has BTF
        self.btf = _btf_of(session, self.kernel)
        #: where the prefix's comm and pid come from, for the trace header
        self.tasks_note = session.target.prepare_tasks() or \
            f"comm-pid: {self.fixed_task.comm}-{self.fixed_task.pid}, fixed (the target has no tasks)"
        clock = session.target.prepare_clock()
        #: the guest's clock in ns at a hit (a kernel's sched_clock), None: the host's is used
        self.guest_clock: Callable[[], int | None] | None = session.target.clock_ns if clock else None
        self._last_guest = 0.0
        #: what the timestamps are, for the trace header
        self.time_note = f"TIMESTAMP: seconds on {clock}" if clock else HOST_TIME_NOTE
        #: the events whose fetches run in C at the hit (:mod:`kpsdk.trace.native`), made at the
        #: first registration where the target runs fetch programs
        self.native: NativeTrace | None = None
        self._native_asked = False

    def renew_event_writers(self) -> None:
        """The sink's writer changed (``kpsdk trace`` opens its output after the events are
        defined): each event asks it for its per-event path again at its next hit."""
        for event in self.events:
            event.fast = UNMADE
        if self.native is not None:
            self.native.renew()

    # -- the clock and tasks ---------------------------------------------------------------------

    def now(self) -> float:
        """A hit's time stamp in seconds: the guest's clock where the target reads one (the
        kernel's own trace clock), else the host's since the trace started."""
        if self.guest_clock is not None:
            try:
                ns = self.guest_clock()
            except KpsdkError:  # cd could not be read: the last time seen, not the host's
                ns = None
            if ns is not None:
                self._last_guest = ns / 1e9
            return self._last_guest
        return time.perf_counter() - self.start_time

    def task_id(self) -> int:
        """A small number per task (kernel stacks on a live kernel; 1 for a program)."""
        if self._task_of is None:
            return 1
        try:
            raw = int(self._task_of())
        except KpsdkError:
            return 1
        return self._tasks.setdefault(raw, len(self._tasks) + 1)

    def task_info(self) -> TaskInfo:
        """The task the hit runs in (the target's, else :attr:`fixed_task`)."""
        try:
            info = self.session.target.task_info()
        except KpsdkError:  # current could not be read (a fault): the kernel's "<...>"
            return TaskInfo(UNKNOWN_COMM, 0)
        return info if info is not None else self.fixed_task

    def stack_of(self, regs: PtRegs) -> tuple[str, ...]:
        """The hit's stack as ftrace prints its frames (``sym+0xoff/0xsize``): kpsdk's backtrace,
        which puts the real return address where a return probe's trampoline stands."""
        from kpsdk.backtrace import backtrace

        session = self.session
        try:
            frames = backtrace(session.target, regs, STACK_DEPTH)
        except KpsdkError:
            return ()
        return tuple(format_symbol(session, f.pc) for f in frames)

    def deliver(self, record: TraceRecord) -> None:
        sink = self._sink
        if sink is None:
            self.records.append(record)
        elif isinstance(sink, list):
            sink.append(record)
        else:
            sink(record)

    # -- definitions ------------------------------------------------------------------------------

    def add(self, definitions: str | Iterable[str]) -> list[TraceEvent]:
        """Parse, bind and register definitions, all or none; ``-:`` lines remove events."""
        lines = _lines(definitions)
        parser = Parser(self.session.arch, sessions=[self.session], kernel=self.kernel, btf=self.btf)
        alive = alive_events(self.session)
        pending: list[TraceEvent] = []
        removals: list[TraceEvent] = []
        for line in lines:
            definition = parser.parse(line)
            if definition.op == "-":
                found = _find(pending, definition) or _find(list(alive.values()), definition)
                if found is None:
                    raise KprobeError(errno.ENOENT, f"{line!r}: no event {definition.event!r} to clear")
                if found in pending:
                    pending.remove(found)
                else:
                    removals.append(found)
                continue
            if definition.full_name in alive or any(e.definition.full_name == definition.full_name
                                                    for e in pending):
                raise TraceDefinitionError("EVENT_EXIST", line, line.find(":") + 1 if definition.explicit_event
                                           else 0, definition.full_name,
                                           "trace_uprobe" if definition.is_uprobe else "trace_kprobe")
            pending.append(self._bind(definition))
        for event in removals:
            event.trace.remove(event)
        self._register(pending)
        self.renew_event_writers()  # a new return event may want the p events' stack pointers
        return pending

    def _bind(self, definition: ProbeDef) -> TraceEvent:
        subsystem = "trace_uprobe" if definition.is_uprobe else "trace_kprobe"
        session = self.session
        if definition.symbol is not None and definition.symbol not in session.symbols:
            word = definition.text.split()[1]
            raise TraceDefinitionError("BAD_PROBE_ADDR", definition.text, definition.text.find(word),
                                       f"unknown symbol {definition.symbol!r}"
                                       + did_you_mean(session.symbols.suggest(definition.symbol)), subsystem)
        if definition.addr is not None and any(n.kind == "arg" for a in definition.args for n in a.fetch.walk()):
            sym = session.symbols.containing(definition.addr & ~1 if session.arch.has_thumb else definition.addr)
            if sym is not None and not definition.is_return and (definition.addr & ~1) != sym.address:
                col = next(n.column for a in definition.args for n in a.fetch.walk() if n.kind == "arg")
                raise TraceDefinitionError(arg_error(self.kernel, False, False) or "NOFENTRY_ARGS", definition.text,
                                           col, subsystem=subsystem)
        args = [BoundArg(a, session, definition.text, subsystem, definition.path) for a in definition.args]
        return TraceEvent(self, definition, args)

    def _register(self, events: list[TraceEvent]) -> None:
        """One probe per event; ``p`` events first, so that at one address their records come first."""
        session = self.session
        registry = session.registry
        probes: list[Probe] = []
        for event in events:  # ids in the order the events were defined, as the kernel gives them
            event.id = self._next_id
            self._next_id += 1
        if not self._native_asked:
            self._native_asked = True
            self.native = native_trace(self)
        for event in sorted(events, key=lambda e: e.definition.is_return):
            event.probe = self._make_probe(registry, event)
            event.probe.name = event.name
            session.target.declare_fetches(event.probe, event.args)
            if self.native is not None:
                self.native.prepare(event)
            probes.append(event.probe)
        session.register_many(probes)
        alive = alive_events(session)
        for event in events:
            self.events.append(event)
            alive[event.definition.full_name] = event

    def _make_probe(self, registry: Any, event: TraceEvent) -> Probe:
        d = event.definition
        if d.is_uprobe:
            kind = "uretprobe" if d.is_return else "uprobe"
            cls = _probe_class(registry, kind)
            if d.is_return:
                params = inspect.signature(cls).parameters
                if "entry_handler" in params:
                    return cls(path=d.path, offset=d.offset, handler=event.on_return,  # type: ignore[no-any-return]
                               entry_handler=event.on_entry)
                if d.needs_entry():
                    col = next(n.column for a in d.args for n in a.fetch.walk() if n.kind == "arg")
                    raise TraceDefinitionError("NOFENTRY_ARGS", d.text, col,
                                               "$argN on a uprobe return is not supported yet (Uretprobe has "
                                               "no entry_handler)", "trace_uprobe")
                return cls(path=d.path, offset=d.offset, handler=event.on_return)  # type: ignore[no-any-return]
            return cls(path=d.path, offset=d.offset, pre_handler=event.on_hit)  # type: ignore[no-any-return]
        where: dict[str, Any] = {"symbol_name": d.symbol, "offset": d.offset} if d.symbol is not None \
            else {"addr": d.addr}
        if d.is_return:
            cls = _probe_class(registry, "kretprobe")
            return cls(**where, handler=event.on_return, entry_handler=event.on_entry,  # type: ignore[no-any-return]
                       maxactive=d.maxactive)
        cls = _probe_class(registry, "kprobe")
        return cls(**where, pre_handler=event.on_hit)  # type: ignore[no-any-return]

    def remove(self, event: TraceEvent) -> None:
        """Unregister one event (``-:EVENT``)."""
        if self.native is not None:
            self.native.forget(event)
        if event.probe is not None and event.probe.registered:
            self.session.unregister(event.probe)
        alive = alive_events(self.session)
        if alive.get(event.definition.full_name) is event:
            del alive[event.definition.full_name]
        self._let_go(event)

    def _let_go(self, event: TraceEvent) -> None:
        """``event`` leaves the trace; its records stay in :attr:`counts`."""
        if event in self.events:
            self.events.remove(event)
            self._retired[event.name] += event.recorded

    def close(self) -> None:
        """Unregister every event of this trace."""
        for event in list(self.events):
            if self.session.closed:
                self._let_go(event)
                continue
            self.remove(event)
        if self.native is not None and not self.session.closed:
            self.native.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- triggers ------------------------------------------------------------------------------------

    def add_trigger(self, text: str) -> HistTrigger | StackTrigger:
        """``EVENT:COMMAND`` (``myopen:hist:keys=common_pid``, ``myopen:stacktrace``): what the kernel
        takes in ``events/GROUP/EVENT/trigger``, on one of this trace's events."""
        if not isinstance(text, str):
            raise ArgumentError(f"trigger {shown(text)}: want a str ('EVENT:hist:keys=FIELD')")
        name, command = split_trigger(text)
        event = next((e for e in self.events if matches(name, e.name, e.group)), None)
        if event is None:
            known = ", ".join(e.name for e in self.events) or "none"
            raise TriggerError("ENOENT", text, 0, f"no event {name!r} (events: {known})", "trigger")
        session = self.session
        trigger = parse_trigger(command, event.definition, session.arch.word_size,
                                lambda addr, offset: format_symbol(session, addr, with_offset=offset),
                                session.arch.kernel_log2_overflow)
        if isinstance(trigger, StackTrigger):
            event.triggers.stacks.append(trigger)
            event.fast = UNMADE  # the trigger wants the records
        else:
            added = register(trigger, event.triggers.hists, self._named, f"hist:{event.group}:{event.name}")
            if added is not None:
                event.triggers.hists.append(added)
                event.fast = UNMADE
        if self.native is not None:  # counted in C where it can be, else the records go to Python
            self.native.triggers_changed(event)
        return trigger

    def hists(self) -> list[tuple[TraceEvent, HistTrigger]]:
        """Each hist trigger with its event, in the order they were added per event."""
        return [(e, h) for e in self.events for h in e.triggers.hists]

    def hist_text(self) -> str:
        """Each event's ``hist`` file, after a ``==> events/GROUP/EVENT/hist <==`` line (as ``head``
        names the files it shows); the triggers of one event two blank lines apart, as the kernel
        prints them (``hist_show``)."""
        parts = []
        for event in self.events:
            if event.triggers.hists:
                body = "\n\n".join(h.render() for h in event.triggers.hists)
                parts.append(f"==> events/{event.group}/{event.name}/hist <==\n{body}")
        return "\n".join(parts)

    # -- reports ------------------------------------------------------------------------------------

    @property
    def counts(self) -> Counter[str]:
        """Records delivered per event name, over every event this trace took (removed and
        closed ones too): a new Counter, added up when asked (a count per hit was a dict
        update on every event's path)."""
        out = Counter(self._retired)
        for event in self.events:
            out[event.name] += event.recorded
        return out

    def profile_rows(self) -> list[tuple[str, int, int]]:
        """``(event, hits, misses)``: the kernel's ``kprobe_profile`` for these events."""
        return [(e.name, e.hits, e.missed) for e in self.events]

    def profile(self) -> str:
        """``kprobe_profile`` as the kernel prints it."""
        return "".join(f"  {n:<44} {h:>15} {m:>15}\n" for n, h, m in self.profile_rows())


def _kernel_of(session: Session) -> tuple[int, int] | None:
    """The version of the kernel a live target runs, from the image it was given (``kernel_image``)."""
    image = getattr(session.target, "kernel_image", None)
    if image is None:
        return None
    from kpsdk.kernel.version import kernel_version

    return kernel_version(image)


def _btf_of(session: Session, kernel: tuple[int, int] | None) -> BtfArgs | None:
    """The BTF of the kernel a live target runs, where that kernel takes BTF fetch arguments."""
    if kernel is None or kernel < BTF_ARGS_VERSION:
        return None
    from kpsdk.trace.btfsyntax import kernel_btf_args

    return kernel_btf_args(getattr(session.target, "kernel_image", None), session.arch)


def _lines(definitions: str | Iterable[str]) -> list[str]:
    if not isinstance(definitions, str | Iterable) or isinstance(definitions, bytes):
        raise ArgumentError(f"definitions={shown(definitions)}: want a str or a list of str")
    items = definitions.splitlines() if isinstance(definitions, str) else list(definitions)
    wrong = next((item for item in items if not isinstance(item, str)), None)
    if wrong is not None:
        raise ArgumentError(f"definition {shown(wrong)}: want a str ('p:EVENT SYM ARGS')")
    out: list[str] = []
    for item in items:
        for line in item.splitlines() or [item]:
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(line.strip())
    if not out:
        raise TraceDefinitionError("NO_PROBE_POINT", "", 0, "no definition given")
    return out


def _find(events: list[TraceEvent], clear: ProbeDef) -> TraceEvent | None:
    for event in events:
        if event.name == clear.event and (not clear.group or event.group == clear.group):
            return event
    return None


def _probe_class(registry: Any, name: str) -> type:
    if name not in registry.probe_types:
        loaded = ", ".join(registry.probe_types) or "none"
        raise KpsdkError(f"no {name!r} probe type is loaded (probe types: {loaded}); "
                         f"{'uprobes need the uprobes plugin' if name.startswith('u') else 'drop -p no:' + name + 's'}")
    return registry.probe_types[name].probe_class  # type: ignore[no-any-return]


def start_trace(session: Session, definitions: str | Iterable[str], sink: Sink | None = None,
                filter: str | Filter | None = None, comm: str | None = None,  # noqa: A002
                pid: int | None = None, triggers: Iterable[str] = (), stack: bool = False) -> Trace:
    """What :meth:`Session.trace` does: a :class:`Trace` with these events registered."""
    if isinstance(triggers, str):
        raise ArgumentError(f"triggers={shown(triggers)}: want a list of 'EVENT:COMMAND' strings")
    trace = Trace(session, sink=sink, filter=filter, comm=comm, pid=pid, stack=stack)
    trace.add(definitions)
    try:
        for text in triggers:
            trace.add_trigger(text)
    except BaseException:
        trace.close()
        raise
    if trace.filter is not None and trace.events and not any(e.filtered for e in trace.events):
        trace.close()
        raise KpsdkError(f"filter {trace.filter.expr!r} names fields ({', '.join(sorted(trace.filter.fields))}) "
                         "that no event has")
    return trace
