"""Option types shared by several commands, declared once with their help text.

typer reads a command's options from its signature, so a shared option is an
``Annotated`` type that each command names as a parameter's type.  The
target options (``--target``, ``--arg``, ``--kernel``, ``--call``...) are
shared by ``kpsdk probe`` and ``kpsdk trace`` as one group,
:class:`TargetOptions`: :func:`takes_target_options` gives a command all of
them, so both take the same names, help and defaults, and
:meth:`TargetOptions.choose` hands their values to
:func:`kpsdk.cli.target_choice.choose_target`.

``--pid PID`` (:data:`PidOpt`) is not one of the group: ``kpsdk trace --pid N``
already is the pid a Unicorn program's trace prefix shows, so only ``kpsdk
probe`` declares it, as a short way to write TARGET ``pid:PID``
(:meth:`TargetOptions.with_pid`); ``kpsdk trace pid:PID`` attaches the same way.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, get_type_hints

import typer
from typer.models import ArgumentInfo

from kpsdk.fixtures import ARCHS

if TYPE_CHECKING:
    from kpsdk.cli.command import ProgramWords
    from kpsdk.cli.target_choice import TargetChoice

TARGET_PANEL = "Target (default: the ELF in Unicorn)"

ElfArg = Annotated[str, typer.Argument(
    metavar="ELF", help="An ELF executable, or a bundled fixture's name: " + ", ".join(ARCHS))]
NoprobeOpt = Annotated[list[str] | None, typer.Option(
    "--noprobe", metavar="NAME[,NAME]", help="Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL).")]

#: the target options of ``kpsdk probe`` and ``kpsdk trace`` (:class:`TargetOptions`)
TargetArg = Annotated[str | None, typer.Argument(
    metavar="TARGET", show_default=False,
    help="What runs: a program to run in Unicorn (an ELF, or a bundled fixture: " + ", ".join(ARCHS) + "), or a "
         "target spec, as --target takes it: qemu-user:PROG, qemu-system:ARCH, gdb://HOST:PORT, native:PROG, "
         "pid:PID, elf:PATH, unicorn:ARCH. May come last, after --, with the program's arguments: "
         "-- PROG ARG... (as strace and ltrace take it).")]
TargetOpt = Annotated[str | None, typer.Option(
    "--target", metavar="SPEC", rich_help_panel=TARGET_PANEL,
    help="Where the code runs, as TARGET may say it too: qemu-user:PROG (a program under qemu-user; "
         "--target qemu-user takes PROG from TARGET), qemu-system:ARCH (a kernel booted in QEMU), "
         "gdb://HOST:PORT (a gdbstub already running: gdbserver, a kernel, a board), native:PROG (PROG run "
         "natively under gdbserver; --target native takes PROG from TARGET), pid:PID (a running process, "
         "left running). Default: TARGET, a program in Unicorn.")]
ProgArgOpt = Annotated[list[str] | None, typer.Option(
    "--arg", metavar="ARG", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn, qemu-user: one argument for the program (repeat for more; --arg=-v for one "
         "starting with -). Or give the program last, with its arguments: -- PROG ARG...")]
SysrootOpt = Annotated[str | None, typer.Option(
    "--sysroot", metavar="DIR", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn: the directory the program sees as / (read-only); qemu-user: where the program's "
         "loader and libraries are looked up first (QEMU's -L). Default for another architecture's program: "
         "Debian's cross sysroot /usr/TRIPLE (libc6-ARCH-cross); in Unicorn / for the host's own.")]
StdinOpt = Annotated[str | None, typer.Option(
    "--stdin", metavar="FILE", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn, qemu-user: the program's standard input, read from FILE ('-': kpsdk's own). "
         "Default: empty.")]
BindOpt = Annotated[list[str] | None, typer.Option(
    "--bind", metavar="HOST_DIR:GUEST_DIR[:ro|rw]", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn (a Linux program): the host directory HOST_DIR at GUEST_DIR in the program's tree; "
         "rw (the default) writes through to the host, the one way a program's files reach it; ro answers "
         "every change with EROFS. Repeatable; binds may not nest.")]
KernelOpt = Annotated[str | None, typer.Option(
    "--kernel", metavar="VMLINUZ", rich_help_panel=TARGET_PANEL,
    help="qemu-system: the kernel image to boot (its symbols come from its own kallsyms table "
         "unless --symbols).")]
InitrdOpt = Annotated[str | None, typer.Option(
    "--initrd", metavar="FILE", rich_help_panel=TARGET_PANEL, help="qemu-system: the initramfs.")]
AppendOpt = Annotated[str | None, typer.Option(
    "--append", metavar="CMDLINE", rich_help_panel=TARGET_PANEL,
    help="qemu-system: the kernel command line (default: 'nokaslr panic=-1'); console= for the "
         "architecture's board (ttyS0, ttyAMA0, hvc0) is added unless it names one.")]
SymbolsOpt = Annotated[str | None, typer.Option(
    "--symbols", metavar="FILE", rich_help_panel=TARGET_PANEL,
    help="qemu-system, gdb://: symbols from an ELF (vmlinux), System.map or a kallsyms dump.")]
QemuArgOpt = Annotated[list[str] | None, typer.Option(
    "--qemu-arg", metavar="ARG", rich_help_panel=TARGET_PANEL,
    help="qemu-system: one more argument for QEMU's command line (repeat for more: --qemu-arg=-smp "
         "--qemu-arg=2). Passed as one argv word, never through a shell.")]
MechanismOpt = Annotated[str | None, typer.Option(
    "--mechanism", metavar="gdb|plugin", rich_help_panel=TARGET_PANEL, show_default=False,
    help="qemu-system: how probe hits reach kpsdk. gdb (the default): a gdb breakpoint per probe, QEMU "
         "stops at each hit (milliseconds a hit; every probe type, handlers at the hit). plugin: kpsdk's "
         "TCG plugin in QEMU 10 (x86_64, i386, arm, riscv64, ppc64le kernels; fetched from "
         "bookworm-backports when the host's QEMU is older) "
         "records kprobe hits without stopping, with the registers and the memory the definitions read "
         "at the hit (microseconds a hit); probes it cannot serve keep gdb's breakpoints. "
         "docs/api/kernels.md, 'The TCG plugin mechanism'.")]
AbiOpt = Annotated[str | None, typer.Option(
    "--abi", metavar="user|kernel", rich_help_panel=TARGET_PANEL, show_default=False,
    help="gdb://: what the stub runs, a Linux process (user) or a kernel or bare-metal program (kernel). "
         "Default: asked of the stub (one that answers an auxiliary vector serves a process).")]
PidOpt = Annotated[int | None, typer.Option(
    "--pid", metavar="PID", rich_help_panel=TARGET_PANEL, show_default=False,
    help="Probe a running process (gdbserver --attach; ptrace must allow it): it is detached, running and "
         "unmodified, when kpsdk ends (also at Ctrl-C). Same as TARGET (or --target) pid:PID.")]
ArchOpt = Annotated[str | None, typer.Option(
    "--arch", metavar="ARCH", rich_help_panel=TARGET_PANEL,
    help="gdb://: the architecture (not needed when --symbols is an ELF).")]
DebugDirOpt = Annotated[list[str] | None, typer.Option(
    "--debug-dir", metavar="DIR", rich_help_panel=TARGET_PANEL,
    help="Where separate debug files are looked for first (DIR/.build-id/xx/yyyy.debug, the .gnu_debuglink "
         "name), before /usr/lib/debug: for source probe points, variables by name and CFI stacks. "
         "Repeatable.")]
CallOpt = Annotated[str | None, typer.Option(
    "--call", metavar="FN ARGS...", rich_help_panel=TARGET_PANEL,
    help="Unicorn only: call FN with integer arguments instead of running the program: --call add 2 3 "
         "(after TARGET), or one quoted string 'add 2 3' / 'add(2, -3)'; 0x.. ok.")]


@dataclass(frozen=True)
class TargetOptions:
    """What the target options said, as one command received them.

    The fields are the options: each field's type is the option's declaration
    (name, help, panel) and its default the option's.  A command gets them all
    through :func:`takes_target_options`, so no command declares one of them
    itself and none can differ from another's.
    """

    #: TARGET, the command's argument: a program, or a target spec (:func:`~kpsdk.cli.target_choice.is_target_spec`)
    target_arg: TargetArg = None
    target: TargetOpt = None
    prog_arg: ProgArgOpt = None
    sysroot: SysrootOpt = None
    stdin: StdinOpt = None
    bind: BindOpt = None
    call: CallOpt = None
    kernel: KernelOpt = None
    initrd: InitrdOpt = None
    append: AppendOpt = None
    symbols: SymbolsOpt = None
    arch: ArchOpt = None
    abi: AbiOpt = None
    qemu_arg: QemuArgOpt = None
    mechanism: MechanismOpt = None
    debug_dir: DebugDirOpt = None

    def with_pid(self, pid: int | None) -> TargetOptions:
        """These options with ``--pid PID`` as the target they name, ``pid:PID`` (``kpsdk probe --pid``);
        ``--pid`` besides TARGET or ``--target`` names the target twice, a usage error."""
        if pid is None:
            return self
        if self.call is not None:  # first: --call's words may have been taken for TARGET
            refuse_call("pid", "--pid")
        if self.target_arg is not None or self.target is not None:
            raise typer.BadParameter("--pid names the target: drop TARGET and --target", param_hint="--pid")
        return replace(self, target=f"pid:{pid}")

    def choose(self, extra: list[str], program: ProgramWords | None = None) -> TargetChoice:
        """The target to open and what to run there, or a usage error, before anything starts.

        ``extra`` are the words the command line left over before ``--``, the arguments of
        ``--call FN`` (``--call add 2 -3``); ``program`` what followed ``--``
        (:func:`kpsdk.cli.command.program_words`): the program, when TARGET was not given
        before, and its arguments, passed as they are (``-la`` included).  A call on a live
        target is refused first: that target runs its own code, and ``--call``'s words may have
        been taken for TARGET.  Then TARGET and ``--target`` are read
        (:func:`~kpsdk.cli.target_choice.choose_target`), and the launcher options checked
        against the kind of target.
        """
        from kpsdk.cli.parsing import parse_call, refuse_unknown_options
        from kpsdk.cli.target_choice import PROGRAM_ARGS, choose_target, live_kind, target_words

        named_before = self.target_arg is not None and (program is None or program.program is None)
        refuse_unknown_options([*([self.target_arg] if named_before and self.target_arg is not None else []),
                                *extra])
        if extra and self.call is None:
            raise typer.BadParameter(f"unexpected arguments {' '.join(extra)!r}" + (
                ": a program's arguments go after it, -- PROG ARGS" if program is None else ""), param_hint="TARGET")
        args = program.args if program is not None and program.args else None
        if args is not None and self.prog_arg:
            raise typer.BadParameter("the program's arguments are given twice: after -- PROG, and with --arg; "
                                     "give them one way", param_hint="--arg")
        kind = live_kind(target_words(self.target_arg, self.target)[1])
        if self.call is not None and kind is not None:
            refuse_call(kind, "--target")
        given = given_target_options(
            self.prog_arg, self.kernel, self.initrd, self.append, self.symbols, self.arch, self.qemu_arg,
            sysroot=self.sysroot, stdin=self.stdin, mechanism=self.mechanism, abi=self.abi, bind=self.bind)
        given[PROGRAM_ARGS] = args
        choice = choose_target(self.target_arg, self.target, given)
        if self.call is not None:
            choice.call = parse_call(" ".join([self.call, *extra]))
        if self.debug_dir:
            choice.options["debug_dir"] = list(self.debug_dir)
        return choice


def refuse_call(kind: str, named_by: str) -> NoReturn:
    """``--call`` on a live target (``kind``, named by TARGET, ``--target`` or ``--pid``): a usage error."""
    raise typer.BadParameter(f"--call calls one function in Unicorn; a {kind} target runs its own "
                             f"code: drop --call (or {named_by})", param_hint="--call")


#: the name of the parameter a command taking the target options receives them in
WHERE = "where"


def takes_target_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the target options as its own, gathered into one :class:`TargetOptions`.

    typer reads a command's options from its signature, and a signature cannot
    name a group; so the command declares one parameter, ``where: TargetOptions``,
    and the function returned here has, in its place, the group's argument
    (TARGET) and, after the command's own options, the group's options.  typer
    calls it with them all; it calls ``command`` with the group's values in
    ``where``.  The options are thus declared once, on :class:`TargetOptions`.
    """
    signature = inspect.signature(command, eval_str=True)
    if WHERE not in signature.parameters:
        raise TypeError(f"{command.__name__} takes no {WHERE!r} parameter for its target options")
    hints = get_type_hints(TargetOptions, include_extras=True)
    group = [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default,
                               annotation=hints[f.name])
             for f in fields(TargetOptions)]
    names = [p.name for p in group]
    clash = set(names) & set(signature.parameters)
    if clash:
        raise TypeError(f"{command.__name__} declares target options itself: {', '.join(sorted(clash))}")
    arguments = [p for p in group if isinstance(_typer_info(p.annotation), ArgumentInfo)]
    options = [p for p in group if p not in arguments]
    own: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        own += arguments if p.name == WHERE else [p]

    @functools.wraps(command)
    def with_target_options(**values: Any) -> None:
        where = TargetOptions(**{name: values.pop(name) for name in names})
        command(**values, **{WHERE: where})

    parameters = [*own, *options]
    setattr(with_target_options, "__signature__", signature.replace(parameters=parameters))  # noqa: B010
    with_target_options.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_target_options


