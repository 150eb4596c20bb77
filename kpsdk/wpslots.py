"""Debug-register slots shared by priority (Guts section 8.2: "Probing the Guts of Kprobes", OLS 2006).

A CPU has a few watchpoint slots (x86: DR0-DR3).  Guts asks for "a
nonintrusive, flexible, low-level facility for allocating debug registers"
that makes a holder "relinquish" its slot "when a more demanding user comes
along".  This module is that allocator and nothing else: it knows no target,
no watchpoint and no architecture, only owners (any hashable object) with a
priority.

* :meth:`SlotTable.request` gives the lowest free slot.  When none is free it
  takes the slot of the lowest-priority holder whose priority is strictly
  lower than the requester's (of equal lowest holders, the most recent one
  loses, so long-standing holders keep theirs); that holder becomes *waiting*
  and is returned so the caller can tell it.  With no such holder the request
  fails with ``ENOSPC`` and changes nothing.
* :meth:`SlotTable.release` frees an owner's slot (or drops it from the
  waiting list) and hands the slot to the highest-priority waiting owner
  (first preempted first, among equals), which is returned so the caller can
  re-arm it.

Slot numbers are stable: an owner keeps its number until it is released or
preempted, and a re-armed owner gets the number that was freed.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field

from kpsdk.errors import KprobeError


@dataclass(eq=False)
class _Entry:
    owner: Hashable
    priority: int
    seq: int  # when it was granted (holders) or preempted (waiting): the tie-breaker
    slot: int | None = None


@dataclass
class Grant:
    """What :meth:`SlotTable.request` gave: the slot, and the owner it was taken from."""

    slot: int
    preempted: Hashable | None = None


@dataclass
class SlotTable:
    """``count`` slots, numbered 0 to count-1; ``what`` names them in errors."""

    count: int
    what: str = "watchpoint slots"
    _holders: dict[int, _Entry] = field(default_factory=dict)  # slot -> entry
    _waiting: list[_Entry] = field(default_factory=list)
    _by_owner: dict[Hashable, _Entry] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def request(self, owner: Hashable, priority: int = 0) -> Grant:
        """A slot for ``owner``; ``ENOSPC`` when all are held at priorities >= ``priority``."""
        if owner in self._by_owner:
            raise KprobeError(errno.EBUSY, f"{owner!r} already holds or waits for one of the {self.what}")
        free = next((n for n in range(self.count) if n not in self._holders), None)
        victim: _Entry | None = None
        if free is None:
            lower = [e for e in self._holders.values() if e.priority < priority]
            if not lower:
                raise KprobeError(errno.ENOSPC, f"all {self.count} {self.what} are in use by holders of priority "
                                  f">= {priority}")
            victim = min(lower, key=lambda e: (e.priority, -e.seq))
            free = victim.slot
            assert free is not None
            del self._holders[free]
            victim.slot = None
            victim.seq = next(self._seq)
            self._waiting.append(victim)
        entry = _Entry(owner, priority, next(self._seq), free)
        self._holders[free] = entry
        self._by_owner[owner] = entry
        return Grant(free, victim.owner if victim is not None else None)

    def release(self, owner: Hashable) -> tuple[Hashable, int] | None:
        """Forget ``owner``; if it held a slot, the ``(owner, slot)`` it went to, if any."""
        entry = self._by_owner.pop(owner, None)
        if entry is None:
            raise KprobeError(errno.EINVAL, f"{owner!r} holds none of the {self.what}")
        if entry.slot is None:
            self._waiting.remove(entry)
            return None
        slot = entry.slot
        del self._holders[slot]
        if not self._waiting:
            return None
        heir = min(self._waiting, key=lambda e: (-e.priority, e.seq))
        self._waiting.remove(heir)
        heir.slot = slot
        heir.seq = next(self._seq)
        self._holders[slot] = heir
        return heir.owner, slot

    def slot_of(self, owner: Hashable) -> int | None:
        """The owner's slot, or None while it waits (or is unknown)."""
        entry = self._by_owner.get(owner)
        return entry.slot if entry is not None else None

    def holders(self) -> dict[int, Hashable]:
        """Slot -> owner, for the slots in use."""
        return {slot: e.owner for slot, e in sorted(self._holders.items())}

    def waiting(self) -> list[Hashable]:
        """Owners that lost their slot, in the order they would get one back."""
        return [e.owner for e in sorted(self._waiting, key=lambda e: (-e.priority, e.seq))]

    def __contains__(self, owner: Hashable) -> bool:
        return owner in self._by_owner
