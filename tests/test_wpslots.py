"""The debug-register slot allocator on its own (kpsdk.wpslots): no target, no watchpoint."""

from __future__ import annotations

import errno

import pytest

from kpsdk.errors import KprobeError
from kpsdk.wpslots import SlotTable


def test_lowest_free_slot_then_enospc_at_count_plus_one() -> None:
    t = SlotTable(4)
    assert [t.request(f"o{i}").slot for i in range(4)] == [0, 1, 2, 3]
    with pytest.raises(KprobeError) as info:
        t.request("o4")
    assert info.value.errno == errno.ENOSPC
    assert "o4" not in t and t.holders() == {0: "o0", 1: "o1", 2: "o2", 3: "o3"}  # nothing changed
    assert t.release("o1") is None
    assert t.request("o5").slot == 1  # the freed number is reused


def test_equal_priority_does_not_preempt() -> None:
    t = SlotTable(1)
    t.request("a", priority=3)
    with pytest.raises(KprobeError) as info:
        t.request("b", priority=3)
    assert info.value.errno == errno.ENOSPC


def test_higher_priority_takes_the_lowest_holder_and_gives_it_back() -> None:
    t = SlotTable(3)
    t.request("low-old", priority=1)
    t.request("lowest", priority=0)
    t.request("mid", priority=2)
    grant = t.request("high", priority=9)
    assert (grant.slot, grant.preempted) == (1, "lowest")
    assert t.slot_of("lowest") is None and t.waiting() == ["lowest"]
    grant = t.request("higher", priority=10)
    assert (grant.slot, grant.preempted) == (0, "low-old")
    assert t.waiting() == ["low-old", "lowest"]  # higher priority first
    assert t.release("higher") == ("low-old", 0)  # re-armed in the slot that freed
    assert t.release("mid") == ("lowest", 2)
    assert t.waiting() == [] and t.holders() == {0: "low-old", 1: "high", 2: "lowest"}


def test_among_equal_lowest_the_most_recent_loses_and_first_preempted_comes_back_first() -> None:
    t = SlotTable(2)
    t.request("first", priority=0)
    t.request("second", priority=0)
    assert t.request("x", priority=1).preempted == "second"
    assert t.request("y", priority=1).preempted == "first"
    assert t.waiting() == ["second", "first"]
    assert t.release("x") == ("second", 1)  # x had taken slot 1 from it


def test_release_of_a_waiting_owner_and_of_an_unknown_one() -> None:
    t = SlotTable(1)
    t.request("a")
    t.request("b", priority=1)
    assert t.release("a") is None  # it was waiting: nothing frees
    assert t.holders() == {0: "b"}
    with pytest.raises(KprobeError) as info:
        t.release("a")
    assert info.value.errno == errno.EINVAL
    with pytest.raises(KprobeError) as info:
        t.request("b")
    assert info.value.errno == errno.EBUSY


def test_zero_slots() -> None:
    with pytest.raises(KprobeError) as info:
        SlotTable(0).request("a", priority=100)
    assert info.value.errno == errno.ENOSPC
