"""The embedded default target: code run in-process by Unicorn.

One module, because it is one class's choice of mechanism and its hit paths; its other
jobs are in the parts listed below.

How a probe point is armed (chosen per point, re-chosen whenever its probes,
the enabled knob or the optimization knob change):

``hook`` [OPTIMIZED]
    A Unicorn code hook bound to the one address.  Cheapest per hit (~0.7 us),
    but every hit walks all code hooks, so at most :data:`OPT_LIMIT` probes get
    it, the kernel-style optimization: the first ones registered, and then the
    hottest (a breakpoint-path point hit :data:`PROMOTE_EVERY` times takes the
    slot of a colder optimized one).  Never used for probes with a
    post_handler, as in the kernel.
``breakpoint`` (the classic path with the kprobe booster)
    A trap instruction over the probed one, and an out-of-line copy of the
    original instruction followed by a jump back (the kprobe booster, Guts section 6.1).  One
    interrupt hook and a dict lookup serve any number of probes, so the
    per-hit cost stays flat up to 10,000 probes and beyond.
``hook`` + step (not optimized)
    For instructions that cannot run out of line (they read or write the pc)
    and for post_handlers: the instruction runs in place; the successors it
    can reach are computed from the registers (software single-step, as gdb
    does on ARM and RISC-V) and hooks there, kept from hit to hit, run the
    post_handlers (:mod:`kpsdk.targets.unicorn.step`).

The trap encodings differ from the kernel's where Unicorn 2.1.4 would stop
emulation instead of raising a hookable interrupt; see each arch backend.

The target is one object made of parts, each in its module with the reason it is apart:

* here, the mechanisms: arming each point (the paths above, booster slots, promotion) and the
  hit paths (the interrupt hook, the hook path's callbacks, single-step, the pc written back);
* :mod:`.memory` (a mixin): mappings, kpsdk's area and the stack, reads that hide kpsdk's
  traps (K10), translations dropped;
* :mod:`.returns` (a mixin): return probes' trampolines, the target's side of :mod:`kpsdk.rethook`;
* :mod:`.syscalls` (owned): the system-call boundary to the Linux layer;
* :mod:`.libraries` (owned): ld.so's libraries announced and unloaded;
* :mod:`.running` (owned): ``run()``, ``call()`` and the emulation loop;
* :mod:`.loader`: the target kinds ``elf:`` and ``unicorn:`` that make one;
* :mod:`.layout`: where they all put kpsdk's own things in the address space.

The two mixins are the parts that the hit paths and handlers call on every hit (memory reads,
``hijack_return``): as bases of this class they cost no call or lookup more than methods
defined here.  The owned objects are reached once per system call, run or library, and
what a system call reads on its way is the glue's own (:mod:`.syscalls`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import unicorn

from kpsdk.arch import Arch, InstructionSet
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import TargetFault, UnsupportedTargetError
from kpsdk.manager import ProbeManager, ProbePoint
from kpsdk.regs import PtRegs
from kpsdk.targets.unicorn.detour import DetourEngine
from kpsdk.targets.unicorn.engine import ExitChecks
from kpsdk.targets.unicorn.fast import FastHooks, FastRegs, FastWords
from kpsdk.targets.unicorn.layout import PAGE, SLOT_BASE, SLOT_SIZE, STACK_TOP
from kpsdk.targets.unicorn.libraries import Libraries
from kpsdk.targets.unicorn.linux.syscalls import PID
from kpsdk.targets.unicorn.memory import GuestMemory
from kpsdk.targets.unicorn.nativetrace import NativeTraceHost, native_trace_host
from kpsdk.targets.unicorn.output import GuestOutput
from kpsdk.targets.unicorn.processes import TaskSupport
from kpsdk.targets.unicorn.returns import ReturnProbes
from kpsdk.targets.unicorn.running import Runner
from kpsdk.targets.unicorn.space import Space, keep_blocks_apart
from kpsdk.targets.unicorn.step import SoftStep
from kpsdk.targets.unicorn.syscalls import SyscallGlue
from kpsdk.targets.unicorn.tlb import TlbFill, watch_mappings
from kpsdk.targets.unicorn.watch import UcWatch

if TYPE_CHECKING:
    from pathlib import Path

    import capstone

    from kpsdk.target import MappedFile
    from kpsdk.targets.unicorn.linux import LinuxProcess

#: most probes given the [OPTIMIZED] hook path at once (see docs/performance.md)
OPT_LIMIT = 32
#: a breakpoint-path point hit this often asks for the hook path, taking the
#: slot of the coldest optimized point when all are taken (kpsdk's optimizer)
PROMOTE_EVERY = 256


class UnicornTarget(GuestMemory, ReturnProbes, TaskSupport):
    """One Unicorn CPU with its memory, symbols and probe points."""

    #: the interrupt hook's way to :meth:`SyscallGlue.syscall <kpsdk.targets.unicorn.syscalls.SyscallGlue.syscall>`
    #: (set where the arch has system calls): an attribute of its own, no slower than a method
    _syscall: Callable[[], None]

    def __init__(self, arch: Arch, abi_kind: str = "user", default_iset: str | None = None) -> None:
        if arch.unicorn is None or arch.unicorn_unsupported:
            raise UnsupportedTargetError(arch.unicorn_unsupported or f"Unicorn has no {arch.name}")
        self.arch = arch
        self.abi_kind = abi_kind
        self.uc = unicorn.Uc(*arch.unicorn)
        if arch.unicorn_cpu is not None:  # before anything starts the engine (MIPS64: a Release 2 CPU)
            self.uc.ctl_set_cpu_model(arch.unicorn_cpu)
        keep_blocks_apart(self.uc)
        #: guest stores at full speed on memory that is not executable (kpsdk.targets.unicorn.tlb), where
        #: the arch allows it (``Arch.unicorn_tlb_fill``; ARM clears the IT state a fill restores; MIPS
        #: settles its delay-slot state after each data fill, which only the Python fill does)
        settle = arch.delay_slots.unicorn_settle if arch.delay_slots is not None else None
        self.tlb = TlbFill(self.uc, fail=self.fail, clear_it=arch.has_thumb, pc_reg=arch.register(arch.pc).uc or 0,
                           settle=settle, prefer_native=settle is None) if arch.unicorn_tlb_fill else None
        watch_mappings(self.uc, self.tlb)
        if arch.unicorn_setup is not None:  # CPU state Unicorn leaves off that programs expect (ARM's VFP)
            arch.unicorn_setup(self.uc)
        #: the CPU as a new process starts it (execve resets the registers to this)
        self.fresh_context = self.uc.context_save()
        self.fast = FastRegs(self.uc)
        self.words = FastWords(self.uc, arch.word_size, arch.endian)
        #: Unicorn's exit checks after loads and stores, made only while a code or memory hook
        #: exists (:mod:`.engine`; 32-bit ARM's translator keeps the field to itself)
        self.exit_checks = ExitChecks(self.uc, enabled=not arch.has_thumb)
        if self.tlb is not None:  # stores that fault stop precisely while the checks may be off
            self.tlb.refuse(self.exit_checks.available)
        self.hooks = FastHooks(self.uc, self.exit_checks)
        self._init_memory()
        #: run(), call() and the emulation loop; ``runner.depth``: emu_start calls under way
        self.runner = Runner(self)
        self.symbols = SymbolTable()
        self.manager = ProbeManager(self)
        self.default_iset = arch.iset(default_iset)
        self.entry: int | None = None
        self._pc = arch.register(arch.pc)
        self._sp = arch.register(arch.sp)
        self.hit_regs = PtRegs.create(arch, self.fast, arch.abi(abi_kind), self.read_memory, self.read_word,
                                      owner=self)
        self._bp_points: dict[int, ProbePoint] = {}
        self._slot_points: dict[int, ProbePoint] = {}
        self._hook_points: dict[int, ProbePoint] = {}
        #: software single-step for post_handlers: persistent successor hooks, one pending step
        self.stepper = SoftStep(self, self._hook_points)
        self._n_optimized = 0
        self._free_slots: list[int] = []
        self._console = bytearray()
        #: where the program's fds 1 and 2 go as written; ``_console`` is the tail it keeps
        self.output = GuestOutput(self._console)
        self._exit_status: int | None = None
        #: libraries ld.so is mapping and unmapping (:mod:`kpsdk.targets.unicorn.libraries`)
        self.libraries = Libraries(self)
        #: the directory a Linux program sees as ``/`` (None: none, or not a Linux program); where
        #: a bare library name (``libc.so.6``) is looked up for this session (kpsdk.binfmt.filelocation)
        self.sysroot: Path | None = None
        #: where call() builds its frame when no run is under way (below the process's initial stack)
        self.call_sp = STACK_TOP - 0x2000
        self._pending: BaseException | None = None
        bp = self.default_iset.unicorn_breakpoint
        self._bp_intno, self._bp_adjust = bp.intno, bp.pc_adjust
        self._sys = arch.syscalls
        self._init_returns()
        #: return probes' entries done in guest code (made with kpsdk's area: setup_area)
        self.detours: DetourEngine | None = None
        #: trace events run in C (:mod:`.nativetrace`): made at a trace's first ask (native_tracer)
        self.native_trace: NativeTraceHost | None = None
        self._native_asked = False
        self.hooks.intr(self._on_intr)
        #: the system calls (:mod:`kpsdk.targets.unicorn.syscalls`); None where the arch has none
        self.syscall_glue = SyscallGlue(self, self._sys, self.output, self.libraries) \
            if self._sys is not None else None
        if self.syscall_glue is not None:
            self._syscall = self.syscall_glue.syscall

    def setup_area(self, base: int) -> None:
        """Map kpsdk's own area (:mod:`.memory`) at ``base``, with the detour engine on its data part."""
        data, mem = self._map_area(base)
        self.detours = DetourEngine(self, data, mem)

    # -- instructions ---------------------------------------------------------------

    def _cs_insn(self, point: ProbePoint) -> capstone.CsInsn:
        insn = point.state.get("cs")
        if insn is None:
            md = self.arch.disassembler(point.iset)
            insn = next(md.disasm(point.insn.raw, point.addr))
            point.state["cs"] = insn
        return insn  # type: ignore[return-value]

    def can_step(self, point: ProbePoint) -> bool:
        succ = self.arch.insn.successors(
            self._cs_insn(point), lambda name: 0, lambda a, n: bytes(n), self.arch.word_size
        )
        return succ is not None

    # -- arming -------------------------------------------------------------------------

    def _choose(self, point: ProbePoint) -> tuple[str, bool] | None:
        if not point.active:
            return None
        if point.internal:  # kpsdk's own point: its own code hook, outside the OPT_LIMIT budget
            return ("hook", False)
        if self.native_trace is not None and self.native_trace.serves(point):  # trace events in C
            return ("native", True)
        if self.detours is not None and self.manager.optimization and len(point.active) == 1 \
                and point.active[0].entry_rethook is not None and not self.many_tasks():
            length = self.detours.plan(point)
            if length is not None:  # 0: the entry cannot hold the jump, the detour's return code serves
                return ("detour" if length else "hooked-entry", True)
        if point.needs_step or not point.insn.boostable:
            return ("hook", False)
        if self.manager.optimization and (point.optimized or self._n_optimized < OPT_LIMIT):
            return ("hook", True)
        if self.breakpoints_paused:  # a data watchpoint needs the memory hooks' pc (kpsdk.targets.unicorn.watch)
            return ("hook", False)
        slot = self._peek_slot()
        code = self._slot_code(point, slot)
        if code is None:
            return ("hook", False)
        point.state["booster"] = (slot, code)  # what _arm writes there, unless another slot comes first
        return ("breakpoint", False)

    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        want = self._choose(point)
        have = (point.mechanism, point.optimized) if point.mechanism else None
        if have == ("native", True) and self.native_trace is not None and self.native_trace.stale(point):
            force = True  # its probes changed: the hook's programs are made again
        if want != have or force:
            self._disarm(point)
            if want is not None:
                self._arm(point, *want)
            if self.detours is not None and self.detours.by_addr:  # a probe inside a detoured entry's bytes
                clash = self.detours.clashing(point)
                if clash is not None:
                    self.sync_point(clash, force=True)
        if point.mechanism == "hook":
            if point.needs_step:
                if not self.runner.depth:  # outside a run, a step that goes nowhere new is hooked now
                    for a in self.stepper.prepare(point, self._cs_insn(point)):
                        self._drop_translations(a, a + 1)
            elif self.stepper.holds(point):  # its post_handlers are gone, the mechanism stays
                self.stepper.release(point)

    def _arm(self, point: ProbePoint, mechanism: str, optimized: bool) -> None:
        addr, size = point.addr, point.insn.size
        if self.kernel is not None:
            self._file_key(point)  # the file it belongs to, read in the process arming it (processes.py)
        if mechanism == "hook":
            if self.kernel is not None:
                self.quiet_elsewhere(point)
            callback = self._internal_hooks.get(addr) or self._hook_callback(point)
            point.state["hook"] = self.hooks.code(callback, addr, addr)
            self._hook_points[addr] = point
            if optimized:
                self._n_optimized += 1
        elif mechanism == "native":
            assert self.native_trace is not None
            self.native_trace.arm(point)
            self._hook_points[addr] = point  # a code hook too: quiet where the hook path's are (processes.py)
        elif mechanism in ("detour", "hooked-entry"):
            assert self.detours is not None
            length = int(point.state["detour_plan"])  # type: ignore[call-overload]
            self.detours.arm(point, length)
            if length:
                self._bp_lo, self._bp_hi = min(self._bp_lo, addr), max(self._bp_hi, addr + length)
            else:  # a hooked entry: a code hook at the entry, as the hook path's (resuming, steps)
                self._hook_points[addr] = point
        else:
            slot = self._alloc_slot()
            booster = point.state.pop("booster", None)
            code = booster[1] if booster is not None and booster[0] == slot else self._slot_code(point, slot)  # type: ignore[index]
            assert code is not None
            self.write_code(slot, code)
            bp = point.iset.unicorn_breakpoint.for_length(size)
            # the pc written on every hit: the slot, with the Thumb bit where it runs Thumb code
            resume = slot | 1 if point.iset.thumb_bit else slot  # the slot's own int where equal
            point.state.update(slot=slot, bp_len=len(bp), resume=resume)
            self.patch(point, addr, bp)
            self._bp_points[addr] = point
            self._bp_hidden[addr] = point.insn.raw[:len(bp)]
            self._bp_sorted.add(addr)
            self._bp_lo, self._bp_hi = min(self._bp_lo, addr), max(self._bp_hi, addr)
            self._slot_points[slot] = point
        point.mechanism, point.optimized = mechanism, optimized
        self._drop_translations(self._translated_from(point), addr + size)

    def _translated_from(self, point: ProbePoint) -> int:
        """Where to drop translations from when ``point``'s bytes or hooks change: its
        function's start (same page), else the point.  Dropping the instruction's
        own bytes was not enough on riscv64 (Unicorn 2.1.4): after a breakpoint
        on inc's second instruction was removed, a block translated from inc's
        start with the trap in it still ran, and the next run faulted there;
        dropping from the function's start fixes it (tests/test_register_fast.py)."""
        start = point.state.get("translated_from")
        if start is None:
            sym = self.symbols.containing(point.addr)
            begin = sym.address & ~1 if sym is not None else point.addr
            start = begin if point.addr - PAGE < begin <= point.addr else point.addr
            point.state["translated_from"] = start
        return int(start)  # type: ignore[call-overload]

    def _disarm(self, point: ProbePoint) -> None:
        addr = point.addr
        if point.mechanism == "hook":
            self.hooks.delete(point.state.pop("hook"))  # type: ignore[arg-type]
            self.stepper.release(point)
            self._hook_points.pop(addr, None)
            if point.optimized:
                self._n_optimized -= 1
        elif point.mechanism == "breakpoint":
            bp_len = int(point.state.pop("bp_len"))  # type: ignore[call-overload]
            self.patch(point, addr, point.insn.raw[:bp_len])
            slot = int(point.state.pop("slot"))  # type: ignore[call-overload]
            point.state.pop("resume", None)
            self._slot_points.pop(slot, None)
            self._free_slots.append(slot)
            self._bp_points.pop(addr, None)
            del self._bp_hidden[addr]
            self._bp_sorted.remove(addr)
        elif point.mechanism == "native":
            assert self.native_trace is not None
            self.native_trace.disarm(point)
            self._hook_points.pop(addr, None)
        elif point.mechanism in ("detour", "hooked-entry"):
            assert self.detours is not None
            self.detours.disarm(point)
            if self._hook_points.get(addr) is point:
                del self._hook_points[addr]
        else:
            return
        point.mechanism, point.optimized = None, False
        self._drop_translations(self._translated_from(point), addr + point.insn.size)

    def _promote(self, point: ProbePoint) -> bool:
        """Give a hot breakpoint-path point the [OPTIMIZED] hook path.

        Called from its trap after its handlers ran; the instruction then runs
        in place under the new hook, which skips this one re-entry.  When all
        OPT_LIMIT hook slots are taken, the coldest optimized point (fewest
        hits) goes back to the breakpoint path if it is colder than this one.
        """
        if not self.manager.optimization or self.manager.busy:
            return False
        if self._n_optimized >= OPT_LIMIT:
            def heat(p: ProbePoint) -> int:
                return sum(probe.hits for probe in p.probes)

            coldest = min((p for p in self._hook_points.values() if p.optimized and p.mechanism == "hook"),
                          key=heat, default=None)
            if coldest is None or heat(coldest) >= heat(point):
                return False
            if self._slot_code(coldest, self._peek_slot()) is None:
                return False  # no booster reaches it from kpsdk's area (riscv jal range): it keeps its hook
            self._disarm(coldest)
            self._arm(coldest, "breakpoint", False)
        self._disarm(point)
        self._arm(point, "hook", True)
        point.resuming = True
        self._set_pc(point.addr, point)
        return True

    def _peek_slot(self) -> int:
        return self._free_slots[-1] if self._free_slots else self._next_slot

    def _alloc_slot(self) -> int:
        if self._free_slots:
            return self._free_slots.pop()
        return self.alloc_code(SLOT_SIZE)

    def _slot_code(self, point: ProbePoint, slot: int) -> bytes | None:
        """The booster: the original instruction, then a jump back after it."""
        ool = self.arch.out_of_line
        back = None if ool is None else ool.jump_back(slot + point.insn.size, point.addr + point.insn.size, point.iset)
        return None if back is None else point.insn.raw + back

    # -- hit paths (hot: keep them lean) ----------------------------------------------------

    def _on_intr(self, handle: int, intno: int, user: int) -> None:
        try:
            if intno == self._bp_intno:
                pc = self.fast.read(self._pc)
                point = self._bp_points.get(pc + self._bp_adjust)
                if point is not None:
                    run_pre = point.run_pre  # set whenever the point is armed (ProbeManager._sync)
                    new = None if run_pre is None or (point.insn.condition is not None
                                                      and not self._condition_passes(point)) \
                        else run_pre(self.hit_regs)
                    if new is not None:
                        self._set_pc(new, point)
                    elif point.mechanism != "breakpoint":  # a handler disarmed or re-armed it: run it in place
                        point.resuming = point.mechanism == "hook"
                        self._set_pc(point.addr, point)
                    elif not (point.active and point.active[0].hits % PROMOTE_EVERY == 0 and self._promote(point)):
                        self.fast.write(self._pc, point.state["resume"])  # type: ignore[arg-type]
                    return
            if self._sys is not None and intno == self._sys.intno:
                self._syscall()
                if self.native_trace is not None:  # the call may have changed the task or its comm
                    self.native_trace.refresh()
                return
            kernel = self.kernel
            if kernel is not None and self._sys is not None and self._sys.linux is not None:
                for number, name, code in self._sys.linux.cpu_exceptions:
                    if number == intno:  # a fault of the program's own: a signal (a divide error's SIGFPE)
                        kernel.cpu_exception(name, code)
                        return
            pc = self.fast.read(self._pc)
            self.fail(TargetFault(f"unhandled CPU exception (interrupt {intno})", pc, self.symbols.format(pc)))
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.fail(exc)

    def _hook_callback(self, point: ProbePoint) -> Callable[[int, int, int, int], None]:
        """The code hook of one hook-path point: a closure over the point and what its
        hits need, so a hit does no lookup by address.

        The usual point, one active probe, runs in this one frame: it is
        :meth:`ProbeManager.pre <kpsdk.manager.ProbeManager.pre>` for one probe
        inlined (K2, K4 through the manager's ``_fault``, K6), because a second
        Python frame per hit was a quarter of a hit (docs/performance.md).  Any
        other point goes through ``point.run_pre``."""
        regs, stepper, manager, fail, set_pc = self.hit_regs, self.stepper, self.manager, self.fail, self._set_pc
        start_step, condition_passes = self._start_step, self._condition_passes
        conditional = point.insn.condition is not None
        state = point.state
        hit = regs._hit
        at = point.addr
        #: the address spaces this point keeps quiet in (an exec'd process with other code there:
        #: :mod:`.processes`); empty for a program that never exec'd
        excluded: set[Space] = state.setdefault("excluded", set())  # type: ignore[assignment]
        target = self

        def on_hit(handle: int, addr: int, size: int, user: int) -> None:
            try:
                if excluded and target.space in excluded:
                    return
                if point.resuming:
                    point.resuming = False
                    return
                if stepper.pending is not None:  # a step arriving here ends before this hit starts
                    stepper.reached(addr)
                if conditional and not condition_passes(point):
                    return
                only = point.only
                if only is not None:  # ProbeManager.pre for one probe, inlined
                    p, me = only
                    if manager.busy:  # K6
                        p.nmissed += 1
                        return
                    p.hits += 1
                    handler = p.pre_handler
                    new = None
                    if handler is not None:
                        manager.busy = True
                        hit[0] = None
                        hit[1] = at
                        hit[2] = None
                        try:
                            try:  # the truth test is the handler's too: a return value whose bool() raises
                                unchanged = not handler(me, regs)
                            except Exception as exc:  # noqa: BLE001 - K4: fault_handler or re-raised
                                manager._fault(p, point, regs, exc, "pre_handler")
                                unchanged = True
                            if not unchanged:  # K2
                                new = manager.path_change(p, point, hit[0])
                        finally:
                            manager.busy = False
                    if new is not None:
                        set_pc(new, point)
                    elif point.needs_step:
                        fixed = state.get("step_fixed")  # the step of an instruction that does not branch
                        if fixed is not None:
                            stepper.pending = fixed  # type: ignore[assignment]
                        else:
                            start_step(point)
                    return
                run_pre = point.run_pre
                if run_pre is None:  # no active probe (unregistered by a handler in this same block)
                    return
                reentrant = manager.busy
                new = run_pre(regs)
                if new is not None:
                    set_pc(new, point)
                elif point.needs_step and not reentrant:
                    start_step(point)
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        return on_hit

    def _condition_passes(self, point: ProbePoint) -> bool:
        """A conditional instruction whose condition fails is skipped, handlers
        and all, as the kernel's ARM kprobe_handler does (no nmissed either)."""
        arch = self.arch
        cond = point.insn.condition
        assert arch.conditions is not None and cond is not None, "only conditional instructions get here"
        return bool(arch.conditions.passes(cond, lambda n: self.fast.read(arch.register(n))))

    def slot_point(self, addr: int) -> ProbePoint | None:
        """The probe point whose booster slot holds ``addr`` (its copied instruction
        or the jump back), or None."""
        if not self.is_reserved(addr) or addr < self._area + SLOT_BASE:
            return None
        return self._slot_points.get(addr - (addr - self._area - SLOT_BASE) % SLOT_SIZE)

    def _start_step(self, point: ProbePoint) -> None:
        """Run the point's post_handlers after its instruction (:mod:`kpsdk.targets.unicorn.step`):
        the step is pending, and the persistent hooks on the successors end it."""
        fresh = self.stepper.start(point, self._cs_insn(point))
        assert fresh is not None, "registration refuses post_handlers where can_step() is False"
        if fresh:
            # a successor got its first hook: leave the current translation block so that the
            # hook is seen, and re-enter this instruction without running its handlers again
            point.resuming = True
            self._remove_cache(point.addr, point.addr + point.insn.size)
            self._set_pc(point.addr, point)

    def _set_pc(self, addr: int, point: ProbePoint | None = None) -> None:
        if self.arch.has_thumb and not addr & 1:
            sym = self.symbols.containing(addr)
            if sym is not None:
                thumb = bool(sym.iset) and self.arch.iset(sym.iset).thumb_bit
            elif point is not None and self.is_reserved(addr):
                thumb = point.iset.thumb_bit
            else:
                thumb = self.running_iset().thumb_bit
            addr |= 1 if thumb else 0
        self.fast.write(self._pc, addr)

    def begin_at(self, addr: int, point: ProbePoint | None = None) -> int:
        """Set the pc to ``addr`` and return it as ``emu_start`` wants it: with
        the Thumb bit when the CPU is in Thumb state (``_set_pc`` decided which)."""
        self._set_pc(addr, point)
        pc = self.fast.read(self._pc)
        if self.arch.has_thumb and self.running_iset().thumb_bit:
            pc |= 1
        return pc

    def read_pc(self) -> int:
        """The program counter now (without a Thumb bit: see :meth:`running_iset`)."""
        return self.fast.read(self._pc)

    def hook_point(self, addr: int) -> ProbePoint | None:
        """The probe point whose code hook is at ``addr``, or None."""
        return self._hook_points.get(addr)

    @property
    def failed(self) -> bool:
        """A hook stored an error for ``run()``/``call()`` to raise (see :meth:`fail`)."""
        return self._pending is not None

    def running_iset(self) -> InstructionSet:
        """The instruction set the CPU is in now (the arch's ``mode_bit``)."""
        return self.arch.running_iset(lambda name: self.fast.read(self.arch.register(name)))

    def fail(self, exc: BaseException) -> None:
        if self._pending is None:
            self._pending = exc
        self.uc.emu_stop()

    def take_failure(self) -> BaseException | None:
        """The error a hook stored with :meth:`fail`, handed to the runner to raise and forgotten."""
        pending, self._pending = self._pending, None
        return pending

    # -- the program (system calls, libraries) -----------------------------------------------

    def close(self) -> None:
        """Close the host files the program's processes opened."""
        if self.kernel is not None:
            self.kernel.close()
        elif self.linux is not None:
            self.linux.close()

    def ifunc_args(self) -> tuple[int, ...]:
        """AT_HWCAP (and AT_HWCAP2), as glibc's resolvers get them (x86's ignore them)."""
        linux = self._sys.linux if self._sys is not None else None
        if linux is None:
            return super().ifunc_args()
        return (linux.hwcap, linux.hwcap2)

    @property
    def syscalls_unimplemented(self) -> dict[str, int]:  # every process of the program shares one record
        """System calls the program made that the Linux layer does not emulate (each got
        ``-ENOSYS``), and files of its own ``/proc/self`` it does not make (``ENOENT``), with
        how often: empty when everything it asked for was there."""
        return dict(self.linux.unimplemented) if self.linux is not None else {}

    def program_pid(self) -> int | None:
        """The Linux layer's pid (1000) for the program it runs; None for a bare session."""
        return PID if self.linux is not None else None

    def thread_pointer(self) -> int | None:
        """The running task's thread pointer, where the arch's Linux ABI says it is kept: the
        register ``arch_prctl``/``set_tls`` writes, the general register the program sets
        itself, or (i386) the base of the segment ``set_thread_area`` loads."""
        syscalls = self.arch.syscalls
        abi = syscalls.linux if syscalls is not None else None
        if abi is None or self.linux is None:
            return None
        if abi.tls_register is not None:
            return int(self.uc.reg_read(abi.tls_register))
        if abi.tls_gpr is not None:
            return int(self.fast.read(self.arch.register(abi.tls_gpr)))
        if abi.thread_pointer is not None:
            return abi.thread_pointer(self.uc)
        return None

    @property
    def linux(self) -> LinuxProcess | None:
        """The Linux process (elf: targets): every system call but exit goes to it; None:
        the minimal layer, write and exit only (:mod:`kpsdk.targets.unicorn.syscalls`)."""
        return self.syscall_glue.linux if self.syscall_glue is not None else None

    @linux.setter
    def linux(self, process: LinuxProcess | None) -> None:
        assert self.syscall_glue is not None, "a Linux process runs on an arch with system calls"
        self.syscall_glue.linux = process

    def program_exited(self, status: int) -> None:
        """The program called ``exit`` or ``exit_group`` (:mod:`.syscalls`): its status is
        kept, the hooked calls in flight will never return, and the run stops."""
        self._exit_status = status
        if self.rethook is not None:  # the calls in flight will never return
            self.rethook.unwind()
        self.uc.emu_stop()

    @property
    def pending_libraries(self) -> list[MappedFile]:
        """Libraries ld.so is mapping, announced at its first system call past their mappings
        (:mod:`kpsdk.targets.unicorn.libraries`; the Linux layer appends to this list)."""
        return self.libraries.pending

    def unmapping(self, start: int, end: int) -> None:
        """The program is about to unmap ``[start, end)``: the libraries there are unloaded
        (:meth:`Libraries.unmapping <kpsdk.targets.unicorn.libraries.Libraries.unmapping>`)."""
        self.libraries.unmapping(start, end)

    # -- watchpoints (kpsdk.targets.unicorn.watch) ------------------------------------------------

    watch: UcWatch | None = None
    #: no probe takes the breakpoint path while this is set (a data watchpoint is armed): see
    #: :meth:`UcWatch.arm <kpsdk.targets.unicorn.watch.UcWatch.arm>`
    breakpoints_paused = False

    def watch_engine(self) -> UcWatch:
        if self.watch is None:
            self.watch = UcWatch(self)
        return self.watch

    # -- running (kpsdk.targets.unicorn.running) ------------------------------------------------

    @property
    def running(self) -> bool:
        """Inside ``emu_start`` (a hook or handler runs): Unicorn 2.1.4 cannot nest a
        timed ``emu_start`` (it joins the outer run's timer thread twice and aborts
        the process), and a nested untimed run would start over at the entry."""
        return self.runner.depth > 0

    def before_run(self) -> None:
        """A run starts: what kpsdk knows of the memory map and the code may be wrong from now
        on (the program may map, unmap or protect memory, or write code, while it runs), and
        the translations registration left stale are dropped."""
        self._forget_memory()
        self._flush_stale()
        if self.watch is not None:
            self.watch.before_run()
        if self.native_trace is not None:  # a slice starts: maybe another task's
            self.native_trace.refresh()

    def native_tracer(self) -> NativeTraceHost | None:
        """Trace events run in C here (:mod:`.nativetrace`; None: no C compiler, or hits that
        count only in some tasks, ``follow=False``: the C hook does not ask the task filter)."""
        if self.manager.task_filter is not None:
            return None
        if not self._native_asked:
            self._native_asked = True
            self.native_trace = native_trace_host(self)
        return self.native_trace

    def regs(self) -> PtRegs:
        self.hit_regs._reset(self.fast.read(self._pc))
        return self.hit_regs

    def stop(self) -> None:
        self.uc.emu_stop()

    def run(self, timeout: float | None = None) -> int | None:
        try:
            return self.runner.run(timeout)
        finally:
            if self.native_trace is not None:  # the records of native trace events reach their writers
                self.native_trace.drain()

    def call(self, addr: int, args: tuple[int, ...], restype: str = "long") -> int:
        try:
            return self.runner.call(addr, args, restype)
        finally:
            if self.native_trace is not None:
                self.native_trace.drain()
