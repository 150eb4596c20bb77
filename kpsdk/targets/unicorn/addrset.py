"""A sorted set of addresses whose inserts and removals stay cheap at a million.

The breakpoint-path points' addresses are kept sorted so that a read of guest memory finds
the traps inside it by bisection (K10, :mod:`.memory`).  A plain sorted list made arming
and disarming O(n) each (a ``list.insert``/``del`` moves the tail: 8 MB at a million
probes), so re-arming a million points (the optimization knob) or unregistering them took
hours.  Here the addresses are in sorted blocks of at most ``2 * BLOCK``: an insert or a
removal moves one block and bisects the blocks' last addresses.
"""

from __future__ import annotations

from bisect import bisect_left, insort

#: a block splits past twice this
BLOCK = 512


class AddressSet:
    """Addresses, sorted, no duplicates expected (each point is armed once)."""

    def __init__(self) -> None:
        self._blocks: list[list[int]] = []
        self._lasts: list[int] = []  # each block's last (largest) address
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, addr: int) -> None:
        blocks, lasts = self._blocks, self._lasts
        self._len += 1
        if not blocks:
            blocks.append([addr])
            lasts.append(addr)
            return
        i = min(bisect_left(lasts, addr), len(blocks) - 1)
        block = blocks[i]
        insort(block, addr)
        lasts[i] = block[-1]
        if len(block) > 2 * BLOCK:
            blocks[i:i + 1] = [block[:BLOCK], block[BLOCK:]]
            lasts[i:i + 1] = [block[BLOCK - 1], block[-1]]

    def remove(self, addr: int) -> None:
        """Remove ``addr`` (present: the caller armed it)."""
        blocks, lasts = self._blocks, self._lasts
        i = bisect_left(lasts, addr)
        block = blocks[i]
        del block[bisect_left(block, addr)]
        self._len -= 1
        if block:
            lasts[i] = block[-1]
        else:
            del blocks[i]
            del lasts[i]

    def between(self, lo: int, hi: int) -> list[int]:
        """The addresses in ``[lo, hi)``, in order."""
        blocks = self._blocks
        out: list[int] = []
        i = bisect_left(self._lasts, lo)
        while i < len(blocks):
            block = blocks[i]
            if block[0] >= hi:
                break
            out += block[bisect_left(block, lo):bisect_left(block, hi)]
            i += 1
        return out
