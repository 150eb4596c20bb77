"""The Unicorn target's side of a Linux program's tasks: what its kernel asks of the engine, and
probes that follow every process.

The kernel (:mod:`kpsdk.targets.unicorn.linux.kernel`) switches the engine between tasks
(:meth:`TaskSupport.switch_space`, :meth:`TaskSupport.run_slice`) and tells the target when
a task's call finishes or a task ends.  Probes follow the program into every process (U1:
a probe belongs to a file, not to a process): a process made by ``fork`` is a copy whose
memory already holds every breakpoint and detour jump; one that ``execve`` made starts
clean, and each file it maps (its program, ld.so, the libraries) gets the probes of that
file, at the addresses where the same file's same bytes now are (:meth:`TaskSupport.file_mapped`).
A probe whose bytes are written (the breakpoint path, a detoured entry) is written into
every live address space where it applies and taken out of each on unregistration; a probe
served by a code hook (global to the engine) is told which spaces it must keep quiet in
(``point.state["excluded"]``: an exec'd process's memory that holds other code there).

A mixin of :class:`~kpsdk.targets.unicorn.target.UnicornTarget`, as :mod:`.memory` and
:mod:`.returns` are: the exclusion check runs in the code hook of every hit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kpsdk.kernel.tasks import TaskInfo
from kpsdk.target import Target
from kpsdk.targets.unicorn.layout import STACK_SIZE, STACK_TOP
from kpsdk.targets.unicorn.quantum import QuantumCounter
from kpsdk.targets.unicorn.space import Space, switch
from kpsdk.targets.unicorn.tlb import flush_tlb

if TYPE_CHECKING:
    import mmap

    import unicorn

    from kpsdk.events import SyscallEvent
    from kpsdk.manager import ProbePoint
    from kpsdk.targets.unicorn.detour import DetourEngine
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.memory import AddressSpace
    from kpsdk.targets.unicorn.running import Runner
    from kpsdk.targets.unicorn.syscalls import SyscallGlue


class TaskSupport(Target):
    """What the Linux layer's kernel uses of the Unicorn target (see the module's docstring)."""

    # what this part uses of the target's others
    uc: unicorn.Uc
    space: Space
    runner: Runner
    syscall_glue: SyscallGlue | None
    _stack_mem: mmap.mmap | None
    _bp_points: dict[int, ProbePoint]
    _hook_points: dict[int, ProbePoint]
    detours: DetourEngine | None

    def _forget_memory(self) -> None: ...

    def _write_trap(self, addr: int, data: bytes) -> None: ...

    def _drop_translations(self, begin: int, end: int) -> None: ...

    def sync_point(self, point: ProbePoint, force: bool = False) -> None: ...

    @property
    def kernel(self) -> LinuxKernel | None:
        """The Linux layer's kernel (elf: targets): its processes and tasks, their scheduling;
        the system-call glue hands it every call."""
        return self.syscall_glue.kernel if self.syscall_glue is not None else None

    @kernel.setter
    def kernel(self, kernel: LinuxKernel | None) -> None:
        assert self.syscall_glue is not None, "a Linux program runs on an arch with system calls"
        self.syscall_glue.kernel = kernel

    def current_task(self) -> int:
        """The thread id of the task running now (0 without a Linux layer)."""
        kernel = self.kernel
        return kernel.current.tid if kernel is not None and kernel.current is not None else 0

    def task_info(self) -> TaskInfo | None:
        """The task of a hit, once the program has made a second task (before that, None: the
        trace's fixed comm and pid, the program's name and pid unless the user chose others)."""
        kernel = self.kernel
        if kernel is None or kernel.current is None or not kernel.many:
            return None
        task = kernel.current
        return TaskInfo(task.comm or task.process.comm, task.tid)

    # -- the kernel's engine ----------------------------------------------------------------------

    def switch_space(self, space: Space) -> None:
        """Make ``space`` (another process's) the engine's memory: its mappings replace the
        current ones, the TLB is emptied, and the stack buffer hot paths read is its own."""
        switch(self.uc, self.space, space)
        self.space = space
        region = space.region_at(STACK_TOP - 1)
        self._stack_mem = region.buf if region is not None and region.offset == 0 and \
            region.start == STACK_TOP - STACK_SIZE else None
        self._forget_memory()
        flush_tlb(self.uc)

    def run_slice(self, timeout: float | None) -> None:
        """Run the current task from its pc until it stops (the kernel's loop, one turn)."""
        self.runner.run_slice(timeout)

    def complete_call(self, call: SyscallEvent, result: int) -> None:
        """A call a task waited in has its result: written, and plugins hear it returned."""
        assert self.syscall_glue is not None
        self.syscall_glue.complete(call, result)

    def task_ended(self, tid: int) -> None:
        """Task ``tid`` ended: the hooked calls it has in flight will never return."""
        if self.rethook is not None:
            self.rethook.unwind(tid)

    def task_cloned(self, parent: int, child: int, copies_stack: bool) -> None:
        """Task ``child`` was made by ``parent`` (and adopted).  Return probes leave guest
        code for the hook path from the second task on: a detour's records and its entry's
        shortcuts are one task's (:mod:`.detour`); and a child running on a copy of the
        parent's stack (``fork``, ``vfork``) returns through the parent's hooked calls in
        flight too, each on a copy of its node, as uprobes' ``dup_utask`` copies them."""
        if self.detours is not None and self.kernel is not None and self.kernel.many:
            self.detours.settle()
            for point in [p for p in self.manager.points.values() if p.mechanism in ("detour", "hooked-entry")]:
                self.sync_point(point, force=True)
        if copies_stack and self.rethook is not None:
            self.rethook.fork(parent, child)

    def many_tasks(self) -> bool:
        """Whether the program ever had a second task (see :meth:`task_cloned`)."""
        kernel = self.kernel
        return kernel is not None and kernel.many

    def quantum_counter(self) -> QuantumCounter:
        """A block counter on the engine, for the scheduler's quanta (:mod:`.quantum`)."""
        return QuantumCounter(self.uc)

    # -- probes in every process ---------------------------------------------------------------

    def _spaces(self) -> list[AddressSpace]:
        """The address spaces of the program's live processes (one each, shared ones once)."""
        kernel = self.kernel
        if kernel is None:
            return []
        seen: dict[int, AddressSpace] = {}
        for process in kernel.processes.values():
            if process.exit_status is None:
                seen.setdefault(id(process.mem), process.mem)
        return list(seen.values())

    def _file_key(self, point: ProbePoint) -> tuple[str, int] | None:
        """Which file and offset ``point``'s address maps in the process it was armed in (None:
        no file: anonymous memory, a blank CPU)."""
        if "file" not in point.state:
            kernel = self.kernel
            current = kernel.current.process.mem if kernel is not None and kernel.current is not None else None
            point.state["file"] = current.file_at(point.addr) if current is not None else None
        return point.state["file"]  # type: ignore[return-value]

    def patch(self, point: ProbePoint, addr: int, data: bytes) -> None:
        """Write ``data`` (a trap, a detour's jump, or the original bytes back) at ``addr`` in the
        current space and in every other live space where ``point`` applies."""
        self._write_trap(addr, data)
        key = self._file_key(point)
        if key is None:
            return
        kernel = self.kernel
        if kernel is not None:  # the cached pages no process maps keep the old bytes: drop them
            kernel.pages.clear()
        elsewhere = False
        for mem in self._spaces():
            if mem.table is not self.space and mem.file_at(addr) == key:
                mem.table.write(addr, data)
                elsewhere = True
        if elsewhere:  # a parked copy of that code keeps its translations otherwise (space.Parking)
            self._drop_translations(addr, addr + len(data))

    def quiet_elsewhere(self, point: ProbePoint) -> None:
        """A hooked point armed now: it keeps quiet in every other live space that does not map
        its file there (a library at another bias in another process holds other code there)."""
        key = self._file_key(point)
        excluded: set[Space] = point.state.setdefault("excluded", set())  # type: ignore[assignment]
        for mem in self._spaces():
            if mem.table is not self.space and (key is None or mem.file_at(point.addr) != key):
                excluded.add(mem.table)

    def file_mapped(self, mem: AddressSpace, start: int, end: int) -> None:
        """A file was mapped at ``[start, end)`` in ``mem`` (the current process's space: an
        exec'd program, ld.so, a library): the probes of that file there are armed in it, the
        others there kept quiet in it."""
        for addr, point in list(self._bp_points.items()):
            if start <= addr < end and self._file_key(point) == mem.file_at(addr):
                self._write_trap(addr, point.iset.unicorn_breakpoint.for_length(point.insn.size))
                self._drop_translations(addr, addr + point.insn.size)
        detours = getattr(self, "detours", None)
        if detours is not None:
            for addr, det in list(detours.by_addr.items()):
                if start <= addr < end and det.jump and self._file_key(det.point) == mem.file_at(addr):
                    self._write_trap(addr, det.jump)
                    self._drop_translations(addr, addr + len(det.jump))
        for addr, point in list(self._hook_points.items()):
            if start <= addr < end:
                excluded: set[Space] = point.state.setdefault("excluded", set())  # type: ignore[assignment]
                if self._file_key(point) == mem.file_at(addr):
                    excluded.discard(mem.table)
                else:
                    excluded.add(mem.table)

    def new_space(self, mem: AddressSpace) -> None:
        """``mem`` is an exec'd process's fresh space: every hooked probe keeps quiet there until
        its file is mapped (:meth:`file_mapped`)."""
        for point in self._hook_points.values():
            excluded: set[Space] = point.state.setdefault("excluded", set())  # type: ignore[assignment]
            excluded.add(mem.table)

    def forked_space(self, parent: AddressSpace, child: AddressSpace) -> None:
        """``child`` is a copy of ``parent`` (fork): quiet where the parent's is."""
        for point in self._hook_points.values():
            excluded: set[Space] = point.state.get("excluded", set())  # type: ignore[assignment]
            if parent.table in excluded:
                excluded.add(child.table)
