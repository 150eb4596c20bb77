"""What ``kpsdk trace`` does (the hook in :mod:`kpsdk.trace.command` adds it to the app).

Imported only when the app is built (it needs typer).  The command opens the
target the way ``kpsdk probe`` does, with the same options and target
selection, shared by the CLI's commands (:mod:`kpsdk.cli.options`,
:mod:`kpsdk.cli.target_choice`, :mod:`kpsdk.cli.parsing`), registers the
events with :meth:`Session.trace`, streams each record through a writer
(:mod:`kpsdk.trace.output`), and at the end prints the histograms and the
``kprobe_profile`` table when asked.  Errors are raised as kpsdk errors;
:mod:`kpsdk.cli.exits` turns them into exit codes (a definition error shows
the kernel's ``error_log`` with its caret).
"""

from __future__ import annotations

import errno
import signal
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from kpsdk.cli.consoles import console
from kpsdk.cli.exits import INTERRUPTED
from kpsdk.cli.options import NoprobeOpt, TargetOptions, takes_target_options
from kpsdk.cli.parsing import check_out_path, check_seconds, split_commas
from kpsdk.cli.target_choice import LIVE_KINDS, LIVE_TIMEOUT, UNICORN_TIMEOUT, TargetChoice, close_session
from kpsdk.errors import KpsdkError, TargetError, UnknownNameError
from kpsdk.kernel.tasks import PID_MAX_LIMIT, check_comm
from kpsdk.trace.functions import FunctionsError, check_templates
from kpsdk.trace.hist import PLOT_FORMATS, parse_lhist
from kpsdk.trace.output import EventShape, EventWrite, Writer, WriterContext, output_format
from kpsdk.trace.precheck import precheck

if TYPE_CHECKING:
    from rich.table import Table

    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.session import Session
    from kpsdk.trace.events import Trace, TraceRecord
    from kpsdk.trace.fetch import HitContext
    from kpsdk.trace.hist import Histogram

EVENTS_PANEL = "Events"
OUTPUT_PANEL = "Output"
LIMITS_PANEL = "Limits"
SCHEMES = ("elf:", "unicorn:", "qemu-user:", "qemu-system:", "gdb:")

HELP = """\
Trace a program or a kernel with ftrace probe definitions, as in /sys/kernel/tracing/kprobe_events.

[bold]TARGET[/bold] is a program to run in Unicorn (an ELF, or a bundled fixture: x86_64, i386,
arm, thumb, riscv64, ppc64), or a target spec: qemu-user:PROG, qemu-system:ARCH (with
--kernel/--initrd/--append/--symbols), gdb://HOST:PORT (with --arch/--symbols), elf:PATH,
unicorn:ARCH.  The target runs until it ends, --duration S, --count N or Ctrl-C.

[bold]Definitions[/bold] (-e, repeatable; -f FILE for one a line, # comments):

  p[:[GRP/]EVENT] SYM[+offs]|MEMADDR [FETCHARGS]     a probe
  r[MAXACTIVE][:[GRP/]EVENT] SYM [FETCHARGS]         a return probe (also p SYM%return)
  p[:[GRP/]EVENT] PATH:OFFSET[%return] [FETCHARGS]   a uprobe (PATH has a /)
  -:[GRP/]EVENT                                      clear an event defined before

  FETCHARGS: NAME=FETCHARG[:TYPE]; FETCHARG is %REG, @ADDR, @SYM[+|-offs], $stackN,
  $stack, $retval, $argN (from 1, by the target's ABI), $comm, +|-\\[u]OFFS(FETCHARG), \\IMM.
  TYPE: u8-u64, s8-s64, x8-x64, char, string, ustring, symbol, symstr, b<w>@<o>/<size>,
  TYPE[N].  Registers as the kernel spells them (%di, %ax on x86; %r3 on ppc64; %a0 on riscv;
  %r0 on arm) or by their full names.  A wrong definition prints the kernel's error_log
  line with a caret under the column.

[bold]Output[/bold]: --output text: the kernel's trace file, its header, then
TASK-PID [CPU] FLAGS TIMESTAMP: EVENT: (sym+0x0/0x14) a=2 b=3 (returns: EVENT: (caller+0xoff/0xsize
<- sym) ...); on a kernel the task is current, read through the kernel's BTF; --no-prefix: the
bodies only.  --output jsonl (one JSON object a line), perfetto (a Chrome/Perfetto trace-event
JSON: open it in ui.perfetto.dev), trace-dat (trace-cmd's trace.dat: trace-cmd report, KernelShark) or a
plugin's format ('kpsdk plugins' lists them); --out FILE.
While it runs, a live table of counts per event on stderr (a terminal only).  At the end (or on
Ctrl-C): --hist FIELD and --latency histograms (log2 buckets, as bpftrace), --lhist (linear), --plot
FILE (.png, .svg, .pdf), --profile (kprobe_profile).

[bold]Triggers[/bold] (--trigger EVENT:CMD, as written to events/GROUP/EVENT/trigger):
hist:keys=K\\[,K2..]:vals=V:sort=S.descending\\[:size=N] \\[if FILTER] (printed at the end as the
event's hist file; modifiers .hex .sym .sym-offset .execname .log2 .buckets=N), stacktrace\\[:N]
\\[if FILTER] (the stack after the event's line; --stack: after every line).
--functions GLOB: each definition probing $func, once per matching function.
"""

