"""An address space of the Unicorn target: every mapping backed by a host buffer of kpsdk's.

One module, because a space's mappings, its arenas and the switch and parking between
spaces all keep one table in step with Unicorn's.

One Unicorn engine runs every process of a session, so each process's memory must be able to
leave the engine and come back: a :class:`Space` keeps its mappings as host buffers handed to
Unicorn with ``mem_map_ptr``.  Switching processes (:func:`switch`) unmaps the mappings of one
space from the engine and maps the other's, leaving in place those both share (kpsdk's own
area, ``MAP_SHARED`` memory inherited across ``fork``); no byte is copied.  ``fork`` copies
each private mapping's bytes once (:meth:`Space.fork`); a thread shares its process's space.

The table is kpsdk's, not read back from Unicorn (``uc_mem_regions`` walks every region: a
program making thousands of mappings made each ``mmap`` slower than the last).  It is kept in
address order; Unicorn splits and merges its own regions when a part of one is unmapped or
re-protected, and the table splits the same way (both halves keep the buffer, at offsets).

The engine never allocates a mapping's memory itself (``mem_map``): Unicorn 2.1.4 records a
failed allocation of its own in the field a run returns at its end (``invalid_error``, set by
``ram_block_add``), so a huge ``mmap`` refused inside a run made the program's exit fail with
``UC_ERR_NOMEM``.  kpsdk's buffer is made first; the host's refusal is the program's ENOMEM.

Small anonymous mappings share engine mappings (:class:`Arena`: why, there).

The bytes of a space that is not in the engine are read and written straight in its buffers
(:meth:`Space.read`, :meth:`Space.write`), which is how kpsdk writes a breakpoint into every
process that maps a probed file.  A futex is named by its buffer and offset
(:meth:`Space.key_of`), so processes sharing memory meet on the same word.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
from dataclasses import dataclass, field
from typing import Any, Protocol

import unicorn

PAGE = 0x1000


@dataclass(eq=False)
class Region:
    """``[start, end)`` with Unicorn permissions ``prot``: the bytes ``buf[offset:offset + size]``."""

    start: int
    end: int
    prot: int
    buf: mmap.mmap
    offset: int
    #: forks share the buffer (``MAP_SHARED``, kpsdk's area) instead of copying it
    shared: bool = False
    #: the buffer exported to ctypes (kept: its address is what Unicorn holds)
    view: ctypes.Array[ctypes.c_char] | None = field(default=None, repr=False)
    #: a private mapping another process may share since a fork (it is read-only in both):
    #: made writable, it gets its own copy first
    cow: bool = False
    #: the arena whose engine mapping holds it (None: a mapping of its own in the engine)
    arena: Arena | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return self.end - self.start

    def host_address(self) -> int:
        assert self.view is not None
        return ctypes.addressof(self.view) + self.offset

    def same_mapping(self, other: Region) -> bool:
        """The same bytes at the same place with the same permissions (a switch leaves it mapped)."""
        return (self.start, self.end, self.prot, self.offset) == (other.start, other.end, other.prot, other.offset) \
            and self.buf is other.buf


def _view(buf: mmap.mmap) -> ctypes.Array[ctypes.c_char]:
    return (ctypes.c_char * len(buf)).from_buffer(buf)


#: an arena's size, the most an arena mapping may be, and the least room an arena is made in
ARENA_SIZE, ARENA_MAPPING, ARENA_MIN = 16 << 20, 1 << 20, 1 << 20
#: an arena page's byte: 0 nothing mapped, MAPPED | the read and write bits, or CARVED (a mapping
#: of its own in the engine); tlbfill.c reads them
MAPPED, CARVED = 0x40, 0x80
_RW = unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE


class ArenaFill(Protocol):
    """What a space needs of the engine's TLB fill to keep arenas (:class:`kpsdk.targets.unicorn.tlb.TlbFill`)."""

    def set_arenas(self, arenas: list[tuple[int, int, Any]]) -> None: ...

    def flush(self) -> None: ...


