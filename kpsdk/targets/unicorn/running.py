"""Running the Unicorn target: ``run()`` to the program's end, ``call()`` of one function, and
the emulation loop both go through.

Its own module because it is the other side of the mechanisms (:mod:`.target`): they arm
hooks that run inside ``emu_start``; this calls ``emu_start``, and after it raises what a hook
stored, resumes after a watched access or a fault a probe's fault_handler handled, and builds
and takes down call frames.  An object the target owns, typed against :class:`RunHost`: it is
one call deeper per run or call, never per hit (nothing here runs inside a hook).
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Protocol

import unicorn

from kpsdk.errors import TargetError, TargetFault
from kpsdk.targets.unicorn.timer import emu_start

if TYPE_CHECKING:
    from kpsdk.arch import Arch, InstructionSet
    from kpsdk.binfmt.symbols import SymbolTable
    from kpsdk.manager import ProbeManager, ProbePoint
    from kpsdk.regs import PtRegs
    from kpsdk.rethook import ShadowStacks
    from kpsdk.targets.unicorn.detour import DetourEngine
    from kpsdk.targets.unicorn.fast import FastRegs
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.step import SoftStep
    from kpsdk.targets.unicorn.watch import UcWatch

#: the largest timeout uc_emu_start takes (a uint64 of microseconds; ctypes would wrap a larger one)
USEC_MAX = 2**64 - 1


def timeout_usec(timeout: float | None) -> int:
    """``uc_emu_start``'s timeout for ``timeout`` seconds (Session.run checked it): 0 is
    Unicorn's "no limit", so a positive timeout is at least 1 us, and at most USEC_MAX."""
    if timeout is None:
        return 0
    return min(max(1, math.ceil(min(timeout, USEC_MAX / 1e6) * 1e6)), USEC_MAX)


class RunHost(Protocol):
    """What running uses of the Unicorn target."""

    uc: unicorn.Uc
    arch: Arch
    abi_kind: str
    fast: FastRegs
    symbols: SymbolTable
    manager: ProbeManager
    hit_regs: PtRegs
    stepper: SoftStep
    rethook: ShadowStacks | None
    detours: DetourEngine | None
    watch: UcWatch | None
    #: where run() starts the program (None: nothing to run, call() only)
    entry: int | None
    #: where call() builds its frame when no run is under way
    call_sp: int
    #: the Linux layer's kernel (None: no Linux program: the run is one emulation)
    kernel: LinuxKernel | None

    @property
    def sentinel(self) -> int:
        """Where called functions return to (kpsdk's area)."""

    @property
    def exit_status(self) -> int | None: ...

    def program_exited(self, status: int) -> None:
        """The program ended with ``status``: kept for run() (and the run stops)."""

    def before_run(self) -> None:
        """What kpsdk knows of memory and code may change from now on; stale translations go."""

    def take_failure(self) -> BaseException | None:
        """The error a hook stored (:meth:`~kpsdk.targets.unicorn.host.UnicornHost.fail`), now forgotten."""

    def begin_at(self, addr: int, point: ProbePoint | None = None) -> int: ...

    def running_iset(self) -> InstructionSet:
        """The instruction set the CPU is in now (the arch's ``mode_bit``)."""

    def read_memory(self, addr: int, size: int) -> bytes: ...

    def is_mapped(self, addr: int) -> bool: ...

    def is_executable(self, addr: int) -> bool: ...

    def current_task(self) -> int: ...

    def hook_point(self, addr: int) -> ProbePoint | None: ...

    def slot_point(self, addr: int) -> ProbePoint | None: ...