def _typer_info(annotation: Any) -> object:
    """The ``typer.Option``/``typer.Argument`` of an ``Annotated`` type (None: there is none)."""
    return next(iter(getattr(annotation, "__metadata__", ())), None)


def given_target_options(prog_arg: list[str] | None, kernel: str | None, initrd: str | None, append: str | None,
                         symbols: str | None, arch: str | None,
                         qemu_arg: list[str] | None = None, sysroot: str | None = None,
                         stdin: str | None = None, mechanism: str | None = None,
                         abi: str | None = None, bind: list[str] | None = None) -> dict[str, Any]:
    """The target options' values by option name, as ``choose_target`` checks them (None: not given).
    ``--stdin FILE`` is read here (its bytes are the option's value), ``--bind`` parsed
    (:func:`kpsdk.cli.parsing.parse_binds`)."""
    from kpsdk.cli.parsing import parse_binds

    return {"--arg": prog_arg, "--kernel": kernel, "--initrd": initrd, "--append": append, "--symbols": symbols,
            "--arch": arch, "--qemu-arg": qemu_arg or None, "--sysroot": sysroot,
            "--stdin": None if stdin is None else read_stdin(stdin), "--mechanism": check_mechanism(mechanism),
            "--abi": check_abi(abi), "--bind": parse_binds(bind)}