EXAMPLES = """\
kpsdk trace x86_64 -e 'p:add add a=%di:s32 b=%si:s32'
kpsdk trace riscv64 -e 'p put name=+0(%a0):string value=%a1:s64'
kpsdk trace arm -e 'r:fact fact n=$arg1 ret=$retval:s32' --latency
kpsdk trace x86_64 -e 'p bump by=$arg1:s32 now=@counter:s32' --output jsonl
kpsdk trace thumb -e 'p:put put name=+0($arg1):string v=$arg2:s32' --filter 'v > 100'
kpsdk trace x86_64 -e 'r sub $retval:s32' --call 'sub 3 5'          # r_sub_0: (... <- sub) arg1=-2
kpsdk trace qemu-user:ppc64 -e 'p:add add a=%r3:s32 b=%gpr4:s32' --profile
kpsdk trace i386 -f probes.txt --output perfetto --out trace.json   # open in ui.perfetto.dev
kpsdk trace x86_64 -e 'r fact' --latency --plot latency.png
kpsdk trace x86_64 -e 'r:fact fact n=$arg1:s64 ret=$retval:s64' -t 'fact:hist:keys=n.log2:vals=ret'
kpsdk trace x86_64 -e 'p:f fact n=%di:s64' -t 'f:stacktrace if n == 1'
kpsdk trace x86_64 --functions 'check*' -e 'p $func x=%di:s32'
kpsdk trace qemu-system:x86_64 --kernel vmlinuz --initrd initrd.img \\
    -e 'r:open do_sys_openat2 name=+0($arg2):ustring ret=$retval:s32' --filter 'ret < 0'
"""


def _target_choice(target_arg: str | None, where: TargetOptions, extra: list[str]) -> TargetChoice:
    """TARGET may be an ELF or fixture name, or a spec (qemu-user:PROG...); --target also works."""
    if target_arg is not None and where.target is None and target_arg.startswith(SCHEMES):
        return replace(where, target=target_arg).choose(None, extra)
    return where.choose(target_arg, extra)


