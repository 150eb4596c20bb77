"""Which target a command opens: ELF or ``--target SPEC`` plus the launcher options.

``kpsdk probe`` and ``kpsdk trace`` take the same target options
(:mod:`kpsdk.cli.options`); this module turns their values into one
``kpsdk.open(spec, **options)`` call (:class:`TargetChoice`), refusing an
option meant for another kind of target as a usage error, and closes the
session again (:func:`close_session`).  The run time limits are here too,
because they depend on the kind of target.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

import kpsdk
from kpsdk.cli.parsing import elf_path

if TYPE_CHECKING:
    from kpsdk.session import Session

#: target kinds that run real code behind a gdbstub: no --call; they run until they end
LIVE_KINDS = ("qemu-user", "qemu-system", "gdb", "native", "pid")
#: the launcher options of the live kinds: CLI option -> (kpsdk.open keyword, the kinds that take it)
TARGET_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "--arg": ("args", ("qemu-user", "elf", "native")),
    "--sysroot": ("sysroot", ("elf", "qemu-user", "gdb", "native", "pid")),
    "--stdin": ("stdin", ("elf", "qemu-user", "native")),
    "--abi": ("abi", ("gdb",)),
    "--kernel": ("kernel", ("qemu-system",)),
    "--initrd": ("initrd", ("qemu-system",)),
    "--append": ("append", ("qemu-system",)),
    "--symbols": ("symbols", ("qemu-system", "gdb")),
    "--arch": ("arch", ("gdb",)),
    "--qemu-arg": ("qemu_args", ("qemu-system",)),
    "--mechanism": ("mechanism", ("qemu-system",)),
}
TARGET_SPECS = "qemu-user:PROG, qemu-system:ARCH, gdb://HOST:PORT, native:PROG, pid:PID (or elf:PATH, the default)"
#: default --timeout: a program in Unicorn, a live target
UNICORN_TIMEOUT = 5.0
LIVE_TIMEOUT = 120.0


@dataclass
class TargetChoice:
    """What a command opens: ``kpsdk.open(spec, **options)``."""

    spec: str
    options: dict[str, Any]
    #: one of LIVE_KINDS, or None for Unicorn (elf:, unicorn: and other plugins' kinds)
    kind: str | None

    @property
    def live(self) -> bool:
        return self.kind is not None

    def run_timeout(self, given: float | None) -> float:
        """``given`` seconds, else the default for this kind of target."""
        return given if given is not None else (LIVE_TIMEOUT if self.live else UNICORN_TIMEOUT)

    def open(self, noprobe: list[str]) -> Session:
        """The session on this target, with ``noprobe`` symbols refused (``--noprobe``)."""
        return kpsdk.open(self.spec, noprobe=noprobe, **self.options)


def choose_target(elf: str | None, target: str | None, given: dict[str, Any]) -> TargetChoice:
    """The target spec and launcher options from ELF, --target and the options in ``given``.

    ``given`` maps CLI option names (``--kernel``...) to their values (None: not
    given).  An option for another kind of target is a usage error.
    """
    if target is None:
        if elf is None:
            raise typer.BadParameter("give the program (kpsdk probe ELF ...) or a live target (--target SPEC: "
                                     f"{TARGET_SPECS})", param_hint="ELF")
        spec, kind = f"elf:{elf_path(elf)}", None
    else:
        scheme, sep, rest = target.partition(":")
        if not sep:
            if scheme != "qemu-user":
                raise typer.BadParameter(f"{target!r} is not a target spec; want {TARGET_SPECS}",
                                         param_hint="--target")
            if elf is None:
                raise typer.BadParameter("name the program: --target qemu-user:PROG (or kpsdk probe PROG "
                                         "--target qemu-user)", param_hint="--target")
            rest, elf = elf, None
        if elf is not None:
            raise typer.BadParameter(f"both ELF ({elf}) and --target ({target}) name the target: give one "
                                     "(gdb:// takes its symbols from --symbols)", param_hint="ELF")
        if scheme in ("qemu-user", "elf", "native"):
            rest = str(elf_path(rest))
        spec, kind = f"{scheme}:{rest}", (scheme if scheme in LIVE_KINDS else None)
    options: dict[str, Any] = {}
    scheme = kind if kind is not None else spec.partition(":")[0]  # "elf" for the ELF in Unicorn
    for opt, value in given.items():
        if value is None or value == []:
            continue
        keyword, kinds = TARGET_OPTIONS[opt]
        if scheme not in kinds:
            wanted = " or ".join("an ELF run in Unicorn" if k == "elf" else
                                 f"--target {k}{'://HOST:PORT' if k == 'gdb' else ':...'}" for k in kinds)
            raise typer.BadParameter(f"{opt} goes with {wanted}", param_hint=opt)
        options[keyword] = value
    return TargetChoice(spec, options, kind)


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
