"""An address space of the Unicorn target: every mapping backed by a host buffer of kpsdk's.

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

    def __init__(self, uc: unicorn.Uc, parking: Parking | None = None) -> None:
        self.uc = uc
        #: the engine's parked code mappings, shared by every space of the engine
        self.parking = parking if parking is not None else Parking(uc)
        self._starts: list[int] = []
        self._regions: list[Region] = []
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
        i = max(bisect.bisect_right(self._starts, start) - 1, 0)
        for region in self._regions[i:]:
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

    def find_free(self, size: int, low: int, high: int) -> int | None:
        """The lowest ``size`` free bytes in ``[low, high)``, page-aligned, or None."""
        at = low
        i = max(bisect.bisect_right(self._starts, at) - 1, 0)
        for region in self._regions[i:]:
            if region.end <= at:
                continue
            if region.start >= at + size:
                break
            at = (region.end + PAGE - 1) & ~(PAGE - 1)
        return at if at + size <= high else None

    # -- changing the table (and the engine, when active) ------------------------------------

    def _insert(self, region: Region) -> None:
        i = bisect.bisect_left(self._starts, region.start)
        self._starts.insert(i, region.start)
        self._regions.insert(i, region)
        self.generation += 1

    def map(self, start: int, end: int, prot: int, buf: mmap.mmap | None = None, offset: int = 0,
            shared: bool = False) -> Region:
        """Map ``[start, end)`` (free: the caller unmapped what was there) with a new zeroed
        buffer, or ``buf`` from ``offset``.  Raises ``unicorn.UcError`` when the engine refuses."""
        if buf is None:
            buf, offset = anonymous(end - start), 0
        region = Region(start, end, prot, buf, offset, shared, _view(buf))
        if self.active:
            _enter(self.uc, self.parking, region)
        self._insert(region)
        return region

    def _split(self, at: int) -> None:
        """Cut the region holding ``at`` in two there (no change to the engine: Unicorn splits
        its own region when it is asked to unmap or protect a part)."""
        region = self.region_at(at)
        if region is None or region.start == at:
            return
        tail = Region(at, region.end, region.prot, region.buf, region.offset + (at - region.start), region.shared,
                      region.view)
        region.end = at
        self._insert(tail)

    def unmap(self, start: int, end: int) -> list[tuple[int, int]]:
        """Unmap whatever of ``[start, end)`` is mapped; the ranges that were."""
        self._split(start)
        self._split(end)
        gone = []
        i = bisect.bisect_left(self._starts, start)
        while i < len(self._regions) and self._regions[i].start < end:
            region = self._regions[i]
            if self.active:
                self.uc.mem_unmap(region.start, region.size)
            gone.append((region.start, region.end))
            del self._regions[i]
            del self._starts[i]
        if gone:
            self.generation += 1
        return gone

    def protect(self, start: int, end: int, prot: int) -> None:
        """Give the mapped parts of ``[start, end)`` permissions ``prot``."""
        self._split(start)
        self._split(end)
        i = bisect.bisect_left(self._starts, start)
        while i < len(self._regions) and self._regions[i].start < end:
            region = self._regions[i]
            if region.cow and prot & unicorn.UC_PROT_WRITE:
                region = self._own_copy(i)
            if region.prot != prot:
                if self.active:
                    self.uc.mem_protect(region.start, region.size, prot)
                region.prot = prot
            i += 1
        self.generation += 1

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
        child = Space(self.uc, self.parking)
        for region in self._regions:
            if region.shared or not region.prot & unicorn.UC_PROT_WRITE:
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
        theirs = {(r.start, r.end): r for r in new}
        for region in old:
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
    for region in new:
        if id(region) not in keep:
            _enter(uc, parking, region)
    new.active = True


def _enter(uc: unicorn.Uc, parking: Parking, region: Region) -> None:
    """Put ``region`` in the engine: its parked twin back, else mapped (over no parked one)."""
    if not parking.take(region):
        parking.clear(region.start, region.end)
        uc.mem_map_ptr(region.start, region.size, region.prot, region.host_address())
