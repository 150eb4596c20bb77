"""kpsdk's end of the QEMU TCG plugin (``kpsdk_tcg.c``, beside this module): building it, its probe table, its ring.

The plugin instruments probed instructions when QEMU translates them and reports each
hit through one shared file, mapped by both sides (the layout is the C file's)::

    header (64 bytes) | entries[capacity] (288 bytes each) | programs (PROG_AREA) | ring (ring_size bytes)

kpsdk writes entries (address, registers and memory to read, flags) only while the guest
is stopped under gdb: QEMU's gdbstub flushed the translation cache at that stop, so after
:meth:`ProbeTable.commit` bumps the generation every block translated from then on sees
the new table.  The plugin counts every hit in the entry (``hits``) and, for an entry that
streams, appends a record to the ring; :meth:`ProbeTable.records` takes the records written
so far.  A full ring drops a record and counts it (``dropped``), as the kernel's nmissed.

The plugin is compiled at first use with the system's ``gcc`` into kpsdk's cache, named by
the SHA256 of its source, so a changed source is built again and a built one is reused, once
checked: :func:`kpsdk.nativebuild.build_shared_object` loads only an object of this user's that
no one else can write, in a private directory, with the SHA256 recorded when it was built.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kpsdk.errors import TargetError
from kpsdk.fetchprog import HEADER as FETCH_HEADER
from kpsdk.nativebuild import build_shared_object

SOURCE = Path(__file__).with_name("kpsdk_tcg.c")
MAGIC = 0x3154504B  # "KPT1"
VERSION = 3
HEADER = struct.Struct("<IIQIIQQQQQ")  # magic version generation capacity nregs ring_size head tail ready progress
ENTRY_SIZE = 288
ENTRY_HEAD = struct.Struct("<QQIIII")  # addr hits id flags nregs nmem
MAX_REGS = 24
MAX_MEM = 12
MAX_MEM_SIZE = 4096
F_ENABLED, F_STREAM = 1, 2
#: a memory read's flags (M_STRING: up to its NUL) and a record's status for it (R_FAULT: unreadable)
M_STRING, R_FAULT = 1, 1
#: a memory read's flag: the guest's addresses wrap at 32 bits (i386, arm)
M_WORD32 = 2
#: MemFetch.reg: an absolute address; the word an earlier read loaded is CHAIN - k
ABSOLUTE, CHAIN = -1, -2
#: offsets inside the header and an entry
_GENERATION, _HEAD, _TAIL, _READY, _PROGRESS, _NREGS = 8, 32, 40, 48, 56, 20
_HITS, _REGS, _DROPPED, _MEM = 8, 32, 80, 88
#: default sizes: probe points, and the ring (a power of two)
CAPACITY = 4096
RING_SIZE = 1 << 24
#: the fetch programs' area (kpsdk_tcg.c's PROG_AREA), and the longest output one may make (PROG_OUTPUT)
PROG_AREA = 1 << 20
PROG_OUTPUT = 1 << 16
_PROG = 280


def build_plugin(source: Path = SOURCE) -> Path:
    """The plugin's shared object, compiled once per source into kpsdk's cache and checked
    before it is returned (:func:`kpsdk.nativebuild.build_shared_object`); where the cache
    cannot be used safely, built in one private temporary directory per process."""
    return build_shared_object("tcgplugin", source, "kpsdk's QEMU plugin", headers=[FETCH_HEADER])


@dataclass(frozen=True)
class MemFetch:
    """Memory the plugin reads at a hit: ``size`` bytes at ``offset`` plus the base ``reg``
    names: a register (its index), none (:data:`ABSOLUTE`), or the word read ``k`` of the same
    hit loaded (``CHAIN - k``, an earlier read: a dereference chain).  A ``string`` stops
    after its NUL (``size`` bytes at most, the NUL included)."""

    reg: int
    offset: int
    size: int
    string: bool = False
    word32: bool = False  # a 32-bit guest: base + offset wraps at 32 bits


@dataclass
class Entry:
    """One probed address in the table, as kpsdk asked for it."""

    index: int
    addr: int
    ident: int
    regs: tuple[int, ...]
    mem: tuple[MemFetch, ...]
    stream: bool
    enabled: bool = True


@dataclass(frozen=True)
class Record:
    """One hit as the plugin streamed it: the point's id, the vCPU, the address, the
    registers asked for (raw 8-byte slots), the host's CLOCK_MONOTONIC at the hit (ns), the
    memory read as (address, bytes; None where it could not be read)."""

    ident: int
    vcpu: int
    pc: int
    regs: tuple[int, ...]
    mem: tuple[tuple[int, bytes | None], ...]
    time_ns: int = 0
    #: a run of native trace records' bytes (entries with a fetch program: kpsdk.trace.native's
    #: layout, then the vCPU, the registers and the memory reads); the fields above are then empty
    native: bytes | None = None


class ProbeTable:
    """The shared file: entries kpsdk writes, counters and records the plugin writes."""

    def __init__(self, path: Path, capacity: int = CAPACITY, ring_size: int = RING_SIZE) -> None:
        if ring_size <= 0 or ring_size & (ring_size - 1):
            raise ValueError("ring_size must be a power of two")
        self.path = path
        self.capacity = capacity
        self.ring_size = ring_size
        self._programs_at = HEADER.size + capacity * ENTRY_SIZE
        self._ring_at = self._programs_at + PROG_AREA
        size = self._ring_at + ring_size
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        HEADER.pack_into(self.map, 0, MAGIC, VERSION, 1, capacity, 0, ring_size, 0, 0, 0, 0)
        self.entries: dict[int, Entry] = {}  # ident -> entry
        self._free = list(range(capacity - 1, -1, -1))
        self._dirty = False
        self._layouts: dict[int, tuple[int, int]] = {}  # ident -> (registers, memory reads)
        self._progress = 0
        #: the entries' fetch programs: ident -> (offset in the program area, bytes); the
        #: program ids their records carry
        self._programs: dict[int, tuple[int, bytes]] = {}
        self._program_end = 0
        self.native_ids: set[int] = set()

    # -- kpsdk's side: entries --------------------------------------------------------

    def put(self, ident: int, addr: int, regs: Sequence[int], mem: Sequence[MemFetch], stream: bool,
            program: bytes | None = None) -> Entry:
        """Add or change the entry of ``ident`` (the guest must be stopped; :meth:`commit` after);
        ``program``: a fetch program (kpsdk.fetchprog's, its id and the stack pointer's index
        set) the plugin runs at each hit instead of streaming the registers."""
        if len(regs) > MAX_REGS or len(mem) > MAX_MEM or any(not 0 < m.size <= MAX_MEM_SIZE for m in mem):
            raise TargetError(f"the plugin reads at most {MAX_REGS} registers and {MAX_MEM} memory ranges of "
                              f"{MAX_MEM_SIZE} bytes per hit")
        entry = self.entries.get(ident)
        if entry is None:
            if not self._free:
                raise TargetError(f"the plugin's table is full ({self.capacity} probe points)")
            entry = Entry(self._free.pop(), addr, ident, tuple(regs), tuple(mem), stream)
            self.entries[ident] = entry
        else:
            entry.addr, entry.regs, entry.mem, entry.stream = addr, tuple(regs), tuple(mem), stream
        self._place(ident, program)
        self._write(entry)
        return entry

    @property
    def programs_of(self) -> dict[int, tuple[int, bytes]]:
        """The entries that run a program, by ident: (offset in the program area, its bytes)."""
        return self._programs

    def _place(self, ident: int, program: bytes | None) -> None:
        """``program`` into the program area for ``ident`` (where its last one was, if it fits)."""
        old = self._programs.pop(ident, None)
        if old is not None:
            self.native_ids.discard(int.from_bytes(old[1][24:28], "little"))
        if program is None:
            return
        if old is not None and len(program) <= len(old[1]):
            at = old[0]
        else:
            at = (self._program_end + 7) & ~7
            if at + len(program) > PROG_AREA:
                if self._programs:
                    raise TargetError(f"the plugin's program area is full ({PROG_AREA} bytes)")
                at = 0
            self._program_end = at + len(program)
        start = self._programs_at + at
        self.map[start:start + len(program)] = program
        self._programs[ident] = (at, program)
        self.native_ids.add(int.from_bytes(program[24:28], "little"))

    def set_enabled(self, ident: int, enabled: bool) -> None:
        entry = self.entries[ident]
        entry.enabled = enabled
        self._write(entry)

    def remove(self, ident: int) -> None:
        self._place(ident, None)
        entry = self.entries.pop(ident)
        at = HEADER.size + entry.index * ENTRY_SIZE
        self.map[at:at + ENTRY_SIZE] = bytes(ENTRY_SIZE)
        self._free.append(entry.index)
        self._dirty = True

    def _write(self, e: Entry) -> None:
        at = HEADER.size + e.index * ENTRY_SIZE
        flags = (F_ENABLED if e.enabled else 0) | (F_STREAM if e.stream else 0)
        hits, dropped = self.hits(e.ident), self.dropped(e.ident)
        self.map[at:at + ENTRY_SIZE] = bytes(ENTRY_SIZE)
        ENTRY_HEAD.pack_into(self.map, at, e.addr, hits, e.ident, flags, len(e.regs), len(e.mem))
        struct.pack_into(f"<{len(e.regs)}H", self.map, at + _REGS, *e.regs)
        struct.pack_into("<Q", self.map, at + _DROPPED, dropped)
        for i, m in enumerate(e.mem):
            struct.pack_into("<hHIq", self.map, at + _MEM + 16 * i, m.reg, m.size,
                             (M_STRING if m.string else 0) | (M_WORD32 if m.word32 else 0), m.offset)
        placed = self._programs.get(e.ident)
        if placed is not None:
            struct.pack_into("<Q", self.map, at + _PROG, (placed[0] + 1) | (len(placed[1]) << 32))
        self._layouts[e.ident] = (len(e.regs), len(e.mem))
        self._dirty = True

    def commit(self) -> None:
        """Publish the edits: the plugin rebuilds its lookup at the next translation."""
        if self._dirty:
            gen = struct.unpack_from("<Q", self.map, _GENERATION)[0]
            struct.pack_into("<Q", self.map, _GENERATION, gen + 1)
            self._dirty = False

    # -- the plugin's side: counters, registers, records ------------------------------

    def hits(self, ident: int) -> int:
        entry = self.entries.get(ident)
        if entry is None:
            return 0
        return int(struct.unpack_from("<Q", self.map, HEADER.size + entry.index * ENTRY_SIZE + _HITS)[0])

    def dropped(self, ident: int) -> int:
        entry = self.entries.get(ident)
        if entry is None:
            return 0
        return int(struct.unpack_from("<Q", self.map, HEADER.size + entry.index * ENTRY_SIZE + _DROPPED)[0])

    @property
    def ready(self) -> bool:
        """Whether the plugin has listed the registers (at the first vCPU's start)."""
        return bool(struct.unpack_from("<Q", self.map, _READY)[0])

    def progress(self) -> None:
        """Tell the plugin that kpsdk is handling records: a hit waiting for room in a full
        ring keeps waiting (it gives up only after 10 s without progress)."""
        self._progress += 1
        struct.pack_into("<Q", self.map, _PROGRESS, self._progress)

    def pending(self) -> int:
        """Bytes of records written and not yet taken."""
        head, tail = struct.unpack_from("<QQ", self.map, _HEAD)
        return int(head - tail)

    def records(self) -> list[Record]:
        """The records written so far, oldest first, decoded now (with the entries' current
        layout) and taken: their ring space is free for the plugin again."""
        m = self.map
        head, tail = struct.unpack_from("<QQ", m, _HEAD)
        if head == tail:
            return []
        mask = self.ring_size - 1
        ring_at = self._ring_at
        start = tail & mask
        if start + (head - tail) <= self.ring_size:
            data = m[ring_at + start:ring_at + start + (head - tail)]
        else:
            first = self.ring_size - start
            data = m[ring_at + start:ring_at + self.ring_size] + m[ring_at:ring_at + (head - tail) - first]
        struct.pack_into("<Q", m, _TAIL, head)  # the bytes are copied: the plugin may reuse the space
        at, end = 0, len(data)
        if self._programs and all(e.ident in self._programs for e in self.entries.values() if e.stream):
            return [Record(0, 0, 0, (), (), 0, bytes(data))]  # every record a native one: no walk over them
        layouts = self._layouts
        record_head = _RECORD_HEAD.unpack_from
        out: list[Record] = []
        native = self.native_ids
        id_length = _ID_LENGTH.unpack_from
        while at < end:
            ident, length, vcpu, pc, time_ns = record_head(data, at)
            if ident in native:  # a run of native trace records: one Record, the bytes as they are
                start = at
                while at < end:
                    ident, length = id_length(data, at)
                    if ident not in native:
                        break
                    at += length
                out.append(Record(0, 0, 0, (), (), 0, bytes(data[start:at])))
                continue
            nregs, nmem = layouts.get(ident, (0, 0))
            regs = _regs_struct(nregs).unpack_from(data, at + 32)
            mems: list[tuple[int, bytes | None]] = []
            p = at + 32 + 8 * nregs
            for _ in range(nmem):
                got, status, addr = _MEM_HEAD.unpack_from(data, p)
                mems.append((addr, None if status & R_FAULT else bytes(data[p + 16:p + 16 + got])))
                p += 16 + (got + 7) // 8 * 8
            out.append(Record(ident, vcpu, pc, regs, tuple(mems), time_ns))
            at += length
        return out

    def close(self) -> None:
        self.map.close()


_RECORD_HEAD = struct.Struct("<IIQQQ")  # id length vcpu pc time_ns
_ID_LENGTH = struct.Struct("<II")
_MEM_HEAD = struct.Struct("<IIQ")  # bytes read, status, address


@functools.cache
def _regs_struct(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}Q")


def register_names(path: Path) -> dict[str, tuple[int, int]]:
    """The plugin's register list (``NAME SIZE`` lines, in QEMU's order): name -> (index, size)."""
    out: dict[str, tuple[int, int]] = {}
    for index, line in enumerate(path.read_text().splitlines()):
        name, _, size = line.partition(" ")
        out.setdefault(name, (index, int(size)))
    return out
