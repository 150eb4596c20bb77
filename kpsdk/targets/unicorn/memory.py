"""Guest memory as the Unicorn target keeps it: mappings, kpsdk's area and the stack, reads
that never show kpsdk's breakpoints (K10), writes, and dropping stale translations.

A part of :class:`~kpsdk.targets.unicorn.target.UnicornTarget` of its own because memory is
one job with its own state (the region cache, host buffers, pending translation drops, the
generation count) and its own rules (host-backed code and what Unicorn 2.1.4 does with it).

A mixin, not an object the target owns, and that is the honest cut: the trap overlay a read
puts back is the breakpoint tables the arming code keeps (:mod:`.target`), and ``read_memory``,
``read_word`` and ``read_cstring`` are what handlers and the return-probe core call on every
hit (``Session.read_memory``, ``PtRegs``, the rethook's ``[sp]``): a delegating method would
be one more call per read.  Method lookups through the class's bases cost nothing more
(CPython's type cache), so the parts share one object at no cost per hit.

kpsdk's area and the stack are host memory handed to Unicorn (``mem_map_ptr``), so the words a
return probe reads and writes on every hit (the return address at [sp], the trampoline's word)
are plain ``struct`` accesses, not ``uc_mem_read``/``uc_mem_write`` calls (~1.5 us each).
"""

from __future__ import annotations

import errno
import mmap
import struct
from typing import TYPE_CHECKING

import unicorn

from kpsdk.errors import KprobeError, TargetError
from kpsdk.target import Target
from kpsdk.targets.unicorn.addrset import AddressSet
from kpsdk.targets.unicorn.detour import DATA_SIZE
from kpsdk.targets.unicorn.fast import cache_remover, cstring_reader, memory_reader, memory_writer
from kpsdk.targets.unicorn.layout import AREA_SIZE, BARE_STACK, PAGE, SLOT_BASE, STACK_SIZE, STACK_TOP, align_up
from kpsdk.targets.unicorn.space import Space

if TYPE_CHECKING:
    from kpsdk.arch import Register
    from kpsdk.manager import ProbePoint
    from kpsdk.targets.unicorn.detour import DetourEngine
    from kpsdk.targets.unicorn.fast import FastRegs, FastWords
    from kpsdk.targets.unicorn.running import Runner

#: the longest trap a breakpoint-path point writes (ARM, riscv64: 4 bytes): a read looks this far
#: back for a trap reaching into it (K10)
MAX_TRAP = 4
_PERMS = {"r": unicorn.UC_PROT_READ, "w": unicorn.UC_PROT_WRITE, "x": unicorn.UC_PROT_EXEC}


