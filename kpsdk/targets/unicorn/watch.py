"""Watchpoints on the Unicorn target.

Execute watchpoints (``x``) are a code hook bound to the address: they fire
before the instruction, like a kprobe on the hook path.

Data watchpoints (``w``, ``r``, ``rw``) must fire *after* the access, with the
memory changed and registers that belong to an instruction boundary, but
Unicorn 2.1.4's memory hooks run inside the instruction: ``UC_HOOK_MEM_WRITE``
before the store, with the value about to be stored (``UC_HOOK_MEM_READ_AFTER``
is in the C API, but the 2.1.4 Python binding refuses it with ``UC_ERR_ARG``).
Stopping the emulation from a memory hook stops it in the middle of the
instruction (measured: a ``push`` has stored but not moved ``rsp``; ``xchg`` has
stored but not loaded ``eax``), so nothing there is an instruction boundary, and
re-running the instruction would store twice.  So the memory hook only
*records* the access, and the report comes from a code hook on the accessing
instruction's successor, the next instruction boundary.

A write watchpoint (``w``) has no memory hook: its page is write-protected in
the engine and the page's write-protection hooks see its stores (:mod:`.watchpages`:
every other page keeps Unicorn's fast path, bench row ``W``); :meth:`UcWatch._on_prot`
is its memory hook's twin, and a site's first hit is refused by the TLB fill,
precisely, instead of by the region protection below.  Read watchpoints (and a
write watchpoint on a page the program keeps writing beside it) use a memory hook
bound to the watched range (no other access calls Python; every load and store
still pays Unicorn's memory-hook check, bench row ``W``), which exists only while
such a watchpoint is armed.  It knows the address, the
size and the value being stored, and reads the old bytes (still in memory: the
hook runs before the store).  Where the report comes from depends on whether
the accessing instruction (the *site*, by its pc) was seen before:

**A known site** (every hit after the first): the successors of the site's
instruction were learned at its first hit and have persistent code hooks.  The
memory hook records the access into the pending step and returns; the
instruction completes, and the successor's hook runs the handlers.  No hook is
added or deleted and nothing is retranslated per hit (adding a hook or
dropping translations from inside a memory hook crashes Unicorn 2.1.4, which
is why a site is learned outside it).  The site's instruction bytes are
compared at each hit, so code that changed is learned again.

**A site's first hit** (and sites that cannot be learned: an instruction whose
successors depend on registers or memory, such as ``ret`` or ``call rax``; one
running from a kprobe booster slot, which another probe may reuse; past
:data:`MAX_SITE_HOOKS` successor hooks) takes the slow path, measured precise
on the five archs Unicorn runs here:

1. **Abort precisely**: the hook takes away the permissions of the mapped
   region holding the access (the whole region: splitting one from a hook
   crashes Unicorn).  The access it was called for then faults, and Unicorn's
   faults are precise: the CPU is back at the start of the accessing
   instruction, with nothing of it done (measured: ``push``, ``xchg``, ``call``,
   ``rep stos``, ``add [mem]``).
2. **Re-execute once, recording**: outside the emulation, the region gets its
   permissions back, the successors (the arch backend's ``successors()``, as
   kprobes' software single-step uses) get code hooks (persistent for a
   learnable site, one-shot otherwise), and the CPU runs the instruction
   again, the memory hook recording every access in the range.

Either way the report is the same (W1): ``regs`` is the CPU after the
instruction (``regs.ip`` is the next instruction to execute, as x86 reports a
data breakpoint), memory has changed, ``access.pc`` is the accessing
instruction, and every access the instruction made in the range is reported,
in order.  A hit on a known site costs the memory hook, two memory reads and
the successor hook (bench row ``W``: ~130 us per hit on the slow path before
sites were learned); the cost of a watchpoint that never fires is the memory
hook's (1.4-1.7x on a load/store loop).  Adding or deleting a memory hook
drops the translated code: code translated before a read hook existed never
calls it, and code translated with one keeps paying for it after it is
deleted.  Successor hooks stay while a data watchpoint is armed (each costs
its address a code-hook call, and every hooked instruction a bounds check)
and go with the last one.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import unicorn

from kpsdk.errors import TargetFault
from kpsdk.targets.unicorn.fast import HOOK_CODE, memory_reader
from kpsdk.targets.unicorn.tlb import native_symbol
from kpsdk.targets.unicorn.watchpages import PageTraps

if TYPE_CHECKING:
    import capstone

    from kpsdk.targets.unicorn.host import UnicornHost

_KIND = {unicorn.UC_MEM_WRITE: "w", unicorn.UC_MEM_READ: "r"}

#: the most successor addresses kept hooked for learned sites: every code hook costs each
#: hooked instruction a bounds check (bench rows U), so sites past these take the slow path
MAX_SITE_HOOKS = 32


@dataclass(frozen=True, slots=True)
class _Site:
    """An accessing instruction seen before: its bytes then, and where it goes (hooked)."""

    raw: bytes
    succ: frozenset[int]


@dataclass(slots=True)
class _Step:
    """The accessing instruction under way, and what it accessed.

    ``succ``: where it can go (a code hook on each ends the step); ``hooks``: the
    one-shot hooks of a site that is not learned (deleted when the step ends);
    ``recording``: re-executing after an abort (every access in range is noted);
    ``unslot``: the instruction or a successor may be in a booster slot (a learned
    site never is: its report needs no address translation)."""

    pc: int
    succ: frozenset[int]
    hooks: list[int]
    recording: bool
    unslot: bool = True
    accesses: list[tuple[Any, str, int, int, int, int | None]] = field(default_factory=list)


class UcWatch:
    """The watchpoint engine of one Unicorn target (seen through :class:`~kpsdk.targets.unicorn.host.UnicornHost`)."""

    #: Unicorn needs no debug registers: ``strict=False`` may lift the architecture's rules
    emulator = True

    def __init__(self, target: UnicornHost) -> None:
        self.t = target
        self.uc = target.uc
        self._mem: dict[Any, int] = {}  # watchpoint -> its memory hook
        self._exec_at: dict[int, list[Any]] = {}  # address -> x watchpoints
        self._exec_hooks: dict[int, int] = {}  # address -> its code hook
        self._abort: tuple[int, list[tuple[int, int, int]]] | None = None  # (pc, [(start, length, perms)])
        self._step: _Step | None = None
        self._insns: dict[tuple[int, bytes], Any] = {}  # accessing instructions, decoded once
        self._sites: dict[int, _Site] = {}  # learned accessing instructions, by pc
        self._site_hooks: dict[int, int] = {}  # successor address (no Thumb bit) -> its persistent hook
        self._after = HOOK_CODE(self._on_after)  # one callback object for every successor hook, kept alive
        self._read = memory_reader(self.uc)
        self._endian = target.arch.endian
        self._pc_reg = target.arch.register(target.arch.pc)
        self._restart = False
        slots = target.arch.delay_slots
        #: MIPS: the branch delay slots (an access in one is followed through its branch), and what
        #: settles Unicorn after a memory hook ran inside one (:class:`kpsdk.arch.DelaySlots`)
        self._slots = slots
        self._settle = slots.unicorn_settle if slots is not None else None
        #: write watchpoints moved off their trapped pages for good (a page written beside them)
        self._untrapped: weakref.WeakSet[Any] = weakref.WeakSet()
        #: write watchpoints served by write-protected pages instead of a memory hook (:mod:`.watchpages`);
        #: not on MIPS, whose accesses in delay slots only the memory hook path follows
        self._traps = PageTraps(target, target.tlb, self._on_prot, native_symbol("kpsdk_page_allow")) \
            if target.tlb is not None and slots is None else None

    # -- the engine interface (kpsdk.target.Target.watch_engine) --------------------------

    def check(self, wp: Any) -> None:
        """Unicorn watches every type at any length."""

    def arm(self, wp: Any) -> None:
        addr, length = wp.address, wp.length
        if wp.type == "x":
            at = self._exec_at.setdefault(addr, [])
            if not at:
                self._exec_hooks[addr] = self.t.hooks.code(self._on_exec, addr, addr)
                self.uc.ctl_remove_cache(addr, addr + 1)
            at.append(wp)
            return
        if self._traps is not None and wp not in self._untrapped and self._traps.eligible(wp):
            self._traps.arm(wp)
            self._mem[wp] = 0  # no memory hook: the page's write-protection hooks (_on_prot), checked at run time
            if len(self._mem) == 1:
                self._pause_breakpoints(True)  # the protection hooks read the pc too
            return
        kinds = (unicorn.UC_HOOK_MEM_WRITE if "w" in wp.type else 0) | (
            unicorn.UC_HOOK_MEM_READ if "r" in wp.type else 0)
        self._mem[wp] = self.uc.hook_add(kinds, self._on_mem, wp, addr, addr + length - 1)
        if len(self._mem) == 1:
            self._pause_breakpoints(True)
        self.t.hooks.mid_block_added()  # before the retranslation: its blocks check for a stop
        self._drop_code()  # code translated before a read hook existed loads without calling it (measured)

    def _pause_breakpoints(self, paused: bool) -> None:
        """While a data watchpoint is armed, kprobes leave the breakpoint path for the hook path.

        A breakpoint hit resumes by writing the pc from Unicorn's interrupt hook, and Unicorn
        2.1.4 then stops telling memory hooks the accessing instruction's pc for the rest of the
        run (``uc_reg_write`` sets ``skip_sync_pc_on_exit``, which only a translation block
        leaving on request clears; measured on x86_64 and MIPS: the pc a memory hook reads is
        the start of the block after the breakpoint).  The slow path below would then re-run
        a block's instructions before the access (a stack pointer moved twice, measured on
        mips64el).  A code hook's pc write leaves the block on request, so the hook path is safe."""
        t = self.t
        if t.breakpoints_paused == paused:
            return
        t.breakpoints_paused = paused
        t.manager.resync_all()
        if paused and t.running:
            # armed by a handler inside a run, maybe after a breakpoint hit: only a new
            # ``emu_start`` forgets the stale pc, so the run stops here and goes on where it stopped
            self._restart = True
            self.uc.emu_stop()
            point = t.hook_point(t.read_pc())
            if point is not None:  # a kprobe's handler on the hook path armed it: its hit is done
                point.resuming = True

    def take_restart(self) -> bool:
        """Whether the run stopped only to start again (see :meth:`_pause_breakpoints`); asked by
        the runner when ``emu_start`` returns without an error, and forgotten."""
        restart, self._restart = self._restart, False
        return restart

    def disarm(self, wp: Any) -> None:
        if wp.type == "x":
            at = self._exec_at.get(wp.address, [])
            if wp in at:
                at.remove(wp)
            if not at and wp.address in self._exec_hooks:
                del self._exec_at[wp.address]
                self.t.hooks.delete(self._exec_hooks.pop(wp.address))
                self.uc.ctl_remove_cache(wp.address, wp.address + 1)
            return
        handle = self._mem.pop(wp, None)
        if handle is not None:
            if self._traps is not None and wp in self._traps:
                self._traps.disarm(wp)
            else:
                self.uc.hook_del(handle)
                self.t.hooks.mid_block_deleted()
            if not self._mem:
                self._forget_sites()
                self._pause_breakpoints(False)
            self._retranslate()
        if self._step is not None:
            self._step.accesses = [a for a in self._step.accesses if a[0] is not wp]

    def _forget_sites(self) -> None:
        """No data watchpoint is left: the successor hooks go (each costs its address a call)."""
        for handle in self._site_hooks.values():
            self.t.hooks.delete(handle)
        self._site_hooks.clear()
        self._sites.clear()
        if self.t.tlb is not None:
            self.t.tlb.set_sites([])
        step = self._step
        if step is not None and not step.recording and not step.hooks:
            self._step = None  # its successor's hook is gone

    def _retranslate(self) -> None:
        """Drop code translated while a memory hook existed: it keeps paying for the hook.

        Unicorn only forgets a deleted hook at the end of an ``emu_start``, and code
        translated before that still calls the memory-hook helpers (measured: 1.38x
        after unregistering).  Outside a run, an empty run (begin = until = pc) gets
        the hook forgotten first; inside one (a handler unregistering), the flush comes
        before the hook is gone, and the code translated in the rest of that run is slow.
        """
        t = self.t
        if not t.running and not t.failed:
            pc = t.read_pc()
            thumb = t.running_iset().thumb_bit
            try:
                self.uc.emu_start(pc | thumb, pc)
            except unicorn.UcError:
                pass  # nothing ran (begin = until): the hook list was cleaned up all the same
        self._drop_code()

    def _drop_code(self) -> None:
        """Retranslate everything: a flush outside a run; inside one (a handler registering),
        invalidate the executable regions instead, because a flush under a running
        translation block crashes the emulation (measured on ARM: a fetch from the stack)."""
        if not self.t.running:
            self.uc.ctl_flush_tb()  # type: ignore[attr-defined]  # mypy sees the py2 binding
            return
        for start, end, perms in self.uc.mem_regions():
            if perms & unicorn.UC_PROT_EXEC:
                self.uc.ctl_remove_cache(start, end + 1)

    def clear(self) -> None:
        """Forget the step under way: the run ended with an error (a handler's, a fault)
        before its successor was reached, and the CPU is put elsewhere (``call()`` restores
        it), so its accesses will not be reported, and a re-execution's recording ends."""
        step, self._step = self._step, None
        if step is not None:
            for h in step.hooks:
                self.t.hooks.delete(h)
        if self.t.tlb is not None:
            self.t.tlb.allow_once(0)

    @property
    def hooked(self) -> int:
        """Memory hooks installed now (0 when no data watchpoint is armed)."""
        return len(self._mem)

    @property
    def sites(self) -> int:
        """Accessing instructions learned (their hits take the fast path)."""
        return len(self._sites)

    # -- hits --------------------------------------------------------------------------------

    def _on_exec(self, handle: int, addr: int, size: int, user: int) -> None:
        try:
            regs = self.t.hit_regs
            for wp in list(self._exec_at.get(addr, ())):
                regs._reset(addr)
                wp.fire(regs, "x", addr, size, None, None, addr)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.t.fail(exc)

    def _on_mem(self, uc: unicorn.Uc, access: int, addr: int, size: int, value: int, wp: Any) -> None:
        """Record the access into the pending step (a known site, or re-executing), or abort it
        (a site's first hit: see the module's slow path).  Hot: every hit of a known site."""
        try:
            kind = _KIND.get(access)
            if kind is None:
                return
            step = self._step
            if step is not None and step.recording:
                self._record(step, wp, kind, addr, size, value)
                return
            if self._abort is not None or not wp.armed:
                return  # a second watchpoint on the same access: the first one aborts it
            if self.t.manager.busy:
                wp.nmissed += 1  # K6: a handler is running (one that calls target code)
                return
            pc = self.t.fast.read(self._pc_reg)
            site = self._sites.get(pc)
            if site is not None and (step is None or (step.pc == pc and not step.hooks)) \
                    and self._read(pc, len(site.raw)) == site.raw:
                if step is None:  # the instruction's first access in range (a second one appends)
                    step = self._step = _Step(pc, site.succ, [], False, False)
                old = int.from_bytes(self._read(addr, size), self._endian)  # _record, inlined
                if kind == "w":
                    step.accesses.append((wp, kind, addr, size, value & ((1 << (8 * size)) - 1), old))
                else:
                    step.accesses.append((wp, kind, addr, size, old, None))
                return
            saved = self._regions(addr, size)
            for start, length, _perms in saved:
                self.uc.mem_protect(start, length, unicorn.UC_PROT_NONE)
            self._abort = (pc, saved)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.t.fail(exc)
        finally:
            if self._settle is not None:  # MIPS: the hook restored a delay slot's pending branch
                self._settle(uc)

    def _on_prot(self, uc: unicorn.Uc, access: int, addr: int, size: int, value: int, wp: Any) -> bool:
        """A store into a trapped write watchpoint's range (:mod:`.watchpages`): recorded as
        :meth:`_on_mem` records it and made (True), unless the process may not write there
        (False: its fault); refused (False) at a site's first hit, which then stops precisely
        at the store and takes the slow path (:meth:`resume_after_fault`), no region to restore."""
        traps = self._traps
        assert traps is not None
        try:
            step = self._step
            if step is not None and step.recording:
                self._record(step, wp, "w", addr, size, value)
                return traps.store(addr, size, value)
            if self._abort is not None:
                return False  # another watchpoint refused this store: it stops here
            if not wp.armed:
                return traps.store(addr, size, value)
            if self.t.manager.busy:
                wp.nmissed += 1  # K6: a handler is running (one that calls target code)
                return traps.store(addr, size, value)
            pc = self.t.fast.read(self._pc_reg)
            site = self._sites.get(pc)
            if site is not None and (step is None or (step.pc == pc and not step.hooks)) \
                    and self._read(pc, len(site.raw)) == site.raw:
                if step is None:
                    step = self._step = _Step(pc, site.succ, [], False, False)
                self._record(step, wp, "w", addr, size, value)
                return traps.store(addr, size, value)
            self._abort = (pc, [])
            return False
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.t.fail(exc)
            return False

    def before_run(self) -> None:
        """A run starts: write watchpoints whose trapped pages the last run kept writing beside
        them move to the memory hook (:meth:`PageTraps.hot <.watchpages.PageTraps.hot>`)."""
        if self._traps is None or self.t.running:
            return
        for wp in self._traps.hot():
            self._untrapped.add(wp)
            self.disarm(wp)
            self.arm(wp)

    def reassert(self) -> None:
        """kpsdk's view of the memory may have changed (a run starts, a process's memory
        replaced another's): the trapped pages are write-protected again in the engine."""
        if self._traps is not None:
            self._traps.reassert()

    def _record(self, step: _Step, wp: Any, kind: str, addr: int, size: int, value: int) -> None:
        """Note one access: the old bytes are still in memory (the hook runs before a store)."""
        old = int.from_bytes(self._read(addr, size), self._endian)
        if kind == "w":
            step.accesses.append((wp, kind, addr, size, value & ((1 << (8 * size)) - 1), old))
        else:
            step.accesses.append((wp, kind, addr, size, old, None))

    def _regions(self, addr: int, size: int) -> list[tuple[int, int, int]]:
        """``(start, length, perms)`` of the whole mapped regions holding [addr, addr+size).

        Whole regions: protecting part of one makes Unicorn split it, which crashes
        the process when done from a memory hook (measured: a watched stack slot).
        """
        last = addr + size - 1
        return [(start, end - start + 1, perms) for start, end, perms in self.uc.mem_regions()
                if start <= last and end >= addr]

    def resume_after_fault(self) -> int | None:
        """The slow path's step 2, called by the target when the emulation stopped with a
        fault: if it was our abort, restore the region, hook the successors (learning the
        site when its successors are fixed) and return where to resume (the accessing
        instruction); None when the fault is not ours."""
        abort, self._abort = self._abort, None
        tlb = self.t.tlb
        if abort is None and tlb is not None and tlb.trap_fault is not None:
            # the fill refused a trapped page's store by an instruction not learned yet (watchpages.py)
            tlb.trap_fault = None
            abort = (self.t.read_pc(), [])
        if abort is None:
            step = self._step
            if step is not None and not step.recording and not step.hooks:
                self._step = None  # the accessing instruction faulted: it did not complete
            return None
        pc, saved = abort
        for start, length, perms in saved:
            self.uc.mem_protect(start, length, perms)
        t = self.t
        iset = t.running_iset()
        code = bytes(self.uc.mem_read(pc, 16))
        insn = self._insns.get((pc, code))
        if insn is None:
            insn = self._insns[(pc, code)] = next(t.arch.disassembler(iset).disasm(code, pc, 1))
        if self._step is not None:  # left over from a run that ended inside a step
            for h in self._step.hooks:
                t.hooks.delete(h)
            self._step = None
        # MIPS: an access in a branch's delay slot is re-run with its branch (the fault left the pc
        # at the branch's target, the access undone), and goes where the branch goes
        branch = self._branch_before(pc, iset)
        succ, fixed = self._successors(insn if branch is None else branch)
        if succ is None:
            from kpsdk.errors import TargetError

            raise TargetError(f"a watched access by {insn.mnemonic} {insn.op_str} at {t.symbols.format(pc)} "
                              "cannot be followed to its next instruction (a trap)")
        hooks: list[int] = []
        fresh = [a for a in succ if a not in self._site_hooks]
        plain = not any(t.is_reserved(a) for a in (pc, *succ))  # no booster slot (reused by other probes)
        # the successors' hooks only report (a handler's error stops the run at the end of its
        # block): they need no exit checks (engine.py), which would slow every load and store
        if fixed and plain and len(self._site_hooks) + len(fresh) <= MAX_SITE_HOOKS:
            for a in fresh:
                self._site_hooks[a] = t.hooks.code_shared(self._after, a, a, mid_block=False)
            self._sites[pc] = _Site(code[:insn.size], succ)
            if tlb is not None:  # its stores into trapped pages go on to the hooks from now on
                tlb.set_sites(list(self._sites))
        else:
            fresh = list(succ)
            hooks = [t.hooks.code_shared(self._after, a, a, mid_block=False) for a in fresh]
            if tlb is not None:
                tlb.allow_once(pc)  # the re-run that records
        for a in fresh:
            self.uc.ctl_remove_cache(a, a + 1)
        self.uc.ctl_remove_cache(pc, pc + insn.size)
        self._step = _Step(pc, succ, hooks, True, not plain)
        start = pc if branch is None else branch.address
        if branch is not None:
            self.uc.ctl_remove_cache(start, pc)
            if self._settle is not None:
                self._settle(self.uc)  # the fault restored the slot's pending branch: run it afresh
        point = t.hook_point(start)
        if point is not None:  # its kprobe ran before the access: do not run it again
            point.resuming = True
        return t.begin_at(start | (1 if iset.thumb_bit else 0))

    def _branch_before(self, pc: int, iset: Any) -> capstone.CsInsn | None:
        """The branch whose delay slot ``pc`` is, decoded (None where the arch has no delay slots,
        as everywhere but MIPS, or the instruction before is no branch)."""
        slots = self._slots
        if slots is None or pc < slots.size:
            return None
        at = pc - slots.size
        try:
            raw = self.t.read_memory(at, slots.size)  # the program's bytes, a breakpoint's hidden
        except TargetFault:  # nothing readable before: no branch
            return None
        if not slots.branch(raw):
            return None
        found = self._insns.get((at, raw))
        if found is None:
            found = self._insns[(at, raw)] = next(self.t.arch.disassembler(iset).disasm(raw, at, 1))
        return found

    def _successors(self, insn: capstone.CsInsn) -> tuple[frozenset[int] | None, bool]:
        """Where ``insn`` can go from the registers now (no Thumb bits), and whether that
        is fixed for the site: the backend read no memory and no register but the one
        holding the instruction-set bit (ARM's CPSR.T, fixed for an address's code), and
        gives the same answer with every other bit of that register flipped."""
        t = self.t
        arch, fast = t.arch, t.fast
        mode = arch.mode_bit
        read_other = False

        def evaluate(flip: int) -> frozenset[int] | None:
            nonlocal read_other

            def reg(name: str) -> int:
                nonlocal read_other
                r = arch.register(name)
                if mode is not None and name == mode.register:
                    return (fast.read(r) ^ flip) & r.mask
                read_other = True
                return fast.read(r)

            def mem(addr: int, size: int) -> bytes:
                nonlocal read_other
                read_other = True
                return bytes(self.uc.mem_read(addr, size))

            succ = arch.insn.successors(insn, reg, mem, arch.word_size)
            strip = ~1 if arch.has_thumb else ~0
            return None if succ is None else frozenset(a & strip for a in succ)

        succ = evaluate(0)
        if succ is None or read_other:
            return succ, False
        fixed = mode is None or evaluate(~mode.mask) == succ
        return succ, fixed and not read_other

    def _unslot(self, addr: int) -> int:
        """The program's address for one in a kprobe booster slot (the copy of a probed
        instruction, then its jump back): the accessing instruction may run from there."""
        point = self.t.slot_point(addr)
        if point is None:
            return addr
        slot = point.state["slot"]
        return point.addr + min(addr - slot, point.insn.size)  # type: ignore[operator]

    def _on_after(self, handle: int, addr: int, size: int, user: int) -> None:
        """The accessing instruction is done (a successor is reached): run the handlers of
        what it accessed.  Any other time the CPU passes here, nothing is pending."""
        try:
            step = self._step
            if step is None or addr not in step.succ:
                return
            self._step = None
            for h in step.hooks:
                self.t.hooks.delete(h)
            if step.hooks and self.t.tlb is not None:
                self.t.tlb.allow_once(0)  # the re-run of an instruction not learned is over
            regs = self.t.hit_regs
            ip, pc = (self._unslot(addr), self._unslot(step.pc)) if step.unslot else (addr, step.pc)
            for wp, kind, a, size_, value, old in step.accesses:
                if wp.armed:
                    regs._reset(ip)
                    wp.fire(regs, kind, a, size_, value, old, pc)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.t.fail(exc)
