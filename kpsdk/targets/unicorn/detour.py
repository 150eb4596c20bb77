"""Return probes' entries in guest code on the Unicorn target (the kretprobe's optprobe).

One module, because a detour's planning, its guest code and its settling change
together: each step's layout is the next one's input.

A kretprobe hit on the breakpoint or hook path is two calls into Python: one
at the function entry to save the return address and point it at the
trampoline, one at the trampoline to run the handler.  A call into Python from
a Unicorn hook, with the register reads a hit needs, costs several times what
the emulated function itself does, so two of them cannot get near the
1.5-1.75x of a kprobe hit that kprobes.rst gives for a return probe ("Probe
Overhead": a return-probe hit takes 50-75% longer than a kprobe hit).  The
entry needs no Python when there is no entry_handler: it is bookkeeping.  So,
as the kernel's optprobes replace a breakpoint by a jump to a detour buffer,
kpsdk replaces the first instructions of such a function by a jump to a
*detour* in its own area:

* the detour (the arch backend's ``entry_detour``, :class:`kpsdk.arch.EntryDetour`)
  takes an instance from a count kept in guest memory, writes the record
  ``(return address, entry sp)`` in the detour's own record array at the
  count's new value, points the return address at the detour's *return code*
  and jumps to
* the displaced instructions, copied out of line (each boostable, as a booster
  slot's), followed by a jump back to the function after them.

The return code (the backend's ``return_detour``, :class:`kpsdk.arch.ReturnDetour`)
is the detour's own trampoline.  In guest code it checks that the return is
the detour's newest unsettled call (the count is below the free instances
kpsdk holds, and that record's sp matches) and then reaches its *short* hook:
Python runs the handler and gives the instance back by bumping the count, and
nothing else (no shadow-stack node, no register read).  Anything else takes
the *general* hook: the records become shadow-stack nodes first
(:meth:`DetourEngine.settle`, which also runs when a run stops and before any
look at the shadow stacks) and the core's ``on_return`` decides, exactly as
for the shared trampoline of the hook path.  The count is kept equal to the
pool's free nodes minus the unsettled records: the guest decrements it, the
short hook and the pool's ``mirror`` raise it.

Guest stores are the dear part of the guest code (each takes Unicorn's slow
store path, about a sixth of a Python callback): the entry makes four (five
on i386) and the return code none.  That is why the detour clobbers the flags
and one scratch register the psABI leaves free at a call (r11, ip, t1), why
records are per detour (no shared log top to bump) and why the return code,
not a shared trampoline, knows its detour.

Whenever the guest code cannot decide alone it reaches one hooked instruction
(the *slow path*) with the entry's registers: no instance
left (Python may reclaim nodes left by a ``longjmp``, else counts ``nmissed``)
or the *gate* is shut, which kpsdk does while a handler runs nested code (K6:
such entries are missed).  That hook runs the probe's pre_handler as a normal
hit at the function entry.

An entry handler needs Python at the entry, but not the core's entry path: a
detour whose kretprobe has one also hooks its first displaced instruction
(the *resume hook*), which finds the call's record where the guest code left
it and runs only the handler, on the record's instance (record ``n``'s is the
pool's ``free_nodes[n]``, for the entry, the short hook and :meth:`settle`
alike, so ``ri.data`` goes from the entry handler to the return handler).
While the handler runs the record is hidden (the count given back), so the
call is not in flight yet, as on the hook path; a veto, an exception or an
unregistration unhooks it again.  A hit then costs one kprobe hit more than
a detoured one, instead of the hook path's two calls through the core.

A function whose entry cannot hold the jump (x86's 5 bytes over ``lea; ret``),
or whose entry is not safe to move (below), keeps a code hook at its entry, a
*hooked entry* (mechanism ``hooked-entry``): the hook does in Python what the
guest entry code does (two register reads, the record, the return address)
and the return still takes the detour's return code and short hook.

A function gets a detour (guest entry code) only when it is safe, as the
kernel checks for optprobes: the jump fits in whole boostable instructions inside the function,
no direct branch of the function lands inside them and, when more than one
instruction moves, the function has no indirect jump; the function does not
read the scratch register before writing it, nor the flags before its first
flag-setting instruction or branch (a thunk taking an argument there); the
kretprobe is the only active probe at the entry; ``kprobes_optimization`` is on.  Otherwise the
entry is a hooked entry, while the kretprobe is the only active probe there and
optimization is on; else it stays on the hook path.  A probe later placed inside
a detoured region makes the entry a hooked entry.  Reads never show the jump (K10).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import capstone

from kpsdk.arch import DetourCode, EntryDetour, ReturnDetour
from kpsdk.errors import TargetError

if TYPE_CHECKING:
    import mmap

    from kpsdk.manager import ProbePoint
    from kpsdk.probe import Probe
    from kpsdk.rethook import Rethook, RethookNode
    from kpsdk.targets.unicorn.host import UnicornHost

#: the guest-writable part of kpsdk's area: the gate, the shared trampolines' sp,
#: three words per detour, the records
DATA_SIZE = 0x40000
#: most detours at once
MAX_DETOURS = 240
#: one detour's code: the guest entry code, then (at RESUME_AT) the displaced
#: instructions and the jump back, then (at RETURN_AT) the return code
BLOCK_SIZE = 384
RESUME_AT = 192
RETURN_AT = 256
#: the records start after the header words
_RECORDS_AT = 0x2000
#: word 0 is the gate, word 2 the shared trampolines' sp; detour i's words start here
_WORDS_AT = 3


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
    #: the return code's address (Thumb bit included): what return addresses become
    tramp: int
    #: word indexes (in the guest data) of its count (the free count and the jump word
    #: follow) and of its first record; its records are ``rethook.count`` pairs of words
    avail_at: int
    records_at: int
    #: the slow path's hooked instruction; the hooks' handles (slow, short, general,
    #: and the resume hook where an entry handler runs after the guest entry code)
    hook_addr: int = 0
    hooks: tuple[int, ...] = ()
    #: the jump written over the entry (empty for a hooked entry): what another process that
    #: maps the function's file gets too (:mod:`kpsdk.targets.unicorn.processes`)
    jump: bytes = b""
    #: armed (False once disarmed: its blocks wait for the calls in flight)
    live: bool = True
    #: the slow path ran and its jump to the displaced instructions comes next: the
    #: resume hook lets that one pass (the entry's probe ran in full already)
    slow_passing: bool = False


class DetourEngine:
    """The detours of one Unicorn target, and the guest memory they share."""

    def __init__(self, target: UnicornHost, data: int, mem: mmap.mmap) -> None:
        self.target = target
        self.data = data
        arch = target.arch
        w = arch.word_size
        self._w = w
        #: the data as an array of native words: the fastest access Python has (the
        #: short hook reads three of them and writes one per return); detours need
        #: the target's byte order to be the host's (``plan``)
        self.words = memoryview(mem).cast("Q" if w == 8 else "I")
        data_endian = arch.detours.data_endian if arch.detours is not None else None
        self._native = (data_endian or arch.endian) == sys.byteorder
        #: where the shared trampolines store the stack pointer of each return (word 2)
        self.sp_word = data + 2 * w
        #: free runs of record pairs, as (first word index, pairs)
        self._holes: list[tuple[int, int]] = [(_RECORDS_AT // w, (DATA_SIZE - _RECORDS_AT) // (2 * w))]
        #: armed detours by entry address, and by slow-path hook address
        self.by_addr: dict[int, Detour] = {}
        self._by_hook: dict[int, Detour] = {}
        self._free_blocks: list[int] = []
        #: detours disarmed: their blocks and records come back when nothing can use them
        self._retired: list[Detour] = []
        #: every address a return address may hold instead of a real one (the shared
        #: trampolines and every detour's return code): the short hook's chain test
        self.traps: set[int] = set()
        #: lowest and highest byte any detour ever patched (cheap read-overlay test)
        self.lo, self.hi = 1 << 64, -1

    # -- planning ------------------------------------------------------------------------

    def plan(self, point: ProbePoint) -> int | None:
        """The number of entry bytes a detour at ``point`` displaces, 0 for a
        *hooked entry* (the entry stays a code hook, see :meth:`_entry_hook`: the
        entry cannot hold the jump), or
        None when it cannot have a detour at all (see the module docstring).
        The caller checked that the point's one active probe has an ``entry_rethook``."""
        arch, entry = self.target.arch, point.addr
        if arch.detours is None or arch.out_of_line is None or not self._native:
            return None
        rh = point.active[0].entry_rethook
        assert rh is not None
        if "detour_region" not in point.state:
            point.state["detour_region"] = self._region(point)
        region = point.state["detour_region"]
        assert region is None or isinstance(region, int)
        length = region or 0
        if length and any(other != entry and entry <= other < entry + length for other in self.target.manager.points):
            length = 0
        point.state["detour_plan"] = length
        if entry in self.by_addr:  # armed already
            return length
        if not self.target.running:
            self.recycle_blocks()
        if self._free_index() is None or not any(n >= rh.count for _, n in self._holes):
            return None  # every detour in use (or retired with calls in flight): the hook path serves
        block = self.peek_code()
        if block is None:
            return None
        if length and arch.detours.near_jump(entry, block, point.iset) is None:
            point.state["detour_plan"] = length = 0
        return length

    def _code(self) -> DetourCode:
        """The arch backend's detour code (plan() gives no detour to an arch without it)."""
        code: DetourCode = self.target.arch.require("detours", "a detoured kretprobe entry")
        return code

    def _free_index(self) -> int | None:
        """The lowest detour index neither armed nor retired, or None when all
        :data:`MAX_DETOURS` are taken."""
        taken = {d.index for d in self.by_addr.values()} | {d.index for d in self._retired}
        return next((i for i in range(MAX_DETOURS) if i not in taken), None)

    def _region(self, point: ProbePoint) -> int | None:
        t, arch, entry, iset = self.target, self.target.arch, point.addr, point.iset
        need = len(self._code().near_jump(entry, entry, iset) or b"")
        if not need or point.insn.condition is not None:
            return None
        sym = t.symbols.containing(entry)
        end = sym.address + sym.size if sym is not None and sym.size else None
        md = capstone.Cs(*iset.capstone)
        md.detail = True
        code = t.read_memory(entry, 32 if end is None else max(0, min(32, end - entry)))
        length, count = 0, 0
        for insn in md.disasm(code, entry):
            if not arch.insn.classify(insn)[0]:
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
        whole = t.read_memory(entry, end - entry) if end is not None and sym is not None else code
        if not self._scratch_is_free(md, whole, entry):
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

    def _scratch_is_free(self, md: capstone.Cs, code: bytes, entry: int) -> bool:
        """The function neither reads the detour's scratch register before it writes
        it (in address order) nor reads the flags before its first instruction
        that sets them or transfers control: the psABIs give them no meaning at a
        call, but a hand-written thunk may take an argument there."""
        code_of = self._code()
        scratch = set(code_of.scratch)
        flags = code_of.flags
        reads_flags = code_of.reads_flags or (lambda insn, reads: flags in reads)
        writes_flags = code_of.writes_flags or (lambda insn, writes: flags in writes)
        watch_flags = flags is not None
        access = code_of.regs_access or _regs_access
        for insn in md.disasm(code, entry):
            reads, writes = access(insn)
            if watch_flags and reads_flags(insn, reads):
                return False
            if scratch & reads:
                return False
            scratch -= writes
            transfers = any(insn.group(g) for g in (capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET))
            if watch_flags and (writes_flags(insn, writes) or transfers):
                watch_flags = False
            if not scratch and not watch_flags:
                break
        return True

    # -- arming --------------------------------------------------------------------------

    def peek_code(self) -> int | None:
        """Where the next detour's block goes, or None when kpsdk's area has no room."""
        if self._free_blocks:
            return self._free_blocks[-1]
        return self.target.peek_code(BLOCK_SIZE)

    def _take_records(self, count: int) -> int:
        for i, (at, n) in enumerate(self._holes):
            if n >= count:
                self._holes[i] = (at + 2 * count, n - count)
                return at
        raise AssertionError("plan() checked that the records fit")

    def _give_records(self, at: int, count: int) -> None:
        holes = sorted([*self._holes, (at, count)])
        merged: list[tuple[int, int]] = []
        for start, n in holes:
            if merged and merged[-1][0] + 2 * merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            elif n:
                merged.append((start, n))
        self._holes = merged

    def arm(self, point: ProbePoint, length: int) -> None:
        """Write the detour for ``point`` (planned: :meth:`plan` gave ``length``)."""
        t, arch, iset, entry, w = self.target, self.target.arch, point.iset, point.addr, self._w
        rh = point.active[0].entry_rethook
        assert rh is not None
        self.settle()
        block = self._free_blocks.pop() if self._free_blocks else t.alloc_code(BLOCK_SIZE)
        index = self._free_index()
        assert index is not None, "plan() checked that an index is free"
        avail_at = _WORDS_AT + 3 * index
        records_at = self._take_records(rh.count)
        thumb = 1 if iset.thumb_bit else 0
        tramp = (block + RETURN_AT) | thumb
        resume = block + RESUME_AT
        data = self.data
        code_of = self._code()
        ret_code, short, general = code_of.ret(
            block + RETURN_AT, iset, ReturnDetour(data + avail_at * w, data + records_at * w,
                                                  0 if arch.link else w))
        assert len(ret_code) <= BLOCK_SIZE - RETURN_AT
        if length:
            code, hook = code_of.entry(
                block, iset, EntryDetour(data, data + avail_at * w, data + records_at * w, tramp, resume))
            original = t.read_memory(entry, length)
            back = arch.require("out_of_line", "a detour").jump_back(resume + length, entry + length, iset)
            assert back is not None and len(code) <= RESUME_AT and length + len(back) <= RETURN_AT - RESUME_AT
            t.write_code(block, code)
            t.write_code(resume, original + back)
        else:  # a hooked entry: no guest entry code, the entry's own code hook does its work
            original, hook = b"", entry - block
        t.write_code(block + RETURN_AT, ret_code)
        det = Detour(point, point.active[0], rh, index, block, original, tramp, avail_at, records_at, block + hook)
        if not length:
            entry_hook = self._entry_hook(det)
        elif rh.entry is None:
            entry_hook = t.on_detour_slow
        else:
            entry_hook = self._slow_passing_hook(det)
        det.hooks = (t.hooks.code(entry_hook, det.hook_addr, det.hook_addr),
                     t.hooks.code(self._short_hook(det), block + RETURN_AT + short, block + RETURN_AT + short),
                     t.hooks.code(self._general_hook(det), block + RETURN_AT + general,
                                  block + RETURN_AT + general))
        if length and rh.entry is not None:
            det.hooks += (t.hooks.code(self._resume_hook(det), resume, resume),)
        self.by_addr[entry] = self._by_hook[det.hook_addr] = det
        self.traps.add(tramp)
        rh.mirror = mirror = self._mirror_for(avail_at)
        mirror(rh)
        if not length:
            return  # the caller drops the entry's translations, for the hook to be seen
        jump = code_of.near_jump(entry, block, iset)
        assert jump is not None, "plan() checked that the jump reaches the block"
        self.lo, self.hi = min(self.lo, entry), max(self.hi, entry + length)
        det.jump = jump
        t.patch(point, entry, jump)  # every process that maps the function's file gets the jump
        t.uc.ctl_remove_cache(entry, entry + length)

    def _mirror_for(self, at: int) -> Callable[[Rethook], None]:
        words = self.words

        def mirror(rh: Rethook) -> None:
            words[at] = words[at + 1] = len(rh.free_nodes)

        return mirror

    def disarm(self, point: ProbePoint) -> None:
        """Put the entry's bytes back.  Calls it already hooked keep their nodes; their
        returns still come to its return code, which now jumps to the shared
        trampoline (the core finds them by sp), so the block is retired until no
        node points there."""
        self.settle()
        det = self.by_addr.pop(point.addr)
        det.live = False
        t = self.target
        if det.original:
            t.patch(point, point.addr, det.original)
            t.uc.ctl_remove_cache(point.addr, point.addr + len(det.original))
        for handle in det.hooks:
            t.hooks.delete(handle)
        ret_at = det.block + RETURN_AT
        shared = t.trampoline_for(point.addr)
        jump = self._code().near_jump(ret_at, shared & ~1, point.iset)
        assert jump is not None, "the shared trampoline is in kpsdk's area, as the block"
        t.write_code(ret_at, jump)
        det.rethook.mirror = None
        self.words[det.avail_at] = self.words[det.avail_at + 1] = 0
        del self._by_hook[det.hook_addr]
        self._retired.append(det)

    def slow(self, hook_addr: int) -> Detour:
        """The detour whose slow-path instruction is at ``hook_addr``."""
        return self._by_hook[hook_addr]

    def mirror(self, det: Detour) -> None:
        """Set the guest's counts from the pool (after Python took a node)."""
        if det.rethook.mirror is not None:
            det.rethook.mirror(det.rethook)

    def covering(self, addr: int, size: int) -> list[Detour]:
        """Armed detours whose patched bytes overlap ``[addr, addr + size)``."""
        if addr >= self.hi or addr + size <= self.lo:
            return []
        return [d for a, d in self.by_addr.items()
                if d.original and a < addr + size and a + len(d.original) > addr]

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
        """Between runs no CPU is inside a disarmed detour's entry code: its block and
        records come back once no hooked call in flight returns to its code."""
        self.settle()
        core = self.target.rethook
        live = {n.slot for stack in core.stacks.values() for n in stack} if core is not None else set()
        keep = []
        for det in self._retired:
            if det.tramp in live:
                keep.append(det)
            else:
                self._free_blocks.append(det.block)
                self._give_records(det.records_at, det.rethook.count)
        self._retired = keep

    def _short_hook(self, det: Detour) -> Callable[[int, int, int, int], None]:
        """The code hook of ``det``'s short instruction: its newest unsettled call
        returns (the guest checked).  Runs the handler on a free node of the pool,
        which stays in the pool (the call never became a shadow-stack node), and
        gives the instance back by bumping the guest count.  The node is the one
        of the record's position (``free_nodes[n]`` for record ``n``, as
        :meth:`settle` assigns them): the one an entry handler saw at the entry,
        with the ``data`` it left.

        When the return is not that simple (the return address is itself a
        trampoline: a tail call into a hooked function; or the shadow stack holds
        deeper calls, left by a ``longjmp``, that this return drops) it takes the
        general way and writes the address to go on at into the record's first
        word, which the short instruction jumps through.

        One flat closure, because this is half of every such hit and every Python
        operation costs here: it must stay in step with ``ShadowStacks._finish``
        (K6 busy flag, detach when no rethook is left)."""
        t = self.target
        core = t.rethook
        assert core is not None
        words, traps, stacks, manager, regs = self.words, self.traps, core.stacks, t.manager, t.hit_regs
        hit, task, fail = regs._hit, t.current_task(), t.fail  # Unicorn runs one task
        av, rb, probe, rh = det.avail_at, det.records_at, det.probe, det.rethook
        returns = t.trampoline_probe(det.point.addr)  # list() counts hooked returns on the trampoline
        free, handler, direct = rh.free_nodes, rh.handler, rh.direct
        # the rethook's handler said as data (a kretprobe's): its owner's handler in this frame
        owner, fault = (direct.probe, direct.fault) if direct is not None and handler is not None else (None, None)

        def on_short(handle: int, addr: int, size: int, user: int) -> None:
            try:
                returns.hits += 1
                n = words[av]
                r = rb + 2 * n
                ra = words[r]
                stack = stacks.get(task)
                if ra in traps or (stack and stack[-1].frame <= words[r + 1]):
                    words[r] = self.general_return("a detour's return code")
                    return
                words[av] = n + 1
                probe.hits += 1
                node = free[n]
                node.ret_addr = hit[0] = ra
                hit[2] = None
                node.frame = words[r + 1]
                node.task = task
                busy, manager.busy = manager.busy, True
                try:
                    if owner is not None:  # the plugin's return wrapper, inlined (K4)
                        h = owner.handler
                        if h is not None:
                            try:
                                h(node, regs)
                            except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised
                                assert fault is not None
                                fault(owner, regs, exc, "handler")
                    elif handler is not None:
                        handler(node, regs)
                finally:
                    manager.busy = busy
                    if not core.rethooks:
                        core._maybe_detach()
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        return on_short

    def _entry_hook(self, det: Detour) -> Callable[[int, int, int, int], None]:
        """The code hook of a *hooked entry*: a function whose entry cannot hold the
        jump.  It does in Python what the guest entry code does (take a position
        from the guest count, write the record, point the return address at the
        detour's return code), so the return takes the detour's short hook as a
        detoured call's does.  An entry handler runs first, on record ``n``'s
        instance (``free_nodes[n]``, the one the return handler gets, ``data`` and
        all), as the hook path runs it before hooking the return: the call is not
        on the shadow stack yet and its return address is the real one while the
        handler runs; a veto, an exception or an unregistration leaves it unhooked.
        One flat closure (the plugin's entry wrapper inlined through
        ``Rethook.direct``, sp read by a bound ``uc_reg_read``): each Python frame
        is a fifth of a kprobe hit.

        What the guest code would leave to its slow path goes to the entry's
        probe as a normal hit (``on_detour_slow``): a reentrant hit (K6), no
        instance left, a return address that is a trampoline already (a tail
        call) or shadow-stack nodes the stack pointer has left (a ``longjmp``).
        It stays in step with the hook path's ``_hook_callback`` (``resuming``,
        a pending step ending here)."""
        t = self.target
        core = t.rethook
        assert core is not None
        words, traps, stacks, manager = self.words, self.traps, core.stacks, t.manager
        task, fail, slow, stepper = t.current_task(), t.fail, t.on_detour_slow, t.stepper
        av, rb, rh, point, tramp = det.avail_at, det.records_at, det.rethook, det.point, det.tramp
        free, entry_call, at, probe = rh.free_nodes, rh.entry, point.addr, det.probe
        direct = rh.direct
        # the plugin's entry wrapper said as data: the owner's entry_handler in this frame
        owner, fault = (direct.probe, direct.fault) if direct is not None else (None, None)
        regs, push_node = t.hit_regs, self._push_node
        hit = regs._hit
        arch = t.arch
        write = t.fast.write
        # sp (or the link register) read by uc_reg_read bound with partial: no Python frame
        fetch_sp, sp_buf = t.fast.fetcher(arch.register(arch.sp))
        link = arch.register(arch.link) if arch.link else None
        fetch_link, link_buf = t.fast.fetcher(link) if link is not None else (fetch_sp, sp_buf)
        read_word, hijack_word = t.read_word, t.hijack_word
        # [sp] in the host's copy of the stack, without read_word's and hijack_word's frames
        stack_mem, stack_lo, stack_last, word = t.stack_window()
        unpack_from, pack_into = word.unpack_from, word.pack_into
        # and as native words where the target's byte order is the host's: an aligned [sp]
        # is then an index, cheaper than a Struct call (~0.2 us each way here)
        wsize = word.size
        native = stack_last >= 0 and word.format[0] == ("<" if sys.byteorder == "little" else ">")
        stack_words = memoryview(stack_mem).cast("Q" if wsize == 8 else "I") if native else None
        wmask, wshift = wsize - 1, wsize.bit_length() - 1

        def on_entry(handle: int, addr: int, size: int, user: int) -> None:
            try:
                if point.resuming:
                    point.resuming = False
                    return
                if stepper.pending is not None:  # a step arriving here ends before this hit starts
                    stepper.reached(addr)
                n = words[av]
                if manager.busy or not n:
                    slow(handle, addr, size, user)
                    return
                fetch_sp()
                sp = sp_buf.value
                # the window is the stack of the process it was taken in (exec gives another)
                off = sp - stack_lo if t._stack_mem is stack_mem else -1
                slot = -1  # [sp]'s index in stack_words
                if link is not None:
                    fetch_link()
                    ra = link_buf.value
                elif 0 <= off <= stack_last:
                    if stack_words is not None and not off & wmask:
                        slot = off >> wshift
                        ra = stack_words[slot]
                    else:
                        ra = unpack_from(stack_mem, off)[0]
                else:  # a stack of the program's own making
                    ra = read_word(sp)
                stack = stacks.get(task)
                if ra in traps or (stack and stack[-1].frame <= sp):
                    slow(handle, addr, size, user)
                    return
                n -= 1
                if entry_call is not None:  # the entry handler first, on record n's instance
                    node = free[n]
                    node.task, node.frame, node.ret_addr, node.slot, node.chained = task, sp, ra, tramp, False
                    keep = False
                    manager.busy = True
                    hit[0] = None
                    hit[1] = at
                    hit[2] = None
                    try:
                        if owner is None:
                            keep = entry_call(node, regs)
                        else:  # the plugin's _entry_call, inlined (a veto, K4, unregistered meanwhile)
                            h = owner.entry_handler
                            if h is None:
                                keep = not rh.freed
                            else:
                                try:  # the truth test is the handler's too
                                    keep = not h(node, regs) and not rh.freed
                                except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised
                                    assert fault is not None
                                    fault(owner, regs, exc, "entry_handler")
                    finally:
                        manager.busy = False
                        if not keep:  # vetoed, unregistered or raised: nothing was hooked yet
                            probe.hits += 1
                    if not keep:
                        return
                    if not (det.live and words[av] == n + 1 and len(free) > n and free[n] is node):
                        push_node(det, node)  # the handler changed the pool: the core's way
                        n = -1
                if n >= 0:
                    words[av] = n
                    r = rb + 2 * n
                    words[r] = ra
                    words[r + 1] = sp
                if slot >= 0:
                    stack_words[slot] = tramp  # type: ignore[index]  # slot >= 0: stack_words is set
                elif link is not None:
                    write(link, tramp)
                elif 0 <= off <= stack_last:
                    pack_into(stack_mem, off, tramp)
                else:
                    hijack_word(sp, tramp)
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        return on_entry

    def _slow_passing_hook(self, det: Detour) -> Callable[[int, int, int, int], None]:
        """The slow-path hook of a detour whose rethook has an entry handler: the
        entry's probe runs in full (its pre_handler runs the entry handler), and
        the resume hook, next, must not run it again."""
        t, slow = self.target, self.target.on_detour_slow

        def on_slow(handle: int, addr: int, size: int, user: int) -> None:
            slow(handle, addr, size, user)
            det.slow_passing = not t.failed

        return on_slow

    def _resume_hook(self, det: Detour) -> Callable[[int, int, int, int], None]:
        """The code hook on the displaced instructions of a detour whose rethook has an
        entry handler: the guest entry code hooked the call (record ``n``, the
        count's value now) and Python runs only the entry handler, on that
        record's instance.  While it runs, the record is hidden (the count given
        back), so that the call is not in flight yet, as on the hook path: what
        the handler looks at or unregisters does not see it.  The return address
        points at the return code already (``ri.ret_addr`` is the real one).
        The plugin's entry wrapper is done in this frame where ``Rethook.direct``
        says what it does (docs/performance.md: each frame is a fifth of a kprobe hit)."""
        t = self.target
        core = t.rethook
        assert core is not None
        words, fail, traps, stacks, settle = self.words, t.fail, self.traps, core.stacks, self.settle
        task = t.current_task()
        av, rb, rh, tramp = det.avail_at, det.records_at, det.rethook, det.tramp
        free, entry_call, at = rh.free_nodes, rh.entry, det.point.addr
        assert entry_call is not None
        manager, regs, hijack = t.manager, t.hit_regs, self._hijack
        hit = regs._hit
        run_entry, push_node = self._run_entry, self._push_node
        direct = rh.direct
        # the plugin's entry wrapper said as data: the owner's entry_handler in this frame
        owner, fault = (direct.probe, direct.fault) if direct is not None else (None, None)

        def on_resume(handle: int, addr: int, size: int, user: int) -> None:
            try:
                if det.slow_passing:
                    det.slow_passing = False
                    return
                n = words[av]
                r = rb + 2 * n
                sp = words[r + 1]
                ra = words[r]
                node = free[n]
                stack = stacks.get(task)
                if ra in traps or (stack and stack[-1].frame <= sp):
                    chained(n, node, sp, ra)
                    return
                node.task, node.frame, node.ret_addr, node.slot, node.chained = task, sp, ra, tramp, False
                words[av] = n + 1  # hidden while the handler runs
                keep = False
                manager.busy = True  # _run_entry, inlined: this is half of every such hit
                hit[0] = None
                hit[1] = at
                hit[2] = None
                try:
                    if owner is None:
                        keep = entry_call(node, regs)
                    else:  # the plugin's _entry_call, inlined (a veto, K4, unregistered meanwhile)
                        h = owner.entry_handler
                        if h is None:
                            keep = not rh.freed
                        else:
                            try:  # the truth test is the handler's too
                                keep = not h(node, regs) and not rh.freed
                            except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised
                                assert fault is not None
                                fault(owner, regs, exc, "entry_handler")
                finally:
                    manager.busy = False
                    if not keep:  # vetoed, unregistered or raised: the call goes unhooked
                        det.probe.hits += 1
                        hijack(sp, ra)
                if keep:
                    if det.live and words[av] == n + 1 and len(free) > n and free[n] is node:
                        words[av] = n
                    else:
                        push_node(det, node)
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        def chained(n: int, node: RethookNode, sp: int, ra: int) -> None:
            """A tail call (chained) or a longjmp's leftovers: the core decides, as at an
            entry; the node comes off the top of the stack while the handler runs."""
            settle()
            stack = stacks[task]
            assert stack[-1] is node, "the newest call is on top once settled"
            stack.pop()
            keep = False
            try:
                keep = run_entry(det, node)
            finally:
                if not keep:
                    node.rethook.recycle(node)
                    hijack(sp, ra)
            if keep:
                stacks[task].append(node)

        return on_resume

    def _run_entry(self, det: Detour, node: RethookNode) -> bool:
        """The entry handler on ``node``, as the entry's probe's hit would run it
        (K6 busy flag, ``regs.ip`` the entry): True keeps the call hooked."""
        t = self.target
        entry_call = det.rethook.entry
        assert entry_call is not None
        manager, hit = t.manager, t.hit_regs._hit
        manager.busy = True
        hit[0] = None
        hit[1] = det.point.addr
        hit[2] = None
        try:
            return entry_call(node, t.hit_regs)
        finally:
            manager.busy = False

    def _push_node(self, det: Detour, node: RethookNode) -> None:
        """Hook a kept call through the core after its entry handler changed the pool:
        the node out of the pool, onto the shadow stack, with the return code as its slot."""
        rh, core = det.rethook, self.target.rethook
        assert core is not None
        if node in rh.free_nodes:
            rh.free_nodes.remove(node)
        if rh.mirror is not None:
            rh.mirror(rh)
        det.probe.hits += 1
        core.entered(node, node.frame, node.ret_addr, det.tramp)

    def _hijack(self, sp: int, value: int) -> None:
        """Write the return address of the call entered at ``sp`` (link register or [sp])."""
        t = self.target
        if t.arch.link is not None:
            t.fast.write(t.arch.register(t.arch.link), value)
        else:
            t.hijack_word(sp, value)

    def _general_hook(self, det: Detour) -> Callable[[int, int, int, int], None]:
        """The code hook of ``det``'s general instruction, which jumps through the
        detour's jump word: the core decides, as at the shared trampoline."""
        words, at, fail = self.words, det.avail_at + 2, self.target.fail
        returns = self.target.trampoline_probe(det.point.addr)

        def on_general(handle: int, addr: int, size: int, user: int) -> None:
            try:
                returns.hits += 1
                words[at] = self.general_return("a detour's return code")
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        return on_general

    def general_return(self, where: str) -> int:
        """A hooked return reached ``where`` (a trampoline, a detour's return code):
        settle, then let the core run the returning call's handlers; the real
        return address to go on at."""
        self.settle()
        t = self.target
        assert t.rethook is not None
        t.fast.hit[2] = None  # a return is a new hit: no argument snapshot of an earlier one
        ret = t.rethook.on_return(t.hit_regs, True)
        if ret is None:
            raise TargetError(f"kretprobe BUG!: a return reached {where} with sp={t.hit_regs.sp:#x} "
                              "and no hooked call in flight returns there")
        return ret

    def settle(self) -> None:
        """Put the entries the guest recorded on the shadow stacks, oldest first: by
        entry sp, highest first (the live calls of one task nest), and calls
        at one sp (tail calls) in the order their return addresses chain."""
        words = self.words
        pending: list[_Pending] = []
        for det in self.by_addr.values():
            n, m = words[det.avail_at], words[det.avail_at + 1]
            if n < m:
                # record j's instance is free_nodes[j] (the entry hook and the short hook use
                # the same one): taken off the pool before any push can give nodes back
                free = det.rethook.free_nodes
                assert m == len(free), "the guest's free count mirrors the pool"
                nodes = free[n:m]
                del free[n:]
                rb = det.records_at
                pending += [(words[rb + 2 * j + 1], words[rb + 2 * j], j, det, nodes[j - n])
                            for j in range(m - 1, n - 1, -1)]
        if not pending:
            return
        core = self.target.rethook
        assert core is not None, "detours exist only while return probes are attached"
        for det in {rec[3].index: rec[3] for rec in pending}.values():
            self.mirror(det)
        for frame, ra, _, det, node in _oldest_first(pending):
            det.probe.hits += 1
            core.entered(node, frame, ra, det.tramp)


