"""Option types shared by several commands, declared once with their help text.

typer reads a command's options from its signature, so a shared option is an
``Annotated`` type that each command names as a parameter's type.  The
target options (``--target``, ``--arg``, ``--kernel``...) are shared by
``kpsdk probe`` and ``kpsdk trace``; :func:`given_target_options` hands
their values to :func:`kpsdk.cli.target_choice.choose_target`.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from kpsdk.fixtures import ARCHS

TARGET_PANEL = "Target (default: the ELF in Unicorn)"

ElfArg = Annotated[str, typer.Argument(
    metavar="ELF", help="An ELF executable, or a bundled fixture's name: " + ", ".join(ARCHS))]
NoprobeOpt = Annotated[list[str] | None, typer.Option(
    "--noprobe", metavar="NAME[,NAME]", help="Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL).")]

#: the target options of ``kpsdk probe``, shared with other commands (``kpsdk trace``)
TargetOpt = Annotated[str | None, typer.Option(
    "--target", "-t", metavar="SPEC", rich_help_panel=TARGET_PANEL,
    help="Where the code runs: qemu-user:PROG (a program under qemu-user), qemu-system:ARCH (a kernel "
         "booted in QEMU), gdb://HOST:PORT (a gdbstub already running: gdbserver, a kernel, a board), "
         "native:PROG (PROG run natively under gdbserver), pid:PID (a running process, as --pid). "
         "Default: ELF in Unicorn.")]
ProgArgOpt = Annotated[list[str] | None, typer.Option(
    "--arg", metavar="ARG", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn, qemu-user: one argument for the program (repeat for more; --arg=-v for one "
         "starting with -).")]
SysrootOpt = Annotated[str | None, typer.Option(
    "--sysroot", metavar="DIR", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn: the directory the program sees as / (read-only); qemu-user: where the program's "
         "loader and libraries are looked up first (QEMU's -L). Default for another architecture's program: "
         "Debian's cross sysroot /usr/TRIPLE (libc6-ARCH-cross); in Unicorn / for the host's own.")]
StdinOpt = Annotated[str | None, typer.Option(
    "--stdin", metavar="FILE", rich_help_panel=TARGET_PANEL,
    help="ELF in Unicorn, qemu-user: the program's standard input, read from FILE ('-': kpsdk's own). "
         "Default: empty.")]
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
         "docs/api.md, 'The TCG plugin mechanism'.")]
AbiOpt = Annotated[str | None, typer.Option(
    "--abi", metavar="user|kernel", rich_help_panel=TARGET_PANEL, show_default=False,
    help="gdb://: what the stub runs, a Linux process (user) or a kernel or bare-metal program (kernel). "
         "Default: asked of the stub (one that answers an auxiliary vector serves a process).")]
PidOpt = Annotated[int | None, typer.Option(
    "--pid", metavar="PID", rich_help_panel=TARGET_PANEL, show_default=False,
    help="Probe a running process (gdbserver --attach; ptrace must allow it): it is detached, running and "
         "unmodified, when kpsdk ends (also at Ctrl-C). Same as --target pid:PID.")]
ArchOpt = Annotated[str | None, typer.Option(
    "--arch", metavar="ARCH", rich_help_panel=TARGET_PANEL,
    help="gdb://: the architecture (not needed when --symbols is an ELF).")]


def given_target_options(prog_arg: list[str] | None, kernel: str | None, initrd: str | None, append: str | None,
                         symbols: str | None, arch: str | None,
                         qemu_arg: list[str] | None = None, sysroot: str | None = None,
                         stdin: str | None = None, mechanism: str | None = None,
                         abi: str | None = None) -> dict[str, Any]:
    """The target options' values by option name, as ``choose_target`` checks them (None: not given).
    ``--stdin FILE`` is read here (its bytes are the option's value)."""
    return {"--arg": prog_arg, "--kernel": kernel, "--initrd": initrd, "--append": append, "--symbols": symbols,
            "--arch": arch, "--qemu-arg": qemu_arg or None, "--sysroot": sysroot,
            "--stdin": None if stdin is None else read_stdin(stdin), "--mechanism": check_mechanism(mechanism),
            "--abi": check_abi(abi)}


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
