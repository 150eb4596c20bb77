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
re-running the instruction would store twice.  What works, measured on the five
archs Unicorn runs here:

1. **Detect** with a memory hook bound to the watched range (so no other access
   calls Python; every load and store still pays Unicorn's memory-hook check,
   see bench row ``W``).  The hook exists only while a data watchpoint is armed.
2. **Abort precisely**: the hook takes away the permissions of the mapped
   region holding the access (the whole region: splitting one from a hook
   crashes Unicorn).  The access it was called for then faults, and Unicorn's
   faults are precise: the CPU is back at the start of the accessing
   instruction, with nothing of it done (measured: ``push``, ``xchg``, ``call``,
   ``rep stos``, ``add [mem]``).
3. **Re-execute once, watching**: the region gets its permissions back, one-shot
   code hooks go on the instruction's successors (the arch backend's
   ``successors()``, as kprobes' software single-step uses), and the CPU runs
   the instruction again.  The memory hook, now in recording mode, notes each
   access in the range (address, size, value, the old bytes for a write).
4. **Report at the next instruction**: the first successor hook runs the
   handlers.  ``regs`` is the CPU after the instruction (``regs.ip`` is the
   next instruction to execute, as x86 reports a data breakpoint), memory has
   changed, and ``access.pc`` is the accessing instruction.

The cost of a hit is therefore a fault, a restart, two hooks and the
retranslation of the code around (~120 us, bench row ``W``); the cost of a
watchpoint that never fires is the memory hook's (1.5-1.7x on a load/store loop).
Adding or deleting a memory hook drops the translated code: code translated
before a read hook existed never calls it, and code translated with one keeps
paying for it after it is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import unicorn

if TYPE_CHECKING:
    from kpsdk.targets.uchost import UnicornHost

_KIND = {unicorn.UC_MEM_WRITE: "w", unicorn.UC_MEM_READ: "r"}


@dataclass
class _Step:
    """The accessing instruction being re-executed, and what it accessed."""

    pc: int
    hooks: list[int]
    accesses: list[tuple[Any, str, int, int, int, int | None]] = field(default_factory=list)


class UcWatch:
    """The watchpoint engine of one Unicorn target (seen through :class:`~kpsdk.targets.uchost.UnicornHost`)."""

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
        kinds = (unicorn.UC_HOOK_MEM_WRITE if "w" in wp.type else 0) | (
            unicorn.UC_HOOK_MEM_READ if "r" in wp.type else 0)
        self._mem[wp] = self.uc.hook_add(kinds, self._on_mem, wp, addr, addr + length - 1)
        self._drop_code()  # code translated before a read hook existed loads without calling it (measured)

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
            self.uc.hook_del(handle)
            self._retranslate()
        if self._step is not None:
            self._step.accesses = [a for a in self._step.accesses if a[0] is not wp]

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

    @property
    def hooked(self) -> int:
        """Memory hooks installed now (0 when no data watchpoint is armed)."""
        return len(self._mem)

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
        """Step 1 (detect: abort the access) or step 3 (re-executing: record it)."""
        try:
            kind = _KIND.get(access)
            if kind is None:
                return
            step = self._step
            if step is not None:
                old = int.from_bytes(self.uc.mem_read(addr, size), self.t.arch.endian)
                if kind == "w":
                    step.accesses.append((wp, kind, addr, size, value & ((1 << (8 * size)) - 1), old))
                else:
                    step.accesses.append((wp, kind, addr, size, old, None))
                return
            if self._abort is not None or not wp.armed:
                return  # a second watchpoint on the same access: the first one aborts it
            if self.t.manager.busy:
                wp.nmissed += 1  # K6: a handler is running (one that calls target code)
                return
            pc = self.t.read_pc()
            saved = self._regions(addr, size)
            for start, length, _perms in saved:
                self.uc.mem_protect(start, length, unicorn.UC_PROT_NONE)
            self._abort = (pc, saved)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.t.fail(exc)

    def _regions(self, addr: int, size: int) -> list[tuple[int, int, int]]:
        """``(start, length, perms)`` of the whole mapped regions holding [addr, addr+size).

        Whole regions: protecting part of one makes Unicorn split it, which crashes
        the process when done from a memory hook (measured: a watched stack slot).
        """
        last = addr + size - 1
        return [(start, end - start + 1, perms) for start, end, perms in self.uc.mem_regions()
                if start <= last and end >= addr]

    def resume_after_fault(self) -> int | None:
        """Step 3, called by the target when the emulation stopped with a fault: if it was
        the abort of step 2, restore the page, arm the successor hooks and return where to
        resume (the accessing instruction); None when the fault is not ours."""
        abort, self._abort = self._abort, None
        if abort is None:
            return None
        pc, saved = abort
        for start, length, perms in saved:
            self.uc.mem_protect(start, length, perms)
        t = self.t
        arch = t.arch
        iset = t.running_iset()
        code = bytes(self.uc.mem_read(pc, 16))
        insn = self._insns.get((pc, code))
        if insn is None:
            insn = self._insns[(pc, code)] = next(arch.disassembler(iset).disasm(code, pc, 1))
        if self._step is not None:  # left over from a run that ended inside a step
            for h in self._step.hooks:
                t.hooks.delete(h)
            self._step = None
        hooks = t.successor_hooks(insn, self._on_after)
        if hooks is None:
            from kpsdk.errors import TargetError

            raise TargetError(f"a watched access by {insn.mnemonic} {insn.op_str} at {t.symbols.format(pc)} "
                              "cannot be followed to its next instruction (a trap)")
        self.uc.ctl_remove_cache(pc, pc + insn.size)
        self._step = _Step(pc, hooks)
        point = t.hook_point(pc)
        if point is not None:  # its kprobe ran before the access: do not run it again
            point.resuming = True
        return t.begin_at(pc | (1 if iset.thumb_bit else 0))

    def _unslot(self, addr: int) -> int:
        """The program's address for one in a kprobe booster slot (the copy of a probed
        instruction, then its jump back): the accessing instruction may run from there."""
        point = self.t.slot_point(addr)
        if point is None:
            return addr
        slot = point.state["slot"]
        return point.addr + min(addr - slot, point.insn.size)  # type: ignore[operator]

    def _on_after(self, handle: int, addr: int, size: int, user: int) -> None:
        """Step 4: the accessing instruction is done; run the handlers of what it accessed."""
        try:
            step = self._step
            if step is None:
                return
            self._step = None
            for h in step.hooks:
                self.t.hooks.delete(h)
            regs = self.t.hit_regs
            ip, pc = self._unslot(addr), self._unslot(step.pc)
            for wp, kind, a, size_, value, old in step.accesses:
                if wp.armed:
                    regs._reset(ip)
                    wp.fire(regs, kind, a, size_, value, old, pc)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.t.fail(exc)
