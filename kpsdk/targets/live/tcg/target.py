"""qemu-system with kpsdk's TCG plugin: probe hits without a gdb stop (``mechanism="plugin"``).

One module, because which points the plugin serves and how their hits come back share
the plugin's table and ring state.

:class:`PluginTarget` is a :class:`~kpsdk.targets.live.target.GdbTarget` (gdb still starts, stops
and reads the guest) whose probe points go to the plugin when the plugin can serve them:
kprobes without a post_handler.  Everything else (post_handlers, kretprobes, watchpoints,
kpsdk's own breakpoints) keeps gdb's breakpoint path in the same session.  ``list()`` shows
``[PLUGIN]`` or ``[GDB]`` per probe.

How a plugin hit flows::

    the probed instruction runs -> the plugin counts it in the shared table and, when the
    point has pre_handlers, appends the registers to the shared ring (QEMU does not stop)
      -> run()'s loop (every POLL_SECONDS_PLUGIN) takes the records, oldest first, and runs
         the pre_handlers with a read-only snapshot of the registers at the hit

So handlers run *after* the hit, in batches, while the guest goes on: they see the
registers as they were, may not change them or the execution path (a write, or a
non-zero return with ``regs.ip`` set, raises :class:`~kpsdk.errors.TargetError`), and read
only the guest memory the probe declared, which the plugin read at the hit
(:mod:`kpsdk.targets.live.tcg.fetch`: a trace definition's fetch arguments, or
:meth:`PluginTarget.declare_memory`); any other read raises too (the guest has moved on).  A point whose probes have no
pre_handler streams nothing; its hits are counted by the plugin alone.  A full ring makes the
hit wait until run() has taken records (the guest then goes at the pace of the
handlers); only a ring still full after 10 s without kpsdk taking records drops the record, counted in the probe's
``nmissed``.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.arch import Arch, Register
from kpsdk.errors import TargetError, TargetFault
from kpsdk.regs import PtRegs
from kpsdk.targets.live.limits import POLL_SECONDS
from kpsdk.targets.live.runloop import _RUNNING
from kpsdk.targets.live.target import GdbTarget
from kpsdk.targets.live.tcg.fetch import Declared, HitMemory, Planner, bound_fetches, parse_fetches
from kpsdk.targets.live.tcg.plugin import MAX_REGS, MemFetch, ProbeTable, Record, register_names

if TYPE_CHECKING:
    from kpsdk.fetchargs import BoundFetch
    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.manager import ProbePoint
    from kpsdk.probe import Probe
    from kpsdk.targets.live.tcg.native import PluginNativeHost, PluginProgram

#: how often run() takes the plugin's records while no gdb hit comes (seconds)
POLL_SECONDS_PLUGIN = 0.005
#: the same where every streaming point runs a trace event's program (.native): no handler waits
#: for its records, and the 16 MiB ring holds a second of them; a poll costs kpsdk ~0.3 ms
POLL_SECONDS_NATIVE = 0.05
#: handled records between two signs of progress to the plugin (a power of two, minus one)
PROGRESS_EVERY = 255
#: while the guest runs, how often the plugin's own counts reach the probes' hits and nmissed
#: (at every stop too): reading every point's counters at each poll would cost more than the hits
CREDIT_SECONDS = 0.1
#: while waiting for a stop, how often the plugin's records are taken (seconds)
AWAIT_SLICE = 0.02
#: how long the plugin gets to list the registers after QEMU starts
READY_TIMEOUT = 10.0


class SnapshotRegs:
    """Registers as the plugin read them at one hit: reads from the snapshot, writes refused."""

    def __init__(self, arch: Arch) -> None:
        self.arch = arch
        self.cache: dict[str, int] = {}

    def read(self, reg: Register) -> int:
        value = self.cache.get(reg.gdb)
        if value is None:
            raise TargetError(f"register {reg.name} is not in the plugin's snapshot of this hit")
        return value & reg.mask

    def write(self, reg: Register, value: int) -> None:
        raise TargetError(f"a probe on the plugin mechanism cannot change {reg.name}: its handlers run after "
                          "the hit on a snapshot (register the probe on a gdb session to change registers)")


#: the trace header's note on the timestamps of a plugin session
CLOCK_NOTE = ("the host's CLOCK_MONOTONIC at the hit, read by kpsdk's QEMU plugin (gdb-path hits: when kpsdk "
              "takes the stop, the guest stopped at the hit)")


class PluginTarget(GdbTarget):
    """A qemu-system session whose kprobes without post_handlers are served by the TCG plugin."""

    @property
    def poll_seconds(self) -> float:  # type: ignore[override]
        """Wake every few milliseconds only while a plugin point streams records (the ring must
        be drained); points that are only counted need no more than the gdb loop's pace."""
        if not self._streaming:
            return POLL_SECONDS
        return POLL_SECONDS_NATIVE if self._native_only else POLL_SECONDS_PLUGIN

    def __init__(self, arch: Arch, remote: str, *, table: ProbeTable, regs_file: Path, **kwargs: Any) -> None:
        self.table = table
        self._regs_file = regs_file
        self._plugin_regs: list[tuple[str, int, int]] = []  # gdb name, plugin index, size
        self._by_ident: dict[int, ProbePoint] = {}
        self._counted: dict[int, tuple[int, int]] = {}  # ident -> (hits, dropped) already credited
        self._backlog: deque[Record] = deque()
        self._next_ident = 1
        self._snap_io = SnapshotRegs(arch)
        #: the memory the record being handled holds
        self._hit_memory = HitMemory()
        #: the fetches each probe declared (the plugin reads them at its hits)
        self._declared: weakref.WeakKeyDictionary[Probe, list[Declared]] = weakref.WeakKeyDictionary()
        #: the per-cpu base register's plugin index, once a trace wants the prefix's task
        #: (prepare_tasks) and the kernel's task layout is known: every streaming point reads it
        self._task_percpu: int | None = None
        #: ident -> index of the read of the per-cpu ``current`` word in that point's records
        self._task_read: dict[int, int] = {}
        #: trace probes whose fetches the plugin cannot read: gdb's path serves them
        self._gdb_only: weakref.WeakSet[Probe] = weakref.WeakSet()
        #: plugin handlers are running: the guest runs too, so table edits wait for the next stop
        #: (while stopped, at a gdb hit or between runs, QEMU's gdbstub has flushed its translations)
        self._dispatching = False
        #: the record whose handlers run now (None outside them): its task and vCPU
        self._record: Record | None = None
        self._credited_at = 0.0
        self._streaming = False  # a plugin point streams records: run() polls the ring often
        self._native_only = False  # ...and every one runs a trace event's program (polled less often)
        self._native_ranges: list[tuple[int, int, int]] | None = None
        #: trace events whose fetch programs the plugin runs (:mod:`.native`), made at a trace's first ask
        self._native: PluginNativeHost | None = None
        #: a native program's id -> the entry (point) ident its records come from
        self._native_points: dict[int, int] = {}
        super().__init__(arch, remote, **kwargs)
        self._snap = PtRegs.create(arch, self._snap_io, arch.abi(self.abi_kind), self._hit_memory.read, owner=self)

    # -- the plugin's registers ---------------------------------------------------------

    def _registers(self) -> list[tuple[str, int, int]]:
        """The arch's registers the plugin can read, as (gdb name, plugin index, size)."""
        if not self._plugin_regs:
            deadline = time.monotonic() + READY_TIMEOUT
            while not self.table.ready:
                if time.monotonic() > deadline:
                    raise TargetError(f"kpsdk's QEMU plugin did not list the registers within {READY_TIMEOUT:g} s")
                time.sleep(0.01)
            known = register_names(self._regs_file)
            wanted = self.arch.plugin_registers[:MAX_REGS]  # the arch's exact names (arch_backends)
            missing = [qemu for _, qemu in wanted if qemu not in known]
            if missing:
                raise TargetError(f"QEMU lists no register {', '.join(missing)} for kpsdk's plugin on "
                                  f"{self.arch.name} (it lists {', '.join(known) or 'none'})")
            self._plugin_regs = [(gdb, *known[qemu]) for gdb, qemu in wanted]
        return self._plugin_regs

    def _register_index(self, gdb_name: str) -> int | None:
        """The plugin's index of a register by gdb's name (any the plugin lists: ``gs_base`` too)."""
        for name, index, _ in self._registers():  # the arch's registers, by QEMU's exact names
            if name == gdb_name:
                return index
        found = register_names(self._regs_file).get(gdb_name)
        return found[0] if found is not None else None

    # -- memory declared for the hits -------------------------------------------------------

    def _plan(self, probes: Iterable[Probe], ident: int | None = None) -> list[MemFetch]:
        """The plugin's reads for the fetches ``probes`` declared (TargetError: not readable),
        and, for point ``ident`` while a trace wants the prefix's task, the task's."""
        planner = Planner(self.arch, self.arch.abi(self.abi_kind), self._register_index)
        for probe in probes:
            for fetch, argtype, symbol in self._declared.get(probe, ()):
                planner.add(fetch, argtype, symbol)
        if ident is not None:
            self._task_read.pop(ident, None)
            if self._task_percpu is not None and self._task_layout is not None:
                try:
                    self._task_read[ident] = planner.add_task(self._task_layout, self._task_percpu)
                except TargetError:
                    pass  # no room left for the task's reads: this point's lines show <...>-0
        return planner.reads

    def declare_memory(self, probe: Probe, fetches: Sequence[str]) -> None:
        """Have the plugin read guest memory at each hit of ``probe``, for its pre_handler:
        ``fetches`` are kprobe_events fetch arguments (``"+0(%si):string"``, ``"+8(%sp):u64"``,
        ``"+0(+0(%si)):string"``, ``"@jiffies:u64"``, ``"$stack1"``, ``"$arg2"``).  The handler
        then reads exactly those bytes (``s.read_memory``, ``s.read_string``, ``regs.arg(7)``)
        as they were at the hit; another read raises :class:`~kpsdk.errors.TargetError`.
        Declare before registering (a registered probe's point is updated at the next stop)."""
        from kpsdk.errors import ArgumentError, SymbolError, TraceDefinitionError
        from kpsdk.probe import Probe as ProbeBase

        if not isinstance(probe, ProbeBase):
            raise ArgumentError(f"declare_memory wants a probe (a Kprobe, Kretprobe...), not {type(probe).__name__}")
        parsed = parse_fetches(self.arch, fetches)

        def symbol(node: Any) -> int:
            if node.kind != "sym":
                raise TargetError("a kernel has no file offsets (@+OFFSET)")
            try:
                return (self.symbols.resolve(node.name) + node.value) & self.arch.word_mask
            except SymbolError as exc:
                raise TraceDefinitionError("BAD_MEM_ADDR", node.name, 0, f"unknown symbol {node.name!r}") from exc

        declared = self._declared.get(probe, []) + [(f, t, symbol) for f, t in parsed]
        old = self._declared.get(probe)
        self._declared[probe] = declared
        try:
            self._plan([probe])
        except BaseException:
            if old is None:
                del self._declared[probe]
            else:
                self._declared[probe] = old
            raise
        self._refresh(probe)

    def declare_fetches(self, probe: Probe, args: Sequence[BoundFetch]) -> None:
        """A trace event's fetch arguments, read by the plugin at the hit; fetches the plugin
        cannot read (more than it reads per hit...) put the probe on gdb's path instead."""
        self._declared[probe] = bound_fetches(args)
        try:
            self._plan([probe])
        except TargetError:
            del self._declared[probe]
            self._gdb_only.add(probe)

    def _refresh(self, probe: Probe) -> None:
        point = self.manager.point_of(probe)
        if point is not None and point.mechanism == "plugin" and point.active:
            self._put(point, int(point.state["plugin"]))  # type: ignore[call-overload]
            if not self._dispatching:
                self.table.commit()

    # -- arming ------------------------------------------------------------------------

    def plugin_can_serve(self, point: ProbePoint) -> bool:
        """Kprobes only (letter ``k``), no post_handler, not kpsdk's own points, not a trace
        probe whose fetches the plugin cannot read, not several probes whose reads together
        exceed what the plugin reads at one hit (the point then keeps gdb's path)."""
        return (not point.internal and not point.needs_step and point.addr not in self._return_bps
                and point.addr not in self._stop_hooks and all(p.letter == "k" for p in point.probes)
                and not any(p in self._gdb_only for p in point.probes) and self._plan_fits(point))

    def _plan_fits(self, point: ProbePoint) -> bool:
        """The reads of all the point's handled probes, merged, fit one plugin entry."""
        try:
            self._plan([p for p in point.active if p.pre_handler is not None])
        except TargetError:
            return False
        return True

    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        on_plugin = point.mechanism == "plugin"
        if on_plugin and not self.plugin_can_serve(point):
            self._plugin_off(point)  # a post_handler came: gdb's path from now on
        elif not on_plugin and point.mechanism is None and self.plugin_can_serve(point):
            if point.active:
                self._plugin_on(point)
            return
        if point.mechanism == "plugin":
            ident = int(point.state["plugin"])  # type: ignore[call-overload]
            if not point.active:
                self._plugin_off(point)
                return
            self._put(point, ident)
            return
        super().sync_point(point, force)

    def _put(self, point: ProbePoint, ident: int) -> None:
        native = self._native_program(point)
        if native is not None:  # the plugin runs the trace event's program: the task's reads stream after it
            flags = self._native_flags_index()
            self._drain()
            self.table.put(ident, point.addr, [flags] if flags is not None else [], self._plan([], ident), True,
                           program=native.code)
            self._native_points[native.ident] = ident
            self._note_streaming()
            return
        handled = [p for p in point.active if p.pre_handler is not None]
        stream = bool(handled)
        regs = [index for _, index, _ in self._registers()] if stream else []
        mem = self._plan(handled, ident if stream else None)
        self._drain()  # records already written were written with the entry's old layout
        self.table.put(ident, point.addr, regs, mem, stream)
        self._note_streaming()

    # -- trace events run by the plugin (.native) ---------------------------------------------

    def native_tracer(self) -> PluginNativeHost:
        """Trace events whose fetch programs the plugin runs at the hit (:mod:`.native`)."""
        if self._native is None:
            from kpsdk.targets.live.tcg.native import PluginNativeHost

            self._native = PluginNativeHost(self)
        return self._native

    def _native_program(self, point: ProbePoint) -> PluginProgram | None:
        """The program of the point's one active probe, where it has one the plugin can run."""
        from kpsdk.targets.live.tcg.native import PluginProgram
        from kpsdk.targets.live.tcg.plugin import PROG_OUTPUT

        if self._native is None or len(point.active) != 1:
            return None
        prog = getattr(point.active[0], "native_fetch", None)
        if not isinstance(prog, PluginProgram) or prog.ring.closed or prog.hist is not None:
            return None
        return prog if int.from_bytes(prog.code[20:24], "little") <= PROG_OUTPUT else None

    def _native_flags_index(self) -> int | None:
        tasks = self.arch.kernel_tasks
        if tasks is None:
            return None
        return self._register_index(self._raw_register(tasks.flags_register).gdb)

    def native_task_ranges(self) -> list[tuple[int, int, int]]:
        """The bytes of the task's reads that the prefix reads (read index, offset, length): of
        the per-cpu words current and the preempt count, of the task_struct pid and comm; the
        other reads whole (restamp.c tells task states apart by these)."""
        from kpsdk.targets.live.tcg.fetch import Planner

        layout, percpu = self._task_layout, self._task_percpu
        if self._native_ranges is not None or layout is None or percpu is None:
            return self._native_ranges or []
        planner = Planner(self.arch, self.arch.abi(self.abi_kind), self._register_index)
        planner.add_task(layout, percpu)
        word = self.arch.word_size
        ranges: list[tuple[int, int, int]] = []
        for i, read in enumerate(planner.reads):
            wanted = []
            if read.reg == percpu and layout.preempt_count is not None and \
                    read.offset == min(layout.current, layout.preempt_count) and read.size > word:
                wanted = [(layout.current - read.offset, word), (layout.preempt_count - read.offset, 4)]
            elif read.reg < 0 and read.offset == min(layout.pid, layout.comm) and \
                    read.size == max(layout.pid + 4, layout.comm + layout.comm_size) - read.offset:
                wanted = [(layout.pid - read.offset, 4), (layout.comm - read.offset, layout.comm_size)]
            ranges += [(i, off, n) for off, n in wanted]
        self._native_ranges = ranges
        return ranges

    def native_task_stamp(self, prog_ident: int, tail: bytes, ns: int, ip: int, sp: int,
                          task_stamp: Callable[[], int]) -> int:
        """``task_stamp()`` for a native record's task (its tail: the vCPU, the flags register,
        the task's reads), asked as at a hit of the Python path (:meth:`task_info` on the record)."""
        from kpsdk.targets.live.tcg.native import parse_tail

        flags = self._native_flags_index()
        vcpu, regs, mems = parse_tail(tail, 1 if flags is not None else 0)
        record = Record(self._native_points.get(prog_ident, 0), vcpu, ip, regs, mems, ns)
        cache = self._snap_io.cache
        cache.clear()
        if flags is not None and self.arch.kernel_tasks is not None:
            cache[self._raw_register(self.arch.kernel_tasks.flags_register).gdb] = regs[0]
        cache[self.arch.register(self.arch.sp).gdb] = sp
        cache[self._pc.gdb] = ip
        self._hit_memory.reads = mems
        self._record = record
        try:
            return task_stamp()
        finally:
            self._record = None

    def _note_streaming(self) -> None:
        streaming = [e for e in self.table.entries.values() if e.stream]
        self._streaming = bool(streaming)
        self._native_only = all(e.ident in self.table.programs_of for e in streaming)

    def _plugin_on(self, point: ProbePoint) -> None:
        self._registers()  # a register QEMU does not list fails here, before the point is changed
        self._drain()
        ident = self._next_ident
        self._next_ident += 1
        self._put(point, ident)  # first: a failure here leaves the point as it was
        point.state["plugin"] = ident
        point.mechanism = "plugin"
        self._by_ident[ident] = point
        self._counted[ident] = (0, 0)
        if not self._dispatching:
            self.table.commit()

    def _plugin_off(self, point: ProbePoint) -> None:
        self._drain()
        ident = int(point.state.pop("plugin"))  # type: ignore[call-overload]
        self._credit(ident)
        self.table.remove(ident)
        if not self._dispatching:
            self.table.commit()
        del self._by_ident[ident]
        self._counted.pop(ident, None)
        point.mechanism = None
        self._note_streaming()

    def list_flag(self, point: ProbePoint) -> str:
        """``[PLUGIN]`` or ``[GDB]``: which mechanism serves the point."""
        return "[PLUGIN]" if point.mechanism == "plugin" else "[GDB]" if point.mechanism else ""

    # -- running -----------------------------------------------------------------------

    def _run(self, timeout: float | None) -> int | None:
        self.table.commit()
        return super()._run(timeout)

    def _between_hits(self) -> object:
        self._dispatch()
        result = super()._between_hits()
        if result is not _RUNNING:
            self._dispatch(stopped=True)  # what the plugin wrote up to the stop (the ring has it all)
            if self._pending_error is not None:
                error, self._pending_error = self._pending_error, None
                raise error
        return result

    def _await_stop(self, timeout: float) -> dict[str, Any] | None:
        """gdb's stop, taking the plugin's records meanwhile (their handlers run later, in
        order): a hit waiting for room in the ring would hold the vCPU, and the stop, back."""
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            stopped = super()._await_stop(min(AWAIT_SLICE, max(deadline - time.monotonic(), 0.0)))
            if stopped is not None or time.monotonic() >= deadline:
                return stopped

    def _program_exited(self, status: int) -> int:
        """QEMU ended: the ring holds every hit up to its end; their handlers run first (an
        error of theirs is what run() raises)."""
        self._dispatch(stopped=True)
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            super()._program_exited(status)
            raise error
        return super()._program_exited(status)

    def _hit(self, line: str) -> None:
        """A gdb-path hit: the plugin's records before it are handled first (they happened first)."""
        self._dispatch(stopped=True)
        super()._hit(line)

    def _drain(self) -> None:
        """Take the ring's records now (before the table changes: their layout is the current one)."""
        self._backlog.extend(self.table.records())

    def _credit(self, ident: int) -> None:
        """Hits the plugin counted without records (points with no pre_handler), and records
        the full ring dropped (``nmissed``), added to the point's probes."""
        point = self._by_ident.get(ident)
        if point is None:
            return
        hits, dropped = self.table.hits(ident), self.table.dropped(ident)
        old_hits, old_dropped = self._counted[ident]
        self._counted[ident] = (hits, dropped)
        stream = any(p.pre_handler is not None for p in point.active) and self._native_program(point) is None
        for p in point.active:
            if not stream:
                p.hits += hits - old_hits
            p.nmissed += dropped - old_dropped

    def _dispatch(self, stopped: bool = False) -> None:
        """Run the pre_handlers of the records taken so far, oldest first (``stopped``: the
        guest is stopped meanwhile, so their table edits can be published at once)."""
        self._drain()
        backlog = self._backlog
        io = self._snap_io
        regs = self._snap
        names = [name for name, _, _ in self._plugin_regs]
        pc_name = self._pc.gdb
        self._dispatching = not stopped
        try:
            self._run_records(backlog, io, regs, names, pc_name)
        finally:
            self._dispatching = False
        now = time.monotonic()
        if stopped or now - self._credited_at >= CREDIT_SECONDS:
            self._credited_at = now
            for ident in self._by_ident:
                self._credit(ident)

    def _run_records(self, backlog: deque[Record], io: SnapshotRegs, regs: PtRegs,
                     names: list[str], pc_name: str) -> None:
        table = self.table
        natives: list[Record] = []
        try:
            self._records_loop(backlog, io, regs, names, pc_name, table, natives)
        finally:
            if natives and self._native is not None:
                self._native.deliver(natives)

    def _records_loop(self, backlog: deque[Record], io: SnapshotRegs, regs: PtRegs, names: list[str], pc_name: str,
                      table: ProbeTable, natives: list[Record]) -> None:
        count = 0
        while backlog:
            count += 1
            if not count & PROGRESS_EVERY:
                table.progress()  # a hit waiting for room waits on while handlers run
            if self._pending_error is not None:
                backlog.clear()  # the run ends with that error: later hits are not handled
                break
            record = backlog.popleft()
            if record.native is not None:  # a trace event's record the plugin made: with its run, in a batch
                natives.append(record)
                continue
            if natives and self._native is not None:  # the native ones before it came first
                self._native.deliver(natives)
                natives.clear()
            point = self._by_ident.get(record.ident)
            if point is None or point.run_pre is None:
                continue
            cache = io.cache
            cache.clear()
            cache.update(zip(names, record.regs, strict=False))
            cache[pc_name] = record.pc
            self._hit_memory.reads = record.mem
            self._record = record
            try:
                new = point.run_pre(regs)
                if new is not None:
                    raise TargetError(f"a probe on the plugin mechanism at {self.symbols.format(point.addr)} "
                                      "cannot change the execution path: its handlers run after the hit")
            except BaseException as exc:  # noqa: BLE001 - raised from run() once the target stops
                self._pending_error = exc
                self._stop_requested = True
            finally:
                self._record = None

    # -- memory at a plugin hit: the guest has moved on ---------------------------------------

    def regs(self) -> PtRegs:
        """At a plugin hit: the hit's snapshot (``s.regs()`` in a handler), else the live CPU's."""
        return self._snap if self._record is not None else super().regs()

    def read_memory(self, addr: int, size: int) -> bytes:
        """At a plugin hit: from the memory the probe declared, as the plugin read it at the hit."""
        if self._record is not None:
            return self._hit_memory.read(addr, size)
        return super().read_memory(addr, size)

    def read_cstring(self, addr: int, max: int) -> bytes:  # noqa: A002 - as Target.read_cstring
        if self._record is not None:
            return self._hit_memory.cstring(addr, max)
        return super().read_cstring(addr, max)

    def write_memory(self, addr: int, data: bytes) -> None:
        if self._record is not None:
            raise TargetError(f"a probe on the plugin mechanism cannot write guest memory ({len(data)} bytes at "
                              f"{addr:#x}): its handlers run after the hit")
        super().write_memory(addr, data)

    # -- the trace prefix at a plugin hit: from the snapshot ---------------------------------

    def current_task(self) -> int:
        """At a plugin hit: the task's kernel stack from the snapshot's stack pointer."""
        if self._record is None:
            return super().current_task()
        return self._snap.sp & ~(self.arch.kernel_stack_size - 1)

    def task_info(self) -> TaskInfo | None:
        """At a plugin hit: the vCPU, irqs-off from the snapshot's flags, and, where a trace
        asked for the task (:meth:`prepare_tasks`), comm, pid and the other flags from the
        task's memory the plugin read at the hit; else ``<...>-0``."""
        record = self._record
        if record is None:
            return super().task_info()
        from kpsdk.kernel.tasks import UNKNOWN_COMM, TaskInfo, lat_flags

        tasks = self.arch.kernel_tasks
        if tasks is None:
            return TaskInfo(UNKNOWN_COMM, 0, record.vcpu)
        flags = self._snap_io.cache.get(self._raw_register(tasks.flags_register).gdb)
        irqs_off = tasks.irqs_disabled(flags) if flags is not None else False
        k = self._task_read.get(record.ident)
        layout = self._task_layout
        if k is not None and layout is not None and k < len(record.mem):
            percpu = record.mem[k][0] - layout.current
            try:
                comm, pid, lat = layout.read(self._hit_memory.read, percpu, self.arch.word_size, self.arch.endian,
                                             irqs_off, tasks)
            except TargetFault:
                pass  # current's memory was not readable at the hit
            else:
                return TaskInfo(comm, pid, record.vcpu, lat)
        return TaskInfo(UNKNOWN_COMM, 0, record.vcpu, lat_flags(irqs_off))

    def prepare_tasks(self) -> str:
        """gdb's answer for gdb-path hits; for plugin hits the plugin reads current's task
        at the hit, through the per-cpu base register, when the kernel's layout is known."""
        note = super().prepare_tasks()
        tasks = self.arch.kernel_tasks
        if self._task_layout is None or tasks is None or tasks.current_register is not None:
            return f"{note}; plugin hits: <...>-0 (not yet: the kernel's layout is found from its code only at a " \
                   "gdb hit)" if self._task_layout is None else note
        self._task_percpu = self._register_index(tasks.percpu_register)
        if self._task_percpu is None:
            return f"{note}; plugin hits: <...>-0 (the plugin cannot read {tasks.percpu_register})"
        for ident, point in self._by_ident.items():
            if point.active:
                self._put(point, ident)
        if not self._dispatching:
            self.table.commit()
        return f"{note}; on plugin hits read by the plugin at the hit"

    def reads_comm(self) -> bool:
        """``$comm`` on plugin hits: once a trace asked for the task (read at the hit)."""
        return self._task_percpu is not None

    # -- timestamps: at the hit ---------------------------------------------------------------

    def prepare_clock(self) -> str:
        return CLOCK_NOTE

    def clock_ns(self) -> int | None:
        """At a plugin hit: the host's CLOCK_MONOTONIC when it happened (the plugin read it);
        at a gdb-path hit, the same clock now (the guest is stopped at the hit)."""
        record = self._record
        return record.time_ns if record is not None else time.monotonic_ns()

    def close(self) -> None:
        super().close()
        self.table.close()
