"""Kretprobe hits whose handlers run in the target's own hook frame (``Rethook.direct``).

On Unicorn the detour's resume hook, the hooked entry and the detour's short
return hook call a kretprobe's ``entry_handler`` and ``handler`` themselves
instead of through the plugin's wrappers (``kpsdk/targets/unicorn/detour.py``).  What
the wrappers decide at every hit must still be decided at every hit: a handler
swapped or cleared by the user after registration, a veto, an exception claimed
by the fault_handler or surfacing as ``ProbeHandlerError``, the probe
unregistered by its own entry_handler.  Each run is made twice, with the fast
paths and with the detour planner off (the hook path, which goes through the
wrappers and the core), and the two must agree event for event; the counts are
also checked against what R1 says they must be.
"""

from __future__ import annotations

from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures
from tests.conftest import UNICORN_ARCHS

#: loop(N) calls inc(0) .. inc(N - 1)
N = 12


def _open(arch: str, fast: bool) -> kpsdk.Session:
    s = kpsdk.open(f"elf:{fixtures.path(arch)}")
    if not fast:
        s.target.detours.plan = lambda point: None  # type: ignore[attr-defined]
    return s


def _mechanism(s: kpsdk.Session, rp: kpsdk.Kretprobe) -> str:
    return str(s.target.manager.point_of(rp).mechanism)


def _swapping(arch: str, fast: bool) -> tuple[list[tuple[Any, ...]], int, tuple[int, int], str]:
    """inc's handlers replaced, then cleared, by themselves in the middle of loop(N)."""
    events: list[tuple[Any, ...]] = []
    with _open(arch, fast) as s:
        rp = kpsdk.Kretprobe(symbol_name="inc", maxactive=4, data_size=4)
        at: list[int] = []

        def entry2(ri: Any, regs: Any) -> int:
            x = regs.arg(0) & 0xFFFFFFFF
            events.append(("entry2", x))
            ri.data[:] = (x + 1000).to_bytes(4, "little")
            if x == 5:
                rp.entry_handler = None  # later calls: hooked, no entry handler
            return int(x == 4)  # a veto: inc(4) goes unhooked

        def entry1(ri: Any, regs: Any) -> int:
            x = regs.arg(0) & 0xFFFFFFFF
            events.append(("entry1", x, regs.ip == at[0]))
            ri.data[:] = x.to_bytes(4, "little")
            if x == 2:
                rp.entry_handler = entry2
            return 0

        def ret2(ri: Any, regs: Any) -> None:
            value = regs.return_value & 0xFFFFFFFF
            events.append(("ret2", value))
            if value == 9:
                rp.handler = None

        def ret1(ri: Any, regs: Any) -> None:
            data = int.from_bytes(ri.data, "little")
            events.append(("ret1", data, regs.return_value & 0xFFFFFFFF))
            if data == 1003:
                rp.handler = ret2

        rp.entry_handler, rp.handler = entry1, ret1
        s.register_kretprobe(rp)
        at.append(s.target.manager.point_of(rp).addr)
        mechanism = _mechanism(s, rp)
        result = s.call("loop", N)
        counts = (rp.hits, rp.nmissed)
        assert rp.in_flight == 0
        s.unregister_kretprobe(rp)
    return events, result, counts, mechanism


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_handlers_swapped_and_cleared_by_the_user_take_effect_at_the_next_hit(arch: str) -> None:
    fast = _swapping(arch, True)
    slow = _swapping(arch, False)
    assert slow[3] == "hook" and fast[3] in ("detour", "hooked-entry")
    assert fast[:3] == slow[:3]
    events, result, counts, _ = fast
    assert result == sum(range(1, N + 1))
    assert counts == (N, 0)
    assert events == [("entry1", 0, True), ("ret1", 0, 1), ("entry1", 1, True), ("ret1", 1, 2),
                      ("entry1", 2, True), ("ret1", 2, 3),
                      ("entry2", 3), ("ret1", 1003, 4),  # ret1 swaps itself for ret2 here
                      ("entry2", 4),  # vetoed: no return
                      ("entry2", 5),  # clears the entry handler: inc(5) on are hooked without one
                      ("ret2", 6), ("ret2", 7), ("ret2", 8), ("ret2", 9)]  # then no handler at all


