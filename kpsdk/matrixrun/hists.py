"""Hist triggers over a matrix: each target's tables, and the tables merged per key across targets.

A target's process keeps a :class:`HistSnapshot` of each of its hist triggers (the
table's layout, its entries, its counts, and the text of every symbol a ``.sym`` key
shows, made with that target's own symbols), plain data that pickles.  Here the
snapshots become :class:`~kpsdk.trace.histtrigger.HistTrigger` objects again, to be
printed as the kernel's ``hist`` file prints them: one per target, and one per trigger
for the whole matrix, whose entries add up the entries of the same key across targets
(hitcount and values summed, wrapping at 64 bits as the kernel's do; ``Hits`` and
``Dropped`` summed).  A merged table keeps every key (the kernel's table would drop the
keys beyond its size).  A key's ``.sym`` text and ``.execname`` come from the first
target that had it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kpsdk.trace.histtrigger import U64, HistEntry, HistSpec, HistTable, HistTrigger

if TYPE_CHECKING:
    from kpsdk.matrixrun.result import TargetResult
    from kpsdk.trace.events import Trace

SYM_MODIFIERS = ("sym", "sym-offset")


@dataclass
class HistSnapshot:
    """One hist trigger of one event, as plain data."""

    group: str
    event: str
    #: the trigger's place among its event's hist triggers
    position: int
    spec: HistSpec
    layout: HistSpec
    word: int
    log2_overflow: int | None
    #: ``(key, sums, comm)`` per entry, in the order they came
    entries: list[tuple[tuple[int | str, ...], list[int], str]]
    hits: int
    dropped: int
    #: ``(address, with_offset) -> text`` for the ``.sym`` keys shown
    symbols: dict[tuple[int, bool], str] = field(default_factory=dict)

    @property
    def slot(self) -> tuple[str, str, int, str]:
        """Which trigger of the script this is: the same in every target."""
        return (self.group, self.event, self.position, self.spec.command)


def snapshot(trace: Trace) -> list[HistSnapshot]:
    """The hist triggers of ``trace`` (in its target's process, before the session closes)."""
    out = []
    positions: dict[str, int] = {}
    for event, trigger in trace.hists():
        position = positions.get(event.name, 0)
        positions[event.name] = position + 1
        layout = trigger.layout
        symbols: dict[tuple[int, bool], str] = {}
        for entry in trigger.entries.values():
            for key_field, value in zip(layout.keys, entry.key, strict=True):
                if key_field.modifier in SYM_MODIFIERS and isinstance(value, int):
                    offset = key_field.modifier == "sym-offset"
                    symbols[(value & U64, offset)] = trigger.symbolize(value & U64, offset)
        out.append(HistSnapshot(event.group, event.name, position, trigger.spec, layout, trigger.word,
                                trigger.log2_overflow,
                                [(e.key, list(e.sums), e.comm) for e in trigger.entries.values()],
                                trigger.hits, trigger.dropped, symbols))
    return out


def _trigger(first: HistSnapshot, symbols: dict[tuple[int, bool], str]) -> HistTrigger:
    def symbolize(addr: int, offset: bool) -> str:
        return symbols.get((addr, offset), f"{addr:#x}")

    return HistTrigger(first.spec, first.word, symbolize, table=HistTable(first.layout),
                       log2_overflow=first.log2_overflow)


def rebuild(snapshots: Iterable[HistSnapshot]) -> HistTrigger:
    """One trigger whose table holds the entries of every snapshot, added up per key."""
    merged: HistTrigger | None = None
    symbols: dict[tuple[int, bool], str] = {}
    for snap in snapshots:
        if merged is None:
            merged = _trigger(snap, symbols)
        for known, text in snap.symbols.items():
            symbols.setdefault(known, text)
        table = merged.table
        assert table is not None
        table.hits += snap.hits
        table.dropped += snap.dropped
        for key, sums, comm in snap.entries:
            entry = table.entries.get(key)
            if entry is None:
                table.entries[key] = HistEntry(key, list(sums), comm)
                continue
            entry.sums = [(a + b) & U64 for a, b in zip(entry.sums, sums, strict=True)]
    if merged is None:
        raise ValueError("no snapshot to rebuild a hist trigger from")
    return merged


def hist_text(results: Iterable[TargetResult], per_target: bool = True) -> str:
    """The hist files: each target's (``==> TARGET: events/GROUP/EVENT/hist <==``, when
    ``per_target``), then each trigger merged over the targets (``==> all targets: ... <==``)."""
    parts = []
    slots: dict[tuple[str, str, int, str], list[HistSnapshot]] = {}
    for result in results:
        for snap in result.hists:
            slots.setdefault(snap.slot, []).append(snap)
            if per_target:
                parts.append(f"==> {result.name}: events/{snap.group}/{snap.event}/hist <==\n"
                             + rebuild([snap]).render())
    for (group, event, _position, _command), snaps in slots.items():
        parts.append(f"==> all targets ({len(snaps)}): events/{group}/{event}/hist <==\n" + rebuild(snaps).render())
    return "\n".join(parts)
