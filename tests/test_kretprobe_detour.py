"""Kretprobe entries done in guest code on Unicorn (kpsdk/targets/ucdetour.py).

test_kretprobes.py runs every kretprobe semantic on the optimized path, which is
this one wherever a function can have a detour; these tests pin down which
functions get one, and what the detour must not change: what reads show, what
the program computes, the counts, and the way back to the hook path.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.manager import ProbePoint
from kpsdk.regs import PtRegs

Ri = kpsdk.KretprobeInstance

#: functions of the fixture each arch detours (their first instructions are
#: boostable and no branch lands inside the bytes the jump covers)
DETOURED = {
    "x86_64": ("fact", "sum7", "loop", "check", "try_escape"),
    "i386": ("add", "fact", "inc", "loop", "twice", "try_escape"),
    "arm": ("add", "fact", "inc", "loop", "twice", "escape"),
    "thumb": ("add", "sum7", "inc", "loop", "twice"),
    "riscv64": ("add", "sum7", "inc", "loop", "twice"),
}
#: and some each keeps on the hook path, with why
NOT_DETOURED = {
    "x86_64": ("inc", "add"),  # 4 bytes (lea; ret): a 5-byte jmp does not fit
    "i386": ("escape",),  # the jmp covers 3 instructions and the function ends in ``jmp *%eax``
    "arm": (),
    "thumb": ("fact",),  # the 4-byte b.w would cover ``cmp; ble``: a branch cannot move
    "riscv64": ("fact",),  # the same: ``li; bge``
}


def point(s: kpsdk.Session, name: str) -> ProbePoint:
    return s.target.manager.points[s.symbols.resolve(name)]


def raw(s: kpsdk.Session, name: str, n: int) -> bytes:
    """Bytes as the CPU fetches them (no K10 overlay)."""
    return bytes(s.target.uc.mem_read(s.symbols.resolve(name), n))  # type: ignore[attr-defined]


@pytest.fixture
def s(arch: str) -> Iterator[kpsdk.Session]:
    session = kpsdk.open(f"elf:{fixtures.path(arch)}")
    yield session
    session.close()


def test_which_functions_get_a_detour(s: kpsdk.Session, arch: str) -> None:
    for name in DETOURED[arch] + NOT_DETOURED[arch]:
        rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None)
        s.register_kretprobe(rp)
        want = "detour" if name in DETOURED[arch] else "hook"
        assert point(s, name).mechanism == want, name
        s.unregister_kretprobe(rp)


def test_detoured_returns_match_the_program(s: kpsdk.Session, arch: str) -> None:
    """Every return of ``loop``'s callee and of ``loop`` is seen with the value the
    program computes, and reads of the patched entry show the original bytes."""
    name = "inc" if "inc" in DETOURED[arch] else "loop"
    before = s.target.read_memory(s.symbols.resolve(name), 16)
    seen: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: seen.append(regs.signed(s.arch.return_value)))
    s.register_kretprobe(rp)
    assert point(s, name).mechanism == "detour"
    assert raw(s, name, 16) != before  # the CPU fetches the jump ...
    assert s.target.read_memory(s.symbols.resolve(name), 16) == before  # ... reads show the function (K10)
    total = s.call("loop", 100)
    assert total == sum(range(1, 101))
    if name == "inc":
        assert seen == list(range(1, 101)) and rp.hits == 100
    else:
        assert seen == [total] and rp.hits == 1
    assert rp.nmissed == 0 and rp.in_flight == 0
    assert len(rp.rethook.free_nodes) == rp.rethook.count  # type: ignore[union-attr]
    s.unregister_kretprobe(rp)
    assert raw(s, name, 16) == before  # unregistration puts the entry back


def test_the_whole_program_under_detours_prints_the_same(s: kpsdk.Session, arch: str) -> None:
    returns: dict[str, list[int]] = {}
    probes = []
    for name in DETOURED[arch]:
        rp = kpsdk.Kretprobe(symbol_name=name, maxactive=16,
                             handler=lambda ri, regs, n=name: returns.setdefault(n, []).append(regs.return_value))
        probes.append(rp)
    s.register_kretprobes(probes)
    assert all(point(s, rp.symbol_name).mechanism == "detour" for rp in probes)  # type: ignore[arg-type]
    assert s.run(timeout=10) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT
    for rp in probes:  # escape() leaves by longjmp: entered, never returned
        expected = 0 if rp.symbol_name == "escape" else rp.hits
        assert rp.hits > 0 and len(returns.get(rp.symbol_name, [])) == expected, rp.symbol_name  # type: ignore[arg-type]
    if "fact" in returns:
        assert returns["fact"] == [1, 2, 6, 24, 120]
    if "loop" in returns:
        assert returns["loop"] == [fixtures.EXPECTED["loop"]]


def test_an_entry_handler_keeps_the_hook_path(s: kpsdk.Session, arch: str) -> None:
    name = DETOURED[arch][0]
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None, entry_handler=lambda ri, regs: 0)
    s.register_kretprobe(rp)
    assert point(s, name).mechanism == "hook"


def test_the_optimization_knob_turns_detours_off_and_on(s: kpsdk.Session, arch: str) -> None:
    name = DETOURED[arch][0]
    before = raw(s, name, 8)
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None)
    s.register_kretprobe(rp)
    s.kprobes_optimization = False
    assert point(s, name).mechanism == "breakpoint"
    s.kprobes_optimization = True
    assert point(s, name).mechanism == "detour"
    s.disable_kretprobe(rp)
    assert point(s, name).mechanism is None and raw(s, name, 8) == before
    s.enable_kretprobe(rp)
    assert point(s, name).mechanism == "detour"


@pytest.mark.parametrize(("arch", "name"), [("x86_64", "loop"), ("i386", "inc"), ("thumb", "inc"),
                                          ("riscv64", "inc")])  # arm: one 4-byte instruction, nothing inside
def test_a_probe_inside_the_displaced_bytes_sends_the_entry_back(arch: str, name: str) -> None:
    """A kprobe on the second displaced instruction would never be reached through
    the detour: the entry goes back to the hook path and both fire."""
    s = kpsdk.open(f"elf:{fixtures.path(arch)}")
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None)
    s.register_kretprobe(rp)
    length, first = point(s, name).state["detour_plan"], point(s, name).insn.size
    assert isinstance(length, int) and length > first
    s.unregister_kretprobe(rp)
    returns: list[int] = []
    inside: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: returns.append(regs.return_value))
    kp = kpsdk.Kprobe(symbol_name=name, offset=first, pre_handler=lambda p, regs: inside.append(regs.ip) or 0)
    s.register_kretprobe(rp)
    assert point(s, name).mechanism == "detour"
    s.register_kprobe(kp)
    assert point(s, name).mechanism == "hook"
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    assert len(inside) == len(returns) == rp.hits > 0


def test_writing_over_a_detoured_entry_is_refused(s: kpsdk.Session, arch: str) -> None:
    name = DETOURED[arch][-1]
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None)
    s.register_kretprobe(rp)
    length = point(s, name).state["detour_plan"]
    assert isinstance(length, int)
    with pytest.raises(kpsdk.KprobeError) as e:
        s.target.write_memory(s.symbols.resolve(name) + length - 1, b"\0")
    assert e.value.errno == errno.EBUSY


@pytest.mark.parametrize(("arch", "name"), [("x86_64", "try_escape"), ("i386", "try_escape"), ("arm", "escape")])
def test_a_full_pool_goes_to_python_which_reclaims_longjmp_frames(arch: str, name: str) -> None:
    """``escape`` leaves by a longjmp into ``try_escape``, so a call of either is
    never returned from: on the detour path the guest's count of free instances
    reaches 0, and the slow path reclaims the abandoned ones."""
    s = kpsdk.open(f"elf:{fixtures.path(arch)}")
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None, maxactive=1)
    s.register_kretprobe(rp)
    assert point(s, name).mechanism == "detour"
    assert s.call("escapes", 7) == 7
    assert rp.hits == 7 and rp.nmissed == 0
    s.unregister_kretprobe(rp)


def test_nested_code_run_by_a_handler_is_missed_k6(s: kpsdk.Session, arch: str) -> None:
    name = DETOURED[arch][0]
    seen: list[int] = []

    def on_loop_return(ri: Ri, regs: PtRegs) -> None:
        seen.append(s.call(name, *args))

    args = {"fact": (4,), "sum7": (1, 1, 1, 1, 1, 1, 1), "add": (2, 3), "loop": (3,)}[name]
    inner = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: seen.append(-1))
    outer = kpsdk.Kretprobe(symbol_name="check", handler=on_loop_return)
    s.register_kretprobes([inner, outer])
    assert point(s, name).mechanism == "detour"
    s.call("check", 50)
    assert len(seen) == 1 and seen[0] != -1  # the nested call ran, its kretprobe did not
    assert inner.hits == 0 and inner.nmissed >= 1
