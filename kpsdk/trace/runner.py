"""One ``kpsdk trace`` run, its command line checked: open the target, register the events,
stream the records, print the reports.

:mod:`kpsdk.trace.run` declares the command and checks its options (usage errors
before a target starts), then hands them here as a :class:`TraceRun`, as
``kpsdk probe`` hands a ``ProbeRun`` to :mod:`kpsdk.cli.probe_run`.  Imported
when the command runs, not when the app is built (``kpsdk --help``).

The run streams each record through the output format's writer
(:mod:`kpsdk.trace.output`) behind the run's limits (``--count``, a reader that
went away), and at the end, or on Ctrl-C or SIGTERM, prints what
:class:`Reports` was asked for.  Errors are raised as kpsdk errors;
:mod:`kpsdk.cli.exits` turns them into exit codes.
"""

from __future__ import annotations

import errno
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich.text import Text

from kpsdk.cli.consoles import ProgramOutput, console
from kpsdk.cli.libraries import MIN_TIMEOUT, run_to_entry, wants_libraries
from kpsdk.cli.target_choice import TargetChoice, close_session
from kpsdk.errors import KprobeError, KpsdkError, TargetError, TraceDefinitionError
from kpsdk.trace.hist import PLOT_FORMATS, HistogramSet
from kpsdk.trace.output import EventShape, EventWrite, TextWriter, Writer, WriterContext

if TYPE_CHECKING:
    from rich.table import Table

    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.session import Session
    from kpsdk.trace.events import Trace, TraceRecord
    from kpsdk.trace.fetch import HitContext
    from kpsdk.trace.hist import Histogram
    from kpsdk.trace.output import OutputFormat


@dataclass(frozen=True)
class EventOptions:
    """How the events are registered (:meth:`Session.trace`'s arguments besides the definitions)."""

    filter_expr: str | None = None
    comm: str | None = None
    pid: int | None = None
    triggers: list[str] = field(default_factory=list)
    stack: bool = False
    #: ``--functions GLOB``: the ``$func`` definitions are written once per matching function
    functions: str | None = None


@dataclass(frozen=True)
class Reports:
    """What is printed at the end: histograms (``--hist``, ``--latency``, ``--lhist``), their
    ``--plot``, ``--profile``, the target's ``--console``."""

    hist_fields: list[str] = field(default_factory=list)
    latency: bool = False
    #: ``--lhist FIELD,MIN,MAX,STEP``, parsed
    linear: list[tuple[str, int, int, int]] = field(default_factory=list)
    plot_path: Path | None = None
    profile: bool = False
    show_console: bool = False

    @property
    def keeps_records(self) -> bool:
        """The histograms need the records once the run is over: the run keeps them."""
        return bool(self.hist_fields or self.latency or self.linear)

    def print(self, con: Any, session: Session, trace: Trace, records: HistogramSet,
              interrupted: bool = False, streamed: ProgramOutput | None = None) -> None:
        """The reports asked for, at the end of the run or when it was interrupted (then what
        was collected so far, and no complaint about what did not happen yet); ``streamed``:
        the program's output, already printed as it was written."""
        hists = self._histograms(records, interrupted)
        for hist in hists:
            con.out(hist.render(), highlight=False)
        if trace.hists():
            con.out(trace.hist_text(), highlight=False, end="")
        if self.plot_path is not None and hists:
            self._plot(hists, self.plot_path)
        if self.profile:
            con.print(_profile_table(trace))
        if streamed is not None:
            streamed.end(newline=False)
        elif self.show_console:
            console(stderr=True).out(session.console, end="", highlight=False)

    def _histograms(self, records: HistogramSet, interrupted: bool) -> list[Histogram]:
        """``--hist``, ``--latency`` and ``--lhist`` over the records; one that found nothing is an
        error, unless the run was interrupted."""
        from kpsdk.trace.hist import field_histograms, latency_histograms, linear_histograms

        hists = [h for f in self.hist_fields for h in field_histograms(records, f)]
        if self.hist_fields and not hists and not interrupted:
            raise KpsdkError(f"--hist {', '.join(self.hist_fields)}: no record had an integer value for it")
        if self.latency:
            lat = latency_histograms(records)
            if not lat and not interrupted:
                raise KpsdkError("--latency: no return event (r SYM or p SYM%return) completed a call")
            hists += lat
        for field_name, low, high, step in self.linear:
            lin = linear_histograms(records, field_name, low, high, step)
            if not lin and not interrupted:
                raise KpsdkError(f"--lhist {field_name}: no record had an integer value for it")
            hists += lin
        return hists

    def _plot(self, hists: list[Histogram], path: Path) -> None:
        """``--plot FILE``: the histograms as an image, its format from the suffix."""
        from kpsdk.trace.hist import plot

        xlabel = "latency (us)" if self.latency and not self.hist_fields else "value"
        plot(hists, str(path), fmt=PLOT_FORMATS[path.suffix.lower()], xlabel=xlabel)
        console(stderr=True).print(Text(f"plot saved to {path}", style="dim"))


