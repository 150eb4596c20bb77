"""The ``kpsdk trace`` command: its options, help and checks (the hook in :mod:`kpsdk.trace.command`
adds it to the app).

Imported only when the app is built (it needs typer).  The command opens the
target the way ``kpsdk probe`` does, with the same target options and target
selection, shared by the CLI's commands (:mod:`kpsdk.cli.options`,
:mod:`kpsdk.cli.target_choice`, :mod:`kpsdk.cli.parsing`).  :func:`cmd_trace`
checks the command line step by step, every mistake a usage error before a
target starts, then hands the run to :class:`kpsdk.trace.runner.TraceRun`:
it registers the events with :meth:`Session.trace`, streams each record
through a writer (:mod:`kpsdk.trace.output`), and at the end prints the
histograms and the ``kprobe_profile`` table when asked.  Errors are raised as
kpsdk errors; :mod:`kpsdk.cli.exits` turns them into exit codes (a definition
error shows the kernel's ``error_log`` with its caret).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kpsdk.cli.command import program_words
from kpsdk.cli.exits import INTERRUPTED
from kpsdk.cli.options import NoprobeOpt, TargetOptions, takes_target_options
from kpsdk.cli.parsing import check_out_path, check_seconds, refuse_inputs, split_commas
from kpsdk.cli.target_choice import LIVE_KINDS, LIVE_TIMEOUT, TargetChoice
from kpsdk.errors import KpsdkError, UnknownNameError
from kpsdk.kernel.tasks import PID_MAX_LIMIT, check_comm
from kpsdk.trace.functions import FunctionsError, check_templates
from kpsdk.trace.hist import PLOT_FORMATS, parse_lhist
from kpsdk.trace.output import output_format
from kpsdk.trace.perfsyntax import program_of, runnable_lines, translate_all
from kpsdk.trace.precheck import precheck

if TYPE_CHECKING:
    from kpsdk.trace.output import OutputFormat
    from kpsdk.trace.runner import Reports

EVENTS_PANEL = "Events"
OUTPUT_PANEL = "Output"
LIMITS_PANEL = "Limits"

HELP = """\
Trace a program or a kernel with ftrace probe definitions, as in /sys/kernel/tracing/kprobe_events.

[bold]TARGET[/bold] is a program to run in Unicorn (an ELF, or a bundled fixture: x86_64, i386,
arm, thumb, riscv64, ppc64), or a target spec: qemu-user:PROG, qemu-system:ARCH (with
--kernel/--initrd/--append/--symbols), gdb://HOST:PORT (with --arch/--symbols/--abi),
native:PROG (PROG under gdbserver), pid:PID (a running process, left running), elf:PATH,
unicorn:ARCH.  A program may come last, after --, with its arguments, as strace takes it:
kpsdk trace -e 'p:w libc.so.6:write n=$arg3' -- /bin/ls -la (each word is the program's, -la too;
a program of this machine's arch sees the caller's files, environment and working directory).
The target runs until it ends, --duration S, --count N or Ctrl-C.

