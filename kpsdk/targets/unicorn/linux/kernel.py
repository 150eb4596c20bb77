"""The Linux layer's kernel: every task of a session, which one runs, and how they end.

One :class:`LinuxKernel` per ``elf:`` session owns the processes and their tasks
(:mod:`.tasks`), the run queue and the program's clock (:mod:`.sched`), the futex table
(:mod:`.futex`) and the timers.  The Unicorn target's system-call glue hands it every call
(:meth:`LinuxKernel.syscall`) and its runner hands it the run (:meth:`LinuxKernel.run`):

* a call runs in the current task's process (:class:`~.syscalls.LinuxProcess`'s handlers);
  one that must wait raises :class:`~.waits._Block`, and the task is parked with the call
  pending (:mod:`.waits` says why a call may run more than once);
* anything that changes the flow of the program (a wait, an exit, ``execve``, a signal to
  deliver, ``rt_sigreturn``, ``sched_yield``) stops the engine at the system call and is
  done between two runs of the engine, never inside a Unicorn hook: registers and memory are
  then simply the CPU's;
* :meth:`LinuxKernel.run` picks the next task (:mod:`.sched`: deterministic), switches the
  engine to its registers and address space, finishes its pending call or delivers its
  signals (:mod:`.signaling`), and runs it until it stops, blocks or its quantum ends.

The run ends when every task has ended (the first process's exit status is ``run()``'s), or
when the first process has ended and every task left waits for something nothing can give
(orphans blocked forever are stopped with the session).  Every task blocked with no timer
while the first process lives is a deadlock: an error naming what each task waits in.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import unicorn

from kpsdk.errors import TargetError
from kpsdk.targets.unicorn.faults import fault_addresses
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.futex import FutexTable, exit_robust_list
from kpsdk.targets.unicorn.linux.images import PageCache
from kpsdk.targets.unicorn.linux.sched import BLOCK_NS, SYSCALL_NS, Clock, Scheduler
from kpsdk.targets.unicorn.linux.tasks import BLOCKED, DEAD, RUNNABLE, STOPPED, PendingCall, Task
from kpsdk.targets.unicorn.linux.waits import WaitQueue, _Block

if TYPE_CHECKING:
    from kpsdk.arch import Arch, Register
    from kpsdk.events import SyscallEvent
    from kpsdk.targets.unicorn.fast import FastRegs
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore as LinuxProcess
    from kpsdk.targets.unicorn.linux.memory import AddressSpace
    from kpsdk.targets.unicorn.quantum import QuantumCounter
    from kpsdk.targets.unicorn.space import Space

#: the reasons the kernel stops the engine at a system call (see the module docstring)
BLOCK, EXIT, EXEC, SIGRETURN, SIGNAL, YIELD = "block", "exit", "exec", "sigreturn", "signal", "yield"


class KernelHost(Protocol):
    """What the kernel uses of the Unicorn target."""

    uc: unicorn.Uc
    arch: Arch
    fast: FastRegs

    def switch_space(self, space: Space) -> None:
        """Make ``space`` the engine's memory (a process switch)."""

    def run_slice(self, timeout: float | None) -> None:
        """Run the CPU from its pc until something stops it (:meth:`Runner.run_slice`)."""

    def complete_call(self, call: SyscallEvent, result: int) -> None:
        """Write a pending call's result into the live registers and tell plugins it returned."""

    def emit(self, event: str, **kwargs: Any) -> None: ...

    def program_exited(self, status: int) -> None:
        """Every task has ended: the run stops with the first process's ``status``."""

    def task_ended(self, tid: int) -> None:
        """Task ``tid`` ended: its return probes in flight will never return."""

    def task_cloned(self, parent: int, child: int, copies_stack: bool) -> None:
        """Task ``child`` was made by ``parent``; ``copies_stack``: it runs on a copy of the
        parent's stack (its return probes in flight return there too)."""

    def quantum_counter(self) -> QuantumCounter:
        """The engine's block counter, installed at the first call."""

    def file_mapped(self, mem: AddressSpace, start: int, end: int) -> None:
        """A file was mapped at ``[start, end)`` of ``mem`` (the current process's): its probes there."""

    def new_space(self, mem: AddressSpace) -> None:
        """``mem`` is an exec'd process's fresh space."""

    def forked_space(self, parent: AddressSpace, child: AddressSpace) -> None:
        """``child`` is ``parent`` copied by fork."""