class Arena:
    """One engine mapping (read and write, never executable) holding many small anonymous
    private mappings, as Linux keeps many VMAs in one page table.

    Unicorn 2.1.4 rebuilds its whole view of memory at every ``mem_map``, ``mem_unmap`` and
    ``mem_protect`` (``flatview`` rendering inserts each region into a sorted array), and its
    search for RAM offsets compares every block with every other: with n mappings each call
    costs O(n**2) (measured: the 3,000th 4 KiB ``mem_map_ptr`` took ~5 ms, the 4,000th in a
    process ~54 ms).  A program making thousands of small mappings (malloc's large blocks, a
    JIT's pages, the benchmark of ``tests/programs/mm.c``) went quadratic or worse.  In an
    arena a mapping, an unmapping or a change of read/write permissions is a byte per page
    (``pages``) and, for the last two, a TLB flush: no engine call.  The TLB fill
    (:mod:`.tlb`) reads those bytes and refuses, precisely, an access to a page nothing is
    mapped at or whose permissions refuse it, as the engine would refuse it outside arenas:
    so arenas exist only on engines whose fill refuses (not on 32-bit ARM, whose engine
    fills its own TLB).

    A range of the arena given a mapping of its own in the engine (a mapping made executable,
    a file or shared mapping placed over it) is *carved* out of the arena's engine mapping for
    good; a later mapping there is a mapping of its own too.  The Linux layer's copies ask
    :meth:`Space.in_hole` first (``EFAULT``); kpsdk's other reads of an arena page nothing is
    mapped at (``uc_mem_read``: a probe's handler) see zeros, and a page mapped there again
    is emptied first, whatever was written meanwhile."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.buf = anonymous(end - start)
        self.view = _view(self.buf)
        #: one byte a page (MAPPED | prot, CARVED, 0)
        self.pages = (ctypes.c_uint8 * ((end - start) // PAGE))()
        #: pages of mappings living in the arena (the arena goes when none is left)
        self.used = 0
        #: the carved ranges, in no order (the engine mapping is the arena minus these)
        self.carved: list[tuple[int, int]] = []

    @property
    def size(self) -> int:
        return self.end - self.start

    def set(self, start: int, end: int, value: int) -> None:
        """Give the pages of ``[start, end)`` the byte ``value``."""
        ctypes.memset(ctypes.addressof(self.pages) + (start - self.start) // PAGE, value, (end - start) // PAGE)

    def holds(self, start: int, end: int) -> bool:
        """``[start, end)`` lies in the arena and no page of it is mapped or carved."""
        if not (self.start <= start and end <= self.end):
            return False
        first, last = (start - self.start) // PAGE, (end - self.start) // PAGE
        return not any(self.pages[first:last])

    def pieces(self) -> list[tuple[int, int]]:
        """The engine mappings of the arena: its range minus the carved ranges."""
        out, at = [], self.start
        for lo, hi in sorted(self.carved):
            if at < lo:
                out.append((at, lo))
            at = max(at, hi)
        if at < self.end:
            out.append((at, self.end))
        return out

    def enter(self, uc: unicorn.Uc, parking: Parking) -> None:
        for lo, hi in self.pieces():
            parking.clear(lo, hi)
            uc.mem_map_ptr(lo, hi - lo, _RW, ctypes.addressof(self.view) + (lo - self.start))

    def leave(self, uc: unicorn.Uc) -> None:
        for lo, hi in self.pieces():
            uc.mem_unmap(lo, hi - lo)

    def fill_entry(self) -> tuple[int, int, Any]:
        return self.start, self.end, self.pages


def anonymous(size: int) -> mmap.mmap:
    """``size`` zeroed bytes of host memory for a mapping: private (``mmap.mmap(-1, n)`` is a
    shared one, whose first touch of each page costs twice a private one's here)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _copy_of(region: Region) -> Region:
    """``region`` with a buffer of its own holding its bytes (one memmove: no bytes object)."""
    buf = anonymous(region.size)
    view = _view(buf)
    ctypes.memmove(view, region.host_address(), region.size)
    return Region(region.start, region.end, region.prot, buf, 0, False, view)


def keep_blocks_apart(uc: unicorn.Uc) -> None:
    """Make a new engine give every mapping RAM offsets of its own: map a page and unmap it.

    Unicorn 2.1.4 places the RAM block of a new mapping after the block last in its list
    (sorted by size, so the smallest one) until some block has been freed; after the first
    free it searches for a gap (``find_ram_offset`` in ``exec.c``).  Before that, blocks
    overlap in RAM-offset space, where translated code is filed: unmapping a process's stack
    or heap then threw away the translations of the program's code, whose block was among
    those it overlapped (measured: every ``fork`` of busybox ``sh`` translated ~1,000 blocks
    again).  One free at the start puts the engine on the gap search for good."""
    uc.mem_map(0, PAGE)
    uc.mem_unmap(0, PAGE)


#: code mappings kept parked in the engine at most (each keeps its buffer alive)
PARK_LIMIT = 64
_CODE, _WRITE = unicorn.UC_PROT_EXEC, unicorn.UC_PROT_WRITE


class Parking:
    """Code mappings of processes that left the engine, kept in it without permissions.

    Unicorn finds translated code by the memory block it was translated from, and a block
    unmapped and mapped again is a new one: every process switch, and every ``execve`` of a
    program the session ran before, would translate the same code again (a shell loop that
    runs ``cat`` a thousand times spent most of its time there).  So a read-only executable
    mapping a switch takes out of the engine is *parked* instead: it stays mapped with no
    permission (an access faults as at an unmapped address: :meth:`LinuxKernel.fault
    <kpsdk.targets.unicorn.linux.kernel.LinuxKernel.fault>` reports it as one), and a space
    that maps the same buffer at the same place again (the process switched back to, another
    process sharing the pages, a new image from the page cache of
    :mod:`kpsdk.targets.unicorn.linux.images`) gets it back with its permissions, its
    translations intact.  A mapping made over a parked one unmaps it first; the oldest go
    beyond :data:`PARK_LIMIT`.  Parked regions are copies: the tables they came from may
    split theirs."""

    def __init__(self, uc: unicorn.Uc) -> None:
        self.uc = uc
        self._starts: list[int] = []
        self._regions: dict[int, Region] = {}  # by start, oldest first

    def __len__(self) -> int:
        return len(self._regions)

    @staticmethod
    def wants(region: Region) -> bool:
        """Private code (executable, not writable): what is worth keeping translated.  Not
        shared memory, which another mapping may write."""
        return bool(region.prot & _CODE) and not region.prot & _WRITE and not region.shared

    def park(self, region: Region) -> None:
        """Take ``region`` (mapped in the engine, in no active space) out of reach."""
        self.uc.mem_protect(region.start, region.size, unicorn.UC_PROT_NONE)
        parked = Region(region.start, region.end, region.prot, region.buf, region.offset, region.shared, region.view)
        bisect.insort(self._starts, region.start)
        self._regions[region.start] = parked
        while len(self._regions) > PARK_LIMIT:
            self._drop(next(iter(self._regions.values())))

    def take(self, region: Region) -> bool:
        """Give ``region`` its parked twin back, with ``region``'s permissions (True), or
        nothing (False: there is none with its bytes at its place)."""
        parked = self._regions.get(region.start)
        if parked is None or parked.end != region.end or parked.buf is not region.buf \
                or parked.offset != region.offset:
            return False
        self._forget(parked)
        # its bytes are as they were when it left (read-only; kpsdk's own writes into it drop
        # their translations: TaskSupport.patch), so the translations stay
        self.uc.mem_protect(region.start, region.size, region.prot, keep_code=True)  # type: ignore[call-arg]
        return True

    def clear(self, start: int, end: int) -> None:
        """Unmap the parked mappings that overlap ``[start, end)`` (about to be mapped)."""
        if not self._starts:
            return
        i = max(bisect.bisect_right(self._starts, start) - 1, 0)
        while i < len(self._starts) and self._starts[i] < end:
            parked = self._regions[self._starts[i]]
            if parked.end > start:
                self._drop(parked)
            else:
                i += 1

    def _forget(self, parked: Region) -> None:
        del self._regions[parked.start]
        del self._starts[bisect.bisect_left(self._starts, parked.start)]

    def _drop(self, parked: Region) -> None:
        self._forget(parked)
        self.uc.mem_unmap(parked.start, parked.size)


class Space:
    """The mappings of one address space (see the module's docstring)."""

    def __init__(self, uc: unicorn.Uc, parking: Parking | None = None, fill: ArenaFill | None = None) -> None:
        self.uc = uc
        #: the engine's parked code mappings, shared by every space of the engine
        self.parking = parking if parking is not None else Parking(uc)
        #: the engine's TLB fill, when it refuses what a mapping refuses: arenas may be made
        #: (:class:`Arena`); None: every mapping is one of the engine's
        self.fill = fill
        self._starts: list[int] = []
        self._regions: list[Region] = []
        #: the arenas, by start
        self.arenas: list[Arena] = []
        #: ``(low, at)``: no byte of ``[low, at)`` is free (what :meth:`find_free` last found
        #: from ``low``); mapping keeps it true, unmapping below ``at`` lowers ``at``
        self._full: tuple[int, int] = (0, 0)
        #: whether these mappings are the engine's now (only one space is at a time)
        self.active = False
        #: moves on at every change to the table (what caches of it compare)
        self.generation = 0

    # -- looking things up -----------------------------------------------------------------

    def region_at(self, addr: int) -> Region | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            region = self._regions[i]
            if addr < region.end:
                return region
        return None

    def regions(self, start: int = 0, end: int = 1 << 64) -> list[tuple[int, int, int]]:
        """The mapped parts of ``[start, end)``: ``(start, end, prot)``, in order."""
        out = []
        regions = self._regions
        for i in range(max(bisect.bisect_right(self._starts, start) - 1, 0), len(regions)):
            region = regions[i]
            if region.start >= end:
                break
            lo, hi = max(region.start, start), min(region.end, end)
            if lo < hi:
                out.append((lo, hi, region.prot))
        return out

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._regions))

    def free(self, start: int, end: int) -> bool:
        return not self.regions(start, end)

    def find_free(self, size: int, low: int, high: int, avoid_arenas: bool = False) -> int | None:
        """The lowest ``size`` free bytes in ``[low, high)``, page-aligned, or None;
        ``avoid_arenas``: outside the arenas (a mapping that could not live in one)."""
        full_low, full_at = self._full
        at = full_at if full_low == low and full_at > low else low
        first_free = None  # the first free byte met: [low, it) is full
        regions = self._regions
        while True:
            for i in range(max(bisect.bisect_right(self._starts, at) - 1, 0), len(regions)):
                region = regions[i]
                if region.end <= at:
                    continue
                if region.start >= at + size:
                    break
                if region.start > at and first_free is None:
                    first_free = at  # a gap too small
                at = (region.end + PAGE - 1) & ~(PAGE - 1)
            if first_free is None:
                first_free = at
            arena = next((a for a in self.arenas if a.start < at + size and at < a.end), None) \
                if avoid_arenas else None
            if arena is None:
                break
            at = arena.end
        self._full = (low, first_free)
        return at if at + size <= high else None

    def arena_room(self, start: int, limit: int) -> int:
        """Where the free range from ``start`` (free itself) ends, ``limit`` at most."""
        i = bisect.bisect_left(self._starts, start)
        end = self._regions[i].start if i < len(self._regions) else limit
        for arena in self.arenas:
            if arena.start >= start:
                end = min(end, arena.start)
        return min(end, limit)

    # -- changing the table (and the engine, when active) ------------------------------------

    def _insert(self, region: Region) -> None:
        i = bisect.bisect_left(self._starts, region.start)
        self._starts.insert(i, region.start)
        self._regions.insert(i, region)
        self.generation += 1

    def map(self, start: int, end: int, prot: int, buf: mmap.mmap | None = None, offset: int = 0,
            shared: bool = False, room: int | None = None) -> Region:
        """Map ``[start, end)`` (free: the caller unmapped what was there) with a new zeroed
        buffer, or ``buf`` from ``offset``.  Raises ``unicorn.UcError`` when the engine refuses.

        ``room``: the mapping may live in an arena (anonymous, private, at most
        :data:`ARENA_MAPPING` bytes; the caller decides) and, outside any, may start a new one up
        to ``room`` (where the free range it starts ends, :meth:`arena_room`)."""
        if room is not None and buf is None and not shared and not prot & ~_RW and self.fill is not None:
            region = self._arena_map(start, end, prot, room)
            if region is not None:
                return region
        self._carve(start, end)
        if buf is None:
            buf, offset = anonymous(end - start), 0
        region = Region(start, end, prot, buf, offset, shared, _view(buf))
        if self.active:
            _enter(self.uc, self.parking, region)
        self._insert(region)
        return region

    def _arena_map(self, start: int, end: int, prot: int, room: int) -> Region | None:
        arena = next((a for a in self.arenas if a.start <= start < a.end), None)
        if arena is None:
            room = min(room, start + ARENA_SIZE)
            if room - start < max(ARENA_MIN, end - start):
                return None
            arena = Arena(start, room)
            if self.active:
                arena.enter(self.uc, self.parking)
            bisect.insort(self.arenas, arena, key=lambda a: a.start)
            self._arenas_changed()
        elif not arena.holds(start, end):
            return None
        arena.set(start, end, MAPPED | prot)
        arena.buf.madvise(mmap.MADV_DONTNEED, start - arena.start, end - start)  # zeros, whatever was written
        arena.used += (end - start) // PAGE
        region = Region(start, end, prot, arena.buf, start - arena.start, False, arena.view, arena=arena)
        self._insert(region)
        return region

    def in_hole(self, addr: int, size: int) -> bool:
        """Some byte of ``[addr, addr + size)`` lies on an arena page nothing is mapped at (the
        engine's mapping there takes any access: the Linux layer's copies ask this first)."""
        for arena in self.arenas:
            lo, hi = max(addr, arena.start), min(addr + size, arena.end)
            if lo < hi:
                first, last = (lo - arena.start) // PAGE, (hi - 1 - arena.start) // PAGE + 1
                if 0 in bytes(arena.pages[first:last]):
                    return True
        return False

    def _arenas_changed(self) -> None:
        if self.active and self.fill is not None:
            self.fill.set_arenas([a.fill_entry() for a in self.arenas])

    def _carve(self, start: int, end: int) -> None:
        """Take ``[start, end)`` (nothing of the program's mapped there) out of the arenas'
        engine mappings: a mapping of its own goes there."""
        for arena in self.arenas:
            lo, hi = max(start, arena.start), min(end, arena.end)
            if lo >= hi:
                continue
            for a, b in arena.pieces():  # the parts still in the arena's engine mapping
                cut_lo, cut_hi = max(a, lo), min(b, hi)
                if cut_lo < cut_hi and self.active:
                    self.uc.mem_unmap(cut_lo, cut_hi - cut_lo)
            arena.carved.append((lo, hi))
            arena.set(lo, hi, CARVED)
            if self.active and self.fill is not None:
                self.fill.flush()

    def _drop_arena(self, arena: Arena) -> None:
        """An arena with no mapping left goes (its range is free for any mapping again)."""
        if self.active:
            arena.leave(self.uc)
        self.arenas.remove(arena)
        self._arenas_changed()

    def _split(self, at: int) -> None:
        """Cut the region holding ``at`` in two there (no change to the engine: Unicorn splits
        its own region when it is asked to unmap or protect a part)."""
        region = self.region_at(at)
        if region is None or region.start == at:
            return
        tail = Region(at, region.end, region.prot, region.buf, region.offset + (at - region.start), region.shared,
                      region.view, region.cow, region.arena)
        region.end = at
        self._insert(tail)

    def unmap(self, start: int, end: int) -> list[tuple[int, int]]:
        """Unmap whatever of ``[start, end)`` is mapped; the ranges that were."""
        self._split(start)
        self._split(end)
        gone = []
        flush = False
        i = bisect.bisect_left(self._starts, start)
        while i < len(self._regions) and self._regions[i].start < end:
            region = self._regions[i]
            arena = region.arena
            if arena is not None:  # the pages freed (zeros next time), the engine left alone
                arena.set(region.start, region.end, 0)
                arena.buf.madvise(mmap.MADV_DONTNEED, region.offset, region.size)
                arena.used -= region.size // PAGE
                flush = True
                if not arena.used and not arena.carved:
                    self._drop_arena(arena)
            elif self.active:
                self.uc.mem_unmap(region.start, region.size)
            gone.append((region.start, region.end))
            del self._regions[i]
            del self._starts[i]
        if flush and self.active and self.fill is not None:
            self.fill.flush()
        if gone:
            self.generation += 1
            if start < self._full[1]:
                self._full = (self._full[0], min(self._full[1], start))
        return gone

    def protect(self, start: int, end: int, prot: int) -> None:
        """Give the mapped parts of ``[start, end)`` permissions ``prot``."""
        self._split(start)
        self._split(end)
        i = bisect.bisect_left(self._starts, start)
        while i < len(self._regions) and self._regions[i].start < end:
            region = self._regions[i]
            if region.arena is not None and prot & ~_RW:
                region = self._carve_region(region, prot)
            elif region.arena is not None:
                if region.prot != prot:
                    region.arena.set(region.start, region.end, MAPPED | prot)
                    region.prot = prot
                    if self.active and self.fill is not None:
                        self.fill.flush()
                i += 1
                continue
            if region.cow and prot & unicorn.UC_PROT_WRITE:
                region = self._own_copy(i)
            if region.prot != prot:
                if self.active:
                    self.uc.mem_protect(region.start, region.size, prot)
                region.prot = prot
            i += 1
        self.generation += 1

    def _carve_region(self, region: Region, prot: int) -> Region:
        """Give arena mapping ``region`` a mapping of its own in the engine (its bytes stay in the
        arena's buffer), about to be given ``prot`` (executable: an arena never is)."""
        arena = region.arena
        assert arena is not None
        arena.used -= region.size // PAGE
        arena.set(region.start, region.end, 0)
        self._carve(region.start, region.end)
        region.arena = None
        if self.active:
            self.uc.mem_map_ptr(region.start, region.size, region.prot, region.host_address())
        return region

    def unshare(self, start: int, end: int) -> None:
        """Give the copy-on-protect regions over ``[start, end)`` buffers of their own: a write
        there (a user's, through the target) goes to this process alone."""
        i = bisect.bisect_right(self._starts, start) - 1
        i = max(i, 0)
        while i < len(self._regions) and self._regions[i].start < end:
            if self._regions[i].end > start and self._regions[i].cow:
                self._own_copy(i)
            i += 1

    def _own_copy(self, i: int) -> Region:
        """Give region ``i`` (shared since a fork) a buffer of its own, with its bytes."""
        old = self._regions[i]
        region = _copy_of(old)
        self._regions[i] = region
        if self.active:
            self.uc.mem_unmap(region.start, region.size)
            self.uc.mem_map_ptr(region.start, region.size, region.prot, region.host_address())
        return region

    # -- bytes -------------------------------------------------------------------------------

    def read(self, addr: int, size: int) -> bytes | None:
        """``size`` bytes at ``addr`` from the buffers, or None where a byte is not mapped."""
        out = bytearray()
        while len(out) < size:
            region = self.region_at(addr + len(out))
            if region is None:
                return None
            at = addr + len(out) - region.start + region.offset
            take = min(size - len(out), region.end - (addr + len(out)))
            out += region.buf[at:at + take]
        return bytes(out)

    def write(self, addr: int, data: bytes) -> bool:
        """Write ``data`` at ``addr`` into the buffers (whatever the permissions: kpsdk's own
        writes); False, nothing written, where a byte is not mapped."""
        parts = []
        done = 0
        while done < len(data):
            region = self.region_at(addr + done)
            if region is None:
                return False
            take = min(len(data) - done, region.end - (addr + done))
            parts.append((region, addr + done - region.start + region.offset, done, take))
            done += take
        for region, at, off, take in parts:
            region.buf[at:at + take] = data[off:off + take]
        return True

    def key_of(self, addr: int) -> tuple[int, int] | None:
        """What names the memory at ``addr`` whatever address another space maps it at: its
        buffer and the offset in it (a futex's key)."""
        region = self.region_at(addr)
        if region is None:
            return None
        return id(region.buf), region.offset + (addr - region.start)

    # -- processes ----------------------------------------------------------------------------

    def fork(self) -> Space:
        """A copy for a new process: shared mappings shared; private ones the process cannot write
        (code, read-only data) shared too until one side makes them writable (:meth:`protect`
        copies first: a copy on protect, where Linux copies on write); the rest copied."""
        child = Space(self.uc, self.parking, self.fill)
        arenas: dict[int, Arena] = {}
        for arena in self.arenas:  # each its own copy, carved alike; the mappings' bytes copied below
            copy = arenas[id(arena)] = Arena(arena.start, arena.end)
            ctypes.memmove(copy.pages, arena.pages, len(arena.pages))
            copy.used, copy.carved = arena.used, list(arena.carved)
            child.arenas.append(copy)
        for region in self._regions:
            if region.arena is not None:
                copy = arenas[id(region.arena)]
                ctypes.memmove(ctypes.addressof(copy.view) + region.offset, region.host_address(), region.size)
                child._insert(Region(region.start, region.end, region.prot, copy.buf, region.offset, False, copy.view,
                                     arena=copy))
            elif region.shared or not region.prot & unicorn.UC_PROT_WRITE:
                if not region.shared:
                    region.cow = True
                child._insert(Region(region.start, region.end, region.prot, region.buf, region.offset, region.shared,
                                     region.view, cow=not region.shared))
            else:
                child._insert(_copy_of(region))
        return child

    def release(self) -> None:
        """The space is gone (its process ended or exec'd); the buffers go with the last
        reference to them.  The engine's current space stays mapped until another takes its
        place (:func:`switch`): its process may have ended inside a hook, with its code still
        running, and the last process's memory is still read after the run (K10's checks,
        ``read_memory``)."""
        if self.active:
            self.doomed = True
            return
        self._regions.clear()
        self._starts.clear()
        self.arenas.clear()
        self.generation += 1

    #: released while the engine's: emptied when another space replaces it
    doomed = False