[bold]Definitions[/bold] (-e, repeatable; -f FILE for one a line, # comments):

  p[:[GRP/]EVENT] SYM[+offs]|MEMADDR [FETCHARGS]     a probe
  r[MAXACTIVE][:[GRP/]EVENT] SYM [FETCHARGS]         a return probe (also p SYM%return)
  p[:[GRP/]EVENT] PATH:OFFSET[%return] [FETCHARGS]   a uprobe (PATH has a /)
  -:[GRP/]EVENT                                      clear an event defined before
  [EVENT=]POINT [[NAME=]VAR[:TYPE]...]               perf probe's syntax, with debug information

  perf's syntax: POINT is FUNC, FUNC:RELLINE, FILE.c:LINE, FUNC@FILE, 'FUNC;PATTERN', FUNC%return;
  VAR a variable path (len, buf->size, argv[1]), $vars, $params or $retval. Translated with the
  DWARF of -x PROG (or the program TARGET runs: uprobe lines) or of --symbols vmlinux (kprobe
  lines) into the lines perf probe -D prints (--definition shows them); events as perf names them.

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
kpsdk trace -e 'p:open libc.so.6:open64 path=+0($arg1):string' -- /bin/ls -la /etc
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
kpsdk trace ./myprog -e 'parse_line:12 len buf->size:u32' -e 'parse_line%return $retval'
kpsdk trace -x ./myprog -e 'parse_line $params' --definition     # the uprobe_events lines, as perf probe -D
kpsdk trace qemu-system:x86_64 --kernel vmlinuz --initrd initrd.img \\
    -e 'r:open do_sys_openat2 name=+0($arg2):ustring ret=$retval:s32' --filter 'ret < 0'
"""


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


@takes_target_options
def cmd_trace(
    ctx: typer.Context,
    where: TargetOptions,
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
        help="Stop after S seconds, a positive number; inf: no limit (default: none in Unicorn, where a program "
             f"runs until it ends or Ctrl-C; {LIVE_TIMEOUT:g} on a live target). Reaching it is not an error.")] = None,
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
             "program). To trace a running process, give TARGET pid:PID.")] = None,
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
    exec_: Annotated[str | None, typer.Option(
        "--exec", "-x", metavar="PROG", rich_help_panel=EVENTS_PANEL, show_default=False,
        help="The program perf-syntax definitions probe, as perf probe -x: uprobe lines on PROG (default: the "
             "program TARGET runs; a kernel's come from --symbols vmlinux).")] = None,
    definition: Annotated[bool, typer.Option(
        "--definition", "-D", rich_help_panel=EVENTS_PANEL,
        help="Print the kprobe_events/uprobe_events lines the definitions mean, as perf probe -D prints "
             "them, and exit: nothing runs (TARGET optional with -x or --symbols).")] = False,
) -> None:
    from kpsdk.trace.runner import EventOptions, TraceRun  # the run's machinery: not for kpsdk --help

    fmt = _output_format(output)
    definitions = _definitions(event, file)
    program = program_of(exec_, where.target_arg, where.target)
    if definition:
        _print_definitions(definitions, program, where.symbols, where.debug_dir or [])
        return
    definitions = runnable_lines(definitions, program, where.symbols, where.debug_dir or [])
    choice = where.choose(ctx.args, program_words(ctx))
    _check_prefix(choice, comm, pid)
    _check_output_file(fmt, out)
    _check_outputs_are_not_inputs(choice, out, plot, file or [], definitions)
    reports = _reports(hist, latency, lhist, plot, profile, show_console)
    _check_functions(definitions, functions)
    # before a target starts: a mistake costs no boot
    precheck(choice, definitions, [*reports.hist_fields, *(f for f, *_ in reports.linear)], trigger or [], functions)
    run = TraceRun(choice, definitions, fmt, out, split_commas(noprobe),
                   EventOptions(filter_expr, comm, pid, trigger or [], stack_trace, functions),
                   prefix=not no_prefix, limit=choice.run_timeout(duration), count=count, reports=reports)
    if run.execute():
        raise typer.Exit(INTERRUPTED)


def _print_definitions(definitions: list[str], program: str | None, kernel: str | None, debug_dirs: list[str]) -> None:
    """``--definition``: each line as ``perf probe -D`` prints it (a line already in the kernel's
    syntax as it is), on stdout."""
    for line in translate_all(definitions, program, kernel, debug_dirs, runnable=False):
        sys.stdout.write(f"{line}\n")


def _output_format(name: str) -> OutputFormat:
    """``--output``: a format some plugin loaded (the built-in ones may be blocked with ``-p no:``)."""
    try:
        return output_format(name)
    except UnknownNameError as exc:
        want = f"want one of {', '.join(sorted(exc.valid))}" if exc.valid else \
            "no output format is loaded (blocked with -p no:trace-formats?)"
        raise typer.BadParameter(f"{name!r}: {want}", param_hint="--output") from None


def _check_prefix(choice: TargetChoice, comm: str | None, pid: int | None) -> None:
    """``--comm``/``--pid`` name the task a Unicorn program's prefix shows; a live target has tasks of
    its own, and a name is the kernel's (at most 15 bytes, no NUL)."""
    if (comm is not None or pid is not None) and choice.kind in LIVE_KINDS:
        raise typer.BadParameter(f"a {choice.kind} target has tasks of its own: the prefix shows them",
                                 param_hint="--comm/--pid")
    if comm is not None:
        try:
            check_comm(comm)
        except KpsdkError as exc:
            raise typer.BadParameter(str(exc), param_hint="--comm") from None


def _check_output_file(fmt: OutputFormat, out: Path | None) -> None:
    """``--out`` is a file that can be written (not opened yet); a binary format is never written
    to a terminal."""
    if out is not None:
        check_out_path(out)
    elif fmt.binary and sys.stdout.isatty():
        raise typer.BadParameter(f"{fmt.name} is a binary file: give --out FILE, or send stdout to a file or pipe",
                                 param_hint="--output")


def _check_outputs_are_not_inputs(choice: TargetChoice, out: Path | None, plot: Path | None, files: list[Path],
                                  definitions: list[str]) -> None:
    """``--out`` and ``--plot`` are neither an input of the run (the program, a file a definition
    probes, a ``-f`` file, a kernel or initramfs) nor each other: the run would write over it."""
    inputs = [*choice.input_files(), *(("a definitions file (-f)", path) for path in files),
              *_probed_files(definitions)]
    for path, option in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            refuse_inputs(path, option, inputs)
    if out is not None and plot is not None:
        refuse_inputs(plot, "--plot", [("the --out file", out)])


def _probed_files(definitions: list[str]) -> list[tuple[str, Path]]:
    """The files the definitions put uprobes in (``p PATH:OFFSET``, ``p libc.so.6:malloc``): the
    name as given, and the file a bare library name finds (:func:`~kpsdk.binfmt.filelocation.find_file`)."""
    from kpsdk.binfmt.filelocation import find_file
    from kpsdk.trace.grammar import uprobe_file

    found: list[tuple[str, Path]] = []
    for line in definitions:
        words = line.split()
        name = uprobe_file(words[1]) if len(words) > 1 else None
        if name:
            for path in dict.fromkeys((name, find_file(name))):
                found.append(("a file the definitions probe", Path(path)))
    return found


def _reports(hist: list[str] | None, latency: bool, lhist: list[str] | None, plot: Path | None, profile: bool,
             show_console: bool) -> Reports:
    """The reports asked for, checked: ``--plot`` draws histograms some option asked for, in a format
    kpsdk can write; each ``--lhist`` parses."""
    from kpsdk.trace.runner import Reports

    if plot is not None and not (hist or latency or lhist):
        raise typer.BadParameter("--plot draws the --hist FIELD or --latency histograms: add one", param_hint="--plot")
    if plot is not None:
        check_plot(plot)
    try:
        linear = [parse_lhist(spec) for spec in lhist or []]
    except KpsdkError as exc:
        raise typer.BadParameter(str(exc), param_hint="--lhist") from None
    return Reports(hist or [], latency, linear, plot, profile, show_console)


def _check_functions(definitions: list[str], functions: str | None) -> None:
    """``--functions GLOB``: the definitions are templates written once per function (at least one
    probing ``$func``, none naming its event, which would repeat)."""
    if functions is None:
        return
    try:
        check_templates(definitions, functions)
    except FunctionsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--functions") from None


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