def check_abi(value: str | None) -> str | None:
    """``--abi``'s value: ``user`` or ``kernel`` (anything else is a usage error, before a target starts)."""
    if value is not None and value not in ("user", "kernel"):
        raise typer.BadParameter(f"{value!r} is not one of user, kernel", param_hint="--abi")
    return value


def check_mechanism(value: str | None) -> str | None:
    """``--mechanism``'s value: ``gdb`` or ``plugin`` (anything else is a usage error, before a target starts)."""
    from kpsdk.targets.live.tcg.launch import MECHANISMS

    if value is not None and value not in MECHANISMS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(MECHANISMS)}", param_hint="--mechanism")
    return value


#: the most bytes ``--stdin`` reads (the program gets them all at once, in memory)
STDIN_MAX = 1 << 28


def read_stdin(name: str) -> bytes:
    """The bytes of ``--stdin FILE`` (``-``: kpsdk's own standard input), at most STDIN_MAX."""
    try:
        if name == "-":
            data = sys.stdin.buffer.read(STDIN_MAX + 1)
        else:
            with open(name, "rb") as f:
                data = f.read(STDIN_MAX + 1)
    except OSError as e:
        raise typer.BadParameter(f"cannot read {name}: {e.strerror}", param_hint="--stdin") from None
    if len(data) > STDIN_MAX:
        raise typer.BadParameter(f"{name} is larger than {STDIN_MAX} bytes", param_hint="--stdin")
    return data
