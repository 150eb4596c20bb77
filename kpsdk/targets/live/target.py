"""Live targets: any gdbstub (QEMU system or user mode), through gdb/MI.

How a probe point is armed: a gdb breakpoint (software by default, hardware
with ``hardware_breakpoints=True``) owned by kpsdk's agent inside gdb.  QEMU
implements both kinds itself, so target memory is never modified (K10 holds
trivially, and qemu-user's read-only code pages do not matter).

How one hit flows::

    QEMU stops -> gdb calls KpsdkBreakpoint.stop() in the agent
      -> "H addr thread regs..." over the socket pair
      -> run() here: ProbeManager.pre() with a PtRegs whose reads are answered
         from the prefetched registers, else by one request to the agent
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
"""

from __future__ import annotations

import array
import atexit
import fcntl
import math
import os
import re
import signal
import subprocess
import termios
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.arch import Arch, Register
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import KpsdkError, SymbolError, TargetError, TargetExited, TargetFault, TargetStalled
from kpsdk.manager import ProbeManager, ProbePoint
from kpsdk.options import STALL_LIMIT as _STALL_LIMIT
from kpsdk.regs import PtRegs
from kpsdk.target import Target
from kpsdk.targets.live.agentlink import AgentLink
from kpsdk.targets.live.mi import GdbError, MiConnection, c_string
from kpsdk.targets.live.step import LiveStep
from kpsdk.targets.live.watch import LiveWatch

if TYPE_CHECKING:
    from kpsdk.arch import QemuMachine
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.kernel.guestclock import SchedClock
    from kpsdk.kernel.tasks import TaskInfo, TaskLayout
    from kpsdk.rethook import RethookNode, ShadowStacks
    from kpsdk.targets.live.solibs import Libraries

AGENT = Path(__file__).with_name("gdb_agent.py")
#: how long stop()/timeouts wait for the target to report that it stopped: a
#: healthy one does in milliseconds, so a timeout is kept to within a second or two
HALT_TIMEOUT = 1.5
#: a gdbstub that does not complete the handshake within this is not one
ATTACH_TIMEOUT = 8.0
#: the run loop wakes at least this often to notice a dead or stalled target
POLL_SECONDS = 0.5
#: how long the run loop spins for the next hit before blocking: not at all, since gdb and
#: QEMU need the CPU to produce it (kpsdk.targets.live.agentlink, docs/performance.md)
NEXT_HIT_SPIN = 0.0
#: memory reads during a hit this close above the stack pointer, and this small, are learned
#: (sent by the agent with the point's later hits): return addresses, stack arguments
MEMORY_PREFETCH_REACH = 0x100
MEMORY_PREFETCH_SIZE = 0x40
#: default ``stall_limit`` (kpsdk.options): the same bound as one MI command's
STALL_LIMIT = _STALL_LIMIT
#: gdb waits this much longer for a stub's reply than kpsdk waits for gdb
STALL_MARGIN = 5.0
#: while no hit comes, the run loop asks gdb a harmless question at most this often
PING_SECONDS = 1.0
#: what gdb may be given as an architecture, a register name, a remote
_GDB_ARCH = re.compile(r"[\w:.+-]+")
_GDB_REGISTER = re.compile(r"\w+")
_REMOTE = re.compile(r"[\w.:/+\[\]-]+")

#: how gdb words a gdbstub that went away (a closed socket, or a reset one)
_DISCONNECTED = ("connection closed", "target disconnected", "connection reset")

_open_targets: weakref.WeakSet[GdbTarget] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Reap every gdb and QEMU kpsdk started, whatever the program forgot to close."""
    for target in list(_open_targets):
        target.close()


class LiveRegs:
    """Register access for a live CPU: cached per stop, batched writes during a hit."""

    def __init__(self, target: GdbTarget) -> None:
        self.t = target
        self.cache: dict[str, int] = {}
        self.writes: dict[str, int] = {}
        self.learned: list[str] = []
        #: memory the agent sent with the hit, by address (``@ADDR=HEX`` words)
        self.memory: dict[int, bytes] = {}
        self._sp = target.arch.register(target.arch.sp).gdb

    def learn_memory(self, addr: int, size: int) -> None:
        """A read during a hit near the stack pointer (a return address, a stack argument):
        ask the agent to send those bytes with the point's later hits (``+@SP:OFF:SIZE``),
        as registers are learned, so that a kretprobe's entry on x86 or a stack argument
        costs no round trip."""
        sp = self.cache.get(self._sp)
        if sp is not None and 0 <= addr - sp < MEMORY_PREFETCH_REACH and size <= MEMORY_PREFETCH_SIZE:
            self.learned.append(f"@{self._sp}:{addr - sp:x}:{size:x}")

    def read(self, reg: Register) -> int:
        value = self.cache.get(reg.gdb)
        if value is None:
            t = self.t
            if t.in_hit:
                value = int(t.link.request("r " + reg.gdb), 16)
                self.learned.append(reg.gdb)
            else:
                value = t.mi_read_register(reg.gdb)
            self.cache[reg.gdb] = value
        return value & reg.mask

    def write(self, reg: Register, value: int) -> None:
        t = self.t
        if t.in_hit:
            self.writes[reg.gdb] = value
        else:
            t._mi().command(f"-gdb-set var ${reg.gdb}={value:#x}")
        self.cache[reg.gdb] = value


def _pipe_pending(fd: int) -> int:
    """Bytes waiting in a pipe (``FIONREAD``)."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


