"""Return probes' entries in guest code on the Unicorn target (the kretprobe's optprobe).

A kretprobe hit on the breakpoint or hook path is two calls into Python: one
at the function entry to save the return address and point it at the
trampoline, one at the trampoline to run the handler.  A call into Python from
a Unicorn hook, with the register reads a hit needs, costs several times what
the emulated function itself does, so two of them cannot get near the seed's
1.5-1.75x of a kprobe hit.  The entry needs no Python when there is no
entry_handler: it is bookkeeping.  So, as the kernel's optprobes replace a
breakpoint by a jump to a detour buffer, kpsdk replaces the first instructions
of such a function by a jump to a *detour* in its own area:

* the detour (the arch backend's ``entry_detour``, :class:`kpsdk.arch.EntryDetour`)
  takes an instance from a count kept in guest memory, appends the record
  ``(return address, entry sp, detour index)`` to a log, points the return
  address at the trampoline, and jumps to
* the displaced instructions, copied out of line (each boostable, as a booster
  slot's), followed by a jump back to the function after them.

Python learns of the entries later, from the log (:meth:`DetourEngine.settle`,
called before every return the trampoline reports, when a run stops and
before any look at the shadow stacks): each record becomes a node on the
shadow stack exactly as :meth:`kpsdk.rethook.ShadowStacks.push` would have
made it at the entry.  The count of available instances is kept equal to the
pool's free nodes minus the unsettled records: the guest decrements it, the
pool's ``mirror`` sets it when a node comes back.

Whenever the guest code cannot decide alone it leaves every register as it
found them and reaches one hooked instruction (the *slow path*): no instance
left (Python may reclaim nodes left by a ``longjmp``, else counts ``nmissed``)
or the *gate* is shut, which kpsdk does while a handler runs nested code (K6:
such entries are missed).  That hook runs the probe's pre_handler as a normal
hit at the function entry.

A function gets a detour only when it is safe, as the kernel checks for
optprobes: the jump fits in whole boostable instructions inside the function,
no direct branch of the function lands inside them and, when more than one
instruction moves, the function has no indirect jump; the kretprobe is the
only active probe at the entry; ``kprobes_optimization`` is on.  Otherwise the
entry stays on the hook path.  A probe later placed inside a detoured region
sends the entry back to the hook path.  Reads never show the jump (K10).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import capstone

from kpsdk.arch import EntryDetour

if TYPE_CHECKING:
    import mmap

    from kpsdk.manager import ProbePoint
    from kpsdk.probe import Probe
    from kpsdk.rethook import Rethook
    from kpsdk.targets.unicorn import UnicornTarget

#: the guest-writable part of kpsdk's area: gate, log top, available counts, log
DATA_SIZE = 0x40000
#: most detours at once (their index must fit every arch's immediate forms)
MAX_DETOURS = 240
#: one detour's code: the guest entry code, then (at RESUME_AT) the displaced
#: instructions and the jump back
BLOCK_SIZE = 256
RESUME_AT = 192
#: the log starts after the header words
_LOG_AT = 0x1000


@dataclass
class Detour:
    """One function entry done in guest code."""

    point: ProbePoint
    probe: Probe
    rethook: Rethook
    index: int
    block: int
    #: the entry bytes the jump replaced (reads show these)
    original: bytes
    tramp: int
    #: index of its available-instances word in the guest data's words
    avail_at: int = 0
    #: the slow path's hooked instruction, and the hook's handle
    hook_addr: int = 0
    hook: int = 0


class DetourEngine:
    """The detours of one Unicorn target, and the guest memory they share."""

    def __init__(self, target: UnicornTarget, data: int, mem: mmap.mmap) -> None:
        self.target = target
        self.data = data
        arch = target.arch
        w = arch.word_size
        self._w = w
        #: the data as an array of native words: the fastest access Python has (the
        #: short way reads and writes five of them per return); detours need the
        #: target's byte order to be the host's (``plan``)
        self.words = memoryview(mem).cast("Q" if w == 8 else "I")
        self._native = arch.endian == sys.byteorder
        self.log_base = data + _LOG_AT
        self._one_record = self.log_base + 3 * w  # a record: return address, entry sp, detour index
        #: where the trampolines store the stack pointer of each return (word 2)
        self.sp_word = data + 2 * w
        self.capacity = (DATA_SIZE - _LOG_AT) // (3 * w)
        self.words[1] = self.log_base
        #: armed detours by entry address, and by index
        self.by_addr: dict[int, Detour] = {}
        self._by_index: dict[int, Detour] = {}
        self._by_hook: dict[int, Detour] = {}
        self._free_blocks: list[int] = []
        #: blocks of detours disarmed during a run: the CPU may still be in one
        self._retired: list[int] = []
        #: the return hook's short way (:meth:`_short_way`), made with the first detour
        self.short_way: Callable[[], int | None] = lambda: None
        #: lowest and highest byte any detour ever patched (cheap read-overlay test)
        self.lo, self.hi = 1 << 64, -1

    # -- planning ------------------------------------------------------------------------

    def plan(self, point: ProbePoint) -> int | None:
        """The number of entry bytes a detour at ``point`` displaces, or None when it
        cannot have one (see the module docstring).  The caller checked that the
        point's one active probe has an ``entry_rethook``."""
        arch, entry = self.target.arch, point.addr
        if "entry_detour" not in arch.extra or not self._native:
            return None
        if "detour_plan" not in point.state:
            point.state["detour_plan"] = self._region(point)
        length = point.state["detour_plan"]
        if length is None:
            return None
        assert isinstance(length, int)
        if any(other != entry and entry <= other < entry + length for other in self.target.manager.points):
            return None
        if entry in self.by_addr:  # armed already
            return length
        rh = point.active[0].entry_rethook
        assert rh is not None
        if len(self.by_addr) >= MAX_DETOURS or self._reserved() + rh.count > self.capacity:
            return None
        return length if arch.extra["near_jump"](entry, self._peek_block(), point.iset) is not None else None

    def _reserved(self) -> int:
        return sum(d.rethook.count for d in self.by_addr.values())

    def _region(self, point: ProbePoint) -> int | None:
        t, arch, entry, iset = self.target, self.target.arch, point.addr, point.iset
        need = len(arch.extra["near_jump"](entry, entry, iset) or b"")
        if not need or point.insn.condition is not None:
            return None
        sym = t.symbols.containing(entry)
        end = sym.address + sym.size if sym is not None and sym.size else None
        md = capstone.Cs(*iset.capstone)
        md.detail = True
        code = t.read_memory(entry, 32 if end is None else max(0, min(32, end - entry)))
        length, count = 0, 0
        for insn in md.disasm(code, entry):
            if not arch.extra["classify"](insn)[0]:
                return None
            length += insn.size
            count += 1
            if length >= need:
                break
        if length < need:
            return None
        if count > 1:
            if sym is None or end is None or not self._no_branch_into(md, sym.address, end, entry, length):
                return None
        return length

    def _no_branch_into(self, md: capstone.Cs, start: int, end: int, entry: int, length: int) -> bool:
        """No direct branch of the function lands inside the region after its first
        byte, and the function has no indirect jump (its target could)."""
        link = self.target.arch.link
        for insn in md.disasm(self.target.read_memory(start, end - start), start):
            if not (insn.group(capstone.CS_GRP_JUMP) or insn.group(capstone.CS_GRP_CALL)
                    or insn.group(capstone.CS_GRP_BRANCH_RELATIVE)):
                continue
            if insn.group(capstone.CS_GRP_RET):
                continue
            imms = [op.imm for op in insn.operands if op.type == capstone.CS_OP_IMM]
            if imms:
                if any(entry < target < entry + length for target in imms):
                    return False
            elif not insn.group(capstone.CS_GRP_CALL):
                regs = {insn.reg_name(op.reg) for op in insn.operands if op.type == capstone.CS_OP_REG}
                if link is None or regs != {link}:  # ``bx lr``/``jr ra`` return; anything else may land inside
                    return False
        return True

    # -- arming --------------------------------------------------------------------------

    def _peek_block(self) -> int:
        if self._free_blocks:
            return self._free_blocks[-1]
        return self.target._peek_block()

    def arm(self, point: ProbePoint, length: int) -> None:
        """Write the detour for ``point`` (planned: :meth:`plan` gave ``length``)."""
        t, arch, iset, entry = self.target, self.target.arch, point.iset, point.addr
        rh = point.active[0].entry_rethook
        assert rh is not None
        self.settle()
        if not self.by_addr:
            self.short_way = self._short_way()
        block = self._free_blocks.pop() if self._free_blocks else t._alloc_block(BLOCK_SIZE)
        index = min(set(range(MAX_DETOURS)) - set(self._by_index))
        tramp = t.trampoline_for(entry)
        avail_at = 3 + index  # after the gate, the log top and the trampolines' sp
        resume = block + RESUME_AT
        code, hook = arch.extra["entry_detour"](
            block, iset, EntryDetour(self.data, self.data + avail_at * self._w, index, tramp, resume))
        original = t.read_memory(entry, length)
        back = arch.extra["jump_back"](resume + length, entry + length, iset)
        assert back is not None and len(code) <= RESUME_AT and length + len(back) <= BLOCK_SIZE - RESUME_AT
        t._write_code(block, code)
        t._write_code(resume, original + back)
        det = Detour(point, point.active[0], rh, index, block, original, tramp, avail_at, block + hook)
        det.hook = t.hooks.code(t._on_detour_slow, det.hook_addr, det.hook_addr)
        self.by_addr[entry] = self._by_index[index] = self._by_hook[det.hook_addr] = det
        rh.mirror = mirror = self._mirror_for(avail_at)
        mirror(rh)
        jump = arch.extra["near_jump"](entry, block, iset)
        self.lo, self.hi = min(self.lo, entry), max(self.hi, entry + length)
        t.uc.mem_write(entry, jump)
        t.uc.ctl_remove_cache(entry, entry + length)

    def _mirror_for(self, at: int) -> Callable[[Rethook], None]:
        words = self.words

        def mirror(rh: Rethook) -> None:
            words[at] = len(rh.free_nodes)

        return mirror

    def disarm(self, point: ProbePoint) -> None:
        """Put the entry's bytes back; calls it already hooked keep their nodes."""
        det = self.by_addr.pop(point.addr)
        self.settle()
        t = self.target
        t.uc.mem_write(point.addr, det.original)
        t.uc.ctl_remove_cache(point.addr, point.addr + len(det.original))
        t.hooks.delete(det.hook)
        det.rethook.mirror = None
        self.words[det.avail_at] = 0
        del self._by_index[det.index]
        del self._by_hook[det.hook_addr]
        self._retired.append(det.block)

    def slow(self, hook_addr: int) -> Detour:
        """The detour whose slow-path instruction is at ``hook_addr``."""
        return self._by_hook[hook_addr]

    def mirror(self, det: Detour) -> None:
        """Set the guest's available count from the pool (after Python took a node)."""
        if det.rethook.mirror is not None:
            det.rethook.mirror(det.rethook)

    def covering(self, addr: int, size: int) -> list[Detour]:
        """Armed detours whose patched bytes overlap ``[addr, addr + size)``."""
        if addr >= self.hi or addr + size <= self.lo:
            return []
        return [d for a, d in self.by_addr.items() if a < addr + size and a + len(d.original) > addr]

    def clashing(self, point: ProbePoint) -> ProbePoint | None:
        """The detoured entry whose displaced bytes hold ``point`` (not its own)."""
        for d in self.covering(point.addr, 1):
            if d.point is not point:
                return d.point
        return None

    # -- runs ----------------------------------------------------------------------------

    def set_gate(self, shut: bool) -> int:
        """Shut (send every entry to the slow path) or open the gate; returns the old value."""
        old = int(self.words[0])
        self.words[0] = 1 if shut else 0
        return old

    def restore_gate(self, old: int) -> None:
        self.words[0] = old

    def recycle_blocks(self) -> None:
        """Between runs no CPU is inside a disarmed detour: its block may be reused."""
        self._free_blocks += self._retired
        self._retired.clear()

    def _short_way(self) -> Callable[[], int | None]:
        """The return hook's short way, for the usual kretprobe hit of a leaf function:
        a return reaches the trampoline while exactly one detoured entry is
        unsettled, and it is that call returning (the sp the trampoline stored
        is the entry's plus the core's ``ret_sp_offset``), with no older hooked
        call at or below its frame.  It does what ``core.entered`` then
        ``core.on_return`` would (the node never goes on the shadow stack) and
        returns the address to resume at; otherwise it changes nothing and
        returns None (settle, then ``core.on_return``).

        One flat closure, because this is half of every such hit and every
        Python call costs here: it must stay in step with
        ``ShadowStacks._finish`` (K6 busy flag, give the node back unless its
        pool was freed, detach when no rethook is left)."""
        core = self.target.rethook
        assert core is not None
        words, w = self.words, self._w
        one, base, rec = self._one_record, self.log_base, _LOG_AT // w
        sp_at, ret_sp_offset, stacks, by_index = (self.sp_word - self.data) // w, core.ret_sp_offset, core.stacks, \
            self._by_index
        task = self.target.current_task()  # Unicorn runs one task
        manager, regs = self.target.manager, self.target._regs
        hit = regs._hit

        def short_way() -> int | None:
            if words[1] != one:
                return None
            frame = words[rec + 1]
            if words[sp_at] != frame + ret_sp_offset:
                return None
            stack = stacks.get(task)
            if stack and stack[-1].frame <= frame:  # stale frames to drop, or a chain: the general path
                return None
            words[1] = base
            ra = words[rec]
            det = by_index[words[rec + 2]]
            det.probe.hits += 1
            rh = det.rethook
            node = rh.free_nodes.pop()
            node.task, node.frame, node.ret_addr, node.chained, node.slot = task, frame, ra, False, det.tramp
            hit[0] = ra  # regs.ip: the real return address
            busy, manager.busy = manager.busy, True
            try:
                handler = rh.handler
                if handler is not None:
                    handler(node, regs)
            finally:
                manager.busy = busy
                if not rh.freed:
                    free = rh.free_nodes
                    free.append(node)
                    words[det.avail_at] = len(free)
                if not core.rethooks:
                    core._maybe_detach()
            return ra

        return short_way

    def settle(self) -> None:
        """Put the entries the guest logged on the shadow stacks, oldest first."""
        words = self.words
        top = words[1]
        if top == self.log_base:
            return
        core = self.target.rethook
        assert core is not None, "detours exist only while return probes are attached"
        words[1] = self.log_base
        by_index, w = self._by_index, self._w
        for i in range(_LOG_AT // w, (top - self.data) // w, 3):
            det = by_index[words[i + 2]]
            det.probe.hits += 1
            core.entered(det.rethook.free_nodes.pop(), words[i + 1], words[i], det.tramp)
