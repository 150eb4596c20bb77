"""Trace events run in kpsdk's QEMU plugin: the fetch program at the hit, records in batches.

On the plugin mechanism a trace event's hit used to cost a Python call per record: the
registers and the declared memory streamed, then the event's pre_handler ran its fetch
closures on that snapshot (~100 us a string-fetching record).  Here the event's fetch program
(:mod:`kpsdk.fetchprog`, the interpreter ``fetchprog.h`` the plugin includes, as the Unicorn
hook does) goes into the plugin's table with the point's entry: the plugin runs it at the hit
and writes the native trace record (:mod:`kpsdk.trace.native`'s layout), followed by what the
trace prefix needs (the vCPU, the flags register, the task's memory the plugin reads for it).
:class:`PluginNativeHost` hands runs of such records to the trace in batches, each with the
number of its task (the prefix's comm, pid and flags: :meth:`PluginTarget.task_info
<kpsdk.targets.live.tcg.target.PluginTarget.task_info>` asked once per distinct task state,
not per record).

A point whose probes are not one native event keeps the Python path.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.errors import TargetError, ToolMissingError
from kpsdk.nativebuild import build_shared_object

if TYPE_CHECKING:
    from kpsdk.targets.live.tcg.plugin import Record
    from kpsdk.targets.live.tcg.target import PluginTarget

SOURCE = Path(__file__).with_name("restamp.c")
#: a native record's header (kpsdk.trace.native.RECORD): id, length, ns, ip, sp, stamp, output length, faults
_HEAD = struct.Struct("<IIQQQIIQ")
_STAMP_AT = 32
_STAMP = struct.Struct("<I")
_WORD = struct.Struct("<Q")
_ID_LENGTH = struct.Struct("<II")

_library: Any = None
_tried = False


def _restamp_library() -> Any:
    """restamp.c's shared object (None: no gcc, or it did not build: the same in Python)."""
    global _library, _tried
    if not _tried:
        _tried = True
        try:
            lib = ctypes.CDLL(str(build_shared_object("tcgplugin", SOURCE, "kpsdk's plugin record stamps")))
        except (ToolMissingError, TargetError, OSError):
            return None
        fn = lib.kpsdk_restamp
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_int,
                       ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                       ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint32]
        _library = lib
    return _library
_MEM = struct.Struct("<IIQ")


class PluginRing:
    """One trace's end: ``consume(records, address)`` takes a batch, ``task_stamp()`` numbers
    the task of the record being looked at."""

    def __init__(self, consume: Callable[[memoryview, int], None], task_stamp: Callable[[], int]) -> None:
        self.consume = consume
        self.task_stamp = task_stamp
        self.settle: Callable[[], None] | None = None
        self.closed = False


class PluginProgram:
    """A program for the plugin's table: its code carries its id (kfp_head.pad1)."""

    def __init__(self, ring: PluginRing, code: bytes, ident: int) -> None:
        self.ring = ring
        self.code = code
        self.ident = ident
        self.hist: Any = None
        self.records = True


