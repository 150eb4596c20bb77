"""The breakpoint addresses' sorted set (kpsdk/targets/unicorn/addrset.py) against a sorted list."""

from __future__ import annotations

import bisect
import random

from kpsdk.targets.unicorn.addrset import BLOCK, AddressSet


def test_the_set_answers_as_a_sorted_list_through_splits_and_emptied_blocks() -> None:
    rng = random.Random(38)
    ours, ref = AddressSet(), []
    live: set[int] = set()
    for step in range(20 * BLOCK):
        if live and rng.random() < 0.4:
            a = rng.choice(sorted(live)) if step % 50 == 0 else next(iter(live))
            live.discard(a)
            ours.remove(a)
            del ref[bisect.bisect_left(ref, a)]
        else:
            a = rng.randrange(1 << 20)
            if a in live:
                continue
            live.add(a)
            ours.add(a)
            bisect.insort(ref, a)
        if step % 97 == 0:
            lo = rng.randrange(1 << 20)
            hi = lo + rng.randrange(1 << 16)
            assert ours.between(lo, hi) == ref[bisect.bisect_left(ref, lo):bisect.bisect_left(ref, hi)]
    assert len(ours) == len(ref) and ours.between(0, 1 << 21) == ref


def test_a_million_in_order_and_out_again_is_quick() -> None:
    ours = AddressSet()
    for a in range(0, 3_000_000, 3):
        ours.add(a)
    for a in range(0, 3_000_000, 3):
        ours.remove(a)
    assert len(ours) == 0 and ours.between(0, 1 << 30) == []
