"""Kretprobes with an entry_handler, and on functions too short for a detour, on Unicorn.

Both take the detour's return code (``kpsdk/targets/unicorn/detour.py``): an entry
handler runs from a hook on the detour's displaced instructions, after the
guest entry code hooked the call; a function too short for the jump keeps a
code hook at its entry (the "hooked-entry" mechanism) that does the guest
code's bookkeeping in Python.  Whatever path a call takes, what the handlers
see must be what the hook path shows: every run here is made twice, with the
fast paths and with the detour planner switched off, and the two must agree
hit for hit (R1: entry handler vetoes, ``maxactive`` and ``nmissed``, ``data``
from the entry to the return, recursion, tail calls, longjmp).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.probe import TRAP_HANDLER_EXCEPTION
from tests.conftest import UNICORN_ARCHS

#: functions of the fixture: recursive (fact), short (inc, add), a tail call into
#: inc (twice), a longjmp out of escape into try_escape, stack arguments (sum7), a global's
#: update (bump: aarch64's starts with the adrp of its address, a hooked entry there)
FUNCS = ("add", "fact", "sum7", "inc", "loop", "check", "twice", "escape", "try_escape", "escapes", "bump")


def run(arch: str, fast: bool, veto: bool = True, raising: bool = False) -> tuple[list[tuple[Any, ...]],
                                                                                   dict[str, tuple[int, int]],
                                                                                   set[str]]:
    """The fixture's whole run with an entry_handler and a handler on every FUNCS
    function: the events in order, (hits, nmissed) per probe, the mechanisms."""
    events: list[tuple[Any, ...]] = []
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        if not fast:
            s.target.detours.plan = lambda point: None  # type: ignore[attr-defined]
        word = s.arch.word_size

        def make(name: str) -> kpsdk.Kretprobe:
            def entry(ri: Any, regs: Any) -> int:
                a = regs.arg(0) & 0xFFFFFFFF
                ri.data[:] = a.to_bytes(8, "little")
                events.append(("entry", name, a, regs.ip, ri.ret_addr))
                if raising and name == "add":
                    raise RuntimeError("entry handler fails")
                return int(veto and a % 3 == 1)

            def ret(ri: Any, regs: Any) -> None:
                events.append(("return", name, int.from_bytes(ri.data, "little"),
                               regs.return_value & ((1 << (8 * word)) - 1), ri.ret_addr, regs.ip))

            def fault(p: Any, regs: Any, trapnr: int) -> int:
                events.append(("fault", name, trapnr))
                return 1

            return kpsdk.Kretprobe(symbol_name=name, entry_handler=entry, handler=ret, maxactive=3, data_size=8,
                                   fault_handler=fault)

        probes = [make(name) for name in FUNCS]
        s.register_kretprobes(probes)
        mechanisms = {str(s.target.manager.point_of(rp).mechanism) for rp in probes}
        assert s.run(timeout=30) == 0
        assert s.console == fixtures.EXPECTED_OUTPUT
        stats = {str(rp.symbol_name): (rp.hits, rp.nmissed) for rp in probes}
        for rp in probes:
            assert rp.in_flight == 0
        s.unregister_kretprobes(probes)
    return events, stats, mechanisms


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_entry_handlers_see_what_the_hook_path_shows(arch: str) -> None:
    fast, fast_stats, mechanisms = run(arch, True)
    slow, slow_stats, slow_mechanisms = run(arch, False)
    assert slow_mechanisms <= {"hook"}
    if kpsdk.get_registry().arch(arch).detours is not None:
        assert mechanisms == {"detour", "hooked-entry"}, mechanisms
    assert fast == slow
    assert fast_stats == slow_stats
    # and what the hook path shows is R1: fact's data and return value belong together
    facts = [e for e in fast if e[:2] == ("return", "fact")]
    assert facts and all(e[3] == math.factorial(e[2]) for e in facts)
    # maxactive=3: fact(5) nests five calls; fact(4) and fact(1) are vetoed (4 % 3 == 1),
    # so fact(2) finds no instance left
    assert fast_stats["fact"] == (5, 1)
    vetoed = {(e[1], e[2]) for e in fast if e[0] == "entry" and e[2] % 3 == 1}
    returned = {(e[1], e[2]) for e in fast if e[0] == "return"}
    assert vetoed and not vetoed & returned


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_without_vetoes_every_call_returns_once(arch: str) -> None:
    fast, fast_stats, _ = run(arch, True, veto=False)
    slow, slow_stats, _ = run(arch, False, veto=False)
    assert fast == slow and fast_stats == slow_stats
    assert [e[2] for e in fast if e[:2] == ("return", "inc")] == [*range(100), 10]  # loop, then twice's tail call
    assert fast_stats["inc"][0] == 101


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_an_entry_handler_that_raises_goes_to_the_fault_handler(arch: str) -> None:
    fast, fast_stats, _ = run(arch, True, raising=True)
    slow, slow_stats, _ = run(arch, False, raising=True)
    assert fast == slow and fast_stats == slow_stats
    assert ("fault", "add", TRAP_HANDLER_EXCEPTION) in fast
    assert not [e for e in fast if e[:2] == ("return", "add")]  # the faulting entry leaves the call unhooked


def _on_own_stack(fast: bool, entry: bool) -> tuple[list[tuple[int, ...]], int, str]:
    """x86_64 ``loop(5)`` called with its stack in memory the test mapped (not the
    target's host-backed stack): each return's (ret_addr, return value, sp),
    loop's result, inc's mechanism."""
    seen: list[tuple[int, ...]] = []
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        if not fast:
            s.target.detours.plan = lambda point: None  # type: ignore[attr-defined]
        s.target.map(0x5000_0000, 0x10000, "rw")  # type: ignore[attr-defined]
        s.target.call_sp = 0x5000_8000  # type: ignore[attr-defined]

        def ret(ri: Any, regs: Any) -> None:
            seen.append((ri.ret_addr, regs.return_value, regs.sp))

        rp = kpsdk.Kretprobe(symbol_name="inc", handler=ret, maxactive=4,
                             entry_handler=(lambda ri, regs: 0) if entry else None)
        s.register_kretprobe(rp)
        mechanism = str(s.target.manager.point_of(rp).mechanism)
        result = s.call("loop", 5)
        assert rp.nmissed == 0 and rp.in_flight == 0
    return seen, result, mechanism


@pytest.mark.parametrize("entry", [False, True], ids=["no-entry-handler", "entry-handler"])
def test_a_hooked_entry_on_a_stack_the_program_made(entry: bool) -> None:
    """The hooked entry reads and rewrites [sp] in the host's copy of the stack; on any
    other stack it goes through the target's memory, and the returns are the hook path's."""
    fast, fast_result, mechanism = _on_own_stack(True, entry)
    slow, slow_result, _ = _on_own_stack(False, entry)
    assert mechanism == "hooked-entry"
    assert len(fast) == 5 and all(0x5000_0000 <= sp < 0x5001_0000 for _, _, sp in fast)
    assert (fast, fast_result) == (slow, slow_result)


def _misaligned(fast: bool) -> tuple[list[tuple[int, ...]], int, str]:
    """x86_64 ``inc(7)`` called by a stub with sp 4 bytes off a word boundary, on the
    target's own (host-backed) stack: the hooked entry cannot read and write [sp] as
    an aligned word there."""
    seen: list[tuple[int, ...]] = []
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        if not fast:
            s.target.detours.plan = lambda point: None  # type: ignore[attr-defined]

        def ret(ri: Any, regs: Any) -> None:
            seen.append((ri.ret_addr, regs.return_value, regs.sp % 8))

        rp = kpsdk.Kretprobe(symbol_name="inc", handler=ret, maxactive=4, entry_handler=lambda ri, regs: 0)
        s.register_kretprobe(rp)
        inc = s.target.manager.point_of(rp).addr
        stub = 0x6000_0000
        s.target.map(stub, 0x1000, "rwx")  # type: ignore[attr-defined]
        # sub rsp, 4; mov edi, 7; mov rax, inc; call rax; add rsp, 4; ret
        code = (b"\x48\x83\xec\x04" + b"\xbf\x07\x00\x00\x00" + b"\x48\xb8" + inc.to_bytes(8, "little")
                + b"\xff\xd0" + b"\x48\x83\xc4\x04" + b"\xc3")
        s.write_memory(stub, code)
        mechanism = str(s.target.manager.point_of(rp).mechanism)
        result = s.call(stub)
        seen.append((stub + len(code) - 5,))  # where inc returns to: after the call
        assert rp.nmissed == 0 and rp.in_flight == 0
    return seen, result, mechanism


def test_a_hooked_entry_with_a_misaligned_stack() -> None:
    fast, fast_result, mechanism = _misaligned(True)
    slow, slow_result, _ = _misaligned(False)
    assert mechanism == "hooked-entry"
    assert fast[0] == (fast[1][0], 8, 4)  # inc(7) returned 8 to the stub, sp 4 bytes off
    assert (fast, fast_result) == (slow, slow_result) and fast_result == 8
