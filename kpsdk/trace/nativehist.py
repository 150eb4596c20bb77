"""Hist triggers of native trace events aggregated in C at the hit; Python reads the table.

A ``hist:`` trigger (:mod:`kpsdk.trace.histtrigger`) on an event run in C
(:mod:`kpsdk.trace.native`) would need every record in Python.  Where the trigger is one
the C side counts exactly as :meth:`HistTrigger.hit <kpsdk.trace.histtrigger.HistTrigger.hit>`
does, the event's program gets a table (``struct kfp_hist`` of ``kpsdk/fetchprog.h``) that
the hook fills at each hit that passes the filter, and :meth:`NativeHist.settle` copies it
into the trigger's table after each run or call: the same entries in the same order, hits and
drops.  What C counts: up to three keys, each an integer field of the event (its modifier
``.log2``, ``.buckets=N``, or one that only changes the printing: ``.hex``, ``.sym``...) or
``common_pid``; values that are integer fields.  Anything else (string keys, the other common
fields, a trigger's own ``if`` filter, ``name=`` shared tables, ``pause``, more than one hist
trigger on the event) keeps the event's records in Python.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from kpsdk.trace.histtrigger import _Entry

if TYPE_CHECKING:
    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.trace.histtrigger import HistField, HistTrigger
    from kpsdk.trace.native import NativeEvent

KEYS = 3
FIELD, STAMP = 0, 1
PLAIN, LOG2, BUCKETS = 0, 1, 2
ENTRY = 8  # u64s per entry: keys[3], hitcount, vals[3], first stamp


class _HistField(ctypes.Structure):
    _fields_ = [("src", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("is_signed", ctypes.c_uint8),
                ("mode", ctypes.c_uint8), ("index", ctypes.c_uint32), ("buckets", ctypes.c_uint64),
                ("overflow", ctypes.c_uint64), ("has_overflow", ctypes.c_uint32), ("slot", ctypes.c_uint32)]


class CHist(ctypes.Structure):
    """``struct kfp_hist``."""

    _fields_ = [("nkeys", ctypes.c_uint32), ("nvals", ctypes.c_uint32), ("capacity", ctypes.c_uint32),
                ("count", ctypes.c_uint32), ("hits", ctypes.c_uint64), ("dropped", ctypes.c_uint64),
                ("word_mask", ctypes.c_uint64), ("word_bits", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("key", _HistField * KEYS), ("val", _HistField * KEYS), ("index", ctypes.c_void_p),
                ("entries", ctypes.c_void_p)]


#: sums wrap as the kernel's u64 do
U64 = (1 << 64) - 1


class _NotCounted(Exception):
    """The trigger has no native form."""


class NativeHist:
    """One hist trigger counted in C for one native event."""

    def __init__(self, native: NativeEvent, trigger: HistTrigger, word: int) -> None:
        spec = trigger.spec
        layout = trigger.layout
        if spec.name or trigger.filter is not None or spec.paused or layout is not spec:
            raise _NotCounted("a named, filtered or paused trigger")
        self.trigger = trigger
        names = native.program.names
        self.c = CHist()
        c = self.c
        c.nkeys, c.nvals = len(layout.keys), len(layout.vals)
        c.capacity = layout.size
        c.word_mask = (1 << (8 * word)) - 1
        c.word_bits = 8 * word
        self._stamps: list[bool] = []
        for i, key in enumerate(layout.keys):
            self._field(c.key[i], key, native, names, True)
        for i, val in enumerate(layout.vals):
            self._field(c.val[i], val, native, names, False)
        self._index = (ctypes.c_uint32 * (2 * layout.size))()
        self._entries = (ctypes.c_uint64 * (ENTRY * layout.size))()
        c.index = ctypes.addressof(self._index)
        c.entries = ctypes.addressof(self._entries)
        #: what the last settle took from C (its entries, hits and drops): the next adds the rest
        self._settled: dict[tuple[int | str, ...], tuple[list[int], str]] = {}
        self._settled_counts = (0, 0)

    def _field(self, out: _HistField, field: HistField, native: NativeEvent, names: list[str], key: bool) -> None:
        source = field.field.source
        if source == "pid" and key and field.modifier in (None, "hex", "execname") and not field.buckets:
            out.src = STAMP
            self._stamps.append(True)
            return
        if source != "field" or field.string or field.name not in names:
            raise _NotCounted(f"{field.name}: not an integer field of the event")
        plan = native.program.fields[names.index(field.name)]
        if plan[0] != "int":
            raise _NotCounted(f"{field.name}: not an integer field")
        out.src, out.index, out.slot = FIELD, plan[1], names.index(field.name)
        out.bits, out.is_signed = min(8 * field.field.size, 64), int(field.field.signed)
        if key:
            self._stamps.append(False)
            if field.modifier == "log2":
                out.mode = LOG2
                overflow = self.trigger.log2_overflow
                out.has_overflow, out.overflow = (1, overflow & ((1 << 64) - 1)) if overflow is not None else (0, 0)
            elif field.buckets:
                out.mode, out.buckets = BUCKETS, field.buckets

    def settle(self, tasks: list[tuple[TaskInfo, int]]) -> None:
        """What C counted since the last settle added to the trigger's table: entries in the
        order their keys came, hits, drops.  Added, not written over: the same event's hits on
        the Python path (a point the hook path serves, such as a library's uprobe in another
        process) are counted there by the trigger itself."""
        c = self.c
        table = self.trigger._table
        counted = self._counted(tasks)
        before, self._settled = self._settled, counted
        hits, dropped = int(c.hits), int(c.dropped)
        (old_hits, old_dropped), self._settled_counts = self._settled_counts, (hits, dropped)
        table.hits = (table.hits + hits - old_hits) & U64
        table.dropped += dropped - old_dropped
        entries = table.entries
        for key, (sums, comm) in counted.items():
            old = before.get(key)
            delta = sums if old is None else [(a - b) & U64 for a, b in zip(sums, old[0], strict=True)]
            entry = entries.get(key)
            if entry is not None:
                entry.sums = [(a + b) & U64 for a, b in zip(entry.sums, delta, strict=True)]
            elif len(entries) < self.trigger.layout.size:
                entries[key] = _Entry(key, list(delta), comm)
            else:  # the table is full: the kernel drops a new key's hit
                table.dropped += delta[0]

    def _counted(self, tasks: list[tuple[TaskInfo, int]]) -> dict[tuple[int | str, ...], tuple[list[int], str]]:
        """The C table's entries by key (two tasks' stamps with one pid summed into one, as
        Python keys it): their sums (hitcount first) and comm, cumulative since the start."""
        c = self.c
        out: dict[tuple[int | str, ...], tuple[list[int], str]] = {}
        nkeys, nvals = int(c.nkeys), int(c.nvals)
        raw = self._entries
        for i in range(int(c.count)):
            base = i * ENTRY
            task = tasks[raw[base + 7]][0] if raw[base + 7] < len(tasks) else None
            key = tuple(int(task.pid if task is not None else 0) if self._stamps[k] else int(raw[base + k])
                        for k in range(nkeys))
            sums = [int(raw[base + 3])] + [int(raw[base + 4 + k]) for k in range(nvals)]
            found = out.get(key)
            if found is None:
                pid = task.pid if task is not None else 0
                out[key] = (sums, "<idle>" if pid == 0 else (task.comm if task is not None else "<...>"))
            else:
                out[key] = ([(a + b) & U64 for a, b in zip(found[0], sums, strict=True)], found[1])
        return out


def native_hist(native: NativeEvent, trigger: HistTrigger, word: int) -> NativeHist | None:
    """``trigger`` counted in C for ``native`` (None: it keeps the Python path)."""
    try:
        return NativeHist(native, trigger, word)
    except _NotCounted:
        return None