def _definitions(events: list[str] | None, files: list[Path] | None) -> list[str]:
    lines = list(events or [])
    for path in files or []:
        try:
            text = path.read_text()
        except OSError as exc:
            raise KpsdkError(f"cannot read definitions from {path}: {exc.strerror}") from exc
        lines += [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise typer.BadParameter("give at least one definition: -e 'p:EVENT SYM ARGS' or -f FILE", param_hint="-e")
    return lines


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

    def __init__(self, limits: _Limits, keep: list[TraceRecord] | None) -> None:
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


def _print_histograms(out: Any, hists: list[Histogram]) -> None:
    for hist in hists:
        out.out(hist.render(), highlight=False)


@takes_target_options
def cmd_trace(
    ctx: typer.Context,
    where: TargetOptions,
    target_arg: Annotated[str | None, typer.Argument(
        metavar="TARGET", show_default=False,
        help="An ELF or a fixture name (x86_64, i386, arm, thumb, riscv64, ppc64) to run in Unicorn, or a "
             "spec: qemu-user:PROG, qemu-system:ARCH, gdb://HOST:PORT, elf:PATH, unicorn:ARCH.")] = None,
    event: Annotated[list[str] | None, typer.Option(
        "--event", "-e", metavar="DEF", rich_help_panel=EVENTS_PANEL,
        help="A probe definition in the kprobe_events syntax ('p:EVENT SYM a=%di', 'r SYM $retval'). "
             "Repeatable.")] = None,
    file: Annotated[list[Path] | None, typer.Option(
        "--file", "-f", metavar="FILE", rich_help_panel=EVENTS_PANEL,
        help="Definitions from a file, one a line (# comments). Repeatable.")] = None,
    filter_expr: Annotated[str | None, typer.Option(
        "--filter", metavar="EXPR", rich_help_panel=EVENTS_PANEL,
        help="Keep records whose fields match, as an event filter: 'ret < 0', 'a == 2 && b != 3', "
             "'name ~ \"/etc/*\"'. Events without those fields pass.")] = None,
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="FORMAT", rich_help_panel=OUTPUT_PANEL,
        help="text (ftrace lines), jsonl, perfetto (trace-event JSON for ui.perfetto.dev), trace-dat "
             "(trace-cmd's trace.dat), or a format a plugin adds ('kpsdk plugins' lists them).")] = "text",
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE", rich_help_panel=OUTPUT_PANEL,
        help="Write the records there instead of stdout.")] = None,
    hist: Annotated[list[str] | None, typer.Option(
        "--hist", metavar="FIELD", rich_help_panel=OUTPUT_PANEL,
        help="At the end, a log2 histogram of FIELD per event (as bpftrace's hist()). Repeatable.")] = None,
    latency: Annotated[bool, typer.Option(
        "--latency", rich_help_panel=OUTPUT_PANEL,
        help="At the end, a histogram of each return event's call time (entry to return, us).")] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE", rich_help_panel=OUTPUT_PANEL,
        help="Save the histograms as an image, its format from the suffix: .png, .svg or .pdf (needs pip install "
             "'kpsdk\\[plot]').")] = None,
    profile: Annotated[bool, typer.Option(
        "--profile", rich_help_panel=OUTPUT_PANEL,
        help="At the end, the kprobe_profile table: event, hits, misses.")] = False,
    show_console: Annotated[bool, typer.Option(
        "--console", rich_help_panel=OUTPUT_PANEL,
        help="At the end, what the target printed (program output, serial console), on stderr.")] = False,
    duration: Annotated[float | None, typer.Option(
        "--duration", metavar="S", show_default=False, rich_help_panel=LIMITS_PANEL, callback=check_seconds,
        help=f"Stop after S seconds, a positive number; inf: no limit (default: {UNICORN_TIMEOUT:g} in Unicorn, "
             f"{LIVE_TIMEOUT:g} on a live target). Reaching it is not an error.")] = None,
    count: Annotated[int | None, typer.Option(
        "--count", metavar="N", min=1, rich_help_panel=LIMITS_PANEL,
        help="Stop after N records.")] = None,
    noprobe: NoprobeOpt = None,
    no_prefix: Annotated[bool, typer.Option(
        "--no-prefix", rich_help_panel=OUTPUT_PANEL,
        help="text: the event bodies only (EVENT: (sym+0x0/0x14) a=2), without the kernel's task/CPU/flags/time "
             "prefix and header.")] = False,
    comm: Annotated[str | None, typer.Option(
        "--comm", metavar="NAME", rich_help_panel=OUTPUT_PANEL, show_default=False,
        help="Unicorn: the task name the prefix shows (default: the program's file name, 15 bytes at most).")] = None,
    pid: Annotated[int | None, typer.Option(
        "--pid", metavar="N", min=0, max=PID_MAX_LIMIT, rich_help_panel=OUTPUT_PANEL, show_default=False,
        help="Unicorn: the pid the prefix shows (default: the program's, 1000, as getpid() tells it; 1 with no "
             "program).")] = None,
    trigger: Annotated[list[str] | None, typer.Option(
        "--trigger", "-t", metavar="EVENT:CMD", rich_help_panel=EVENTS_PANEL,
        help="An event trigger, as written to events/GROUP/EVENT/trigger: 'myopen:hist:keys=common_pid:vals=hitcount' "
             "(printed at the end as the event's hist file), 'myopen:stacktrace\\[:N] \\[if FILTER]'. "
             "Repeatable.")] = None,
    stack_trace: Annotated[bool, typer.Option(
        "--stack", rich_help_panel=OUTPUT_PANEL,
        help="text: each record's stack after its line, as ftrace's stacktrace option "
             "('=> sym+0xoff/0xsize').")] = False,
    functions: Annotated[str | None, typer.Option(
        "--functions", metavar="GLOB", rich_help_panel=EVENTS_PANEL, show_default=False,
        help="Write each definition whose probe point is $func once per function matching GLOB: "
             "--functions 'vfs_*' -e 'p $func' (at most 1000).")] = None,
    lhist: Annotated[list[str] | None, typer.Option(
        "--lhist", metavar="FIELD,MIN,MAX,STEP", rich_help_panel=OUTPUT_PANEL,
        help="At the end, a linear histogram of FIELD per event (as bpftrace's lhist()). Repeatable.")] = None,
) -> None:
    try:
        fmt = output_format(output)
    except UnknownNameError as exc:
        want = f"want one of {', '.join(sorted(exc.valid))}" if exc.valid else \
            "no output format is loaded (blocked with -p no:trace-formats?)"
        raise typer.BadParameter(f"{output!r}: {want}", param_hint="--output") from None
    definitions = _definitions(event, file)
    choice = _target_choice(target_arg, where, ctx.args)
    fn_args = choice.call
    if plot is not None and not (hist or latency or lhist):
        raise typer.BadParameter("--plot draws the --hist FIELD or --latency histograms: add one", param_hint="--plot")
    if (comm is not None or pid is not None) and choice.kind in LIVE_KINDS:
        raise typer.BadParameter(f"a {choice.kind} target has tasks of its own: the prefix shows them",
                                 param_hint="--comm/--pid")
    if comm is not None:
        try:
            check_comm(comm)
        except KpsdkError as exc:
            raise typer.BadParameter(str(exc), param_hint="--comm") from None
    if out is not None:
        check_out_path(out)
    elif fmt.binary and sys.stdout.isatty():
        raise typer.BadParameter(f"{fmt.name} is a binary file: give --out FILE, or send stdout to a file or pipe",
                                 param_hint="--output")
    if plot is not None:
        check_plot(plot)
    try:
        linear = [parse_lhist(spec) for spec in lhist or []]
    except KpsdkError as exc:
        raise typer.BadParameter(str(exc), param_hint="--lhist") from None
    if functions is not None:
        try:
            check_templates(definitions, functions)
        except FunctionsError as exc:
            raise typer.BadParameter(str(exc), param_hint="--functions") from None
    # before a target starts: a mistake costs no boot
    precheck(choice, definitions, [*(hist or []), *(f for f, *_ in linear)], trigger or [], functions)
    limit = choice.run_timeout(duration)
    session: Session | None = None
    trace: Trace | None = None
    writer: Writer | None = None
    interrupted = False
    limits = _Limits(None, count)
    with ExitStack() as stack:
        # reports (histograms, profile) go to stdout unless it carries machine-readable records
        report = console(stderr=out is None and fmt.machine_readable)
        records: list[TraceRecord] = []
        try:
            try:
                stack.enter_context(_sigterm_as_interrupt())
                session = limits.session = choice.open(split_commas(noprobe))

                sink = _RunSink(limits, records if hist or latency or linear else None)
                if functions is not None:
                    definitions = _expand_functions(session, definitions, functions)
                trace = session.trace(definitions, sink=sink.write, filter=filter_expr, comm=comm, pid=pid,
                                      triggers=trigger or [], stack=stack_trace)
                # --out is opened (and truncated) only now: the definitions and the target were good
                stream: IO[Any] = _open_out(stack, out, fmt.binary)
                writer = fmt.open(stream, WriterContext(
                    process_name=f"kpsdk trace {choice.spec}", target=choice.spec, prefix=not no_prefix,
                    notes=(trace.time_note, trace.tasks_note), word_size=session.arch.word_size,
                    endian=session.arch.endian))
                sink.writer = writer
                trace.renew_event_writers()  # the events' per-event paths go through the writer now
                _run(session, trace, fn_args, limit, limits)
            except KeyboardInterrupt:
                interrupted = True
                console(stderr=True).print("[bold yellow]interrupted[/]: stopping the target")
            except BaseException:
                # the writers write in blocks: the records before the error reach the output too
                if writer is not None and not limits.pipe_closed:
                    with suppress(OSError):
                        writer.flush()
                raise
            if writer is not None and not limits.pipe_closed:
                try:
                    writer.close()
                except BrokenPipeError:
                    limits.pipe_closed = True
            if limits.pipe_closed:
                # as click ends any command whose stdout closed (kpsdk list | head): quietly
                raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")
            if session is not None and trace is not None:
                _reports(report, session, trace, records, hist or [], latency, plot, profile, show_console,
                         interrupted, linear)
        finally:
            close_session(session)
    if interrupted:
        raise typer.Exit(INTERRUPTED)


