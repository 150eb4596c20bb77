"""The state every part of a live target shares, set in one place.

:class:`~kpsdk.targets.live.target.GdbTarget` is made of parts that each do one job on
the same stopped CPU: memory and registers (:mod:`.memory`), breakpoints
(:mod:`.breakpoints`), the hit dispatch (:mod:`.hits`), the run loop (:mod:`.runloop`)
and the trace prefix (:mod:`.traceprefix`).  They are mixins, not objects the target
holds, because they share one hit's state (its registers, its thread, whether a hit is
being served) and a hit's round trip is measured in microseconds: a call through a
helper object, or an attribute lookup more, on every hit would cost what the agent's
learned registers save.  A subclass (:class:`~kpsdk.targets.live.tcg.target.PluginTarget`)
overrides methods of several parts.  What a part needs of another is declared here for
the type checker; what stands alone is composed instead (:class:`.liveregs.LiveRegs`,
:class:`.processes.Processes`, :class:`.stalls.StallWatch`, :class:`.step.LiveStep`,
:mod:`.connect`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.arch import Arch
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import KpsdkError, TargetError
from kpsdk.manager import ProbeManager, ProbePoint
from kpsdk.regs import PtRegs
from kpsdk.target import Target
from kpsdk.targets.live.agentlink import AgentLink
from kpsdk.targets.live.limits import STALL_LIMIT
from kpsdk.targets.live.liveregs import LiveRegs
from kpsdk.targets.live.processes import Processes
from kpsdk.targets.live.stalls import StallWatch
from kpsdk.targets.live.step import LiveStep

if TYPE_CHECKING:
    from kpsdk.arch import QemuMachine
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.kernel.guestclock import SchedClock
    from kpsdk.kernel.tasks import TaskLayout
    from kpsdk.targets.live.mi import MiConnection
    from kpsdk.targets.live.solibs import Libraries


class LiveState(Target):
    """A CPU behind a gdbstub: what the live target's parts share."""

    def __init__(self, arch: Arch, *, abi_kind: str = "user", symbols: SymbolTable | None = None,
                 image: ElfImage | None = None, processes: list[subprocess.Popen[bytes]] | None = None,
                 interrupt: Callable[[], None] | None = None, hardware_breakpoints: bool = False,
                 cleanup: Callable[[], None] | None = None, real_traps: bool = False,
                 link: AgentLink | None = None) -> None:
        self.stall_limit = STALL_LIMIT
        self.arch = arch
        self.abi_kind = abi_kind
        self.symbols = symbols if symbols is not None else (image.symbols if image else SymbolTable())
        self.image = image
        self.manager = ProbeManager(self)
        self.processes = processes or []
        self._interrupt_fn = interrupt
        self._cleanup = cleanup
        #: a ptrace stub (gdbserver) plants real trap instructions and reports the pc as the
        #: CPU left it, which gdb's pc adjustment expects: software breakpoints are right on
        #: every arch there (and x86 has only four debug registers)
        self.real_traps = real_traps
        self.hardware = hardware_breakpoints or (arch.gdb_break_adjusts_pc and not real_traps)
        self.in_hit = False
        self.closed = False
        self._exit_status: int | None = None
        self._io = LiveRegs(self)
        self._regs = PtRegs.create(arch, self._io, arch.abi(abi_kind), self.read_memory, owner=self)
        self._pc = arch.register(arch.pc)
        self._reg_numbers: dict[str, int] = {}
        # -- the run (kpsdk.targets.live.runloop)
        self._stop_requested = False
        self._pending_step: ProbePoint | None = None
        self._pending_error: BaseException | None = None
        self._until_breakpoint = False  # run_to(): the next breakpoint-hit stop ends the run
        self._deadline: float | None = None  # run(timeout): the first hit after it stops the run
        self._stopping = False  # a hit answered "s": gdb's *stopped is on its way
        self._thread = 0  # gdb's thread (vCPU) of the current hit
        # -- the trace prefix (kpsdk.targets.live.traceprefix)
        #: the kernel image (vmlinuz, vmlinux) whose BTF says where comm and pid are (kpsdk/kernel/tasks.py)
        self.kernel_image: str | os.PathLike[str] | None = None
        self._task_layout: TaskLayout | None = None
        #: a kernel without BTF: the function whose code shows current's layout (address, size),
        #: read at the first hit; why that failed, if it did
        self._task_code: tuple[int, int] | None = None
        self.task_code_error: str | None = None
        #: the qemu-system board kpsdk started (its counters), None for other stubs
        self.board: QemuMachine | None = None
        self._clock: SchedClock | None = None
        #: why the guest's clock is not read (the trace header says it)
        self.clock_error: str | None = None
        self._tids: dict[int, tuple[int, str]] = {}  # gdb's thread number -> the stub's thread id, its name
        # -- breakpoints (kpsdk.targets.live.breakpoints)
        self._return_bps: dict[int, int] = {}  # return address -> hooked calls returning there
        self._dormant = False  # breakpoints removed during a hit wait for a purge
        #: kpsdk's own breakpoints (the loader's r_brk): address -> what runs when it is hit
        self._stop_hooks: dict[int, Callable[[], None]] = {}
        #: breakpoint changes made during the current hit, sent on its final line
        self._changes: list[str] = []
        #: stop hooks the agent reports only when their condition holds (add_stop_hook's only_when)
        self._filtered: set[int] = set()
        #: post_handlers' single-steps whose end the agent reports (kpsdk.targets.live.step)
        self._steps = LiveStep(arch, self.hardware)
        #: the program's libraries (qemu-user, dynamically linked programs), and where they are looked up
        self.libraries: Libraries | None = None
        self.sysroot: Path | None = None
        self.link = link if link is not None else AgentLink()
        self.mi: MiConnection | None = None
        #: the process on this machine the stub serves (native:, pid:), else None
        self.process_id: int | None = None
        #: the target is running (resumed, its stop not seen yet): closing must halt it first
        self.running_now = False
        #: QEMU's processes: their output (``console``), whether one is stopped, their end
        self._procs = Processes(self.processes)
        self._stalls = StallWatch(self._procs)

    def _mi(self) -> MiConnection:
        if self.mi is None or self.closed:
            raise TargetError("the live target is closed")
        return self.mi

    def _abandon(self, error: KpsdkError) -> KpsdkError:
        """End a session that cannot go on and return ``error`` to raise: gdb is killed at
        once (a stuck or spinning gdb would not answer ``-gdb-exit``), QEMU reaped."""
        if self.mi is not None:
            self.mi.kill()
        self.close()
        return error

    if TYPE_CHECKING:  # what a part calls of another (defined in the module named)
        def mi_read_register(self, name: str) -> int: ...  # memory: for the run loop and LiveRegs
        def _read_code(self, addr: int, most: int) -> bytes: ...  # memory: for the hit dispatch
        def _agent_line(self, line: str) -> None: ...  # hits: for the run loop
