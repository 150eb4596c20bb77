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

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from kpsdk.cli.consoles import console
from kpsdk.cli.exits import INTERRUPTED
from kpsdk.cli.options import (
    AppendOpt,
    ArchOpt,
    InitrdOpt,
    KernelOpt,
    ProgArgOpt,
    SymbolsOpt,
    SysrootOpt,
    TargetOpt,
    given_target_options,
)
from kpsdk.cli.parsing import check_seconds, parse_call, split_commas
from kpsdk.cli.target_choice import (
    LIVE_KINDS,
    LIVE_TIMEOUT,
    UNICORN_TIMEOUT,
    TargetChoice,
    choose_target,
    close_session,
)
from kpsdk.errors import KpsdkError
from kpsdk.trace.output import FORMATS, make_writer

if TYPE_CHECKING:
    from rich.table import Table

    from kpsdk.session import Session
    from kpsdk.trace.events import Trace, TraceRecord
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

[bold]Output[/bold]: --output text (the ftrace line: EVENT: (sym+0x0/0x14) a=2 b=3; returns as
EVENT: (caller+0xoff/0xsize <- sym) ...), jsonl (one JSON object a line) or perfetto (a
Chrome/Perfetto trace-event JSON: open it in ui.perfetto.dev); --out FILE.  While it runs, a
live table of counts per event on stderr (a terminal only).  At the end: --hist FIELD and
--latency histograms (log2 buckets, as bpftrace), --plot PNG, --profile (kprobe_profile).
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
kpsdk trace qemu-system:x86_64 --kernel vmlinuz --initrd initrd.img \\
    -e 'r:open do_sys_openat2 name=+0($arg2):ustring ret=$retval:s32' --filter 'ret < 0'
"""


def _target_choice(target_arg: str | None, target: str | None, given: dict[str, Any]) -> TargetChoice:
    """TARGET may be an ELF or fixture name, or a spec (qemu-user:PROG...); --target also works."""
    if target_arg is not None and target is None and target_arg.startswith(SCHEMES):
        return choose_target(None, target_arg, given)
    return choose_target(target_arg, target, given)


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

    def __init__(self, session: Session, count: int | None) -> None:
        self.session, self.count, self.seen = session, count, 0

    def reached(self) -> bool:
        return self.count is not None and self.seen >= self.count


def _live_table(trace: Trace) -> Table:
    from rich.table import Table

    table = Table(title="kpsdk trace (Ctrl-C stops)", title_justify="left")
    table.add_column("event", style="bold cyan")
    table.add_column("records", justify="right")
    table.add_column("hits", justify="right")
    table.add_column("missed", justify="right")
    for event in trace.events:
        table.add_row(event.name, str(trace.counts[event.name]), str(event.hits), str(event.missed))
    return table


def _print_histograms(out: Any, hists: list[Histogram]) -> None:
    for hist in hists:
        out.out(hist.render(), highlight=False)


def cmd_trace(
    ctx: typer.Context,
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
        help="text (ftrace lines), jsonl, or perfetto (trace-event JSON for ui.perfetto.dev).")] = "text",
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
        "--plot", metavar="PNG", rich_help_panel=OUTPUT_PANEL,
        help="Save the histograms as a PNG (needs pip install 'kpsdk\\[plot]').")] = None,
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
    call: Annotated[str | None, typer.Option(
        "--call", metavar="'FN ARGS'", rich_help_panel=LIMITS_PANEL,
        help="Unicorn: call FN with integer arguments instead of running the program: --call 'sub 3 5'.")] = None,
    noprobe: Annotated[list[str] | None, typer.Option(
        "--noprobe", metavar="NAME", rich_help_panel=EVENTS_PANEL,
        help="Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL). Repeatable.")] = None,
    target: TargetOpt = None,
    prog_arg: ProgArgOpt = None,
    kernel: KernelOpt = None,
    initrd: InitrdOpt = None,
    append: AppendOpt = None,
    symbols: SymbolsOpt = None,
    arch: ArchOpt = None,
    sysroot: SysrootOpt = None,
) -> None:
    if output not in FORMATS:
        raise typer.BadParameter(f"{output!r}: want one of {', '.join(FORMATS)}", param_hint="--output")
    definitions = _definitions(event, file)
    given = given_target_options(prog_arg, kernel, initrd, append, symbols, arch, sysroot)
    choice = _target_choice(target_arg, target, given)
    fn_args = parse_call(call) if call is not None else None
    if fn_args is not None and choice.kind in LIVE_KINDS:
        raise typer.BadParameter(f"--call calls one function in Unicorn; a {choice.kind} target runs its own code",
                                 param_hint="--call")
    if plot is not None and not (hist or latency):
        raise typer.BadParameter("--plot draws the --hist FIELD or --latency histograms: add one", param_hint="--plot")
    limit = choice.run_timeout(duration)
    session: Session | None = None
    interrupted = False
    with ExitStack() as stack:
        stream: IO[str] = stack.enter_context(out.open("w")) if out is not None else _Stdout()  # type: ignore[assignment]
        # reports (histograms, profile) go to stdout unless it carries machine-readable records
        report = console(stderr=out is None and output != "text")
        writer = make_writer(output, stream, process_name=f"kpsdk trace {choice.spec}")
        records: list[TraceRecord] = []
        try:
            try:
                session = choice.open(split_commas(noprobe))
                limits = _Limits(session, count)

                def sink(record: TraceRecord) -> None:
                    if limits.reached():
                        return
                    limits.seen += 1
                    writer.write(record)
                    if hist or latency:
                        records.append(record)
                    if limits.reached():
                        session.stop()  # type: ignore[union-attr]

                trace = session.trace(definitions, sink=sink, filter=filter_expr)
                _run(session, trace, fn_args, limit)
            except KeyboardInterrupt:
                interrupted = True
                console(stderr=True).print("[bold yellow]interrupted[/] (Ctrl-C): stopping the target")
            writer.close()
            if session is not None and not interrupted:
                _reports(report, session, trace, records, hist or [], latency, plot, profile, show_console)
        finally:
            close_session(session)
    if interrupted:
        raise typer.Exit(INTERRUPTED)


def _run(session: Session, trace: Trace, fn_args: tuple[str, list[int]] | None, limit: float) -> None:
    """Run the target (or the one call) with the live counts table on a terminal's stderr."""
    err = console(stderr=True)

    def go() -> None:
        if fn_args is not None:
            fn, args = fn_args
            session.call(fn, *args)
        else:
            session.run(timeout=limit)

    if not err.is_terminal:
        go()
        return
    from rich.live import Live

    with Live(get_renderable=lambda: _live_table(trace), console=err, refresh_per_second=4, transient=True):
        go()


def _reports(con: Any, session: Session, trace: Trace, records: list[TraceRecord], hist_fields: list[str],
             latency: bool, plot_path: Path | None, profile: bool, show_console: bool) -> None:
    from kpsdk.trace.hist import field_histograms, latency_histograms, plot

    hists = [h for f in hist_fields for h in field_histograms(records, f)]
    if hist_fields and not hists:
        raise KpsdkError(f"--hist {', '.join(hist_fields)}: no record had an integer value for it")
    if latency:
        lat = latency_histograms(records)
        if not lat:
            raise KpsdkError("--latency: no return event (r SYM or p SYM%return) completed a call")
        hists += lat
    _print_histograms(con, hists)
    if plot_path is not None:
        plot(hists, str(plot_path), xlabel="latency (us)" if latency and not hist_fields else "value")
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
