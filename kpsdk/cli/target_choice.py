"""Which target a command opens: TARGET or ``--target SPEC`` plus the launcher options.

``kpsdk probe`` and ``kpsdk trace`` take the same target options
(:mod:`kpsdk.cli.options`) and read their TARGET argument by one rule
(:func:`is_target_spec`: a target spec such as ``qemu-user:PROG``, else a
program run in Unicorn); this module turns their values into one
``kpsdk.open(spec, **options)`` call (:class:`TargetChoice`), refusing an
option meant for another kind of target as a usage error, and closes the
session again (:func:`close_session`).  The run time limits are here too,
because they depend on the kind of target.
"""

from __future__ import annotations

import math
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

import kpsdk
from kpsdk.cli.parsing import elf_path

if TYPE_CHECKING:
    from kpsdk.session import Session

#: target kinds that run real code behind a gdbstub: no --call; they run until they end
LIVE_KINDS = ("qemu-user", "qemu-system", "gdb", "native", "pid")
#: the launcher options of the live kinds: CLI option -> (kpsdk.open keyword, the kinds that take it)
#: the words after ``-- PROG`` (:func:`kpsdk.cli.command.program_words`), checked as a launcher option
PROGRAM_ARGS = "-- PROG ARGS"
TARGET_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "--arg": ("args", ("qemu-user", "elf", "native")),
    PROGRAM_ARGS: ("args", ("qemu-user", "elf", "native")),
    "--sysroot": ("sysroot", ("elf", "qemu-user", "gdb", "native", "pid")),
    "--stdin": ("stdin", ("elf", "qemu-user", "native")),
    "--bind": ("bind", ("elf",)),
    "--abi": ("abi", ("gdb",)),
    "--kernel": ("kernel", ("qemu-system",)),
    "--initrd": ("initrd", ("qemu-system",)),
    "--append": ("append", ("qemu-system",)),
    "--symbols": ("symbols", ("qemu-system", "gdb")),
    "--arch": ("arch", ("gdb",)),
    "--qemu-arg": ("qemu_args", ("qemu-system",)),
    "--mechanism": ("mechanism", ("qemu-system",)),
}
#: the target kinds kpsdk brings (plugins may add more); TARGET is a spec when it begins with one
BUILTIN_KINDS = ("elf", "unicorn", *LIVE_KINDS)
#: the live kinds that run a program kpsdk starts: ``--target KIND`` alone takes it from TARGET
PROGRAM_KINDS = ("qemu-user", "native")
TARGET_SPECS = "qemu-user:PROG, qemu-system:ARCH, gdb://HOST:PORT, native:PROG, pid:PID, elf:PATH, unicorn:ARCH"
#: default --timeout: a program in Unicorn (none: it runs until it ends, Ctrl-C stops it, as it would
#: natively; ``python3 -c 'import json'`` takes ~17 s emulated), a live target
UNICORN_TIMEOUT = math.inf
LIVE_TIMEOUT = 120.0


@dataclass
class TargetChoice:
    """What a command opens: ``kpsdk.open(spec, **options)``."""

    spec: str
    options: dict[str, Any]
    #: one of LIVE_KINDS, or None for Unicorn (elf:, unicorn: and other plugins' kinds)
    kind: str | None
    #: ``--call FN ARGS``: the one function to call instead of running the program (Unicorn only)
    call: tuple[str, list[int]] | None = None

    @property
    def live(self) -> bool:
        return self.kind is not None

    def run_timeout(self, given: float | None) -> float:
        """``given`` seconds, else the default for this kind of target."""
        return given if given is not None else (LIVE_TIMEOUT if self.live else UNICORN_TIMEOUT)

    def open(self, noprobe: list[str]) -> Session:
        """The session on this target, with ``noprobe`` symbols refused (``--noprobe``)."""
        return kpsdk.open(self.spec, noprobe=noprobe, **self.options)

    def input_files(self) -> list[tuple[str, Path]]:
        """The files this target reads, each with what it is: the program (``elf:``,
        ``qemu-user:``, ``native:``), ``--kernel``, ``--initrd``, ``--symbols``.  A command's
        outputs may not be one of them (:func:`kpsdk.cli.parsing.refuse_inputs`)."""
        scheme, _, rest = self.spec.partition(":")
        files = [("the program", Path(rest))] if scheme in ("elf", *PROGRAM_KINDS) and rest else []
        for keyword, what in (("kernel", "the kernel (--kernel)"), ("initrd", "the initramfs (--initrd)"),
                              ("symbols", "the symbol file (--symbols)")):
            value = self.options.get(keyword)
            if isinstance(value, (str, Path)) and str(value):
                files.append((what, Path(value)))
        return files


def live_kind(spec: str | None) -> str | None:
    """The live kind a target spec names (one of LIVE_KINDS: ``qemu-user``, ``native``, ``pid``...), else None."""
    scheme = (spec or "").partition(":")[0]
    return scheme if scheme in LIVE_KINDS else None