class GuestMemory(Target):
    """The memory part of the Unicorn target (a mixin of
    :class:`~kpsdk.targets.unicorn.target.UnicornTarget`; see the module's docstring)."""

    # what this part uses of the target's others (set up in UnicornTarget.__init__)
    uc: unicorn.Uc
    fast: FastRegs
    words: FastWords
    runner: Runner
    detours: DetourEngine | None
    _sp: Register
    #: the probe points armed with a trap, and with a code hook (:mod:`.target`): writes refuse them
    _bp_points: dict[int, ProbePoint]
    _hook_points: dict[int, ProbePoint]

    def _init_memory(self) -> None:
        """This part's state, on a new target whose ``uc`` and ``arch`` are set."""
        uc, arch = self.uc, self.arch
        self._remove_cache = cache_remover(uc)
        self._mem_write = memory_writer(uc)  # a trap over a probed instruction, and back
        self._mem_read = memory_reader(uc)  # every read through kpsdk (decoding at registration)
        self._cstring = cstring_reader(uc)  # strings a trace fetches at every hit
        #: the current process's mappings, every one host memory (:mod:`.space`): what is mapped
        #: where is read from this table, never from ``uc_mem_regions``
        tlb = getattr(self, "tlb", None)  # small anonymous mappings share engine mappings (arenas) it checks
        self.space = Space(uc, fill=tlb)
        self.space.active = True
        #: pages where a trap written into the space's buffer was read back through Unicorn
        #: since the last run or map (:meth:`_write_trap`)
        self._host_checked: set[int] = set()
        #: translations to drop before the next run: ``(begin, end)`` ranges that registration
        #: changed outside a run, dropped once, merged, as the run starts (:meth:`_drop_translations`)
        self._stale: list[tuple[int, int]] = []
        #: moves on at every change to memory made through kpsdk and at every run (see
        #: :attr:`code_generation`)
        self._generation = 0
        #: the breakpoint-path points' addresses, sorted, and the bytes each one's trap hides:
        #: a read finds the traps inside it by bisection (K10); kept by the arming code
        self._bp_sorted = AddressSet()
        self._bp_hidden: dict[int, bytes] = {}
        #: lowest and highest address kpsdk ever patched (reads outside skip the overlay)
        self._bp_lo, self._bp_hi = 1 << 64, -1
        self._area = 0
        self._next_slot = 0
        self._code_end = 0
        self._area_mem: mmap.mmap | None = None
        self._stack_mem: mmap.mmap | None = None
        #: the lowest address of ``_stack_mem`` (the stack's top mapping)
        self._stack_lo = STACK_TOP
        word = "<" if arch.endian == "little" else ">"
        self._word = struct.Struct(word + ("Q" if arch.word_size == 8 else "I"))

    # -- mappings --------------------------------------------------------------------------

    def map(self, addr: int, size: int, perms: str = "rwx", shared: bool = False,
            buf: mmap.mmap | None = None) -> mmap.mmap:
        """Map memory (page-aligned outward) in the current process's space and return the host
        buffer behind it.

        Every mapping is host memory (``mem_map_ptr``, :mod:`.space`): a process's memory can
        leave the engine when another process runs, registering a breakpoint-path kprobe
        writes its trap with a memmove instead of ``uc_mem_write`` (which makes Unicorn 2.1.4
        lift the protection and rebuild its view of memory, ~15 us), and the words a return
        probe reads at every hit are plain ``struct`` accesses.  ``shared``: forks share it
        (kpsdk's own area) instead of copying it.  ``buf``: these bytes, shared copy-on-protect
        with the other processes mapping them (a read-only segment of the same file at the same
        place: :mod:`kpsdk.targets.unicorn.linux.images`).
        """
        start, end = addr & ~(PAGE - 1), align_up(addr + size)
        prot = 0
        for c in perms:
            prot |= _PERMS[c]
        self._forget_memory()
        try:
            region = self.space.map(start, end, prot, buf=buf, shared=shared)
        except unicorn.UcError as e:
            raise TargetError(f"cannot map {start:#x}-{end:#x}: {e}") from e
        region.cow = buf is not None
        return region.buf

    def _forget_memory(self) -> None:
        """What kpsdk knows of the memory map and the code may be wrong from now on:
        kpsdk maps memory, or a run starts (the program may map, unmap, protect or
        change its code)."""
        self._host_checked.clear()
        self._generation += 1
        watch = getattr(self, "watch", None)
        if watch is not None:  # a process's memory replaced another's: its trapped pages again
            watch.reassert()

    @property
    def code_generation(self) -> int | None:
        """An int that moves on whenever the code may have changed: memory mapped or written
        through kpsdk (:meth:`map`, :meth:`write_memory`), and every run.  Decoding keeps a
        function's walk while it stays the same (:mod:`kpsdk.arch.decode`), instead of reading
        the function again at each registration.  None while a run is under way (a handler
        registering: the program may have changed its code since the run began).  Bytes
        written behind kpsdk's back (``target.uc.mem_write``) do not move it."""
        return None if self.runner.depth else self._generation

    def _write_trap(self, addr: int, data: bytes) -> None:
        """Write a trap over a probed instruction, or its bytes back (the caller drops the
        translations): a memmove into the host buffer the space's table names there (every
        mapping is host memory, and the Linux layer maps through the same table), checked by
        reading it back through Unicorn: memory unmapped and mapped again behind kpsdk's back
        (``target.uc.mem_map``) no longer uses the buffer, and then ``uc_mem_write`` does it.
        Outside a run the check is made once per page (until the next run or map: only a run
        can remap the program's memory)."""
        if self.space.write(addr, data):
            checked = self._host_checked
            first, last = addr & ~(PAGE - 1), (addr + len(data) - 1) & ~(PAGE - 1)
            if first in checked and last in checked and not self.runner.depth:
                return
            if self._mem_read(addr, len(data)) == data:
                if not self.runner.depth:
                    checked.update((first, last))
                return
        self._mem_write(addr, data)

    def _drop_translations(self, begin: int, end: int) -> None:
        """Make Unicorn translate ``[begin, end)`` again before it runs it.  Inside a run (a
        handler registering) at once; outside one, at the start of the next run, all the
        ranges merged (:meth:`_flush_stale`): dropping translations cost 22-35 us a call
        whatever the span (docs/performance.md), twice per registered probe.  A range within
        a page of one of the last two kept is merged into it at once: a batch of probes on
        neighbouring code, each with its booster slot, kept ~130 bytes a probe otherwise."""
        if self.runner.depth:
            self._remove_cache(begin, end)
            return
        stale = self._stale
        for i in range(len(stale) - 1, max(len(stale) - 3, -1), -1):  # a batch alternates code and slots
            b, e = stale[i]
            if begin <= e + PAGE and b <= end + PAGE:  # within a page of a recent range: one range
                stale[i] = (min(b, begin), max(e, end))
                return
        stale.append((begin, end))

    def _flush_stale(self) -> None:
        """Drop the translations registration left stale since the last run: one call per
        run of ranges less than a page apart."""
        stale, self._stale = self._stale, []
        if not stale:
            return
        stale.sort()
        begin, end = stale[0]
        for b, e in stale[1:]:
            if b > end + PAGE:
                self._remove_cache(begin, end)
                begin, end = b, e
            elif e > end:
                end = e
        self._remove_cache(begin, end)

    # -- kpsdk's area and the stack ----------------------------------------------------------

    def _map_area(self, base: int) -> tuple[int, mmap.mmap]:
        """Map kpsdk's own area (blacklisted) at ``base``: a sentinel return address, then slots
        and code, then the data part; returns the data part's address and buffer (the detours')."""
        self._area = base
        self._area_mem = self.map(base, AREA_SIZE - DATA_SIZE, "rx", shared=True)
        self._area_words = memoryview(self._area_mem).cast("Q" if self.arch.word_size == 8 else "I")
        data = base + AREA_SIZE - DATA_SIZE
        mem = self.map(data, DATA_SIZE, "rw", shared=True)
        self._next_slot = base + SLOT_BASE
        #: where the slots and code end (the data part follows; tests lower it to fill the area)
        self._code_end = base + AREA_SIZE - DATA_SIZE
        return data, mem

    def setup_stack(self, size: int = BARE_STACK) -> int:
        """Map the top ``size`` bytes of the stack (all of it, unless the Linux layer grows the
        rest on demand) and point sp into it."""
        size = min(STACK_SIZE, align_up(size))
        self._stack_mem = self.map(STACK_TOP - size, size, "rw")
        self._stack_lo = STACK_TOP - size
        sp = STACK_TOP - 0x1000
        self.uc.mem_write(sp, bytes(8 * self.arch.word_size))  # argc=0, argv=NULL, envp=NULL, AT_NULL
        self.fast.write(self._sp, sp)
        return sp

    @property
    def sentinel(self) -> int:
        """Where ``call()`` makes functions return to: the first byte of kpsdk's area."""
        return self._area

    def peek_code(self, size: int) -> int | None:
        """Where the next :meth:`alloc_code` of ``size`` bytes starts, or None when it would not fit."""
        return self._next_slot if self._next_slot + size <= self._code_end else None

    def alloc_code(self, size: int) -> int:
        """``size`` bytes of kpsdk's area for code (a multiple of SLOT_SIZE), never given back:
        their owner keeps its own free list (slots, detours)."""
        block = self._next_slot
        if block + size > self._code_end:
            raise KprobeError(errno.ENOMEM, "kpsdk's out-of-line slot area is full")
        self._next_slot += size
        return block

    def write_code(self, addr: int, code: bytes) -> None:
        """Write code into kpsdk's area (a slot reused by another point, a trampoline).

        The area is host memory (``mem_map_ptr``), for which Unicorn 2.1.4's
        ``uc_mem_write`` does not drop translations of the old bytes: a reused
        slot then ran its previous occupant's code.  So drop them here."""
        off = addr - self._area
        if self._area_mem is not None and 0 <= off and off + len(code) <= len(self._area_mem):
            self._area_mem[off:off + len(code)] = code  # host memory: a memmove, not uc_mem_write's ~19 us
        else:
            self.uc.mem_write(addr, code)
        self._drop_translations(addr, addr + len(code))

    def stack_window(self) -> tuple[mmap.mmap | bytearray, int, int, struct.Struct]:
        """The stack as host memory, for hooks that read and write return addresses
        without a call per word (:meth:`read_word` and :meth:`hijack_word` inlined):
        its buffer, its lowest address, the highest offset a word fits at (-1 while
        there is no stack, with an empty buffer) and the word's ``Struct``.  The stack is mapped at
        ``open`` and never unmapped (the Linux layer refuses to); the window is its top mapping
        (a Linux program's stack grows below it in mappings of their own, read the slow way), and
        it is the current process's: a hook that keeps it checks ``_stack_mem`` is still it."""
        mem = self._stack_mem
        if mem is None:
            return bytearray(), STACK_TOP, -1, self._word
        return mem, self._stack_lo, STACK_TOP - self._stack_lo - self._word.size, self._word

    def hijack_word(self, addr: int, value: int) -> None:
        """Overwrite the return address at ``addr`` (the stack, in host memory, on the hot path)."""
        off = addr - self._stack_lo
        if 0 <= off <= STACK_TOP - self._stack_lo - self._word.size and self._stack_mem is not None:
            self._word.pack_into(self._stack_mem, off, value)
        elif not self.words.write(addr, value):
            raise self.memory_fault("cannot write the return address", addr)

    # -- memory (K10: reads never show kpsdk's breakpoints) ---------------------------------

    def read_memory(self, addr: int, size: int) -> bytes:
        try:
            data = bytearray(self._mem_read(addr, size))
        except unicorn.UcError as e:
            raise self.memory_fault(f"cannot read {size} bytes: {e}", addr) from e
        if self._bp_points:
            hidden, at = self._bp_hidden, self._bp_sorted
            for a in at.between(addr - MAX_TRAP + 1, addr + size):
                if a + len(hidden[a]) > addr:  # a trap before addr reaching into the read
                    _put_back(data, addr, a, hidden[a])
        if self.detours is not None and self.detours.by_addr:
            for det in self.detours.covering(addr, size):
                _put_back(data, addr, det.point.addr, det.original)
        return bytes(data)

    def read_cstring(self, addr: int, max: int) -> bytes:  # noqa: A002 - as Session.read_string
        """One ``uc_mem_read`` per page into a kept buffer, the NUL found by C; near kpsdk's
        breakpoints and detours (K10: the program's own bytes), or where a page cannot be
        read (the fault names the address), the generic pieces through :meth:`read_memory`."""
        if not (self._bp_lo - 4 < addr + max and addr < self._bp_hi + 4):
            data = self._cstring(addr, max)
            if data is not None:
                return data
        return super().read_cstring(addr, max)

    def read_word(self, addr: int) -> int:
        off = addr - self._stack_lo
        if 0 <= off <= STACK_TOP - self._stack_lo - self._word.size and self._stack_mem is not None:  # [sp]
            return int(self._word.unpack_from(self._stack_mem, off)[0])
        if self._bp_lo - 4 < addr < self._bp_hi + 4:
            return super().read_word(addr)
        value = self.words.read(addr)
        if value is None:
            raise self.memory_fault(f"cannot read {self.arch.word_size} bytes: unmapped", addr)
        return value

    def write_memory(self, addr: int, data: bytes) -> None:
        probed = [a for a in list(self._bp_points) + list(self._hook_points) if a + 4 > addr and a < addr + len(data)]
        if self.detours is not None:  # a detoured entry: the whole of its displaced instructions
            probed += [d.point.addr for d in self.detours.covering(addr, len(data))]
        if probed:
            where = self.symbols.format(probed[0])
            raise KprobeError(errno.EBUSY, f"{where} is probed; unregister before writing code there")
        self.space.unshare(addr, addr + len(data))  # as ptrace's pokes: other processes keep their bytes
        try:
            self.uc.mem_write(addr, bytes(data))
        except unicorn.UcError as e:
            raise self.memory_fault(f"cannot write {len(data)} bytes: {e}", addr) from e
        self.uc.ctl_remove_cache(addr, addr + len(data))
        self._generation += 1

    def _region(self, addr: int) -> tuple[int, int, int] | None:
        """The mapped region holding ``addr``: ``(start, last byte, perms)``, as Unicorn names them."""
        region = self.space.region_at(addr)
        return None if region is None else (region.start, region.end - 1, region.prot)

    def is_mapped(self, addr: int) -> bool:
        return self._region(addr) is not None

    def is_executable(self, addr: int) -> bool:
        region = self._region(addr)
        return region is not None and bool(region[2] & unicorn.UC_PROT_EXEC)

    def is_reserved(self, addr: int) -> bool:
        return bool(self._area) and self._area <= addr < self._area + AREA_SIZE


def _put_back(data: bytearray, addr: int, at: int, original: bytes) -> None:
    """Show ``original`` (bytes kpsdk replaced at ``at``) in ``data``, read from ``addr`` (K10):
    one slice assignment (decoding next to many probes puts back each neighbour's bytes)."""
    lo, hi = max(at, addr), min(at + len(original), addr + len(data))
    if lo < hi:
        data[lo - addr:hi - addr] = original[lo - at:hi - at]