def switch(uc: unicorn.Uc, old: Space | None, new: Space) -> None:
    """Make ``new`` the engine's memory instead of ``old``: mappings the two share stay."""
    if old is new:
        return
    keep: set[int] = set()
    parking = new.parking
    if old is not None and old.active:
        for arena in old.arenas:
            arena.leave(uc)
        theirs = {(r.start, r.end): r for r in new}
        for region in old:
            if region.arena is not None:
                continue
            other = theirs.get((region.start, region.end))
            if other is not None and region.same_mapping(other):
                keep.add(id(other))
            elif Parking.wants(region) and new.free(region.start, region.end):
                parking.park(region)
            else:
                uc.mem_unmap(region.start, region.size)
        old.active = False
        if old.doomed:
            old.release()
    for arena in new.arenas:
        arena.enter(uc, parking)
    for region in new:
        if id(region) not in keep and region.arena is None:
            _enter(uc, parking, region)
    new.active = True
    new._arenas_changed()


def _enter(uc: unicorn.Uc, parking: Parking, region: Region) -> None:
    """Put ``region`` in the engine: its parked twin back, else mapped (over no parked one)."""
    if not parking.take(region):
        parking.clear(region.start, region.end)
        uc.mem_map_ptr(region.start, region.size, region.prot, region.host_address())
