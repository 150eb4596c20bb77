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
import re
import subprocess
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.arch import Arch
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import TargetError, TargetFault
from kpsdk.regs import PtRegs
from kpsdk.targets.live.agentlink import AgentLink
from kpsdk.targets.live.breakpoints import LiveBreakpoints
from kpsdk.targets.live.connect import check_gdb_words, finish_attach, select_remote
from kpsdk.targets.live.detach import Detach
from kpsdk.targets.live.hits import HitDispatch
from kpsdk.targets.live.limits import HALT_TIMEOUT, POLL_SECONDS, STALL_LIMIT
from kpsdk.targets.live.memory import LiveMemory
from kpsdk.targets.live.mi import MiConnection
from kpsdk.targets.live.processes import reap
from kpsdk.targets.live.runloop import RunLoop
from kpsdk.targets.live.step import LiveStep
from kpsdk.targets.live.traceprefix import TracePrefix
from kpsdk.targets.live.watch import LiveWatch

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.manager import ProbePoint

#: the bounds are kpsdk.targets.live.limits', named here too for callers of the live target
__all__ = ["GdbTarget", "HALT_TIMEOUT", "POLL_SECONDS", "STALL_LIMIT"]

_open_targets: weakref.WeakSet[GdbTarget] = weakref.WeakSet()
#: the lines gdbserver itself writes to the stream it shares with the program's stderr
_GDBSERVER_SAID = re.compile(r"\n?^(Remote debugging from host [^\n]*|Child exited with status \d+|"
                             r"Child terminated with signal [^\n]*|Detaching from process \d+|"
                             r"Process [^\n]* created; pid = \d+|Listening on port \d+)\n", re.MULTILINE)


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

    def __init__(self, arch: Arch | Callable[[MiConnection], Arch], remote: str, *, abi_kind: str = "user",
                 symbols: SymbolTable | None = None, image: ElfImage | None = None,
                 processes: list[subprocess.Popen[bytes]] | None = None,
                 interrupt: Callable[[], None] | None = None, hardware_breakpoints: bool = False,
                 cleanup: Callable[[], None] | None = None, stall_limit: float = STALL_LIMIT,
                 real_traps: bool = False, files: bool = True, detach: Detach | None = None) -> None:
        """``arch``: the architecture, or a function that tells it from gdb once attached (a
        stub nobody named the program of).  ``files=False``: gdb reads no file by itself
        (:func:`~kpsdk.targets.live.connect.select_remote`).  ``detach``: leave the process
        running when the session closes (``pid:``), every trap checked gone."""
        link = AgentLink()
        mi: MiConnection | None = None
        if not isinstance(arch, Arch):
            try:  # attached before the parts exist: they are made for the architecture the stub says
                check_gdb_words(None, remote)
                mi = self._start_gdb(link)
                select_remote(mi, None, None, image, remote, files=files)
                arch = arch(mi)
            except BaseException:
                if mi is not None:
                    mi.close()
                link.close()
                for proc in processes or []:
                    reap(proc)
                if cleanup is not None:
                    cleanup()
                raise
        super().__init__(arch, abi_kind=abi_kind, symbols=symbols, image=image, processes=processes,
                         interrupt=interrupt, hardware_breakpoints=hardware_breakpoints, cleanup=cleanup,
                         real_traps=real_traps, link=link)
        self.mi = mi
        self._detach = detach
        _open_targets.add(self)
        try:  # from here on a failure reaps what the launcher started
            self.stall_limit = self.link.request_timeout = _positive_seconds(stall_limit, "stall_limit")
            self._connect(remote, files)
        except BaseException:
            self.close()
            raise

    def reconfigure(self, abi_kind: str, hardware: bool, real_traps: bool) -> None:
        """Say what the stub is, once gdb has asked it (``gdb://``): a user process or not,
        breakpoints by hardware or not, real trap instructions or QEMU's.  Before any probe."""
        self.abi_kind, self.real_traps = abi_kind, real_traps
        self.hardware = hardware or (self.arch.gdb_break_adjusts_pc and not real_traps)
        self._regs = PtRegs.create(self.arch, self._io, self.arch.abi(abi_kind), self.read_memory, owner=self)
        self._steps = LiveStep(self.arch, self.hardware)

    @staticmethod
    def _start_gdb(link: AgentLink) -> MiConnection:
        mi = MiConnection(pass_fds=(link.peer.fileno(),), env={"KPSDK_AGENT_FD": str(link.peer.fileno())})
        link.peer.close()
        return mi

    def _connect(self, remote: str, files: bool = True) -> None:
        check_gdb_words(self.arch, remote)
        if self.mi is None:
            self.mi = self._start_gdb(self.link)
            select_remote(self.mi, self.arch, self.abi_kind, self.image, remote, files=files)
        self._reg_numbers = finish_attach(self.mi, self.stall_limit)

    def _insert_breakpoint(self, addr: int) -> None:
        if self._detach is not None and addr not in self._detach.original:
            self._detach.original[addr] = self._original_code(addr)
        super()._insert_breakpoint(addr)

    def _original_code(self, addr: int) -> bytes:
        """The code at ``addr`` before kpsdk's breakpoint, compared after the detach (the stub
        shows memory without its own breakpoints, so this is the program's)."""
        try:
            return self.read_memory(addr, 4)
        except TargetFault:
            return self.read_memory(addr, 1)

    @property
    def console(self) -> str:
        """What QEMU printed so far, including what it wrote just before it stopped (under
        gdbserver: the program's output, without gdbserver's own messages)."""
        self._procs.settle()
        text = self._procs.output.decode("utf-8", "replace")
        return _GDBSERVER_SAID.sub("", text) if self.real_traps else text

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
        if self._detach is not None and not self._detach.left and self.mi is not None:
            self._detach.left = True
            self._detach.leave(self)  # the target still open: it may have to be halted first
            if self.closed:  # leaving failed so badly that the session was abandoned
                raise TargetError(self._detach.error or "detaching failed: the session was abandoned")
        self.closed = True
        _open_targets.discard(self)
        try:
            if self.mi is not None:
                self.mi.close()
        finally:
            if self._detach is not None:
                self._procs.drain()  # gdbserver ends by itself once detached and disconnected
            self._procs.reap()
            self.link.close()
            if self._cleanup is not None:
                self._cleanup()
        if self._detach is not None and self._detach.error is not None:
            raise TargetError(self._detach.error)


def _positive_seconds(value: object, name: str) -> float:
    """A finite number of seconds above 0, or a TargetError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise TargetError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)
