"""A live target's answers for the trace prefix: the hit's task, its CPU, its timestamp.

User programs: the thread's name as the stub reports it (gdbserver: the thread's comm),
else the program's file name, and the thread id gdb's stub reports.  Kernels:
``current``'s comm and pid, found through the kernel's BTF or, without BTF, from the
kernel's own code read at the first hit (:mod:`kpsdk.kernel.tasks`,
:mod:`kpsdk.kernel.taskcode`); the vCPU is gdb's thread; the timestamp is the guest
kernel's sched_clock, read from the board's counter (:mod:`kpsdk.kernel.guestclock`).
These are read at each traced hit, through the hit's registers and memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kpsdk.arch import Register
from kpsdk.errors import SymbolError, TargetError
from kpsdk.targets.live.state import LiveState

if TYPE_CHECKING:
    from kpsdk.kernel.tasks import TaskInfo, TaskLayout


class TracePrefix(LiveState):
    """Tasks and the guest's clock at a hit (a part of GdbTarget: see :mod:`.state`)."""

    def current_task(self) -> int:
        """User programs: gdb's thread.  Kernels: the task's kernel stack (THREAD_SIZE-aligned),
        because a vCPU runs many tasks and a task may move between vCPUs."""
        if self.abi_kind == "kernel":
            return self._regs.sp & ~(self.arch.kernel_stack_size - 1)
        return self._thread

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
            tid, name = self._thread_id()
            comm = name or (program_comm(self.image.path) if self.image is not None else UNKNOWN_COMM)
            return TaskInfo(comm, tid)
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

    def _thread_id(self) -> tuple[int, str]:
        """The stub's id of the hit's thread (the guest's or the process's thread id) and the
        name the stub gives it (gdbserver: the thread's comm, ``""`` where the stub names none),
        asked once per thread."""
        known = self._tids.get(self._thread)
        if known is None:
            if not self.in_hit:
                return self._thread, ""
            tid, _, name = self.link.request("t").partition(" ")
            known = self._tids[self._thread] = (int(tid, 16), name[:15])
        return known