def _regs_access(insn: capstone.CsInsn) -> tuple[set[str], set[str]]:
    """Names of the registers ``insn`` reads and writes, explicit and implicit."""
    read, written = insn.regs_access()
    return {insn.reg_name(r) for r in read}, {insn.reg_name(r) for r in written}


#: a record waiting to be settled: (entry sp, return address, position, detour, its instance)
_Pending = tuple[int, int, int, "Detour", "RethookNode"]


def _oldest_first(pending: list[_Pending]) -> list[_Pending]:
    """Records (frame, return address, position, detour, instance) in the order the calls
    began: frames from the highest; at one frame (a chain of tail calls, each
    entry finding the previous one's return code as its return address) the
    one with a real return address first, then each whose return address is the
    previous one's return code (of one detour, the older record first)."""
    pending.sort(key=lambda rec: -rec[0])
    out: list[_Pending] = []
    i = 0
    while i < len(pending):
        j = i
        while j < len(pending) and pending[j][0] == pending[i][0]:
            j += 1
        group = pending[i:j]
        if len(group) > 1:
            tramps = {rec[3].tramp for rec in group}
            ordered = [rec for rec in group if rec[1] not in tramps][:1] or group[:1]
            rest = [rec for rec in group if rec is not ordered[0]]
            while rest:
                nxt = [rec for rec in rest if rec[1] == ordered[-1][3].tramp] or rest
                pick = max(nxt, key=lambda rec: rec[2])
                ordered.append(pick)
                rest.remove(pick)
            group = ordered
        out += group
        i = j
    return out