def _profile_table(trace: Trace) -> Table:
    """``--profile``: the kprobe_profile table, one row an event."""
    from rich.table import Table

    table = Table(title="kprobe_profile", title_justify="left")
    table.add_column("event", style="bold cyan")
    table.add_column("hits", justify="right")
    table.add_column("misses", justify="right")
    for name, hits, missed in trace.profile_rows():
        table.add_row(name, str(hits), str(missed))
    return table


@dataclass
class TraceRun:
    """One ``kpsdk trace``: the options, parsed and checked, then what the run made."""

    choice: TargetChoice
    definitions: list[str]
    fmt: OutputFormat
    #: ``--out FILE`` (None: stdout); opened, and truncated, only once the events are registered
    out: Path | None
    noprobe: list[str]
    events: EventOptions
    #: text output: the kernel's task/CPU/flags/time prefix and header (``--no-prefix``: without)
    prefix: bool
    #: ``--duration``, or the default for this kind of target
    limit: float
    count: int | None
    reports: Reports
    session: Session | None = None
    trace: Trace | None = None
    writer: Writer | None = None
    #: the histograms' buckets, filled as records come (no record is kept)
    records: HistogramSet = field(init=False)
    interrupted: bool = False
    limits: _Limits = field(init=False)
    #: ``--console`` of an elf: program: its output, printed (on stderr) as it writes it
    streamed: ProgramOutput | None = None

    def __post_init__(self) -> None:
        self.limits = _Limits(None, self.count)
        self.records = HistogramSet(self.reports.hist_fields, self.reports.latency, self.reports.linear)

    def execute(self) -> bool:
        """Trace, write the records, print the reports, close the target; True when Ctrl-C (or
        SIGTERM) ended the run, whose records and reports are written all the same."""
        with ExitStack() as stack:
            # reports (histograms, profile) go to stdout unless it carries machine-readable records
            report = console(stderr=self.out is None and self.fmt.machine_readable)
            try:
                self._trace(stack)
                self._close_output()
                if self.session is not None and self.trace is not None:
                    self.reports.print(report, self.session, self.trace, self.records, self.interrupted,
                                       self.streamed)
            finally:
                close_session(self.session)
        return self.interrupted

    def _trace(self, stack: ExitStack) -> None:
        """Open the target, register the events, open the output, run; Ctrl-C ends the run as the
        target's end would, and any other error writes the records before it first (the writers
        write in blocks)."""
        try:
            stack.enter_context(_sigterm_as_interrupt())
            session, trace = self._start(stack)
            _run(session, trace, self.choice.call, self.limit, self.limits)
        except KeyboardInterrupt:
            self.interrupted = True
            console(stderr=True).print("[bold yellow]interrupted[/]: stopping the target")
        except BaseException:
            if self.writer is not None and not self.limits.pipe_closed:
                with suppress(OSError):
                    self.writer.flush()
            raise

    def _start(self, stack: ExitStack) -> tuple[Session, Trace]:
        """The session, its events registered, and the writer they write through."""
        if self.reports.show_console and self.choice.kind is None and self.choice.spec.startswith("elf:"):
            self.streamed = ProgramOutput(console(stderr=True))  # printed as written, not the tail at the end
            self.choice.options.update(stdout=self.streamed, stderr=self.streamed)
        session = self.session = self.limits.session = self.choice.open(self.noprobe)
        sink = _RunSink(self.limits, self.records if self.reports.keeps_records else None)
        definitions = self.definitions
        events = self.events
        if events.functions is not None:
            definitions = _expand_functions(session, definitions, events.functions)
        try:
            trace = session.trace(definitions, sink=sink.write, filter=events.filter_expr, comm=events.comm,
                                  pid=events.pid, triggers=events.triggers, stack=events.stack)
        except (KprobeError, TraceDefinitionError) as exc:
            # a name only the program's libraries have, or an IFUNC: at the program's entry point
            # they are loaded, as on qemu-user (kpsdk.cli.libraries)
            spent = run_to_entry(session, self.choice, self.limit) if wants_libraries(exc) else None
            if spent is None:
                raise
            self.limit = max(self.limit - spent, MIN_TIMEOUT)
            trace = session.trace(definitions, sink=sink.write, filter=events.filter_expr, comm=events.comm,
                                  pid=events.pid, triggers=events.triggers, stack=events.stack)
        self.trace = trace
        # --out is opened (and truncated) only now: the definitions and the target were good
        stream: IO[Any] = _open_out(stack, self.out, self.fmt.binary)
        self.writer = sink.writer = self.fmt.open(stream, WriterContext(
            process_name=f"kpsdk trace {self.choice.spec}", target=self.choice.spec, prefix=self.prefix,
            notes=(trace.time_note, trace.tasks_note), word_size=session.arch.word_size,
            endian=session.arch.endian))
        trace.renew_event_writers()  # the events' per-event paths go through the writer now
        return session, trace

    def _close_output(self) -> None:
        """The writer's last block; a reader that went away (``| head``) ends the command quietly,
        as click ends any command whose stdout closed (``kpsdk list | head``)."""
        if self.writer is not None and not self.limits.pipe_closed:
            try:
                self.writer.close()
            except BrokenPipeError:
                self.limits.pipe_closed = True
        if self.limits.pipe_closed:
            raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