def _open_out(stack: ExitStack, out: Path | None, binary: bool) -> IO[Any]:
    """The records' stream: ``--out`` (opened, and truncated, only now) or stdout; bytes for a binary format."""
    if out is not None:
        return stack.enter_context(out.open("wb" if binary else "w"))
    return sys.stdout.buffer if binary else _Stdout()  # type: ignore[return-value]


def check_plot(path: Path) -> Path:
    """``--plot FILE`` before the run: a suffix kpsdk can write, a writable place, matplotlib there."""
    import importlib.util

    if path.suffix.lower() not in PLOT_FORMATS:
        raise typer.BadParameter(f"{str(path)!r}: the format comes from the suffix: want one of "
                                 f"{', '.join(PLOT_FORMATS)}", param_hint="--plot")
    check_out_path(path, "--plot")
    if importlib.util.find_spec("matplotlib") is None:
        raise typer.BadParameter("--plot needs matplotlib: pip install 'kpsdk[plot]'", param_hint="--plot")
    return path


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


def _reports(con: Any, session: Session, trace: Trace, records: list[TraceRecord], hist_fields: list[str],
             latency: bool, plot_path: Path | None, profile: bool, show_console: bool,
             interrupted: bool = False, linear: list[tuple[str, int, int, int]] | None = None) -> None:
    """The reports asked for, at the end of the run or when it was interrupted (then what
    was collected so far, and no complaint about what did not happen yet)."""
    from kpsdk.trace.hist import field_histograms, latency_histograms, linear_histograms, plot

    hists = [h for f in hist_fields for h in field_histograms(records, f)]
    if hist_fields and not hists and not interrupted:
        raise KpsdkError(f"--hist {', '.join(hist_fields)}: no record had an integer value for it")
    if latency:
        lat = latency_histograms(records)
        if not lat and not interrupted:
            raise KpsdkError("--latency: no return event (r SYM or p SYM%return) completed a call")
        hists += lat
    for field_name, low, high, step in linear or []:
        lin = linear_histograms(records, field_name, low, high, step)
        if not lin and not interrupted:
            raise KpsdkError(f"--lhist {field_name}: no record had an integer value for it")
        hists += lin
    _print_histograms(con, hists)
    if trace.hists():
        con.out(trace.hist_text(), highlight=False, end="")
    if plot_path is not None and hists:
        xlabel = "latency (us)" if latency and not hist_fields else "value"
        plot(hists, str(plot_path), fmt=PLOT_FORMATS[plot_path.suffix.lower()], xlabel=xlabel)
        console(stderr=True).print(Text(f"plot saved to {plot_path}", style="dim"))
    if profile:
        from rich.table import Table

        table = Table(title="kprobe_profile", title_justify="left")
        table.add_column("event", style="bold cyan")
        table.add_column("hits", justify="right")
        table.add_column("misses", justify="right")
        for name, hits, missed in trace.profile_rows():
            table.add_row(name, str(hits), str(missed))
        con.print(table)
    if show_console:
        console(stderr=True).out(session.console, end="", highlight=False)
