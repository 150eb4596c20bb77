"""Return probes on the Unicorn target: the trampolines hooked calls return through.

A hooked call's return address is replaced by a trampoline in kpsdk's area with an internal
probe on it (``kretprobe_trampoline`` in ``list()``; ARM has a second one for Thumb code).
The trampoline is an indirect jump through a word next to it (the arch backend's
``return_jump``).  Its code hook asks the core which call returned and writes the real return
address into that word, and the jump takes the CPU there.  No pc write: a pc written from a
hook ends the translation block, which cost more than the rest of the return put together.
A kretprobe whose entry is detoured (:mod:`kpsdk.targets.unicorn.detour`) returns through its
detour's own return code instead, which counts on the same trampoline probe.

A part of :class:`~kpsdk.targets.unicorn.target.UnicornTarget` of its own because it is the
target's side of :mod:`kpsdk.rethook` (the methods the core calls), with its own state (the
trampolines and their internal probes).  A mixin rather than an object the target owns, and
that is the honest cut: the core calls :meth:`~ReturnProbes.hijack_return` on every entry of a
hooked call, and it must stay one call deep; the trampolines' hooks are closures made here, so
a return costs what it did.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kpsdk.binfmt.symbols import Symbol
from kpsdk.probe import Probe
from kpsdk.target import Target
from kpsdk.targets.unicorn.layout import SLOT_SIZE

if TYPE_CHECKING:
    import mmap
    import struct

    from kpsdk.manager import ProbePoint
    from kpsdk.regs import PtRegs
    from kpsdk.rethook import RethookNode, ShadowStacks
    from kpsdk.targets.unicorn.detour import DetourEngine
    from kpsdk.targets.unicorn.fast import FastRegs


class ReturnProbes(Target):
    """The return-probe part of the Unicorn target (a mixin of
    :class:`~kpsdk.targets.unicorn.target.UnicornTarget`; see the module's docstring)."""

    # what this part uses of the target's others (set up in UnicornTarget.__init__ and setup_area)
    fast: FastRegs
    hit_regs: PtRegs
    detours: DetourEngine | None
    _area: int
    _area_words: memoryview
    _area_mem: mmap.mmap | None
    _word: struct.Struct

    if TYPE_CHECKING:
        def fail(self, exc: BaseException) -> None: ...

        def write_code(self, addr: int, code: bytes) -> None: ...

        def hijack_word(self, addr: int, value: int) -> None: ...

        def _alloc_slot(self) -> int: ...

        def _set_pc(self, addr: int, point: ProbePoint | None = None) -> None: ...

    def _init_returns(self) -> None:
        """This part's state, on a new target whose ``arch`` is set: no trampoline yet."""
        arch = self.arch
        # return probes: trampoline address by Thumb state, and their probes while attached
        self._link = arch.register(arch.link) if arch.link else None
        self._thumb_entry: dict[int, bool] = {}  # probed function entry -> runs Thumb code
        self._trampolines: dict[bool, int] = {}
        self._tramp_hooks: list[int] = []  # the hooked instruction of each trampoline (Thumb bit included)
        self._tramp_probes: list[Probe] = []
        self._tramp_probe: dict[int, Probe] = {}  # by hook address (no Thumb bit): profile() counts returns
        #: code-hook callbacks of kpsdk's internal points, by address (the trampolines'): the
        #: arming code gives them to those points instead of the hook path's
        self._internal_hooks: dict[int, Any] = {}

    def attach_rethook(self, core: ShadowStacks) -> None:
        """Map the trampolines (once) and register their internal probes.

        One per instruction set: a Thumb function returns through the Thumb
        one with bit 0 set, an ARM one through the ARM one, so the CPU arrives
        in the state the trampoline's code is in, whatever the return
        instruction (``bx lr``, ``pop {pc}``, ``mov pc, lr``).  Its first
        instruction(s) store sp where the return hook reads it cheaply; the
        hook (the internal probe) is on the jump after them.
        """
        assert self.detours is not None
        return_jump = self.arch.require("out_of_line.return_jump", "a return probe on Unicorn")
        if not self._trampolines:
            for iset in self.arch.isets:
                slot = self._alloc_slot()
                code, hook, word = return_jump(slot, iset, self.detours.sp_word)
                self.write_code(slot, code)
                assert word % self.arch.word_size == 0, "kpsdk writes the trampoline's word as a word"
                name = "kretprobe_trampoline" + ("_thumb" if iset.thumb_bit else "")
                self.symbols.add(Symbol(name, slot, word, "func", iset="" if iset is self.arch.isets[0] else iset.name))
                thumb = 1 if iset.thumb_bit else 0
                self._trampolines[iset.thumb_bit] = slot | thumb
                self.detours.traps.add(slot | thumb)
                self._tramp_hooks.append((slot + hook) | thumb)
                self._internal_hooks[slot + hook] = self._trampoline_hook(
                    slot + hook, (slot + word - self._area) // self.arch.word_size)
        for addr in self._tramp_hooks:
            probe = Probe(addr=addr)
            plain = addr & ~1 if self.arch.has_thumb else addr
            probe.name = self.symbols.format(plain).partition("+")[0]
            self.manager.add(probe, addr, internal=True)
            self._tramp_probes.append(probe)
            self._tramp_probe[plain] = probe

    def detach_rethook(self) -> None:
        """Unregister the trampolines' probes (their code and symbols stay for the next attach)."""
        while self._tramp_probes:
            self.manager.remove(self._tramp_probes.pop())

    def trampoline_for(self, entry: int) -> int:
        """The trampoline a function starting at ``entry`` returns through: the one of its
        instruction set (from its symbol, cached: no cpsr read per hit)."""
        if not self.arch.has_thumb:
            return self._trampolines[False]
        thumb = self._thumb_entry.get(entry)
        if thumb is None:
            thumb = self._thumb_entry[entry] = self.iset_at(entry, self.symbols.containing(entry)).thumb_bit
        return self._trampolines[thumb]

    def trampoline_probe(self, entry: int) -> Probe:
        """The internal probe of :meth:`trampoline_for` ``(entry)``: its hits count the
        hooked returns of that instruction set (detoured ones included)."""
        base = self.trampoline_for(entry) & ~1
        return next(p for hook, p in self._tramp_probe.items() if base <= hook < base + SLOT_SIZE)

    def hijack_return(self, regs: PtRegs, node: RethookNode) -> int:
        """Point the return address (link register, or the word at sp) at the trampoline."""
        tramp = self.trampoline_for(regs.ip)
        if self._link is not None:
            self.fast.write(self._link, tramp)
        else:
            self.hijack_word(node.frame, tramp)
        return tramp

    def release_return(self, node: RethookNode) -> None:
        """Nothing to undo: the trampoline serves every hooked return."""

    def settle_returns(self) -> None:
        if self.detours is not None:
            self.detours.settle()

    def on_detour_slow(self, handle: int, addr: int, size: int, user: int) -> None:
        """A detoured entry the guest code left to Python (no instance left, or the gate
        shut): a normal hit of the entry's probe, with the registers of the entry."""
        try:
            detours = self.detours
            assert detours is not None
            det = detours.slow(addr)
            detours.settle()
            new = self.manager.pre(det.point, self.hit_regs)
            detours.mirror(det)
            if new is not None:
                self._set_pc(new, det.point)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.fail(exc)

    def _trampoline_hook(self, at: int, word: int) -> Callable[[int, int, int, int], None]:
        """The code hook of the trampoline whose jump is at ``at`` and goes through word
        ``word`` of kpsdk's area.  A hooked return arrived: the core runs its
        handlers, and the trampoline's jump takes the CPU to the real return
        address (with its Thumb bit, as the link register had it), read from the
        word this hook writes.

        Its own code hook rather than ``_on_code`` and the probe manager: a
        return must never be skipped (not even on a reentrant hit, K6 is for
        entries), and this is half of every kretprobe hit (hence a closure
        over what it needs)."""
        detours, area, probes = self.detours, self._area_words, self._tramp_probe
        assert detours is not None
        if self.arch.endian != sys.byteorder:  # a big-endian guest (ppc64): the word in its byte order
            packer, mem, offset = self._word, self._area_mem, word * self.arch.word_size
            assert mem is not None

            def on_trampoline_swapped(handle: int, addr: int, size: int, user: int) -> None:
                try:
                    probes[at].hits += 1
                    packer.pack_into(mem, offset, detours.general_return("the trampoline"))
                except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                    self.fail(exc)

            return on_trampoline_swapped

        def on_trampoline(handle: int, addr: int, size: int, user: int) -> None:
            try:
                probes[at].hits += 1
                area[word] = detours.general_return("the trampoline")  # settles detoured calls first
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                self.fail(exc)

        return on_trampoline
