"""``kpsdk probe``: kprobes, kretprobes and uprobes from the command line, each hit printed.

This module declares the command's options and checks them (usage errors
before a target is opened); :class:`kpsdk.cli.probe_run.ProbeRun` does the
run.  Ctrl-C closes the session, reaps QEMU and gdb, prints the summary and
exits :data:`kpsdk.cli.exits.INTERRUPTED`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

import kpsdk
from kpsdk.cli.command import Command, program_words
from kpsdk.cli.consoles import console
from kpsdk.cli.exits import INTERRUPTED
from kpsdk.cli.hitregs import ARG_LIMIT
from kpsdk.cli.hitstrings import STRING_SLOT, STRINGS_MAX
from kpsdk.cli.options import TARGET_PANEL, NoprobeOpt, PidOpt, TargetArg, TargetOptions, takes_target_options
from kpsdk.cli.parsing import check_seconds, file_location, parse_where, split_commas
from kpsdk.cli.probe_run import ProbeRun, probe_class
from kpsdk.cli.sourceprobes import SourceProbe, split_probe
from kpsdk.cli.strace import StracePrinter
from kpsdk.cli.target_choice import LIVE_TIMEOUT, close_session, refuse_names_without_symbols
from kpsdk.session import RESTYPES

if TYPE_CHECKING:
    from kpsdk.cli.target_choice import TargetChoice
    from kpsdk.registry import Registry

PROBES_PANEL = "Probes"
OUTPUT_PANEL = "What to print"

#: the former name of TARGET's declaration (kpsdk.cli.options.TargetArg, shared with kpsdk trace)
ProbeElfArg = TargetArg


@takes_target_options
def cmd_probe(
    ctx: typer.Context,
    where: TargetOptions,
    kprobe: Annotated[list[str] | None, typer.Option(
        "--kprobe", "-k", metavar="SYM[+OFF]|'POINT VAR...'", rich_help_panel=PROBES_PANEL,
        help="Put a kprobe here (SYM, SYM+0xOFF or 0xADDR; SYM may be a shell glob, 'vfs_*': one kprobe on each "
             "function that matches and can be probed); each hit prints registers. With debug information, perf "
             "probe's syntax: a source point (FUNC:RELLINE, FILE.c:LINE, FUNC@FILE, 'FUNC;PATTERN', an inlined "
             "function: each copy) and variables to print: 'parse_line:12 len buf->size'. Repeatable.")] = None,
    kretprobe: Annotated[list[str] | None, typer.Option(
        "--kretprobe", metavar="SYM", rich_help_panel=PROBES_PANEL,
        help="Put a kretprobe on function SYM; each return prints 'r SYM ret=VALUE'. Repeatable.")] = None,
    uprobe: Annotated[list[str] | None, typer.Option(
        "--uprobe", "-u", metavar="PATH:SYM|PATH:0xOFF|'[PATH:]POINT VAR...'", rich_help_panel=PROBES_PANEL,
        help="Put a uprobe on file PATH at symbol SYM[+OFF] or file offset 0xOFF (this session); each hit "
             "prints registers, as --kprobe. With debug information, a source point and variables as --kprobe "
             "takes them, in PATH or (no PATH) the program: 'parse_line:12 len buf->size'. Repeatable.")] = None,
    uretprobe: Annotated[list[str] | None, typer.Option(
        "--uretprobe", metavar="PATH:SYM|PATH:0xOFF", rich_help_panel=PROBES_PANEL,
        help="Put a uretprobe on the function at PATH:SYM (or its entry's file offset); each return prints "
             "'r PATH:SYM ret=VALUE'. Repeatable.")] = None,
    string_arg: Annotated[list[int] | None, typer.Option(
        "--string-arg", metavar="N", min=1, max=ARG_LIMIT, rich_help_panel=OUTPUT_PANEL,
        help="Also print argument N (from 1, as the kernel's $argN, by the target's calling convention) as a "
             "NUL-terminated string, "
             "argN=\"...\" (at most 256 bytes; argN=(fault) if unreadable). Read at a kprobe's hit, at a "
             f"kretprobe's function entry (at most {STRINGS_MAX} there). Repeatable.")] = None,
    failed: Annotated[bool, typer.Option(
        "--failed", rich_help_panel=OUTPUT_PANEL,
        help="Print only the returns whose value is negative: a kernel's with the errno name, ret=-2 (ENOENT); a "
             "C library function's with the thread's errno after the call where kpsdk can read it (Unicorn, "
             "glibc), ret=-1 errno=ENOENT.")] = False,
    maxactive: Annotated[int, typer.Option(
        "--maxactive", metavar="N", min=0, rich_help_panel=PROBES_PANEL,
        help="Kretprobe instances, i.e. calls followed at once (more are missed); 0: the kernel's "
             "max(10, 2*ncpus).")] = 0,
    post: Annotated[bool, typer.Option(
        "--post", rich_help_panel=PROBES_PANEL,
        help="Also a post_handler: prints the ip after the instruction.")] = False,
    regs_opt: Annotated[str | None, typer.Option(
        "--regs", metavar="R1,R2", rich_help_panel=OUTPUT_PANEL,
        help="Registers a kprobe hit prints (names, aliases, ip, sp, return_value, argN). "
        "Default: the first 4 argument registers, sp and the return value register.")] = None,
    restype: Annotated[str, typer.Option(
        "--restype", rich_help_panel=OUTPUT_PANEL,
        help="How a return value is read (--call, --kretprobe): long (signed word), ulong, int or uint "
             "(32-bit).")] = "long",
    no_optimize: Annotated[bool, typer.Option(
        "--no-optimize", rich_help_panel=PROBES_PANEL,
        help="s.kprobes_optimization = False: every probe takes the breakpoint path.")] = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", metavar="S", show_default=False, rich_help_panel=TARGET_PANEL, callback=check_seconds,
        help="Stop the target after S seconds, a positive number; inf: no limit (default: none in Unicorn, "
             f"where a program runs until it ends or Ctrl-C; {LIVE_TIMEOUT:g} on a live target).")] = None,
    follow: Annotated[bool, typer.Option(
        "--follow/--no-follow", rich_help_panel=TARGET_PANEL,
        help="Unicorn Linux programs: probes fire in every process the program makes (the default, as strace "
             "-f), or with --no-follow only in the first one, the program started (its threads and what it "
             "execs included; not the children it forks).")] = True,
    noprobe: NoprobeOpt = None,
    pid: PidOpt = None,
    strace: Annotated[bool, typer.Option(
        "--strace", rich_help_panel=OUTPUT_PANEL,
        help="Unicorn Linux programs: print each system call to stderr as strace(1) does, "
             "openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = 3 (probes are then optional).")] = False,
    stack: Annotated[bool, typer.Option(
        "--stack", rich_help_panel=OUTPUT_PANEL,
        help="After each kprobe or uprobe hit, its call stack ('=> sym+0xoff (ADDRESS)'), from the call frame "
             "information where the code has some (through libraries, without frame pointers), else by frame "
             "pointers.")] = False,
    show_console: Annotated[bool, typer.Option(
        "--console", rich_help_panel=OUTPUT_PANEL,
        help="Live targets: print the target's output at the end (qemu-user: the program's; qemu-system: "
             "the serial console). Unicorn always prints the program's, as it writes it.")] = False,
) -> None:
    """Put kprobes and kretprobes on a program or a kernel and print each hit as it happens.

    [bold]Where the code runs[/bold] (TARGET, or --target SPEC; live targets need gdb-multiarch and
    QEMU, or gdbserver for native: and pid:):

      ELF                an ELF or a bundled fixture, run in Unicorn from its entry point, or --call FN ARGS
      -- PROG ARGS...    last, as strace takes it: PROG run in Unicorn with ARGS, each word as it is
                         (-la too); a program of this machine's arch sees the caller's files (/),
                         environment and working directory
      qemu-user:PROG     PROG under qemu-user, --arg ARG for its arguments
      qemu-system:ARCH   a kernel booted in QEMU: --kernel, --initrd, --append, --symbols
      gdb://HOST:PORT    a gdbstub already running (attached, never killed): --arch, --symbols, --abi
      native:PROG        PROG run natively under gdbserver, --arg ARG for its arguments
      pid:PID            a running process (also --pid PID), detached and left running at the end

    All probes are registered at once or none (an error rolls the others back,
    K8); then the target runs until it ends (the program exits, the guest powers
    off) or --timeout (a program in Unicorn has no time limit unless
    --timeout gives one; a live target 120 s).  Ctrl-C stops it: the session is closed, QEMU and gdb are
    reaped, the summary is printed and the exit status is 130.

    [bold]Each hit prints a line[/bold], as it happens:

      \\[n] SYM+OFF (ADDRESS) reg=value ... argN="..."   a kprobe, before the instruction runs
      \\[n] r SYM ret=VALUE argN="..."                    a kretprobe, when SYM returns

    In a program run in Unicorn that has made a second task, the task follows
    \\[n] as a trace's prefix names it, comm-pid: \\[2] tr-1002 write+0x0 ...
    (--follow, the default, probes every process, as strace -f; --no-follow
    the first one only).

    At a function's first instruction the arguments are where the calling
    convention puts them (the kernel's on qemu-system and gdb://), so
    --string-arg 2 on do_sys_openat2 is the file name (arguments count from 1,
    as the kernel's $argN, in --string-arg, --regs argN and what a hit prints).  A kretprobe reads it at
    the entry and keeps it in ri.data until the return.  ret is the return
    register as a signed word (--restype long; give --restype int for a function
    returning int on a 64-bit target); --failed keeps only negative values:
    ret=-2 (ENOENT) on a kernel, ret=-1 errno=ENOENT for a C library function.
    With --post, a post_handler prints the ip after the instruction ran.

    [bold]At the end[/bold]: the program's output (Unicorn; --console for live
    targets), its exit status, the kprobes/list and kprobe_profile views
    (s.list(), s.profile()) and one summary line per probe: hits, returns,
    missed.

    The errors are the kernel's: an unknown symbol is ENOENT, an offset inside
    an instruction EILSEQ, a refused instruction EINVAL (see kpsdk disasm), a
    kretprobe not at a function's entry EINVAL.  Exit status: 0 when probing
    worked, whatever the program's own status; 1 on a kpsdk error or when a
    program (Unicorn, qemu-user) did not exit within --timeout (a kernel still
    running then is just stopped: 0); 2 on a usage error; 130 on Ctrl-C.
    """
    points = _probe_points(kprobe, kretprobe, uprobe, uretprobe, strace)
    strings = _string_args(string_arg, points)
    _check_returns(points, failed, restype)
    choice = where.with_pid(pid).choose(ctx.args, program_words(ctx))
    wheres = [*points.kprobes, *(k for _, k in points.kretprobes)]
    refuse_names_without_symbols(choice, [w["symbol_name"] for w in wheres if w.get("symbol_name") is not None])
    _check_strace(choice, strace)
    _check_follow(choice, follow)
    reg = kpsdk.get_registry()
    _check_probe_types(reg, points)
    run = ProbeRun(choice, points.kprobes, points.kretprobes, strings, failed, maxactive, post,
                   regs_opt, choice.call, restype, no_optimize,
                   choice.run_timeout(timeout),
                   split_commas(noprobe), show_console, console(), uprobes=points.uprobes,
                   uretprobes=points.uretprobes, sources=points.sources, stack=stack)
    if _run(run, reg, strace):
        raise typer.Exit(INTERRUPTED)


@dataclass(frozen=True)
class ProbePoints:
    """Where the probes go, each option's values parsed (the symbols are looked up when the probe is
    made)."""

    #: ``--kprobe``: Kprobe keyword arguments (symbol/offset or addr)
    kprobes: list[dict[str, Any]] = field(default_factory=list)
    #: ``--kretprobe``: (the text, as the summary names it; Kretprobe keyword arguments)
    kretprobes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: ``--uprobe`` / ``--uretprobe``: PATH:SYM or PATH:0xOFF texts
    uprobes: list[str] = field(default_factory=list)
    uretprobes: list[str] = field(default_factory=list)
    #: ``--kprobe``/``--uprobe`` by source, perf's syntax (:mod:`kpsdk.cli.sourceprobes`)
    sources: list[SourceProbe] = field(default_factory=list)

    @property
    def returns(self) -> bool:
        """Some probe reports returns (a kretprobe or a uretprobe)."""
        return bool(self.kretprobes or self.uretprobes)


def _probe_points(kprobe: list[str] | None, kretprobe: list[str] | None, uprobe: list[str] | None,
                  uretprobe: list[str] | None, strace: bool) -> ProbePoints:
    """The probes asked for, each well formed; at least one, unless --strace is what to print."""
    sources = [sp for text, letter in [(k, "k") for k in kprobe or []] + [(u, "u") for u in uprobe or []]
               if (sp := split_probe(text, letter)) is not None]
    by_source = {sp.text for sp in sources}
    points = ProbePoints([parse_where(k) for k in kprobe or [] if k.strip() not in by_source],
                         [(k.strip(), parse_where(k, "--kretprobe")) for k in kretprobe or []],
                         [file_location(u, "--uprobe") for u in uprobe or [] if u.strip() not in by_source],
                         [file_location(u, "--uretprobe") for u in uretprobe or []], sources)
    if not (points.kprobes or points.uprobes or points.returns or points.sources or strace):
        raise typer.BadParameter("give at least one --kprobe SYM, --kretprobe SYM or --uprobe PATH:SYM "
                                 "(or --strace)", param_hint="--kprobe")
    return points


def _string_args(string_arg: list[int] | None, points: ProbePoints) -> list[int]:
    """--string-arg's argument numbers, each once in the order given; a return probe keeps only
    STRINGS_MAX of them from the entry to the return (in ri.data)."""
    numbers = list(dict.fromkeys(string_arg or []))
    if len(numbers) > STRINGS_MAX and points.returns:
        raise typer.BadParameter(f"a kretprobe keeps at most {STRINGS_MAX} strings from the entry to the return "
                                 f"({STRING_SLOT} bytes each in ri.data, at most {STRINGS_MAX * STRING_SLOT})",
                                 param_hint="--string-arg")
    return numbers


def _check_returns(points: ProbePoints, failed: bool, restype: str) -> None:
    """--failed filters returns, so it wants a return probe; --restype is a type a return is read as."""
    if failed and not points.returns:
        raise typer.BadParameter("--failed filters the returns of --kretprobe probes: add one",
                                 param_hint="--failed")
    if restype not in RESTYPES:
        raise typer.BadParameter(", ".join(RESTYPES), param_hint="--restype")


def _check_strace(choice: TargetChoice, strace: bool) -> None:
    """--strace prints the system calls kpsdk's Linux layer runs: a live target's are not kpsdk's."""
    if choice.live and strace:
        raise typer.BadParameter(f"a {choice.kind} target's system calls are run by QEMU or a real kernel, "
                                 "unseen by kpsdk: --strace needs a program run in Unicorn (TARGET a program, "
                                 "no --target or --pid)", param_hint="--strace")


