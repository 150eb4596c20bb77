"""Live targets: any gdbstub (QEMU system or user mode), through gdb/MI.

How a probe point is armed: a gdb breakpoint (software by default, hardware
with ``hardware_breakpoints=True``) owned by kpsdk's agent inside gdb.  QEMU
implements both kinds itself, so target memory is never modified (K10 holds
trivially, and qemu-user's read-only code pages do not matter).

How one hit flows::

    QEMU stops -> gdb calls KpsdkBreakpoint.stop() in the agent
      -> "H addr thread regs..." over the socket pair
      -> run() (runloop.py) hands it to _hit() (hits.py): ProbeManager.pre() with a
         PtRegs whose reads are answered from the prefetched registers, else by one
         request to the agent (liveregs.py, memory.py)
      -> "c writes..." (gdb resumes without an MI stop: ~1 ms a hit)
         or "s" (a real stop: post_handler single-step by ``stepi``, an
         error to raise, or a stop() request), handled from the MI stream.

The agent learns which registers each point's handlers read and sends them
with the next hits, so a steady-state hit is one round trip.

A run never waits forever (design: every wait is bounded).  Whenever no hit
came for ``POLL_SECONDS``, and only then (nothing is added to a hit), the run
loop checks that the run can go on: a QEMU that stays stopped (``SIGSTOP``),
a gdb that stops answering a harmless MI question (it is stuck waiting for the
gdbstub), a request the agent does not answer, each for longer than the
session's ``stall_limit``, or gdb saying that it lost step with the stub,
ends the run with a typed error, gdb killed and the session closed.  gdb's
``remotetimeout`` is raised to the stall limit once attached, so a stub that
freezes for less than that resumes cleanly instead of being sent the same
packet again (which put gdb out of step with qemu-user after a freeze).

The parts, one job each: gdb set up and attached (connect.py), breakpoints for
probes, stop hooks and returns (breakpoints.py), the hit dispatch (hits.py), the
run loop and gdb's stops (runloop.py) with the stall clocks (stalls.py), registers
and memory (liveregs.py, memory.py), the trace prefix (traceprefix.py), QEMU's
processes (processes.py), and their shared state (state.py).  This module puts them
together, attaches, and closes.
"""

from __future__ import annotations

import atexit
import math
import subprocess
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.arch import Arch
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import TargetError
from kpsdk.targets.live.breakpoints import LiveBreakpoints
from kpsdk.targets.live.connect import attach, check_gdb_words
from kpsdk.targets.live.hits import HitDispatch
from kpsdk.targets.live.limits import HALT_TIMEOUT, POLL_SECONDS, STALL_LIMIT
from kpsdk.targets.live.memory import LiveMemory
from kpsdk.targets.live.mi import MiConnection
from kpsdk.targets.live.runloop import RunLoop
from kpsdk.targets.live.traceprefix import TracePrefix
from kpsdk.targets.live.watch import LiveWatch

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.manager import ProbePoint

#: the bounds are kpsdk.targets.live.limits', named here too for callers of the live target
__all__ = ["GdbTarget", "HALT_TIMEOUT", "POLL_SECONDS", "STALL_LIMIT"]

_open_targets: weakref.WeakSet[GdbTarget] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Reap every gdb and QEMU kpsdk started, whatever the program forgot to close."""
    for target in list(_open_targets):
        target.close()


class GdbTarget(HitDispatch, RunLoop, LiveBreakpoints, LiveMemory, TracePrefix):
    """A CPU behind a gdbstub, driven by gdb-multiarch.

    Its parts are mixins over one shared state (:mod:`kpsdk.targets.live.state` says why):
    the hit dispatch, the run loop, breakpoints, memory and registers, the trace prefix.
    This class connects them to gdb and closes everything.
    """

    def __init__(self, arch: Arch, remote: str, *, abi_kind: str = "user", symbols: SymbolTable | None = None,
                 image: ElfImage | None = None, processes: list[subprocess.Popen[bytes]] | None = None,
                 interrupt: Callable[[], None] | None = None, hardware_breakpoints: bool = False,
                 cleanup: Callable[[], None] | None = None, stall_limit: float = STALL_LIMIT) -> None:
        super().__init__(arch, abi_kind=abi_kind, symbols=symbols, image=image, processes=processes,
                         interrupt=interrupt, hardware_breakpoints=hardware_breakpoints, cleanup=cleanup)
        _open_targets.add(self)
        try:  # from here on a failure reaps what the launcher started
            self.stall_limit = self.link.request_timeout = _positive_seconds(stall_limit, "stall_limit")
            self._connect(remote)
        except BaseException:
            self.close()
            raise

    def _connect(self, remote: str) -> None:
        check_gdb_words(self.arch, remote)
        self.mi = MiConnection(pass_fds=(self.link.peer.fileno(),),
                               env={"KPSDK_AGENT_FD": str(self.link.peer.fileno())})
        self.link.peer.close()
        self._reg_numbers = attach(self.mi, self.arch, self.abi_kind, self.image, remote, self.stall_limit)

    @property
    def console(self) -> str:
        """What QEMU printed so far, including what it wrote just before it stopped."""
        self._procs.settle()
        return self._procs.output.decode("utf-8", "replace")

    @property
    def console_bytes(self) -> bytes:
        """:attr:`console` as the bytes QEMU wrote."""
        self._procs.settle()
        return bytes(self._procs.output)

    def set_symbols(self, table: SymbolTable) -> None:
        """What ``symbols`` answers from now on (the program's and its libraries', at run-time addresses)."""
        self.symbols = table

    # -- watchpoints (kpsdk.targets.live.watch) ----------------------------------------------

    #: the gdbstub takes hardware watchpoints (Z2-Z4); qemu-user's does not
    hw_watchpoints = True
    watch: LiveWatch | None = None

    def watch_engine(self) -> LiveWatch:
        if self.watch is None:
            self.watch = LiveWatch(self)
        return self.watch

    def can_step(self, point: ProbePoint) -> bool:
        return True  # gdb's stepi steps any instruction

    # -- teardown ---------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect and reap gdb and every process this target started."""
        if self.closed:
            return
        self.closed = True
        _open_targets.discard(self)
        try:
            if self.mi is not None:
                self.mi.close()
        finally:
            self._procs.reap()
            self.link.close()
            if self._cleanup is not None:
                self._cleanup()


def _positive_seconds(value: object, name: str) -> float:
    """A finite number of seconds above 0, or a TargetError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise TargetError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)
