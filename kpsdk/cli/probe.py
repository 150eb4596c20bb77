"""``kpsdk probe``: kprobes, kretprobes and uprobes from the command line, each hit printed.

This module declares the command's options and checks them (usage errors
before a target is opened); :class:`kpsdk.cli.probe_run.ProbeRun` does the
run.  Ctrl-C closes the session, reaps QEMU and gdb, prints the summary and
exits :data:`kpsdk.cli.exits.INTERRUPTED`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

import kpsdk
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.cli.exits import INTERRUPTED
from kpsdk.cli.hitregs import ARG_LIMIT
from kpsdk.cli.hitstrings import STRING_SLOT, STRINGS_MAX
from kpsdk.cli.options import (
    TARGET_PANEL,
    AbiOpt,
    AppendOpt,
    ArchOpt,
    InitrdOpt,
    KernelOpt,
    MechanismOpt,
    PidOpt,
    ProgArgOpt,
    QemuArgOpt,
    StdinOpt,
    SymbolsOpt,
    SysrootOpt,
    TargetOpt,
    given_target_options,
)
from kpsdk.cli.parsing import check_seconds, file_location, parse_call, parse_where, split_commas
from kpsdk.cli.probe_run import ProbeRun, probe_class
from kpsdk.cli.strace import StracePrinter
from kpsdk.cli.target_choice import LIVE_KINDS, LIVE_TIMEOUT, UNICORN_TIMEOUT, choose_target, close_session
from kpsdk.fixtures import ARCHS
from kpsdk.session import RESTYPES

PROBES_PANEL = "Probes"
OUTPUT_PANEL = "What to print"

ProbeElfArg = Annotated[str | None, typer.Argument(
    metavar="ELF", show_default=False,
    help="The program to run in Unicorn: an ELF executable or a bundled fixture's name ("
         + ", ".join(ARCHS) + "). Omit it with --target (or give it to --target qemu-user).")]


def cmd_probe(
    ctx: typer.Context,
    elf: ProbeElfArg = None,
    kprobe: Annotated[list[str] | None, typer.Option(
        "--kprobe", "-k", metavar="SYM[+OFF]", rich_help_panel=PROBES_PANEL,
        help="Put a kprobe here (SYM, SYM+0xOFF or 0xADDR; SYM may be a shell glob, 'vfs_*': one kprobe on each "
             "function that matches and can be probed); each hit prints registers. Repeatable.")] = None,
    kretprobe: Annotated[list[str] | None, typer.Option(
        "--kretprobe", metavar="SYM", rich_help_panel=PROBES_PANEL,
        help="Put a kretprobe on function SYM; each return prints 'r SYM ret=VALUE'. Repeatable.")] = None,
    uprobe: Annotated[list[str] | None, typer.Option(
        "--uprobe", "-u", metavar="PATH:SYM|PATH:0xOFF", rich_help_panel=PROBES_PANEL,
        help="Put a uprobe on file PATH at symbol SYM[+OFF] or file offset 0xOFF (this session); each hit "
             "prints registers, as --kprobe. Repeatable.")] = None,
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
        help="Print only the returns whose value is negative (errno style), with the errno name: "
             "ret=-2 (ENOENT).")] = False,
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
    call: Annotated[str | None, typer.Option(
        "--call", metavar="FN ARGS...", rich_help_panel=TARGET_PANEL,
        help="Unicorn only: call FN with integer arguments instead of running the program: --call add 2 3 "
             "(after the ELF argument), or one quoted string 'add 2 3' / 'add(2, -3)'; 0x.. ok.")] = None,
    restype: Annotated[str, typer.Option(
        "--restype", rich_help_panel=OUTPUT_PANEL,
        help="How a return value is read (--call, --kretprobe): long (signed word), ulong, int or uint "
             "(32-bit).")] = "long",
    no_optimize: Annotated[bool, typer.Option(
        "--no-optimize", rich_help_panel=PROBES_PANEL,
        help="s.kprobes_optimization = False: every probe takes the breakpoint path.")] = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", metavar="S", show_default=False, rich_help_panel=TARGET_PANEL, callback=check_seconds,
        help=f"Stop the target after S seconds, a positive number; inf: no limit (default: {UNICORN_TIMEOUT:g} "
             f"in Unicorn, {LIVE_TIMEOUT:g} on a live target).")] = None,
    noprobe: Annotated[list[str] | None, typer.Option(
        "--noprobe", metavar="NAME[,NAME]", rich_help_panel=PROBES_PANEL,
        help="Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL).")] = None,
    target: TargetOpt = None,
    prog_arg: ProgArgOpt = None,
    sysroot: SysrootOpt = None,
    stdin: StdinOpt = None,
    kernel: KernelOpt = None,
    initrd: InitrdOpt = None,
    append: AppendOpt = None,
    symbols: SymbolsOpt = None,
    arch: ArchOpt = None,
    abi: AbiOpt = None,
    pid: PidOpt = None,
    qemu_arg: QemuArgOpt = None,
    mechanism: MechanismOpt = None,
    strace: Annotated[bool, typer.Option(
        "--strace", rich_help_panel=OUTPUT_PANEL,
        help="Unicorn Linux programs: print each system call to stderr as strace(1) does, "
             "openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = 3 (probes are then optional).")] = False,
    show_console: Annotated[bool, typer.Option(
        "--console", rich_help_panel=OUTPUT_PANEL,
        help="Live targets: print the target's output at the end (qemu-user: the program's; qemu-system: "
             "the serial console). Unicorn always prints the program's.")] = False,
) -> None:
    """Put kprobes and kretprobes on a program or a kernel and print each hit as it happens.

    [bold]Where the code runs[/bold] (--target; live targets need QEMU and gdb-multiarch):

      (no --target)      ELF, run in Unicorn from its entry point, or --call FN ARGS
      qemu-user:PROG     PROG under qemu-user, --arg ARG for its arguments
      qemu-system:ARCH   a kernel booted in QEMU: --kernel, --initrd, --append, --symbols
      gdb://HOST:PORT    a gdbstub already running (attached, never killed): --arch, --symbols

    All probes are registered at once or none (an error rolls the others back,
    K8); then the target runs until it ends (the program exits, the guest powers
    off) or --timeout.  Ctrl-C stops it: the session is closed, QEMU and gdb are
    reaped, the summary is printed and the exit status is 130.

    [bold]Each hit prints a line[/bold], as it happens:

      \\[n] SYM+OFF (ADDRESS) reg=value ... argN="..."   a kprobe, before the instruction runs
      \\[n] r SYM ret=VALUE argN="..."                    a kretprobe, when SYM returns

    At a function's first instruction the arguments are where the calling
    convention puts them (the kernel's on qemu-system and gdb://), so
    --string-arg 2 on do_sys_openat2 is the file name (arguments count from 1,
    as the kernel's $argN, in --string-arg, --regs argN and what a hit prints).  A kretprobe reads it at
    the entry and keeps it in ri.data until the return.  ret is the return
    register as a signed word (--restype long; give --restype int for a function
    returning int on a 64-bit target); --failed keeps only negative values:
    ret=-2 (ENOENT).  With --post, a post_handler prints the ip after the
    instruction ran.

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
    if ctx.args and call is None:
        raise typer.BadParameter(f"unexpected arguments {' '.join(ctx.args)!r}", param_hint="ELF")
    if ctx.args:
        call = " ".join([call or "", *ctx.args])
    fn_args = parse_call(call) if call is not None else None
    kprobes = [parse_where(k) for k in kprobe or []]
    kretprobes = [(k.strip(), parse_where(k, "--kretprobe")) for k in kretprobe or []]
    uprobes = [file_location(u, "--uprobe") for u in uprobe or []]
    uretprobes = [file_location(u, "--uretprobe") for u in uretprobe or []]
    if not kprobes and not kretprobes and not uprobes and not uretprobes and not strace:
        raise typer.BadParameter("give at least one --kprobe SYM, --kretprobe SYM or --uprobe PATH:SYM "
                                 "(or --strace)", param_hint="--kprobe")
    if len(set(string_arg or [])) > STRINGS_MAX and (kretprobes or uretprobes):
        raise typer.BadParameter(f"a kretprobe keeps at most {STRINGS_MAX} strings from the entry to the return "
                                 f"({STRING_SLOT} bytes each in ri.data, at most {STRINGS_MAX * STRING_SLOT})",
                                 param_hint="--string-arg")
    if failed and not kretprobes and not uretprobes:
        raise typer.BadParameter("--failed filters the returns of --kretprobe probes: add one",
                                 param_hint="--failed")
    if restype not in RESTYPES:
        raise typer.BadParameter(", ".join(RESTYPES), param_hint="--restype")
    if pid is not None:
        if target is not None or elf is not None:
            raise typer.BadParameter("--pid names the target: drop --target and ELF", param_hint="--pid")
        target = f"pid:{pid}"
    live_kind = (target or "").partition(":")[0]
    if live_kind in LIVE_KINDS and strace:
        raise typer.BadParameter(f"a {live_kind} target's system calls are run by QEMU or the guest kernel, "
                                 "unseen by kpsdk: --strace needs a program run in Unicorn (drop --target)",
                                 param_hint="--strace")
    if live_kind in LIVE_KINDS and fn_args is not None:
        raise typer.BadParameter(f"--call calls one function in Unicorn; a {live_kind} target runs its own "
                                 "code: drop --call (or --target)", param_hint="--call")
    choice = choose_target(elf, target, given_target_options(prog_arg, kernel, initrd, append, symbols, arch,
                                                                qemu_arg, sysroot=sysroot, stdin=stdin,
                                                                mechanism=mechanism, abi=abi))
    reg = kpsdk.get_registry()
    if kprobes:
        probe_class(reg, "kprobe")
    if kretprobes:
        probe_class(reg, "kretprobe")
    run = ProbeRun(choice, kprobes, kretprobes, list(dict.fromkeys(string_arg or [])), failed, maxactive, post,
                   regs_opt, fn_args, restype, no_optimize,
                   choice.run_timeout(timeout),
                   split_commas(noprobe), show_console, console(), uprobes=uprobes, uretprobes=uretprobes)
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
    if interrupted:
        raise typer.Exit(INTERRUPTED)


COMMAND = Command(
    "probe", cmd_probe,
    "kpsdk probe x86_64 --kprobe add\n"
    "kpsdk probe riscv64 --kprobe fact --regs a0,sp,ra\n"
    "kpsdk probe arm --kprobe check+0x10 --post --no-optimize\n"
    "kpsdk probe x86_64 --kprobe add --kprobe sub --call 'add 2 3'\n"
    "kpsdk probe ./prog.elf --kprobe 0x401000 --timeout 1\n"
    "kpsdk probe x86_64 --kretprobe sub --restype int --call sub 3 5     # r sub ret=-2\n"
    "kpsdk probe --target qemu-user:arm --kretprobe add --kprobe fact --console\n"
    "kpsdk probe ./prog --uprobe ./prog:add --uretprobe ./prog:0x1f9     # by file and offset\n"
    "kpsdk probe --target qemu-user:./myprog --arg=-v --arg in.txt --kretprobe parse --string-arg 1\n"
    "kpsdk probe --target qemu-system:x86_64 --kernel vmlinuz --initrd initrd.img \\\n"
    "    --kretprobe do_sys_openat2 --string-arg 2 --failed       # failed opens, with file names\n"
    "kpsdk probe --target gdb://localhost:1234 --symbols vmlinux --kprobe do_sys_openat2 --string-arg 2\n"
    "kpsdk probe /bin/busybox --arg ls --arg /etc --sysroot / --strace      # each system call, as strace",
    # the arguments after --call FN are extra arguments (negative numbers included)
    extra_args=True,
)