def _check_follow(choice: TargetChoice, follow: bool) -> None:
    """--no-follow chooses among the processes of kpsdk's Linux layer: ``follow=False`` for an ELF
    run in Unicorn; a live target's processes are QEMU's or a real kernel's."""
    if follow:
        return
    if choice.live or not choice.spec.startswith("elf:"):
        where = f"a {choice.kind} target's" if choice.live else f"{choice.spec}'s"
        raise typer.BadParameter(f"{where} processes are not kpsdk's Linux layer's: --no-follow needs a program run "
                                 "in Unicorn (TARGET a program, no --target or --pid)", param_hint="--no-follow")
    choice.options["follow"] = False


def _check_probe_types(reg: Registry, points: ProbePoints) -> None:
    """The probe types asked for are loaded (a plugin may be blocked: -p no:kretprobes)."""
    if points.kprobes:
        probe_class(reg, "kprobe")
    if points.kretprobes:
        probe_class(reg, "kretprobe")


def _run(run: ProbeRun, reg: Registry, strace: bool) -> bool:
    """Open the target, register, run and report, with --strace's printer in place; True when Ctrl-C
    stopped it.  Then the report so far is printed (a second Ctrl-C skips it), and the session is
    closed whatever happened (QEMU and gdb reaped)."""
    printer = StracePrinter(sys.stderr) if strace else None
    if printer is not None:
        reg.pm.register(printer)
    interrupted = False
    try:
        try:
            run.open()
            run.execute()
        except KeyboardInterrupt:
            interrupted = True
            console(stderr=True).print("[bold yellow]interrupted[/] (Ctrl-C): stopping the target, closing the "
                                       "session")
            if run.session is not None:
                run.report(interrupted=True)
    except KeyboardInterrupt:  # a second Ctrl-C while reporting
        interrupted = True
    finally:
        close_session(run.session)
        if printer is not None:
            reg.pm.unregister(printer)
    return interrupted