def _faults(arch: str, fast: bool, claim: bool) -> tuple[list[tuple[Any, ...]], str]:
    """inc's return handler raises at inc(3); entry handler raises at inc(5)."""
    events: list[tuple[Any, ...]] = []
    with _open(arch, fast) as s:

        def entry(ri: Any, regs: Any) -> int:
            x = regs.arg(0) & 0xFFFFFFFF
            ri.data[:] = x.to_bytes(4, "little")
            events.append(("entry", x))
            if x == 5:
                raise KeyError("entry")
            return 0

        def ret(ri: Any, regs: Any) -> None:
            x = int.from_bytes(ri.data, "little")
            events.append(("ret", x))
            if x == 3:
                raise ZeroDivisionError("return")

        def fault(p: Any, regs: Any, trapnr: int) -> int:
            events.append(("fault", trapnr))
            return int(claim)

        rp = kpsdk.Kretprobe(symbol_name="inc", entry_handler=entry, handler=ret, fault_handler=fault,
                             maxactive=2, data_size=4)
        s.register_kretprobe(rp)
        mechanism = _mechanism(s, rp)
        try:
            events.append(("result", s.call("loop", N)))
        except kpsdk.ProbeHandlerError as e:
            events.append(("error", e.phase, type(e.__cause__).__name__))
        events.append(("counts", rp.hits, rp.nmissed))
        assert rp.rethook is not None
        s.unregister_kretprobe(rp)
    return events, mechanism


@pytest.mark.parametrize("claim", [True, False], ids=["claimed", "unclaimed"])
@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_handler_exceptions_on_the_inlined_paths(arch: str, claim: bool) -> None:
    fast, mechanism = _faults(arch, True, claim)
    slow, _ = _faults(arch, False, claim)
    assert mechanism in ("detour", "hooked-entry")
    assert fast == slow
    if claim:
        trap = kpsdk.TRAP_HANDLER_EXCEPTION
        assert ("ret", 3) in fast and fast[fast.index(("ret", 3)) + 1] == ("fault", trap)
        assert ("entry", 5) in fast and fast[fast.index(("entry", 5)) + 1] == ("fault", trap)
        assert ("ret", 5) not in fast  # the faulting entry leaves its call unhooked
        assert ("result", sum(range(1, N + 1))) in fast and fast[-1] == ("counts", N, 0)
    else:  # the first one, the return handler's, surfaces
        assert fast[-2] == ("error", "handler", "ZeroDivisionError")
        assert ("entry", 5) not in fast


def _unregistering(arch: str, fast: bool) -> tuple[list[tuple[Any, ...]], int, tuple[int, int]]:
    """inc's entry handler unregisters its own probe at inc(3)."""
    events: list[tuple[Any, ...]] = []
    with _open(arch, fast) as s:
        rp = kpsdk.Kretprobe(symbol_name="inc", maxactive=3)

        def entry(ri: Any, regs: Any) -> int:
            x = regs.arg(0) & 0xFFFFFFFF
            events.append(("entry", x))
            if x == 3:
                s.unregister_kretprobe(rp)
            return 0

        rp.entry_handler = entry
        rp.handler = lambda ri, regs: events.append(("ret", regs.return_value & 0xFFFFFFFF))
        s.register_kretprobe(rp)
        result = s.call("loop", N)
        counts = (rp.hits, rp.nmissed)
    return events, result, counts


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_an_entry_handler_that_unregisters_its_probe_leaves_that_call_unhooked(arch: str) -> None:
    fast = _unregistering(arch, True)
    assert fast == _unregistering(arch, False)
    events, result, counts = fast
    assert result == sum(range(1, N + 1))
    assert events == [("entry", 0), ("ret", 1), ("entry", 1), ("ret", 2), ("entry", 2), ("ret", 3), ("entry", 3)]
    assert counts == (4, 0)
