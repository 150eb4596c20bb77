"""post_handlers on live targets: steps ended by the agent (kpsdk/targets/live/step.py).

Ground truth is the slow way, which really single-steps each probed instruction
through MI (``-exec-step-instruction``), and the program's own output: with
a pre_handler and a post_handler on every instruction of the fixture's
functions, both ways must see the same hits in the same order with the same
registers and memory, on every arch.
"""

from __future__ import annotations

import pytest

import kpsdk
from kpsdk import fixtures
from tests.conftest import instructions, probe_addr
from tests.test_live import LIVE_ARCHS, open_live, qemu_truth

#: straight code, a recursion, a store to memory, a conditional branch, a tail call, a
#: longjmp-like indirect jump, stack arguments
FUNCTIONS = ("add", "fact", "bump", "check", "twice", "escape", "sum7")

Event = tuple[object, ...]


def in_it_block(arch: str, s: kpsdk.Session, probes: list[kpsdk.Kprobe]) -> set[int]:
    """Addresses of the probes on Thumb instructions inside an IT block."""
    if arch != "thumb":
        return set()
    points = s.target.manager.points  # type: ignore[attr-defined]
    return {p.addr for p in probes if points[p.addr].insn.condition is not None}


def run_everything_probed(arch: str, agent_steps: bool) -> tuple[list[Event], str, list[kpsdk.Kprobe], set[int]]:
    """Every instruction of FUNCTIONS probed with both handlers; the events in order."""
    with open_live(arch) as s:
        s.target.agent_steps = agent_steps  # type: ignore[attr-defined]
        counter = s.symbols.get("counter").address
        events: list[Event] = []
        rv = s.arch.return_value

        def pre(p: kpsdk.Probe, r: kpsdk.regs.PtRegs) -> int:
            events.append(("pre", p.addr, r.ip, r.sp))
            return 0

        def post(p: kpsdk.Probe, r: kpsdk.regs.PtRegs, flags: int) -> None:
            events.append(("post", p.addr, r.ip, r.sp, r[rv], s.read_int(counter, 4)))

        probes = []
        for name in FUNCTIONS:
            for i in instructions(s, name):
                kp = kpsdk.Kprobe(addr=probe_addr(s, i.address), pre_handler=pre, post_handler=post)
                try:
                    s.register_kprobe(kp)
                except kpsdk.KprobeError:  # what kprobes refuse (Thumb's it) stays unprobed
                    continue
                probes.append(kp)
        assert s.run(timeout=120) == 0
        return events, s.console, probes, in_it_block(arch, s, probes)


@pytest.mark.parametrize("arch", LIVE_ARCHS)
def test_agent_steps_see_what_real_single_steps_see(arch: str) -> None:
    everything, fast_out, fast_probes, in_it = run_everything_probed(arch, True)
    slow, slow_out, _, _ = run_everything_probed(arch, False)
    assert fast_out == slow_out == fixtures.EXPECTED_OUTPUT
    fast = everything
    if in_it:
        # gdb's stepi through QEMU does not execute a Thumb instruction inside an IT block
        # (the pc stays, its effect is missing), so the slow way is no ground truth there: the
        # program's values are.  check()'s `movle r0, #0`: check(5) takes it, and check(50)
        # does not hit it at all (its condition fails: no handlers).
        it_posts = [e for e in fast if e[0] == "post" and e[1] in in_it]
        assert [e[4] for e in it_posts] == [0]
        fast = [e for e in fast if not (e[0] == "post" and e[1] in in_it)]
        slow = [e for e in slow if not (e[0] == "post" and e[1] in in_it)]
    assert fast == slow
    fast = everything
    pres = [e for e in fast if e[0] == "pre"]
    assert len(pres) == sum(p.hits for p in fast_probes) and all(p.nmissed == 0 for p in fast_probes)
    # each pre_handler is followed by its own post_handler, after the instruction ran (K3)
    for before, after in zip(fast[::2], fast[1::2], strict=True):
        assert before[0] == "pre" and after[0] == "post" and before[1] == after[1]
        assert after[2] != before[2] or after[3] != before[3]  # the pc moved, or a loop to itself did something
    # the store in bump() is visible to the post_handler of the instruction that made it
    truth = qemu_truth(arch)
    counters = [e[5] for e in fast if e[0] == "post"]
    assert [1, 3, truth["counter"]] == [c for i, c in enumerate(counters) if i == 0 or c != counters[i - 1]][1:]


@pytest.mark.parametrize("arch", ["x86_64", "thumb"])
def test_a_run_stopped_in_a_pre_handler_returns_with_the_post_handler_run(arch: str) -> None:
    with open_live(arch) as s:
        seen: list[str] = []

        def pre(p: kpsdk.Probe, r: kpsdk.regs.PtRegs) -> int:
            seen.append("pre")
            if seen.count("pre") == 3:
                s.stop()
            return 0

        kp = kpsdk.Kprobe(symbol_name="fact", pre_handler=pre, post_handler=lambda p, r, f: seen.append("post"))
        s.register_kprobe(kp)
        assert s.run(timeout=60) is None
        assert seen == ["pre", "post"] * 2 + ["pre", "post"]  # the stopping hit's step ran before run() returned
        assert s.run(timeout=60) == 0
        assert seen == ["pre", "post"] * 5 and kp.hits == 5
        assert s.console == fixtures.EXPECTED_OUTPUT