class LinuxKernel:
    """Every task of one session (see the module docstring)."""

    def __init__(self, host: KernelHost, seed: int | None = None) -> None:
        self.host = host
        self.uc = host.uc
        self.arch = host.arch
        self.sched = Scheduler(seed)
        self.clock = Clock()
        self.futexes = FutexTable(self.wake)
        self.processes: dict[int, LinuxProcess] = {}
        self.tasks: dict[int, Task] = {}
        #: the task whose registers are the engine's now
        self.current: Task | None = None
        #: the first process: the program kpsdk.open started (run() returns its status)
        self.init: LinuxProcess | None = None
        #: the first process's wait status once it ended
        self.init_status: int | None = None
        self._ids = itertools.count(0)
        self._next_id = 0
        self._timers: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stop: str | None = None
        self._quantum: QuantumCounter | None = None
        self._pc: Register = self.arch.register(self.arch.pc)
        assert self.arch.syscalls is not None and self.arch.syscalls.linux is not None
        self.abi = self.arch.syscalls.linux
        #: woken at every task's end (wait4 waits on its process's, this is for the whole session)
        self.any_exit = WaitQueue("a task ended")
        #: whether the program ever had more than one task (the trace prefix then names each)
        self.many = False
        #: read-only file pages the session's processes share where they map them at one address
        self.pages = PageCache()

    # -- ids ---------------------------------------------------------------------------------

    def first_id(self, pid: int) -> None:
        """Ids are given out from ``pid`` (the first process's, which the program is told)."""
        self._next_id = pid

    def is_pid(self, name: str) -> bool:
        """Whether ``name`` (a /proc entry) is the pid of an emulated process, zombies included."""
        return name.isascii() and name.isdigit() and len(name) < 12 and int(name) in self.processes

    def new_id(self) -> int:
        """A fresh task id (a process's pid is its first task's id, as on Linux)."""
        tid = self._next_id
        self._next_id += 1
        while tid in self.tasks or tid in self.processes:
            tid, self._next_id = self._next_id, self._next_id + 1
        return tid

    # -- tasks joining and leaving -----------------------------------------------------------------

    def adopt(self, task: Task, runnable: bool = True) -> None:
        """``task`` exists from now on (and waits for the CPU)."""
        self.tasks[task.tid] = task
        process = task.process
        self.processes.setdefault(process.pid, process)
        process.root.other_pid = self.is_pid  # one tree: every process's /proc/PID is made (procself)
        process.root.pids = self.processes.keys
        if task not in process.threads:
            process.threads.append(task)
        if runnable:
            task.state = RUNNABLE
            self.sched.add(task)
        if len(self.tasks) > 1:
            self.many = True
            if self._quantum is None:
                self._quantum = self.host.quantum_counter()

    def start(self, task: Task) -> None:
        """The first task: it is the engine's now (its registers are the CPU's), first to run."""
        self.adopt(task)
        self.init = task.process
        self.current = task
        # the fault's address without a memory hook, which would keep every store on the slow path
        self._fault_address = fault_addresses(self.uc, self._on_invalid)

    # -- faults ----------------------------------------------------------------------------------

    def _on_invalid(self, uc: unicorn.Uc, access: int, address: int, size: int, value: int, user: Any) -> bool:
        """Unicorn's hook on an access it refuses: the address, for the signal's si_addr."""
        self._fault_addr = address
        return False  # the access fails: the run stops with the error, and fault() makes it a signal

    _fault_addr: int | None = None

    def expand_stack(self, error: unicorn.UcError) -> bool:
        """The current task's access faulted below its stack's mapped part, in the stack's
        room: the stack grew there (True: run the instruction again), as Linux's page fault
        handler grows it before any signal (:meth:`AddressSpace.grow_stack
        <kpsdk.targets.unicorn.linux.memory.AddressSpace.grow_stack>`)."""
        task = self.current
        if task is None or error.errno not in (unicorn.UC_ERR_READ_UNMAPPED, unicorn.UC_ERR_WRITE_UNMAPPED):
            return False
        addr = self._fault_addr if self._fault_addr is not None else self._fault_address()
        if addr is None or not task.process.mem.grow_stack(addr):
            return False
        self._fault_addr = None
        return True

    def fault(self, error: unicorn.UcError) -> bool:
        """The current task's instruction faulted (``error``, not a probe's or a watchpoint's):
        the signal Linux sends for it is queued (True), or None fits (False: the run ends
        with the error)."""
        from kpsdk.targets.unicorn.linux import signaling
        from kpsdk.targets.unicorn.linux.sigframes.siginfo import BUS_ADRALN, ILL_ILLOPC, SEGV_ACCERR, SEGV_MAPERR

        task = self.current
        if task is None:
            return False
        code = error.errno
        addr, self._fault_addr = self._fault_addr, None
        addr = self._fault_address() if addr is None else addr
        pc = self.host.fast.read(self._pc)
        if code in (unicorn.UC_ERR_READ_UNMAPPED, unicorn.UC_ERR_WRITE_UNMAPPED, unicorn.UC_ERR_FETCH_UNMAPPED):
            signaling.fault(self, task, "SIGSEGV", SEGV_MAPERR, addr if addr is not None else pc)
        elif code in (unicorn.UC_ERR_READ_PROT, unicorn.UC_ERR_WRITE_PROT, unicorn.UC_ERR_FETCH_PROT):
            where = addr if addr is not None else pc
            # no mapping of the process there: another's parked code (space.Parking)
            mapped = task.process.mem.table.region_at(where) is not None
            signaling.fault(self, task, "SIGSEGV", SEGV_ACCERR if mapped else SEGV_MAPERR, where)
        elif code in (unicorn.UC_ERR_READ_UNALIGNED, unicorn.UC_ERR_WRITE_UNALIGNED, unicorn.UC_ERR_FETCH_UNALIGNED):
            signaling.fault(self, task, "SIGBUS", BUS_ADRALN, addr if addr is not None else pc)
        elif code == unicorn.UC_ERR_INSN_INVALID:
            signaling.fault(self, task, "SIGILL", ILL_ILLOPC, pc)
        else:
            return False
        self._stop = SIGNAL
        return True

    def cpu_exception(self, name: str, code: int) -> None:
        """A CPU exception the arch maps to a signal (x86's divide error: SIGFPE), from inside
        the interrupt hook: queued for the current task, the engine stopped."""
        from kpsdk.targets.unicorn.linux import signaling

        if self.current is not None:
            signaling.fault(self, self.current, name, code, self.host.fast.read(self._pc))
            self.stop(SIGNAL)

    # -- system calls ----------------------------------------------------------------------------

    def syscall(self, nr: int, event: SyscallEvent) -> int | None:
        """Run call ``nr`` for the current task; its result, or None when there is none to write
        (the task waits, ended, or the call replaced its registers)."""
        task = self.current
        assert task is not None
        self.clock.advance(SYSCALL_NS)
        process = task.process
        if self.abi.legacy_call is not None:
            self._refuse_legacy()
        name, handler = process.handlers.lookup(nr, event.name)
        if handler is None:
            process.unimplemented[name] += 1
            return -38  # ENOSYS
        try:
            result = handler(*event.args)
        except _Block as block:
            self.park(task, PendingCall(nr, event.args, handler, event), block)
            return None
        except _GuestErrno as e:
            result = -e.errno
        task.progress = None  # a call's own record ends with it
        return result

    def _refuse_legacy(self) -> None:
        """A call made the arch's old way (ARM's OABI ``swi 0x9000NN``) is refused by name at the
        first one: taken for an EABI call it would run another call with the wrong arguments."""
        from kpsdk.errors import NotEmulatedError

        legacy = self.abi.legacy_call
        assert legacy is not None
        thumb = self.host.running_iset().thumb_bit  # type: ignore[attr-defined]
        number = legacy(lambda at, n: bytes(self.uc.mem_read(at, n)), self.host.fast.read(self._pc), thumb)
        if number is not None:
            raise NotEmulatedError(f"the program makes an OABI system call (swi {0x900000 + number:#x}, "
                                   f"call {number}): the Unicorn target emulates EABI calls only (an old-ABI "
                                   "binary runs under qemu-user: --target qemu-user)")

    def after_syscall(self) -> None:
        """A call returned to the current task: stop the engine if a signal is now deliverable."""
        task = self.current
        if task is not None and task.state == RUNNABLE and task.deliverable():
            self.stop(SIGNAL)

    def stop(self, reason: str) -> None:
        """Stop the engine at the current instruction boundary for ``reason`` (done by :meth:`run`)."""
        if self._stop is None or reason in (EXIT, EXEC):
            self._stop = reason
        self.uc.emu_stop()

    # -- waiting and waking -----------------------------------------------------------------------

    def park(self, task: Task, call: PendingCall, block: _Block) -> None:
        """``task`` waits in ``call`` for ``block``'s queues or deadline."""
        task.call, task.block = call, block
        task.state = BLOCKED
        task.woken = task.timed_out = False
        for queue in block.queues:
            queue.add(task)
        if block.deadline is not None:
            self.at(block.deadline, lambda: self._time_out(task, block))
        if task is self.current:
            self.stop(BLOCK)

    def _time_out(self, task: Task, block: _Block) -> None:
        if task.block is block and task.state == BLOCKED:
            task.timed_out = True
            self.wake(task)

    def wake(self, task: Task) -> None:
        """``task`` may go on: a waiting task runs its call again; a stopped one stays stopped."""
        if task.state != BLOCKED:
            return
        if task.block is not None:
            for queue in task.block.queues:
                queue.remove(task)
        task.state = RUNNABLE
        task.woken = True
        self.sched.add(task)

    def at(self, deadline: int, action: Callable[[], None]) -> None:
        """Run ``action`` when the clock reaches ``deadline`` (ns since the start); never, for a
        deadline past the clock's limit (Linux's timer at KTIME_MAX, which does not fire)."""
        if deadline <= self.clock.limit:
            heapq.heappush(self._timers, (deadline, next(self._seq), action))

    def _fire_timers(self) -> None:
        while self._timers and self._timers[0][0] <= self.clock.elapsed:
            _, _, action = heapq.heappop(self._timers)
            action()

    # -- ends ------------------------------------------------------------------------------------

    def exit_task(self, task: Task, code: int) -> None:
        """``task`` ends (``exit``, or its process ending): its robust futexes are marked and its
        ``clear_child_tid`` word zeroed and woken, in its own address space; the process ends
        with its last task."""
        if task.state == DEAD:
            return
        process = task.process
        self._leave_waits(task)
        if task is self.current or task.process.mem.table.active:
            word = self.arch.word_size
            exit_robust_list(task.robust_list, task.tid, word, self._read_word, self._read_u32, self._write_u32,
                             lambda addr: self._futex_wake(addr, 1))
            if task.clear_child_tid:
                self._write_u32(task.clear_child_tid, 0)
                self._futex_wake(task.clear_child_tid, 1)
        task.state = DEAD
        task.exit_code = code
        task.context = None
        self.sched.remove(task)
        self.host.task_ended(task.tid)
        if task in process.threads:
            process.threads.remove(task)
        del self.tasks[task.tid]
        self.any_exit.wake()
        if task is self.current:
            self.stop(EXIT)
        if not process.threads:
            from kpsdk.targets.unicorn.linux.lifecycle import process_ended

            process_ended(self, process, (code & 0xFF) << 8 if process.exit_signal_status is None
                          else process.exit_signal_status)

    def exit_group(self, process: LinuxProcess, status: int) -> None:
        """Every task of ``process`` ends; its wait status is ``status`` (``exit_group``, a fatal
        signal)."""
        process.exit_signal_status = status
        current = self.current
        for task in list(process.threads):
            if task is not current:
                self.exit_task(task, status >> 8)
        if current is not None and current.process is process:
            self.exit_task(current, status >> 8)

    def _leave_waits(self, task: Task) -> None:
        if task.block is not None:
            for queue in task.block.queues:
                queue.remove(task)
        self.futexes.cancel(task)
        task.call = task.block = None

    # -- the current task's memory ------------------------------------------------------------------

    def _read_word(self, addr: int) -> int | None:
        data = self._read(addr, self.arch.word_size)
        return None if data is None else int.from_bytes(data, self.arch.endian)

    def _read_u32(self, addr: int) -> int | None:
        data = self._read(addr, 4)
        return None if data is None else int.from_bytes(data, self.arch.endian)

    def _read(self, addr: int, size: int) -> bytes | None:
        try:
            return bytes(self.uc.mem_read(addr, size))
        except unicorn.UcError:
            return None

    def _write_u32(self, addr: int, value: int) -> bool:
        try:
            self.uc.mem_write(addr, value.to_bytes(4, self.arch.endian))
        except unicorn.UcError:
            return False
        return True

    def _futex_wake(self, addr: int, count: int) -> None:
        assert self.current is not None
        key = self.current.process.mem.table.key_of(addr)
        if key is not None:
            self.futexes.wake(key, count)

    # -- running -----------------------------------------------------------------------------

    def switch_to(self, task: Task) -> None:
        """Make ``task``'s registers and address space the engine's."""
        current = self.current
        if current is task and task.context is None:
            return
        if current is not None and current.state != DEAD and current.context is None:
            current.context = self.uc.context_save()
        if current is None or current.process.mem.table is not task.process.mem.table:
            self.host.switch_space(task.process.mem.table)
        if task.context is not None:
            self.uc.context_restore(task.context)
            task.context = None
        self.current = task
        process = task.process
        root = process.root  # one file system for every process: /proc/self is the running one's
        if root.own_pid != str(process.pid):
            root.own_pid = str(process.pid)
            root.fd_target = process.fd_target
        while task.on_start:
            task.on_start.pop(0)()

    def run(self, timeout: float | None) -> bool:
        """Run the tasks until every one has ended (True), or ``timeout`` seconds passed or the
        user stopped the run (False: ``run()`` goes on from here)."""
        from kpsdk.targets.unicorn.linux import signaling

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            task = self._next()
            if task is None:
                return True
            self.switch_to(task)
            if task.call is not None and not self._finish_call(task):
                continue
            signaling.deliver(self, task)
            if task.state != RUNNABLE or task is not self.current:
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.sched.queue.appendleft(task)
                return False
            quantum = self._quantum
            if quantum is not None:
                quantum.arm(self.sched.quantum() if self.sched.queue else 0)
            self._stop = None
            try:
                self.host.run_slice(left)
            except BaseException:
                if task.state == RUNNABLE and task not in self.sched.queue:
                    self.sched.queue.appendleft(task)  # a handler's error ends the run: the task goes on next time
                raise
            if quantum is not None:
                self.clock.advance(quantum.take() * BLOCK_NS)
            reason, self._stop = self._stop, None
            if reason is None:
                if quantum is not None and quantum.expired:
                    self.sched.add(task)
                    continue
                self.sched.queue.appendleft(task)  # the user's stop() or the time limit: go on later
                return False
            if reason == SIGRETURN:
                signaling.sigreturn(self, task)
            elif reason == EXEC:
                from kpsdk.targets.unicorn.linux.execs import finish_exec

                finish_exec(self, task)
            if task.state == RUNNABLE:
                if reason == YIELD:
                    self.sched.add(task)
                else:
                    self.sched.queue.appendleft(task)

    def _next(self) -> Task | None:
        """The next task to run (None: the run is over), advancing the clock over idle time."""
        while True:
            self._fire_timers()
            task = self.sched.pick()
            if task is not None:
                if task.state == RUNNABLE:
                    return task
                continue
            if not self.tasks:
                return None
            if self._timers:  # every task waits: the clock jumps to the next timer
                self.clock.advance_to(self._timers[0][0])
                continue
            if self.init_status is not None:
                self._abandon()  # the program ended; what is left waits forever
                return None
            raise TargetError("every task of the program waits and nothing can wake it (a deadlock): "
                              + "; ".join(self._describe(t) for t in self.tasks.values()))

    def _describe(self, task: Task) -> str:
        what = task.call.event.name if task.call is not None else task.state
        return f"{task.comm or task.process.comm}[{task.tid}] in {what}"

    def _abandon(self) -> None:
        """End the tasks left when the first process has ended and none can go on."""
        for task in list(self.tasks.values()):
            self._leave_waits(task)
            task.state = DEAD
            self.host.task_ended(task.tid)
        self.tasks.clear()

    def _finish_call(self, task: Task) -> bool:
        """Run the call ``task`` waits in again (it was woken, timed out or signalled): True when
        it finished (its result is written), False when it waits again."""
        from kpsdk.targets.unicorn.linux import signaling

        call = task.call
        assert call is not None
        block = task.block
        try:
            result = call.handler(*call.args)
        except _Block as again:
            if block is not None and block.interruptible and task.deliverable():
                return signaling.interrupt(self, task, block)
            self.park(task, call, again)
            return False
        except _GuestErrno as e:
            result = -e.errno
        task.call = task.block = None
        task.timed_out = task.woken = False
        task.progress = None
        if result is not None:
            self.host.complete_call(call.event, result)
        return True

    def close(self) -> None:
        """The session ends: every process's host files are closed (tasks left are abandoned)."""
        seen: set[int] = set()
        for process in [*self.processes.values(), *(t.process for t in self.tasks.values())]:
            if id(process.fds) not in seen:
                seen.add(id(process.fds))
                process.fds.close_all()
        if self.init is not None:  # the session's file system (every process's): its binds, its private files
            self.init.root.close()
        self.tasks.clear()

    def stopped(self, task: Task) -> None:
        """``task`` stops (SIGSTOP and friends) until SIGCONT."""
        task.state = STOPPED
        self.sched.remove(task)
        if task is self.current:
            self.stop(BLOCK)