def is_target_spec(text: str) -> bool:
    """Whether a command's TARGET is a target spec, ``KIND:REST`` where KIND is a target kind
    (kpsdk's own, or one a plugin adds), rather than a program: the one rule of both commands.
    A program whose name begins so is still reached as ``./NAME`` or ``elf:NAME``."""
    kind, sep, _ = text.partition(":")
    if not sep or not kind:
        return False
    return kind in BUILTIN_KINDS or kind in kpsdk.get_registry().targets


def target_words(positional: str | None, target: str | None) -> tuple[str | None, str | None]:
    """TARGET and ``--target`` as (program, spec): TARGET is the spec when it is one
    (:func:`is_target_spec`), else the program; a spec given in both places is a usage error."""
    if positional is None or not is_target_spec(positional):
        return positional, target
    if target is not None:
        raise typer.BadParameter(f"both TARGET ({positional}) and --target ({target}) name the target: give one",
                                 param_hint="TARGET")
    return None, positional


def choose_target(elf: str | None, target: str | None, given: dict[str, Any]) -> TargetChoice:
    """The target spec and launcher options from TARGET (``elf``: a program or a spec), ``--target``
    and the options in ``given``.

    ``given`` maps CLI option names (``--kernel``...) to their values (None: not
    given).  An option for another kind of target is a usage error.
    """
    program, spec = target_words(elf, target)
    if spec is None:
        spec, kind = _program_spec(program), None
    else:
        spec, kind = _spec_with_program(spec, program)
    scheme = kind if kind is not None else spec.partition(":")[0]  # "elf" for the ELF in Unicorn
    return TargetChoice(spec, _launcher_options(scheme, given), kind)


def refuse_names_without_symbols(choice: TargetChoice, names: list[str]) -> None:
    """Probes by name (``names``) on ``qemu-system:ARCH`` with neither ``--kernel`` nor
    ``--symbols``: a usage error saying so, before QEMU starts.  Without a kernel QEMU runs
    the board's firmware, whose code can be probed by address only: there are no symbols
    (the error was ENOENT for the first name, start_kernel say, as if the kernel lacked it)."""
    if choice.kind != "qemu-system" or not names or choice.options.get("kernel") or choice.options.get("symbols"):
        return
    raise typer.BadParameter(f"{choice.spec} has no symbols to find {names[0]!r} in: give the kernel to boot, "
                             "--kernel VMLINUZ (its symbols come from its own kallsyms table), or --symbols FILE "
                             "(without a kernel, QEMU runs the board's firmware: probe it by address)",
                             param_hint="--kernel")


def _program_spec(program: str | None) -> str:
    """No spec: the program runs in Unicorn (a file, or a bundled fixture's name)."""
    if program is None:
        raise typer.BadParameter(f"give TARGET: a program to run in Unicorn, or a target spec ({TARGET_SPECS})",
                                 param_hint="TARGET")
    return f"elf:{elf_path(program)}"


def _spec_with_program(spec: str, program: str | None) -> tuple[str, str | None]:
    """A spec, and its kind when live: ``--target qemu-user`` (or ``native``) takes its program from
    TARGET; a spec naming its target whole takes no program besides.  A program's path is resolved
    as TARGET's is (a bundled fixture's name works)."""
    scheme, sep, rest = spec.partition(":")
    if not sep:
        if scheme not in PROGRAM_KINDS:
            raise typer.BadParameter(f"{spec!r} is not a target spec; want {TARGET_SPECS}", param_hint="--target")
        if program is None:
            raise typer.BadParameter(f"name the program: --target {scheme}:PROG (or kpsdk COMMAND PROG "
                                     f"--target {scheme})", param_hint="--target")
        rest, program = program, None
    if program is not None:
        raise typer.BadParameter(f"both TARGET ({program}) and --target ({spec}) name the target: give one "
                                 "(gdb:// takes its symbols from --symbols)", param_hint="TARGET")
    if scheme in (*PROGRAM_KINDS, "elf"):
        rest = str(elf_path(rest))
    return f"{scheme}:{rest}", (scheme if scheme in LIVE_KINDS else None)


def _launcher_options(scheme: str, given: dict[str, Any]) -> dict[str, Any]:
    """``kpsdk.open``'s keywords from the options given; one meant for another kind of target than
    ``scheme`` is a usage error naming the kinds that take it."""
    options: dict[str, Any] = {}
    for opt, value in given.items():
        if value is None or value == []:
            continue
        keyword, kinds = TARGET_OPTIONS[opt]
        if scheme not in kinds:
            wanted = " or ".join("an ELF run in Unicorn" if k == "elf" else
                                 f"--target {k}{'://HOST:PORT' if k == 'gdb' else ':...'}" for k in kinds)
            raise typer.BadParameter(f"{opt} goes with {wanted}", param_hint=opt)
        options[keyword] = value
    return options


def close_session(s: Session | None) -> None:
    """Close the session (QEMU and gdb reaped); a second Ctrl-C meanwhile is ignored."""
    if s is None:
        return
    main_thread = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
    try:
        s.close()
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)