class GdbTarget(Target):
    """A CPU behind a gdbstub, driven by gdb-multiarch."""

    #: how long run()'s loop waits for a hit before its other work (a subclass with hits of
    #: its own to collect, kpsdk.targets.live.tcg.target, wakes more often)
    poll_seconds = POLL_SECONDS

    def __init__(self, arch: Arch, remote: str, *, abi_kind: str = "user", symbols: SymbolTable | None = None,
                 image: ElfImage | None = None, processes: list[subprocess.Popen[bytes]] | None = None,
                 interrupt: Callable[[], None] | None = None, hardware_breakpoints: bool = False,
                 cleanup: Callable[[], None] | None = None, stall_limit: float = STALL_LIMIT) -> None:
        self.stall_limit = STALL_LIMIT
        self.arch = arch
        self.abi_kind = abi_kind
        self.symbols = symbols if symbols is not None else (image.symbols if image else SymbolTable())
        self.image = image
        self.manager = ProbeManager(self)
        self.processes = processes or []
        self._interrupt_fn = interrupt
        self._cleanup = cleanup
        self.hardware = hardware_breakpoints or arch.gdb_break_adjusts_pc
        self.in_hit = False
        self.closed = False
        self._exit_status: int | None = None
        self._console = bytearray()
        self._io = LiveRegs(self)
        self._regs = PtRegs.create(arch, self._io, arch.abi(abi_kind), self.read_memory)
        self._pc = arch.register(arch.pc)
        self._reg_numbers: dict[str, int] = {}
        self._stop_requested = False
        self._pending_step: ProbePoint | None = None
        self._pending_error: BaseException | None = None
        self._until_breakpoint = False  # run_to(): the next breakpoint-hit stop ends the run
        self._deadline: float | None = None  # run(timeout): the first hit after it stops the run
        self._stopping = False  # a hit answered "s": gdb's *stopped is on its way
        self._thread = 0  # gdb's thread (vCPU) of the current hit
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
        self._tids: dict[int, int] = {}  # gdb's thread number -> the stub's thread id (qemu-user)
        self._return_bps: dict[int, int] = {}  # return address -> hooked calls returning there
        self._dormant = False  # breakpoints removed during a hit wait for a purge
        self._frozen_since: float | None = None  # when the run loop first saw a QEMU stopped
        #: the program's libraries (qemu-user, dynamically linked programs), and where they are looked up
        self.libraries: Libraries | None = None
        self.sysroot: Path | None = None
        #: kpsdk's own breakpoints (the loader's r_brk): address -> what runs when it is hit
        self._stop_hooks: dict[int, Callable[[], None]] = {}
        #: post_handlers' single-steps whose end the agent reports (kpsdk.targets.live.step)
        self._steps = LiveStep(arch, self.hardware)
        #: breakpoint changes made during the current hit, sent on its final line
        self._changes: list[str] = []
        #: stop hooks the agent reports only when their condition holds (add_stop_hook's only_when)
        self._filtered: set[int] = set()
        self.link = AgentLink()
        self.mi: MiConnection | None = None
        _open_targets.add(self)
        self._streams = [stream for proc in self.processes for stream in (proc.stdout, proc.stderr)
                         if stream is not None]
        self._readers = [threading.Thread(target=self._collect, args=(stream,), daemon=True)
                         for stream in self._streams]
        for reader in self._readers:
            reader.start()
        try:  # from here on a failure reaps what the launcher started
            self.stall_limit = self.link.request_timeout = _positive_seconds(stall_limit, "stall_limit")
            self._connect(remote)
        except BaseException:
            self.close()
            raise

    # -- connection -----------------------------------------------------------------

    def _connect(self, remote: str) -> None:
        self._check_gdb_words(remote)
        self.mi = mi = MiConnection(pass_fds=(self.link.peer.fileno(),),
                                    env={"KPSDK_AGENT_FD": str(self.link.peer.fileno())})
        self.link.peer.close()
        mi.command(f"-gdb-set architecture {self.arch.gdb_arch}")
        # fail fast on a dead or mute stub: gdb's defaults retry for ~15 s
        mi.command("-gdb-set tcp connect-timeout 3")
        mi.command("-gdb-set remotetimeout 3")
        # gdb's byte order follows a loaded file, else the architecture's default (big for
        # powerpc): say it, so that ppc64le's registers and memory read the right way round
        mi.command(f"-gdb-set endian {self.arch.endian}")
        if self.abi_kind == "kernel" and self.arch.gdb_linux_steps_in_software:
            # a kernel is no Linux process: with gdb's Linux ABI, riscv64 steps by planting a
            # breakpoint on the next instruction and continuing, so a pending interrupt runs
            # first (a post_handler ran in the timer's code, and the probed instruction again
            # after it: a second hit).  With none, gdb asks the stub to step, and QEMU steps
            # with interrupts held off, as the kernel's kprobes step with them disabled.
            mi.command("-gdb-set osabi none")
        if self.image is not None:
            path = os.path.abspath(self.image.path)  # gdb would expand a leading ~
            mi.command(f"-file-exec-and-symbols {c_string(path, 'the program file')}")
        try:
            mi.command(f"-target-select remote {remote}", timeout=ATTACH_TIMEOUT)
        except GdbError as exc:
            raise TargetError(f"cannot attach to the gdbstub at {remote}: {exc}") from exc
        except TargetError as exc:
            raise TargetError(f"cannot attach to the gdbstub at {remote}: it does not answer the gdb remote "
                              f"protocol ({exc})") from exc
        # attached: from now on a stub that freezes is waited for, not sent the packet again
        # (which puts gdb out of step with it), until kpsdk's own stall checks have acted
        mi.command(f"-gdb-set remotetimeout {math.ceil(self.stall_limit + STALL_MARGIN)}")
        mi.console_command(f"source {AGENT}")
        names = mi.command("-data-list-register-names").get("register-names", [])
        self._reg_numbers = {n: i for i, n in enumerate(names) if n}
        mi.events.clear()
        mi.trouble = None  # what the handshake said is past: runs watch for new complaints

    def _check_gdb_words(self, remote: str) -> None:
        """What goes into gdb commands unquoted is a plain word (a backstop: launchers check
        user input with better messages, and arch plugins supply the names)."""
        bad = [f"remote {remote!r}"] if not _REMOTE.fullmatch(remote) else []
        if not _GDB_ARCH.fullmatch(self.arch.gdb_arch):
            bad.append(f"gdb architecture {self.arch.gdb_arch!r}")
        bad += [f"register {r.gdb!r}" for r in self.arch.registers if not _GDB_REGISTER.fullmatch(r.gdb)]
        if bad:
            raise TargetError(f"cannot give gdb {', '.join(bad)}: not a plain name")

    def _drain_output(self) -> None:
        """After an exit: wait (briefly) until QEMU's last output is in ``console``."""
        for proc in self.processes:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return
        for reader in self._readers:
            reader.join(timeout=2)

    @property
    def console(self) -> str:
        """What QEMU printed so far, including what it wrote just before it stopped."""
        self._settle_output()
        return self._console.decode("utf-8", "replace")

    @property
    def console_bytes(self) -> bytes:
        """:attr:`console` as the bytes QEMU wrote."""
        self._settle_output()
        return bytes(self._console)

    def _settle_output(self, limit: float = 0.5) -> None:
        """Wait (at most ``limit`` s) until the reader threads have taken everything QEMU
        wrote into its pipes: a program stopped right after a ``write`` has its output
        in the pipe, not yet in ``console``."""
        deadline = time.monotonic() + limit
        for stream in self._streams:
            try:
                while _pipe_pending(stream.fileno()) and time.monotonic() < deadline:
                    time.sleep(0.001)
            except (OSError, ValueError):
                continue  # the pipe is closed: its reader has finished
        time.sleep(0.002)  # the reader appends what its last read returned

    def _collect(self, stream: Any) -> None:
        """Copy a QEMU output stream into ``console`` (a thread per stream)."""
        for chunk in iter(lambda: stream.read1(65536), b""):
            self._console += chunk

    def _mi(self) -> MiConnection:
        if self.mi is None or self.closed:
            raise TargetError("the live target is closed")
        return self.mi

    # -- registers and memory ------------------------------------------------------------

    def mi_read_register(self, name: str) -> int:
        number = self._reg_numbers.get(name)
        if number is None:
            raise TargetError(f"gdb's {self.arch.gdb_arch} target has no register {name!r}")
        values = self._mi().command(f"-data-list-register-values x {number}").get("register-values", [])
        try:
            return int(values[0]["value"], 16)
        except (IndexError, KeyError, ValueError) as exc:
            raise TargetError(f"gdb gave no value for register {name}: {values!r}") from exc

    def regs(self) -> PtRegs:
        self._regs._reset(None)
        return self._regs

    def read_memory(self, addr: int, size: int) -> bytes:
        if size <= 0:
            return b""
        if self.in_hit:
            sent = self._io.memory.get(addr) if self._io.memory else None
            if sent is not None and len(sent) >= size:
                return sent[:size]
            try:
                data = bytes.fromhex(self.link.request(f"m {addr:x} {size:x}"))
                self._io.learn_memory(addr, size)
                return data
            except TargetFault:
                if self.abi_kind != "kernel":
                    raise
                if self.arch.access_gate is not None:
                    return self._read_through_gate(addr, size)
                if self.arch.page_walk is None:
                    raise
                return self._read_through_page_tables(addr, size)
        try:
            blocks = self._mi().command(f"-data-read-memory-bytes {addr:#x} {size}").get("memory", [])
        except GdbError as exc:
            raise self.memory_fault(f"cannot read {size} bytes: {exc}", addr) from exc
        data = b"".join(bytes.fromhex(b["contents"]) for b in blocks if int(b["begin"], 16) >= addr)
        if len(data) < size:
            raise self.memory_fault(f"cannot read {size} bytes (only {len(data)})", addr)
        return data[:size]

    def _read_through_gate(self, addr: int, size: int) -> bytes:
        """A read the kernel's own access gate refused to the debugger (ppc64's KUAP:
        :attr:`~kpsdk.arch.Arch.access_gate`), again with the gate open; the guest's value
        is back in the register before the hit goes on, whatever the read gave.  A read that
        fails with the gate open is a real fault (:class:`TargetFault`)."""
        gate = self.arch.access_gate
        assert gate is not None
        saved = int(self.link.request(f"r {gate.register}"), 16)
        self.link.request(f"W {gate.register} {gate.open_value:x}")
        try:
            return bytes.fromhex(self.link.request(f"m {addr:x} {size:x}"))
        finally:
            self.link.request(f"W {gate.register} {saved:x}")

    def _read_through_page_tables(self, addr: int, size: int) -> bytes:
        """A read the CPU's access control refused to the debugger (ARM's software PAN),
        done page by page at the physical addresses the guest's own page tables give
        (:attr:`~kpsdk.arch.Arch.page_walk`): the guest's registers and memory stay as they
        are.  An address its tables do not map is a real fault (:class:`TargetFault`)."""
        walk = self.arch.page_walk
        assert walk is not None

        def read_reg(name: str) -> int:
            return int(self.link.request(f"r {name}"), 16)

        def read_phys(pa: int, n: int) -> bytes:
            return bytes.fromhex(self.link.request(f"p {pa:x} {n:x}"))

        out = bytearray()
        page = 4096
        while len(out) < size:
            va = addr + len(out)
            chunk = min(size - len(out), page - va % page)
            pa = walk(read_reg, read_phys, va)
            if pa is None:
                raise self.memory_fault(f"cannot read {size} bytes: {va:#x} is not mapped", addr)
            out += read_phys(pa, chunk)
        return bytes(out)

    def write_memory(self, addr: int, data: bytes) -> None:
        if not data:
            return
        if self.in_hit:
            self._io.memory.clear()  # what the agent sent may be stale now
            self.link.request(f"w {addr:x} {bytes(data).hex()}")
            return
        try:
            self._mi().command(f"-data-write-memory-bytes {addr:#x} {bytes(data).hex()}")
        except GdbError as exc:
            raise self.memory_fault(f"cannot write {len(data)} bytes: {exc}", addr) from exc

    def is_mapped(self, addr: int) -> bool:
        try:
            self.read_memory(addr, 1)
        except TargetFault:
            return False
        return True

    def is_executable(self, addr: int) -> bool:
        if self._files:  # the mappings the program really has: its own and its libraries'
            return any(mf.executable_at(addr) for mf in self._files)
        if self.image is not None:
            return any(s.executable and s.vaddr <= addr < s.vaddr + s.memsz for s in self.image.segments)
        sym = self.symbols.containing(addr)
        return sym is None or sym.kind == "func"

    def is_reserved(self, addr: int) -> bool:
        return False  # kpsdk puts nothing of its own into a live target

    # -- instructions ------------------------------------------------------------------

    # -- watchpoints (kpsdk.targets.live.watch) ----------------------------------------------

    #: the gdbstub takes hardware watchpoints (Z2-Z4); qemu-user's does not
    hw_watchpoints = True
    #: post_handler steps end in the agent (kpsdk.targets.live.step); False: every step
    #: through MI, the slow way (tests compare the two)
    agent_steps = True
    watch: LiveWatch | None = None

    def watch_engine(self) -> LiveWatch:
        if self.watch is None:
            self.watch = LiveWatch(self)
        return self.watch

    def can_step(self, point: ProbePoint) -> bool:
        return True  # gdb's stepi steps any instruction

    # -- arming ------------------------------------------------------------------------

    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        want = bool(point.active)
        if want == (point.mechanism is not None) and not force:
            return
        if point.mechanism is not None:
            point.mechanism = None
            if point.addr not in self._return_bps and point.addr not in self._stop_hooks:
                self._remove_breakpoint(point.addr)
        if want:
            self._insert_breakpoint(point.addr)
            self._unfilter(point.addr)
            point.mechanism = "hbreak" if self.hardware else "break"

    def _insert_breakpoint(self, addr: int) -> None:
        hw = int(self.hardware)
        self._agent(f"b {addr:x} {hw}", f"insert({addr:#x}, {hw})", addr)

    def _remove_breakpoint(self, addr: int) -> None:
        self._agent(f"d {addr:x}", f"delete({addr:#x})", addr)
        self._dormant |= self.in_hit  # the agent only parks it during a hit; purged before the next run

    def add_stop_hook(self, addr: int, hook: Callable[[], None],
                      only_when: tuple[int, int, int] | None = None) -> None:
        """Run ``hook()`` whenever the program reaches ``addr`` (the CPU stopped there, memory
        readable, probes may be added): kpsdk's own breakpoint, not a probe.

        ``only_when=(where, size, value)``: only at the hits where the ``size``-byte integer
        at ``where`` is ``value``; gdb's agent continues the others itself, without a round
        trip to kpsdk.  Ignored (every hit seen) while a probe or a return shares ``addr``.
        """
        point = self.manager.points.get(addr)
        shared = addr in self._return_bps or (point is not None and point.mechanism is not None)
        if not shared:
            self._insert_breakpoint(addr)
        self._stop_hooks[addr] = hook
        if only_when is not None and not shared and not self.in_hit:
            where, size, value = only_when
            self._mi().console_command(f"python kpsdk_agent.only_when({addr:#x}, {where:#x}, {size}, {value}, "
                                       f"{int(self.arch.endian == 'big')})")
            self._filtered.add(addr)

    def _unfilter(self, addr: int) -> None:
        """A probe or a return shares a stop hook's address: the agent reports its every hit."""
        if addr in self._filtered:
            self._filtered.discard(addr)
            self._agent(f"a {addr:x}", f"always({addr:#x})", addr)

    def set_symbols(self, table: SymbolTable) -> None:
        """What ``symbols`` answers from now on (the program's and its libraries', at run-time addresses)."""
        self.symbols = table

    # -- return probes: a breakpoint at the return address, matched by sp ------------------

    def attach_rethook(self, core: ShadowStacks) -> None:
        self.rethook = core

    def hijack_return(self, regs: PtRegs, node: RethookNode) -> int:
        """Leave the return address alone; trap it with a breakpoint (one per address)."""
        addr = node.ret_addr & ~1 if self.arch.has_thumb else node.ret_addr
        count = self._return_bps.get(addr, 0)
        if count == 0:
            point = self.manager.points.get(addr)
            if (point is None or point.mechanism is None) and addr not in self._stop_hooks:
                self._insert_breakpoint(addr)
            self._unfilter(addr)
        self._return_bps[addr] = count + 1
        return node.ret_addr

    def release_return(self, node: RethookNode) -> None:
        addr = node.ret_addr & ~1 if self.arch.has_thumb else node.ret_addr
        count = self._return_bps.get(addr, 0) - 1
        if count > 0:
            self._return_bps[addr] = count
            return
        self._return_bps.pop(addr, None)
        point = self.manager.points.get(addr)
        if (point is None or point.mechanism is None) and addr not in self._stop_hooks \
                and not self.closed and self._exit_status is None:
            self._remove_breakpoint(addr)

    def current_task(self) -> int:
        """User programs: gdb's thread.  Kernels: the task's kernel stack (THREAD_SIZE-aligned),
        because a vCPU runs many tasks and a task may move between vCPUs."""
        if self.abi_kind == "kernel":
            return self._regs.sp & ~(self.arch.kernel_stack_size - 1)
        return self._thread

    # -- the trace prefix (kpsdk/kernel/tasks.py) -----------------------------------------------

    def prepare_tasks(self) -> str:
        if self.abi_kind != "kernel":
            return "comm: the program's file name; pid: the thread id gdb's stub reports"
        from kpsdk.kernel.tasks import code_tasks_note, kernel_task_layout

        why = "no kernel image given, so no BTF to find current's comm and pid"
        if self.kernel_image is not None:
            try:
                self._task_layout = kernel_task_layout(self.kernel_image, self.arch)
                return self._task_layout.how
            except (TargetError, SymbolError) as exc:
                why = str(exc)
        tasks = self.arch.kernel_tasks
        if tasks is not None and tasks.code is not None:  # no BTF: the kernel's code says it
            try:
                addr = self.symbols.resolve(tasks.code.function)
            except SymbolError:
                return f"comm-pid: <...>-0 ({why}; and no {tasks.code.function} in the kernel's symbols)"
            found = self.symbols.lookup(addr)
            if found is not None and found[2] > 0:
                self._task_code = (addr, found[2])
                return code_tasks_note(self.arch)
        return f"comm-pid: <...>-0 ({why})"

    def prepare_clock(self) -> str:
        from kpsdk.kernel.guestclock import check_state, sched_clock_layout

        clock = self.board.clock if self.board is not None else None
        if self.abi_kind != "kernel" or clock is None or self.kernel_image is None:
            return ""
        try:
            layout, jiffy_reader = sched_clock_layout(self.kernel_image, self.arch, clock)
            check_state(layout, self.read_memory(layout.cd, layout.span), jiffy_reader, self.arch.endian)
        except TargetError as exc:
            self.clock_error = str(exc)
            return ""
        self._clock = layout
        return layout.how

    def clock_ns(self) -> int | None:
        clock = self._clock
        if clock is None or not self.in_hit:
            return None
        counter = bytes.fromhex(self.link.request(f"p {clock.counter:x} {clock.counter_size:x}"))
        return clock.ns(self.read_memory(clock.cd, clock.span), counter, self.arch.endian)

    def reads_comm(self) -> bool:
        return self.abi_kind == "kernel" and (self._task_layout is not None or self._task_code is not None)

    def _layout_from_code(self) -> TaskLayout | None:
        """The task layout from the kernel's code, read once, at the first hit (no BTF).  A
        kernel whose code kpsdk cannot read that way keeps ``<...>-0``; why is kept in
        :attr:`task_code_error`."""
        from kpsdk.kernel.tasks import code_task_layout

        function, self._task_code = self._task_code, None
        assert function is not None
        try:
            self._task_layout = code_task_layout(self.read_memory, function, self.arch)
        except TargetError as exc:  # TargetFault too: the code could not be read
            self.task_code_error = str(exc)
        return self._task_layout

    def task_info(self) -> TaskInfo | None:
        from kpsdk.kernel.tasks import UNKNOWN_COMM, TaskInfo, lat_flags, program_comm

        if self.abi_kind != "kernel":
            comm = program_comm(self.image.path) if self.image is not None else UNKNOWN_COMM
            return TaskInfo(comm, self._thread_id())
        cpu = max(self._thread - 1, 0)  # qemu-system: gdb's threads are the vCPUs, in order
        tasks = self.arch.kernel_tasks
        if tasks is None:
            return TaskInfo(UNKNOWN_COMM, 0, cpu)
        irqs_off = bool(tasks.flags_register) and \
            tasks.irqs_disabled(self._io.read(self._raw_register(tasks.flags_register)))
        layout = self._task_layout
        if layout is None and self._task_code is not None:
            layout = self._layout_from_code()
        if layout is None:
            return TaskInfo(UNKNOWN_COMM, 0, cpu, lat_flags(irqs_off))
        if tasks.current_register is not None:
            current: int | None = self._io.read(self._raw_register(tasks.current_register))
            base = 0
        else:
            current, base = None, self._io.read(self._raw_register(tasks.percpu_register))
        comm, pid, flags = layout.read(self.read_memory, base, self.arch.word_size, self.arch.endian, irqs_off,
                                       tasks, current)
        return TaskInfo(comm, pid, cpu, flags)

    def _raw_register(self, name: str) -> Register:
        """A register by gdb's name, arch register or not (``gs_base``)."""
        known = self.arch.by_name.get(name)
        return known if known is not None else Register(name, self.arch.word_size, None, name)

    def _thread_id(self) -> int:
        """The stub's id of the hit's thread (qemu-user: the guest's thread id), asked once per thread."""
        tid = self._tids.get(self._thread)
        if tid is None:
            tid = self._tids[self._thread] = int(self.link.request("t"), 16) if self.in_hit else self._thread
        return tid

    def _agent(self, request: str, python_call: str, addr: int) -> None:
        """Insert or delete an agent breakpoint: on the hit's final line during a hit (no
        round trip: ``b ADDR HW`` becomes ``b:ADDR:HW``), else through MI."""
        if self.in_hit:
            self._changes.append(request.replace(" ", ":"))
            return
        try:
            self._mi().console_command(f"python kpsdk_agent.{python_call}")
        except GdbError as exc:
            raise TargetError(f"gdb could not change the breakpoint at {self.symbols.format(addr)}: {exc}") from exc

    # -- running -----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the run: at the end of the current hit, or by interrupting the target."""
        self._stop_requested = True

    def _interrupt(self) -> None:
        if self._interrupt_fn is not None:
            self._interrupt_fn()
        else:
            self._mi().send("-exec-interrupt")

    def run(self, timeout: float | None = None) -> int | None:
        if self._exit_status is not None:
            return self._exit_status
        try:
            return self._run(timeout)
        except _Ended as end:
            return end.status

    def _run(self, timeout: float | None) -> int | None:
        mi = self._mi()
        self._stop_requested = self._stopping = False
        self._deadline = time.monotonic() + timeout if timeout else None
        self._frozen_since = None
        if self._dormant:
            self._dormant = False
            mi.console_command("python kpsdk_agent.purge()")
        self._resume("-exec-continue")
        link = self.link
        while True:
            line = link.wait_line(self.poll_seconds, spin=NEXT_HIT_SPIN, also=mi.fileno)
            if line is not None:
                self._agent_line(line)
                continue
            result = self._between_hits()
            if result is not _RUNNING:
                return result  # type: ignore[return-value]

    def _between_hits(self) -> object:
        """The run loop's work when no hit came: a stop to handle, a target that died or
        stalled, the timeout or stop().  ``_RUNNING`` while the run goes on."""
        self._mi().pump(0)
        stopped = self._take_stopped()
        if stopped is not None:
            return self._on_stopped(stopped)
        self._check_alive()
        self._check_progress()
        if self._stopping:
            return _RUNNING  # a hit told gdb to stop: its *stopped is on the way
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return self._halt("the timeout")
        if self._stop_requested:
            return self._halt("stop()")
        return _RUNNING

    def run_to(self, addr: int, timeout: float) -> None:
        """Run until the CPU reaches ``addr`` (probes fire on the way); TargetError if it does not."""
        mi = self._mi()
        number = mi.command(f"-break-insert -t *{addr:#x}").get("bkpt", {}).get("number")
        self._until_breakpoint = True
        try:
            status = self.run(timeout)
        finally:
            self._until_breakpoint = False
            if number is not None and self._exit_status is None and mi.alive():
                try:
                    mi.command(f"-break-delete {number}")
                except GdbError:
                    pass  # a temporary breakpoint that was hit is already gone
        pc = self.mi_read_register(self._pc.gdb) if status is None else None
        if pc != addr:
            where = self.symbols.format(addr)
            raise TargetError(f"the target did not reach {where} within {timeout:g} s"
                              + (f" (it exited with status {status})" if status is not None else ""))

    def _resume(self, command: str) -> None:
        self._io.cache.clear()
        self._regs._reset(None)
        try:
            self._mi().command(command)
        except GdbError as exc:
            if "exited" in str(exc) or "not being run" in str(exc):
                raise TargetExited(f"the target is not running: {exc}") from exc
            raise

    def _take_stopped(self) -> dict[str, Any] | None:
        mi = self._mi()
        while mi.events:
            record = mi.events.popleft()
            if record["message"] == "stopped":
                return record.get("payload") or {}
        return None

    def _await_stop(self, timeout: float) -> dict[str, Any] | None:
        """Serve hits until gdb reports ``*stopped``; its payload, or None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.link.wait_line(0.05, spin=0, also=self._mi().fileno)
            if line is not None:
                self._agent_line(line)
            self._mi().pump(0)
            stopped = self._take_stopped()
            if stopped is not None:
                return stopped
            self._check_alive()
            self._check_progress()
        return None

    def _halt(self, why: str) -> int | None:
        """Interrupt a running target and wait (briefly: a healthy one stops in
        milliseconds) until it reports the stop; a target that cannot be halted
        ends the session, so ``run(timeout=...)`` returns or raises on time."""
        frozen = self._frozen_process()
        if frozen is not None:
            raise self._abandon(TargetStalled(f"{frozen} is stopped (SIGSTOP?): it cannot be halted for {why}"))
        self._interrupt()
        stopped = self._await_stop(HALT_TIMEOUT)
        if stopped is None:
            raise self._abandon(TargetStalled(f"the target did not stop within {HALT_TIMEOUT:g} s after {why}"))
        result = self._on_stopped(stopped, halting=True)
        return None if result is _RUNNING else result  # type: ignore[return-value]

    def _on_stopped(self, payload: dict[str, Any], halting: bool = False) -> object:
        """React to ``*stopped``: exit, a step to finish, an error to raise, or the stop asked for."""
        self._stopping = False
        reason = payload.get("reason", "")
        if reason in ("exited", "exited-normally", "exited-signalled"):
            code = payload.get("exit-code")
            return self._program_exited(int(code, 8) if code else (0 if reason == "exited-normally" else 128))
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            self._pending_step = None
            raise error
        if self._pending_step is not None:
            point, self._pending_step = self._pending_step, None
            self._step_and_post(point)
            if self._stop_requested or halting:
                return None
            self._resume("-exec-continue")
            return _RUNNING
        if reason == "signal-received" and payload.get("signal-name") not in ("SIGINT", "SIGTRAP", "0"):
            pc = int(payload.get("frame", {}).get("addr", "0"), 16)
            raise TargetFault(f"the target received {payload.get('signal-name')} "
                              f"({payload.get('signal-meaning', '')})", pc, self.symbols.format(pc))
        if self._stop_requested or halting:
            return None
        if reason == "breakpoint-hit" and self._until_breakpoint:
            return None
        # a stop kpsdk did not cause (a breakpoint someone set in gdb): keep going
        self._resume("-exec-continue")
        return _RUNNING

    def _step_and_post(self, point: ProbePoint) -> None:
        """K3 on a live target: execute the probed instruction with ``stepi``, then the post_handlers.

        A step landing on another kpsdk breakpoint is reported as that breakpoint's hit
        before the ``*stopped``: the step is pending for every address, so that hit runs
        these post_handlers first (K3's order), as an agent-ended step does."""
        thread = self._thread
        following: ProbePoint | None = point
        while following is not None:
            point, self._pending_step = following, None
            self._steps.pending[thread] = (point, None)
            self._resume("-exec-step-instruction")
            stopped = self._await_stop(self.stall_limit)
            if stopped is None:
                raise self._abandon(TargetStalled(f"single-stepping {self.symbols.format(point.addr)} did not "
                                                  f"finish within {self.stall_limit:g} s"))
            self._stopping = False  # a hit on the way that asked for a stop had it: this one
            if str(stopped.get("reason", "")).startswith("exited"):
                self._on_stopped(stopped)
                return
            step = self._steps.pending.get(thread)
            if step is not None and step[0] is point:
                del self._steps.pending[thread]
                self.manager.post(point, self._regs, self.mi_read_register(self._pc.gdb))
            # a hit on the way that wants its own step the slow way: the CPU is already stopped there
            following = self._pending_step

    def _agent_line(self, line: str) -> None:
        """A line the agent sent unasked: a hit, or a breakpoint change it could not make
        (``E MESSAGE``; the agent stops the CPU, and run() raises it at that stop)."""
        if line.startswith(("H ", "W ")):
            self._hit(line)
        elif line.startswith("E "):
            self._pending_error = TargetError(f"gdb: {line[2:]}")
            self._stopping = True

    def _hit(self, line: str) -> None:
        """One probe hit reported by the agent; always answers it.

        ``W ID THREAD KIND OLD NEW`` is a watchpoint's (:mod:`kpsdk.targets.live.watch`).
        """
        parts = line.split()
        watch = parts[3:6] if parts[0] == "W" else None
        if watch is not None:
            parts = parts[:3]
        addr = int(parts[1], 16)
        io = self._io
        cache = io.cache
        cache.clear()
        io.writes.clear()
        io.learned.clear()
        if io.memory:
            io.memory.clear()
        for word in parts[3:]:
            name, _, value = word.partition("=")
            if name[0] == "@":
                io.memory[int(name[1:], 16)] = bytes.fromhex(value)
            else:
                cache[name] = int(value, 16)
        verdict = "c"
        point = self.manager.points.get(addr) if watch is None else None
        thread = self._thread = int(parts[2], 16)
        changes = self._changes
        changes.clear()
        self.in_hit = True
        try:
            if watch is not None:
                self.watch_engine().hit(addr, watch, self._regs)
            else:
                if self._steps.pending:  # the end of this thread's single-step comes first (K3)
                    self._steps.reached(thread, addr, self._regs)
                if self._stop_hooks and addr in self._stop_hooks:
                    self._regs._reset(addr)
                    self._stop_hooks[addr]()
            if watch is None and addr in self._return_bps and self.rethook is not None:
                self._regs._reset(addr)
                resume = self.rethook.on_return(self._regs, False)
                if resume is not None and resume & ~1 != addr:
                    io.writes[self._pc.gdb] = resume
            if point is not None and point.active and (
                    point.insn.condition is None or self._condition_passes(point)):
                new = self.manager.pre(point, self._regs)
                if new is not None:
                    io.writes[self._pc.gdb] = new
                elif point.needs_step:
                    verdict = self._start_step(thread, point)
        except BaseException as exc:  # noqa: BLE001 - raised from run() once gdb reports the stop
            self._pending_error = exc
            verdict = "s"
        finally:
            self.in_hit = False
        if self._ending():
            self._stop_requested = True
            verdict = "s"
        if verdict == "s":
            self._stopping = True
        words = [verdict, *(f"{n}={v & ((1 << 64) - 1):x}" for n, v in io.writes.items()),
                 *(f"+{n}" for n in io.learned), *changes]
        self.link.send(" ".join(words))
        cache.clear()

    def _ending(self) -> bool:
        """Whether the run ends at this hit (stop(), or the run's timeout passed)."""
        return self._stop_requested or (self._deadline is not None and time.monotonic() >= self._deadline)

    def _start_step(self, thread: int, point: ProbePoint) -> str:
        """K3 for this hit: the verdict, ``c`` with the step's end armed in the agent
        (:mod:`kpsdk.targets.live.step`), or ``s`` for the slow way through MI, taken
        when the backend cannot follow the instruction or the run ends here (run()
        then returns with the post_handlers run)."""
        if self.agent_steps and not self._ending():
            arch = self.arch
            if self.abi_kind == "kernel":
                self._steps.follow_code(point, self._code_now(point), self._read_code)
            succ = self._steps.successors(point, lambda name: self._io.read(arch.register(name)), self.read_memory)
            if succ is not None:
                self._changes += self._steps.start(thread, point, succ)
                return "c"
        self._pending_step = point
        return "s"

    def _code_now(self, point: ProbePoint) -> bytes:
        """The bytes at ``point`` now, as long as the instruction it was last decoded as
        (at registration, or again by :meth:`LiveStep.follow_code`: a longer one's tail may
        change too): sent with the point's later hits, learned as a register is when the
        agent did not send them (the agent's list of a breakpoint made again is empty)."""
        live_raw = point.state.get("live_raw")
        size = max(len(point.insn.raw), len(live_raw) if isinstance(live_raw, bytes) else 0)
        sent = self._io.memory.get(point.addr) if self._io.memory else None
        if sent is not None and len(sent) >= size:
            return sent[:size]
        self._io.learned.append(f"@{self._pc.gdb}:0:{size:x}")
        try:
            return bytes.fromhex(self.link.request(f"m {point.addr:x} {size:x}"))
        except TargetFault:  # not readable now: the decode at registration is all there is
            return point.insn.raw

    def _read_code(self, addr: int, most: int) -> bytes:
        """Up to ``most`` bytes of code at ``addr``: fewer where the next page is not mapped."""
        while True:
            try:
                return self.read_memory(addr, most)
            except TargetFault:
                if most <= 2:
                    raise
                most //= 2

    def _condition_passes(self, point: ProbePoint) -> bool:
        arch = self.arch
        cond = point.insn.condition
        assert arch.conditions is not None and cond is not None, "only conditional instructions get here"
        return bool(arch.conditions.passes(cond, lambda n: self._io.read(arch.register(n))))

    def _check_alive(self) -> None:
        """Raise when gdb or QEMU died; return quietly while both live.

        A QEMU that exited with a status (the program ended, or a guest powered
        off) ends the run normally: :class:`_Ended` carries the status.  One
        killed by a signal is an error.
        """
        mi = self._mi()
        if not mi.alive():
            tail = "".join(mi.console[-3:]).strip()
            raise TargetExited("gdb exited while the target was running" + (f": {tail}" if tail else ""))
        for proc in self.processes:
            status = proc.poll()
            if status is None:
                continue
            name = Path(str(proc.args[0])).name  # type: ignore[index]
            if status < 0:
                raise TargetExited(f"{name} was killed by signal {-status} while the target was running")
            # gdb reports the end itself (with the program's status) unless QEMU went first
            stopped = mi.next_event("stopped", 1.0)
            if stopped is not None and str(stopped.get("payload", {}).get("reason", "")).startswith("exited"):
                self._on_stopped(stopped["payload"])
            else:
                self._program_exited(status)
            raise _Ended(self._exit_status)

    def _program_exited(self, status: int) -> int:
        """The program ended with ``status``: hooked calls that never returned are dropped
        (nothing leaks), QEMU's last output collected, plugins told."""
        self._exit_status = status
        self._steps.clear()
        if self.rethook is not None:
            self.rethook.unwind()
        self._drain_output()
        self.emit("program_exit", status=status)
        return status

    # -- stalls: checked between hits, never on a hit's path ---------------------------------

    def _check_progress(self) -> None:
        """Raise (gdb killed, session closed) when the run cannot go on although gdb and QEMU live.

        A broken agent conversation, gdb's word that it lost step with the stub,
        a QEMU stopped for longer than ``stall_limit``, or gdb not answering a
        ping for that long (it is waiting for a stub that does not reply).
        """
        mi = self._mi()
        if self.link.broken is not None:
            raise self._abandon(self.link.broken)
        if mi.trouble is not None:
            self._lost_step(mi.trouble)
        self._check_frozen()
        mi.ping(PING_SECONDS)
        if mi.unanswered_for() > self.stall_limit:
            mi.pump(HALT_TIMEOUT)  # an answer held back by a handler that ran long arrives now
            if mi.unanswered_for() > self.stall_limit:
                raise self._abandon(TargetStalled(f"gdb has not answered for {self.stall_limit:g} s (stall_limit): "
                                                  "it is stuck waiting for the gdbstub"))

    def _lost_step(self, message: str) -> None:
        """gdb complained about the remote protocol.  A QEMU that exited closes the
        connection too, and its exit is the news; otherwise the session is over."""
        for proc in self.processes:
            try:
                proc.wait(timeout=HALT_TIMEOUT)
            except subprocess.TimeoutExpired:
                continue
        self._check_alive()
        if any(words in message.lower() for words in _DISCONNECTED):
            raise self._abandon(TargetExited(f"the gdbstub closed the connection: {message}"))
        raise self._abandon(TargetError(f"gdb lost step with the gdbstub ({message}); what it would report "
                                        "next cannot be trusted, so the session was closed"))

    def _check_frozen(self) -> None:
        frozen = self._frozen_process()
        if frozen is None:
            self._frozen_since = None
            return
        now = time.monotonic()
        if self._frozen_since is None:
            self._frozen_since = now
        elif now - self._frozen_since > self.stall_limit:
            raise self._abandon(TargetStalled(f"{frozen} has been stopped (SIGSTOP?) for more than "
                                              f"{self.stall_limit:g} s (stall_limit)"))

    def _frozen_process(self) -> str | None:
        """The first process of this target that is stopped by a signal, as ``name (pid N)``."""
        for proc in self.processes:
            if _job_stopped(proc.pid):
                return f"{Path(str(proc.args[0])).name} (pid {proc.pid})"  # type: ignore[index]
        return None

    def _abandon(self, error: KpsdkError) -> KpsdkError:
        """End a session that cannot go on and return ``error`` to raise: gdb is killed at
        once (a stuck or spinning gdb would not answer ``-gdb-exit``), QEMU reaped."""
        if self.mi is not None:
            self.mi.kill()
        self.close()
        return error

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
            for proc in self.processes:
                _reap(proc)
            self.link.close()
            if self._cleanup is not None:
                self._cleanup()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill, and always wait: no zombie, no orphan.  A stopped
    process is continued, or it would not act on the SIGTERM."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


def _job_stopped(pid: int) -> bool:
    """Whether a process is stopped by a signal (``T``) or a tracer (``t``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


def _positive_seconds(value: object, name: str) -> float:
    """A finite number of seconds above 0, or a TargetError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise TargetError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


class _Ended(Exception):  # noqa: N818 - control flow, never seen by users
    """The target ended while kpsdk waited: run() returns the status."""

    def __init__(self, status: int | None) -> None:
        self.status = status


class _Running:
    """Marker: the target was resumed and the run goes on."""


_RUNNING = _Running()