class _Stdout:
    """``sys.stdout`` looked up at each write: the live display (rich) redirects it while it runs, so
    that records print above the table instead of through it."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


class _Limits:
    """--count: stops the target once N records went out."""

    def __init__(self, session: Session | None, count: int | None) -> None:
        self.session, self.count, self.seen = session, count, 0
        self.pipe_closed = False  # the output's reader went away (| head)

    def reached(self) -> bool:
        return self.count is not None and self.seen >= self.count


class _RunSink(Writer):
    """The trace's sink in ``kpsdk trace``: the format's writer (:attr:`writer`, set once the
    output is open) behind the run's limits (``--count``, a reader that went away).  It is a
    :class:`Writer` so that, where nothing keeps the records (no ``--hist``, ``--latency``,
    ``--linear``), events write through the format's per-event path
    (:meth:`Writer.event_writer`) with the same limits."""

    def __init__(self, limits: _Limits, keep: HistogramSet | None) -> None:
        self.limits = limits
        #: where records are kept for the reports (None: nothing keeps them)
        self.keep = keep
        self.writer: Writer | None = None

    def _closed(self) -> None:
        """``| head`` has read enough: stop, and end quietly."""
        self.limits.pipe_closed = True
        self.limits.session.stop()  # type: ignore[union-attr]

    def write(self, record: TraceRecord) -> None:
        limits, writer = self.limits, self.writer
        if limits.reached() or writer is None or limits.pipe_closed:
            return
        limits.seen += 1
        try:
            writer.write(record)
        except BrokenPipeError:
            self._closed()
            return
        if self.keep is not None:
            self.keep.append(record)
        if limits.reached():
            limits.session.stop()  # type: ignore[union-attr]

    def record_limit(self) -> int | None:
        return self.limits.count

    def text_lines(self) -> tuple[TextWriter, Callable[[], None] | None] | None:
        """The text writer's lines, where nothing keeps the records and no --count must stop the
        run at its record (native events then format them in C, :mod:`kpsdk.trace.nativetext`)."""
        if self.keep is not None or self.writer is None or self.limits.count is not None or self.limits.pipe_closed:
            return None
        inner = self.writer.text_lines()
        return (inner[0], self._closed) if inner is not None else None

    def event_writer(self, shape: EventShape) -> EventWrite | None:
        if self.keep is not None or self.writer is None:
            return None
        inner = self.writer.event_writer(shape)
        if inner is None:
            return None
        self.needs_entry_sp = self.writer.needs_entry_sp
        limits = self.limits
        count = limits.count

        def emit(now: float, ip: int, where: str, hit: HitContext, task: TaskInfo, task_id: int,
                 entry_sp: int | None, caller: int | None, func: str | None, entry_time: float | None) -> None:
            if limits.pipe_closed or (count is not None and limits.seen >= count):
                return
            limits.seen += 1
            try:
                inner(now, ip, where, hit, task, task_id, entry_sp, caller, func, entry_time)
            except BrokenPipeError:
                self._closed()
                return
            if count is not None and limits.seen >= count:
                limits.session.stop()  # type: ignore[union-attr]

        return emit


def _live_table(trace: Trace) -> Table:
    from rich.table import Table

    table = Table(title="kpsdk trace (Ctrl-C stops)", title_justify="left")
    table.add_column("event", style="bold cyan")
    table.add_column("records", justify="right")
    table.add_column("hits", justify="right")
    table.add_column("missed", justify="right")
    counts = trace.counts
    for event in trace.events:
        table.add_row(event.name, str(counts[event.name]), str(event.hits), str(event.missed))
    return table


def _open_out(stack: ExitStack, out: Path | None, binary: bool) -> IO[Any]:
    """The records' stream: ``--out`` (opened, and truncated, only now) or stdout; bytes for a binary format."""
    if out is not None:
        return stack.enter_context(out.open("wb" if binary else "w"))
    return sys.stdout.buffer if binary else _Stdout()  # type: ignore[return-value]


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM while the trace runs is Ctrl-C: the records and reports so far are written,
    the target closed (QEMU, gdb, the socket directory), and the exit code is Ctrl-C's."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (an embedding application): leave SIGTERM alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(session: Session, trace: Trace, fn_args: tuple[str, list[int]] | None, limit: float,
         limits: _Limits) -> None:
    """Run the target (or the one call) with the live counts table on a terminal's stderr."""
    err = console(stderr=True)

    def go() -> None:
        if fn_args is not None:
            fn, args = fn_args
            try:
                session.call(fn, *args)
            except TargetError:
                if not (limits.reached() or limits.pipe_closed):
                    raise  # else --count or a closed pipe stopped the call on purpose: it cannot return
        else:
            session.run(timeout=limit)

    if not err.is_terminal:
        go()
        return
    from rich.live import Live

    with Live(get_renderable=lambda: _live_table(trace), console=err, refresh_per_second=4, transient=True):
        go()


def _expand_functions(session: Session, definitions: list[str], pattern: str) -> list[str]:
    """``--functions GLOB``: each ``$func`` template once per matching function that can be probed."""
    from kpsdk.trace.functions import expand, matching_functions

    names, skipped = matching_functions(pattern, session.symbols, session.target.manager.check_address)
    console(stderr=True).print(Text(f"--functions {pattern}: {len(names)} function{'' if len(names) == 1 else 's'}"
                                    + (f" ({skipped} that cannot be probed left out)" if skipped else ""),
                                    style="dim"), soft_wrap=True)
    return expand(definitions, names)