COMMAND = Command(
    "probe", cmd_probe,
    "kpsdk probe x86_64 --kprobe add\n"
    "kpsdk probe --uprobe libc.so.6:opendir -- /bin/ls -la /tmp        # the program and its arguments, last\n"
    "kpsdk probe riscv64 --kprobe fact --regs a0,sp,ra\n"
    "kpsdk probe arm --kprobe check+0x10 --post --no-optimize\n"
    "kpsdk probe x86_64 --kprobe add --kprobe sub --call 'add 2 3'\n"
    "kpsdk probe ./prog.elf --kprobe 0x401000 --timeout 1\n"
    "kpsdk probe x86_64 --kretprobe sub --restype int --call sub 3 5     # r sub ret=-2\n"
    "kpsdk probe --target qemu-user:arm --kretprobe add --kprobe fact --console\n"
    "kpsdk probe ./prog --uprobe ./prog:add --uretprobe ./prog:0x1f9     # by file and offset\n"
    "kpsdk probe ./myprog --uprobe 'parse_line:12 len buf->size'     # by source line, variables by name\n"
    "kpsdk probe ./myprog --kprobe 'clamp $params' --stack          # every inlined copy; CFI stacks\n"
    "kpsdk probe qemu-user:./myprog --arg=-v --arg in.txt --kretprobe parse --string-arg 1\n"
    "kpsdk probe --target qemu-system:x86_64 --kernel vmlinuz --initrd initrd.img \\\n"
    "    --kretprobe do_sys_openat2 --string-arg 2 --failed       # failed opens, with file names\n"
    "kpsdk probe --target gdb://localhost:1234 --symbols vmlinux --kprobe do_sys_openat2 --string-arg 2\n"
    "kpsdk probe --pid 4242 --uprobe libc.so.6:clock_nanosleep --timeout 1   # a running process, left running\n"
    "kpsdk probe /bin/busybox --arg ls --arg /etc --sysroot / --strace      # each system call, as strace",
    # the arguments after --call FN are extra arguments (negative numbers included)
    extra_args=True,
    takes_program=True,
)
