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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kpsdk.targets.live.tcg.plugin import Record
    from kpsdk.targets.live.tcg.target import PluginTarget

#: a native record's header (kpsdk.trace.native.RECORD): id, length, ns, ip, sp, stamp, output length, faults
_HEAD = struct.Struct("<IIQQQIIQ")
_STAMP_AT = 32
_STAMP = struct.Struct("<I")
_WORD = struct.Struct("<Q")
_MEM = struct.Struct("<IIQ")


class PluginRing:
    """One trace's end: ``consume(records, address)`` takes a batch, ``task_stamp()`` numbers
    the task of the record being looked at."""

    def __init__(self, consume: Callable[[memoryview, int], None], task_stamp: Callable[[], int]) -> None:
        self.consume = consume
        self.task_stamp = task_stamp
        self.settle: Callable[[], None] | None = None
        self.closed = False
        #: the task of each state seen: (the record's task bytes, irqs off, its stack's base) -> stamp
        self.stamps: dict[tuple[bytes, bool, int], int] = {}


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

    def register_id(self, name: str) -> tuple[int, int]:
        """The plugin's index of an arch register, and its mask."""
        reg = self.target.arch.register(name)
        index = self.target._register_index(reg.gdb)
        if index is None:
            from kpsdk.fetchprog import NotNative

            raise NotNative(f"the plugin cannot read {name}")
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
        task in place, then each trace's consecutive records handed over as one batch."""
        head = _HEAD.unpack_from
        stamp_into = _STAMP.pack_into
        size = self.target.arch.kernel_stack_size
        mask = ~(size - 1) if size else 0
        programs = self.programs
        tasks = self.target.arch.kernel_tasks
        # the flags register's bits other than irqs-off change from hit to hit (x86's arithmetic flags):
        # only what the prefix reads of it tells two task states apart
        irqs = tasks.irqs_disabled if tasks is not None and self.target._native_flags_index() is not None else None
        for run in runs:
            assert run.native is not None
            data = bytearray(run.native)
            at, end = 0, len(data)
            batch_ring: PluginRing | None = None
            batch_at = 0
            while at < end:
                ident, length, ns, ip, sp, _, outlen, _ = head(data, at)
                prog = programs.get(ident)
                ring = prog.ring if prog is not None and not prog.ring.closed else None
                if ring is not batch_ring:
                    if batch_ring is not None:
                        self._hand(batch_ring, data, batch_at, at)
                    batch_ring, batch_at = ring, at
                if ring is not None:
                    # the task's state: what the plugin read for it, and the stack's base (kpsdk's task id)
                    tail = bytes(data[at + _HEAD.size + outlen:at + length])
                    key = (tail[:8] + tail[16:], irqs(_WORD.unpack_from(tail, 8)[0]), sp & mask) if irqs is not None \
                        else (tail, False, sp & mask)
                    stamp = ring.stamps.get(key)
                    if stamp is None:
                        stamp = ring.stamps[key] = self.target.native_task_stamp(ident, tail, ns, ip, sp,
                                                                                 ring.task_stamp)
                    stamp_into(data, at + _STAMP_AT, stamp)
                at += length
            if batch_ring is not None:
                self._hand(batch_ring, data, batch_at, end)

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