class Runner:
    """Runs one Unicorn target's code (see the module's docstring)."""

    def __init__(self, host: RunHost) -> None:
        self.host = host
        arch = host.arch
        self._pc = arch.register(arch.pc)
        self._sp = arch.register(arch.sp)
        self._rv = arch.register(arch.return_value)
        #: ``emu_start`` calls under way (a handler's call() nests one): see
        #: :attr:`UnicornTarget.running <kpsdk.targets.unicorn.target.UnicornTarget.running>`
        self.depth = 0
        self._started = False

    def run(self, timeout: float | None = None) -> int | None:
        """Run the program from its entry point, or on from where it stopped.  A Linux program's
        tasks are run by its kernel (:meth:`LinuxKernel.run
        <kpsdk.targets.unicorn.linux.kernel.LinuxKernel.run>`), slice by slice."""
        host = self.host
        if host.exit_status is not None:
            return host.exit_status
        if not self._started:
            if host.entry is None:
                raise TargetError("nothing to run: this target has no entry point (use call() or load an ELF)")
            host.begin_at(host.entry)
            self._started = True
        kernel = host.kernel
        if kernel is not None:
            if kernel.run(timeout):
                status = kernel.init_status or 0
                host.program_exited(status >> 8 & 0xFF if not status & 0x7F else 128 + (status & 0x7F))
            return host.exit_status
        self._emu(host.begin_at(host.fast.read(self._pc)), host.sentinel, timeout)
        return host.exit_status

    def run_slice(self, timeout: float | None) -> None:
        """Run the CPU from its pc until a hook or the kernel stops it (one turn of the kernel's
        loop; a fault the kernel turns into a signal ends the slice)."""
        self._emu(self._resume_pc(), self.host.sentinel, timeout)

    def _resume_pc(self) -> int:
        """Where the current task goes on: its pc, in the instruction set its CPU state says
        (ARM's CPSR.T, kept in each task's saved registers).  Never the symbol the address
        falls in (:meth:`begin_at`): the symbols are the first program's, and another process
        (a child after ``execve``) has other code at the same address."""
        host = self.host
        pc = host.fast.read(self._pc)
        return pc | 1 if host.arch.has_thumb and host.running_iset().thumb_bit else pc

    def _emu(self, begin: int, until: int, timeout: float | None) -> None:
        host = self.host
        host.before_run()  # the program may map, unmap or protect memory, or write code, while it runs
        detours = host.detours
        if detours is None:
            self._emu_loop(begin, until, timeout)
            return
        if not self.depth:
            detours.recycle_blocks()
        gate = detours.set_gate(host.manager.busy)  # code a handler runs: its entries are reentrant (K6)
        try:
            self._emu_loop(begin, until, timeout)
        finally:
            detours.restore_gate(gate)
            detours.settle()

    def _emu_loop(self, begin: int, until: int, timeout: float | None) -> None:
        host = self.host
        usec = timeout_usec(timeout)
        while True:
            self.depth += 1
            error: unicorn.UcError | None = None
            try:
                emu_start(host.uc, begin, until, usec)  # kpsdk's timer: Unicorn's polls every 2 us
            except unicorn.UcError as e:
                error = e
            finally:
                self.depth -= 1
                host.fast.hit[2] = None  # the registers moved on: no argument snapshot outlives a run
            pending = host.take_failure()
            if pending is not None:
                host.stepper.clear()
                if host.watch is not None:
                    host.watch.clear()
                raise pending
            if error is None:
                if host.watch is None or not host.watch.take_restart():
                    return
                begin = host.begin_at(host.fast.read(self._pc))  # the watchpoints asked for a fresh run
                continue
            resume = host.watch.resume_after_fault() if host.watch is not None else None  # a watched access
            if resume is None and host.kernel is not None and host.kernel.expand_stack(error):
                resume = self._resume_pc()  # the access again, the stack grown under it
            if resume is None:
                resume = self._instruction_fault(error)
            if resume is None and host.kernel is not None and self.depth == 0 and host.kernel.fault(error):
                return  # a signal for the task that faulted: its kernel delivers it between slices
            if resume is None:
                pc = host.fast.read(self._pc)
                raise TargetFault(f"{error}", pc, host.symbols.format(pc)) from error
            begin = resume

    def _instruction_fault(self, error: unicorn.UcError) -> int | None:
        """K4 for the probed instruction itself: its probes' fault_handlers may handle it."""
        host = self.host
        pc = host.fast.read(self._pc)
        point = host.hook_point(pc) or host.slot_point(pc)
        if point is None or not host.manager.instruction_fault(point, host.hit_regs, error.errno):
            return None
        new = host.hit_regs.new_ip
        return host.begin_at(int(new) if new is not None else point.addr + point.insn.size, point)

    def _through_descriptor(self, addr: int) -> int:
        """Where a call to ``addr`` starts, with the registers a call through its function
        descriptor loads (ppc64 ELFv1: r2, the TOC of the object the function is in) written,
        or the one that holds the function's address (ELFv2's r12).

        ``addr`` is a function's code (its symbol names its descriptor), or a function
        pointer, which on ELFv1 is the descriptor itself (what an IFUNC resolver returns);
        the descriptor is read from memory, where the loader has relocated it.
        Other architectures: ``addr`` unchanged."""
        host = self.host
        arch = host.arch
        if arch.entry_address_register is not None:  # ELFv2: the global entry finds its TOC from it
            host.fast.write(arch.register(arch.entry_address_register), addr)
        if arch.entry_registers is None or arch.function_descriptors is None:
            return addr
        sym = host.symbols.containing(addr)
        if sym is not None and sym.address == addr and sym.descriptor:
            descriptor = sym.descriptor
        elif not host.is_executable(addr) and host.is_mapped(addr):
            descriptor = addr
        else:
            return addr
        words = host.read_memory(descriptor, 3 * arch.word_size)
        for name, value in arch.entry_registers(words, 0).items():
            host.fast.write(arch.register(name), value)
        return int.from_bytes(words[: arch.word_size], arch.endian)

    def call(self, addr: int, args: tuple[int, ...], restype: str = "long") -> int:
        """Call the function at ``addr`` with ``args`` and return its value as ``restype``
        (:meth:`kpsdk.target.Target.call`); the CPU's registers are restored after."""
        host = self.host
        arch, abi = host.arch, host.arch.abi(host.abi_kind)
        word, mask = arch.word_size, arch.word_mask
        fast, sentinel = host.fast, host.sentinel
        fmt = ("<" if arch.endian == "little" else ">") + ("Q" if word == 8 else "I")
        ctx = host.uc.context_save()
        exited_before = host.exit_status
        try:
            sp = fast.read(self._sp) if self.depth else host.call_sp
            sp = (sp - 0x400) & ~(arch.stack_alignment - 1)
            stack_args = [a & mask for a in args[len(abi.args):]]
            for reg, value in zip(abi.args, args, strict=False):
                fast.write(arch.register(reg), value & mask)
            # where the callee finds its first stack argument: o32's home area for a0-a3 (16
            # bytes), ppc64's parameter save area; x86 pushes its return address below instead
            home = abi.stack_args_offset if arch.link is not None else 0
            sp -= len(stack_args) * word + home
            sp &= ~(arch.stack_alignment - 1)
            blob = bytes(home) + b"".join(struct.pack(fmt, a) for a in stack_args)
            if arch.link is None:  # x86: the return address is pushed
                sp -= word
                blob = struct.pack(fmt, sentinel) + blob
            else:
                fast.write(arch.register(arch.link), sentinel)
            if blob:
                host.uc.mem_write(sp, blob)
            fast.write(self._sp, sp)
            addr = self._through_descriptor(addr)
            sym = host.symbols.containing(addr)
            begin = addr | (1 if sym is not None and sym.iset and arch.iset(sym.iset).thumb_bit else 0)
            try:
                self._emu(begin, sentinel, None)
            finally:
                if host.rethook is not None:  # hooked calls made inside this call are over, returned or not
                    host.rethook.unwind(host.current_task(), sp + 1)
            pc = fast.read(self._pc)
            if pc != sentinel:
                status = host.exit_status
                if status is not None and exited_before is None:
                    raise TargetError(f"the called function exited the program (status {status})")
                raise TargetError(f"the call did not return (stopped at {host.symbols.format(pc)})")
            value = fast.read(self._rv)
        finally:
            host.uc.context_restore(ctx)
        if restype in ("int", "uint"):
            value &= 0xFFFFFFFF
            bits = 32
        else:
            bits = arch.bits
        if restype in ("int", "long") and value >> (bits - 1):
            value -= 1 << bits
        return value
