"""A program's libraries before it runs: the one place ``kpsdk probe`` and ``kpsdk trace`` on
Unicorn and on qemu-user would see different symbols.

A live user target (qemu-user, gdbserver) hands over its session at the program's entry
point: the dynamic loader has mapped the program's libraries and relocated them.  A bare
name (``--kprobe malloc``) is then looked up in the program, then in its libraries, in the
loader's order (:func:`kpsdk.binfmt.symbols.loaded_symbols`), and an IFUNC's choice
(``--uprobe libc.so.6:strlen``) is in the GOT slots the loader filled
(:mod:`kpsdk.binfmt.ifunc`).  The Unicorn target opens a dynamically linked program at the
loader's entry, when only the program and the loader are mapped, so that probes can see the
loader and the libraries' constructors run.

So the commands make their probes as they always did, and when one names what only the
libraries can answer (an unknown symbol, ENOENT; an IFUNC, EOPNOTSUPP; the trace grammar's
BAD_PROBE_ADDR and BAD_UPROBE_OFFS), :func:`run_to_entry` runs the program to its own entry
point, where qemu-user's session starts, and the probes are made again: one lookup, the same
answer on both targets.  What ran before that point (the loader, library constructors) is
not seen by those probes, as on qemu-user.
"""

from __future__ import annotations

import errno
import time
from typing import TYPE_CHECKING

from kpsdk.errors import KprobeError, KpsdkError, TraceDefinitionError

if TYPE_CHECKING:
    from kpsdk.cli.target_choice import TargetChoice
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: a probe's errors that the program's libraries may answer once they are loaded
LIBRARY_ERRNOS = frozenset({errno.ENOENT, errno.EOPNOTSUPP})
#: the trace grammar's codes for the same (an unknown symbol, a uprobe offset it could not find)
LIBRARY_TRACE_CODES = frozenset({"BAD_PROBE_ADDR", "BAD_UPROBE_OFFS"})
#: the least time left for the command's run once the program ran to its entry (Session.run wants a positive one)
MIN_TIMEOUT = 0.001


def wants_libraries(exc: BaseException) -> bool:
    """Whether a probe failed for something the program's libraries may have (see the module)."""
    if isinstance(exc, KprobeError):
        return exc.errno in LIBRARY_ERRNOS
    return isinstance(exc, TraceDefinitionError) and exc.code in LIBRARY_TRACE_CODES


def run_to_entry(session: Session, choice: TargetChoice, limit: float) -> float | None:
    """Run a dynamically linked program on Unicorn to its own entry point (its libraries loaded
    and relocated, nothing of its own code run yet), within ``limit`` seconds; the seconds it
    took.  None when there is nothing to do: a live target (already there), or a static
    program (no libraries).  Called before the command's own run starts, once.

    A program that ends (or fails) before its entry, or does not get there within ``limit``,
    is a :class:`~kpsdk.errors.KpsdkError`: its probes cannot be made.
    """
    if choice.live or not choice.spec.startswith("elf:"):
        return None
    files = session.target.mapped_files()
    if not files or files[0].image.interp is None:
        return None
    program = files[0]
    entry = program.bias + program.image.entry
    kprobe_class = session.registry.probe_types["kprobe"].probe_class
    reached: list[int] = []

    def stop(p: object, regs: PtRegs) -> int:
        reached.append(regs.ip)
        session.stop()
        return 0

    marker = kprobe_class(addr=entry, pre_handler=stop)
    started = time.monotonic()
    session.register(marker)
    try:
        status = session.run(timeout=limit)
    finally:
        session.unregister(marker)
    if not reached:
        what = f"ended (status {status})" if status is not None else f"did not get there within {limit:g} s"
        raise KpsdkError(f"probes in {program.path.name}'s libraries are made at its entry point ({entry:#x}, "
                         f"once the loader has loaded them), but the program {what}")
    return time.monotonic() - started