class PluginNativeHost:
    """The plugin target's native trace events (see the module's docstring)."""

    #: records carry the host's CLOCK_MONOTONIC at the hit, the clock the trace uses on this target
    clock_is_trace_clock = True

    def __init__(self, target: PluginTarget) -> None:
        self.target = target
        self.programs: dict[int, PluginProgram] = {}
        #: task states seen: their hash (restamp.c's) -> the number their trace gave them
        self._known: dict[int, int] = {}
        self._size = 64
        self._keys: Any = (ctypes.c_uint64 * self._size)()
        self._stamps: Any = (ctypes.c_uint32 * self._size)()
        self._mask: tuple[int, int] | None = None

    def register_id(self, name: str) -> tuple[int, int]:
        """The plugin's index of an arch register, and its mask."""
        reg = self.target.arch.register(name)
        index = self.target._register_index(reg.gdb)
        if index is None:
            from kpsdk.fetchprog import _NotNative

            raise _NotNative(f"the plugin cannot read {name}")
        return index, reg.mask

    def new_ring(self, consume: Callable[[memoryview, int], None], task_stamp: Callable[[], int]) -> PluginRing:
        return PluginRing(consume, task_stamp)

    def program(self, ring: PluginRing, code: bytes) -> PluginProgram:
        ident = self.target._next_ident
        self.target._next_ident += 1
        sp = self.register_id(self.target.arch.sp)[0]
        code = code[:24] + struct.pack("<II", ident, sp) + code[32:]
        prog = PluginProgram(ring, code, ident)
        self.programs[ident] = prog
        return prog

    def close_ring(self, ring: PluginRing) -> None:
        ring.closed = True
        for ident in [i for i, p in self.programs.items() if p.ring is ring]:
            del self.programs[ident]

    def drain_ring(self, ring: PluginRing) -> None:
        """Nothing waits here: the target hands records over in the ring's order as it takes them."""

    # -- the target's side ---------------------------------------------------------------------

    def deliver(self, runs: list[Record]) -> None:
        """Runs of native records, oldest first, to their traces: each record numbered with its
        task in place (:meth:`_restamp`), then each trace's consecutive records handed over as one
        batch (a whole run at once where every program is one trace's)."""
        programs = self.programs
        for run in runs:
            assert run.native is not None
            data = bytearray(run.native)
            self._restamp(data)
            rings = {p.ring for p in programs.values()}
            if len(rings) == 1:
                ring = next(iter(rings))
                if not ring.closed:
                    self._hand(ring, data, 0, len(data))
                continue
            self._split(data)

    def _split(self, data: bytearray) -> None:
        """Each trace's consecutive records as one batch (several traces' programs on the session)."""
        id_length = _ID_LENGTH.unpack_from
        programs = self.programs
        at, end = 0, len(data)
        batch_ring: PluginRing | None = None
        batch_at = 0
        while at < end:
            ident, length = id_length(data, at)
            prog = programs.get(ident)
            ring = prog.ring if prog is not None and not prog.ring.closed else None
            if ring is not batch_ring:
                if batch_ring is not None:
                    self._hand(batch_ring, data, batch_at, at)
                batch_ring, batch_at = ring, at
            at += length
        if batch_ring is not None:
            self._hand(batch_ring, data, batch_at, end)

    def _restamp(self, data: bytearray) -> None:
        """Each record's task number written into it: by ``restamp.c`` from the states seen
        (a new one numbered through the target's task_info), or here where it was not built."""
        lib = _restamp_library()
        size = self.target.arch.kernel_stack_size
        sp_mask = ~(size - 1) & ((1 << 64) - 1) if size else 0
        if lib is None:
            self._restamp_python(data, sp_mask)
            return
        holder = (ctypes.c_char * len(data)).from_buffer(data)
        try:
            at, key = ctypes.c_uint64(0), ctypes.c_uint64(0)
            has_flags, mask = self._flags_mask()
            ranges = self.target.native_task_ranges()
            table = (ctypes.c_uint32 * max(3 * len(ranges), 1))(*(v for r in ranges for v in r))
            while lib.kpsdk_restamp(holder, len(data), ctypes.byref(at), has_flags, mask, sp_mask, self._keys,
                                    self._stamps, self._size, ctypes.byref(key), table, len(ranges)):
                self._learn(int(key.value), self._new_stamp(data, int(at.value)))
        finally:
            del holder

    def _new_stamp(self, data: bytearray, at: int) -> int:
        ident, _, ns, ip, sp, _, outlen, _ = _HEAD.unpack_from(data, at)
        length = _ID_LENGTH.unpack_from(data, at)[1]
        prog = self.programs.get(ident)
        if prog is None or prog.ring.closed:
            return 0  # a program let go: its records are skipped
        tail = bytes(data[at + _HEAD.size + outlen:at + length])
        return self.target.native_task_stamp(ident, tail, ns, ip, sp, prog.ring.task_stamp)

    def _learn(self, key: int, stamp: int) -> None:
        """A task state's number into the open-addressing table restamp.c reads: inserted, and the
        table made again (twice the size) only when half full."""
        self._known[key] = stamp
        if 2 * len(self._known) > self._size:
            self._size *= 2
            self._keys = (ctypes.c_uint64 * self._size)()
            self._stamps = (ctypes.c_uint32 * self._size)()
            for k, v in self._known.items():
                self._insert(k, v)
        else:
            self._insert(key, stamp)

    def _insert(self, key: int, stamp: int) -> None:
        keys, size = self._keys, self._size
        slot = key & (size - 1)
        while keys[slot] and keys[slot] != key:
            slot = (slot + 1) & (size - 1)
        keys[slot], self._stamps[slot] = key, stamp

    def _flags_mask(self) -> tuple[int, int]:
        """Whether records carry the flags register, and its bits the prefix reads (irqs-off):
        the bits that change the arch's answer, found once."""
        if self._mask is None:
            tasks = self.target.arch.kernel_tasks
            if tasks is None or self.target._native_flags_index() is None:
                self._mask = (0, 0)
            else:
                test = tasks.irqs_disabled
                bits = sum(1 << b for b in range(64) if test(1 << b) != test(0))
                samples = (0, (1 << 64) - 1, 0x246, 0x202, 0x46, 0x80000000)
                exact = all(test(v) == test(v & bits) for v in samples)
                self._mask = (1, bits if exact else (1 << 64) - 1)
        return self._mask

    def _restamp_python(self, data: bytearray, sp_mask: int) -> None:
        head = _HEAD.unpack_from
        at, end = 0, len(data)
        has_flags, mask = self._flags_mask()
        while at < end:
            ident, length, ns, ip, sp, _, outlen, _ = head(data, at)
            tail = bytes(data[at + _HEAD.size + outlen:at + length])
            if has_flags:
                tail = tail[:8] + (_WORD.unpack_from(tail, 8)[0] & mask).to_bytes(8, "little") + tail[16:]
            key = hash((ident, tail, sp & sp_mask))
            stamp = self._known.get(key)
            if stamp is None:
                stamp = self._known[key] = self._new_stamp(data, at)
            _STAMP.pack_into(data, at + _STAMP_AT, stamp)
            at += length

    @staticmethod
    def _hand(ring: PluginRing, data: bytearray, start: int, end: int) -> None:
        """``data[start:end]`` to ``ring``'s trace, with its address (the C text lines read it there)."""
        holder = (ctypes.c_char * len(data)).from_buffer(data)
        view = memoryview(data)
        try:
            ring.consume(view[start:end], ctypes.addressof(holder) + start)
        finally:
            view.release()
            del holder


def parse_tail(tail: bytes, nregs: int) -> tuple[int, tuple[int, ...], tuple[tuple[int, bytes | None], ...]]:
    """The vCPU, the registers and the memory reads after a native record's output."""
    from kpsdk.targets.live.tcg.plugin import R_FAULT

    vcpu = int.from_bytes(tail[:8], "little")
    regs = struct.unpack_from(f"<{nregs}Q", tail, 8)
    mems: list[tuple[int, bytes | None]] = []
    p = 8 + 8 * nregs
    while p < len(tail):
        got, status, addr = _MEM.unpack_from(tail, p)
        mems.append((addr, None if status & R_FAULT else bytes(tail[p + 16:p + 16 + got])))
        p += 16 + (got + 7) // 8 * 8
    return vcpu, regs, tuple(mems)

