"""post_handlers on Unicorn (K3) through persistent successor hooks (kpsdk/targets/unicorn/step.py).

Each hit of a post_handler point only marks a step pending; the hooks on the
successors stay from hit to hit.  These tests check what that must not change:
every hit runs its post_handler once, after the instruction, in order with the
next probe's pre_handler, and unregistering takes the hooks away.
"""

from __future__ import annotations

import kpsdk
from tests.conftest import fall_through, instructions, probe_addr, probeable_instructions


def test_every_instruction_of_a_function_gets_its_post_handler_on_every_hit(session: kpsdk.Session) -> None:
    insns = probeable_instructions(session, "inc")  # on MIPS not the return's delay slot
    events: list[tuple[str, int, int]] = []

    def pre(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        events.append(("pre", p.addr, regs.ip))
        return 0

    def post(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs, flags: int) -> None:
        events.append(("post", p.addr, regs.ip))

    probes = [kpsdk.Kprobe(addr=probe_addr(session, i.address), pre_handler=pre, post_handler=post) for i in insns]
    session.register_kprobes(probes)
    n = 300
    assert session.call("loop", n) == n * (n + 1) // 2
    for p in probes:
        assert p.hits == n and p.nmissed == 0
    assert len(events) == 2 * n * len(insns)
    per_call = 2 * len(insns)
    for call in range(n):
        got = events[call * per_call:(call + 1) * per_call]
        for k, i in enumerate(insns):  # pre, then post after the instruction, then the next one's pre (K3)
            pre_ev, post_ev = got[2 * k], got[2 * k + 1]
            assert pre_ev[0] == "pre" and post_ev[0] == "post"
            assert pre_ev[2] == i.address and post_ev[2] != i.address
            if k + 1 < len(insns):
                assert post_ev[2] == fall_through(session, i)  # inc runs straight through
    rets = {ev[2] for ev in events if ev[0] == "post" and ev[1] == probes[-1].addr}
    loop = session.symbols.get("loop")
    assert len(rets) == 1 and loop.address <= rets.pop() < loop.address + loop.size  # back in loop()
    session.unregister_kprobes(probes)
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]
    assert session.call("loop", 10) == 55


def test_post_handler_hits_are_not_lost_over_many_hits(session: kpsdk.Session) -> None:
    posts = []
    kp = kpsdk.Kprobe(symbol_name="inc", post_handler=lambda p, r, f: posts.append(r.ip))
    session.register_kprobe(kp)
    n = 5000
    assert session.call("loop", n) == n * (n + 1) // 2
    assert kp.hits == n == len(posts) and kp.nmissed == 0
    assert session.call("loop", n) == n * (n + 1) // 2
    assert kp.hits == 2 * n == len(posts)
    assert session.target.stepper.hooked >= 1  # type: ignore[attr-defined]
    session.unregister_kprobe(kp)
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]


def test_two_points_share_a_successor_hook_until_both_are_gone(session: kpsdk.Session) -> None:
    first, second = instructions(session, "loop")[:2]
    a = kpsdk.Kprobe(addr=probe_addr(session, first.address), post_handler=lambda p, r, f: None)
    b = kpsdk.Kprobe(addr=probe_addr(session, second.address), post_handler=lambda p, r, f: None)
    session.register_kprobes([a, b])
    assert session.call("loop", 3) == 6
    assert a.hits == b.hits == 1
    session.unregister_kprobe(a)
    assert session.call("loop", 3) == 6
    assert b.hits == 2
    session.unregister_kprobe(b)
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]


def test_a_return_s_post_handler_sees_each_call_site() -> None:
    """The successor of a ``ret`` changes from call to call: the memoized successors
    must follow the stack, not replay the first answer (x86_64: [sp] is the address)."""
    s = kpsdk.open("unicorn:x86_64")
    try:
        code, func = 0x400000, 0x400100
        s.target.map(code, 0x1000, "rx")  # type: ignore[attr-defined]
        s.target.uc.mem_write(func, s.arch.assemble("mov eax, 1; ret", func))  # type: ignore[attr-defined]
        body = "; ".join([f"call {func:#x}", "nop"] * 3 + [f"call {func:#x}", "ret"])
        s.target.uc.mem_write(code, s.arch.assemble(body, code))  # type: ignore[attr-defined]
        ret = func + 5
        after: list[int] = []
        s.register_kprobe(kpsdk.Kprobe(addr=ret, post_handler=lambda p, r, f: after.append(r.ip)))
        for _ in range(3):
            s.call(code)
        sites = [i.address + i.size for i in s.arch.disassembler().disasm(s.read_memory(code, 0x40), code)
                 if i.mnemonic == "call"]
        assert len(sites) == 4
        assert after == sites * 3
    finally:
        s.close()


def test_a_return_reached_from_many_call_sites_keeps_a_bounded_number_of_hooks() -> None:
    """Past HOOKS_PER_POINT successors, new ones get one-shot hooks: every post_handler
    still runs, at the right address, and the persistent hooks stay bounded."""
    from kpsdk.targets.unicorn.step import HOOKS_PER_POINT

    s = kpsdk.open("unicorn:x86_64")
    try:
        code, func = 0x400000, 0x401000
        s.target.map(code, 0x2000, "rx")  # type: ignore[attr-defined]
        s.target.uc.mem_write(func, s.arch.assemble("ret", func))  # type: ignore[attr-defined]
        calls = 3 * HOOKS_PER_POINT
        body = "; ".join([f"call {func:#x}", "nop"] * calls + ["ret"])
        s.target.uc.mem_write(code, s.arch.assemble(body, code))  # type: ignore[attr-defined]
        after: list[int] = []
        kp = kpsdk.Kprobe(addr=func, post_handler=lambda p, r, f: after.append(r.ip))
        s.register_kprobe(kp)
        for _ in range(2):
            s.call(code)
        sites = [i.address + i.size for i in s.arch.disassembler().disasm(s.read_memory(code, 0x400), code)
                 if i.mnemonic == "call"]
        assert len(sites) == calls
        assert after == sites * 2 and kp.hits == 2 * calls
        assert s.target.stepper.hooked <= HOOKS_PER_POINT  # type: ignore[attr-defined]
        s.unregister_kprobe(kp)
        assert s.target.stepper.hooked == 0  # type: ignore[attr-defined]
    finally:
        s.close()


def test_a_fall_through_step_is_hooked_at_registration_and_a_return_at_its_hit(session: kpsdk.Session) -> None:
    """An instruction whose successors need no register or memory (inc's first) has its
    successor hook from registration, so its first hit re-enters nothing; a return learns
    where it goes at its hit.  Both run their post_handlers from the first hit on."""
    insns = probeable_instructions(session, "inc")  # on MIPS the return is before its delay slot
    first, last = insns[0], insns[-1]
    posts: list[tuple[int, int]] = []
    post = lambda p, r, f: posts.append((p.addr, r.ip))  # noqa: E731
    straight = kpsdk.Kprobe(addr=probe_addr(session, first.address), post_handler=post)
    session.register_kprobe(straight)
    # arm's successors of a 4-byte instruction read cpsr (Thumb-2 or ARM?): learned at the hit
    at_registration = 0 if session.arch.name == "arm" and first.size == 4 else 1
    assert session.target.stepper.hooked == at_registration  # type: ignore[attr-defined]
    ret = kpsdk.Kprobe(addr=probe_addr(session, last.address), post_handler=post)
    session.register_kprobe(ret)
    assert session.target.stepper.hooked == at_registration  # type: ignore[attr-defined]
    assert session.call("loop", 2) == 3
    loop = session.symbols.get("loop")
    assert [at for p, at in posts if p == straight.addr] == [first.address + first.size] * 2
    rets = [at for p, at in posts if p == ret.addr]
    assert len(rets) == 2 and all(loop.address <= at < loop.address + loop.size for at in rets)
    assert session.target.stepper.hooked > at_registration  # type: ignore[attr-defined]  # the return's, learned
    session.unregister_kprobes([straight, ret])
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]


def test_a_post_handler_registered_by_a_handler_inside_a_run_runs_from_its_first_hit(session: kpsdk.Session) -> None:
    """Registered while the CPU runs (a handler's work), the step is learned at the first hit,
    which re-enters the instruction once: every hit still gets its post_handler, once."""
    first = instructions(session, "inc")[0]
    posts: list[int] = []
    late = kpsdk.Kprobe(addr=probe_addr(session, first.address), post_handler=lambda p, r, f: posts.append(r.ip))

    def register_late(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        if not late.registered:
            session.register_kprobe(late)
        return 0

    session.register_kprobe(kpsdk.Kprobe(symbol_name="loop", pre_handler=register_late))
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]
    assert session.call("loop", 4) == 10
    assert posts == [first.address + first.size] * 4 and late.hits == 4
    assert session.target.stepper.hooked == 1  # type: ignore[attr-defined]


def test_a_point_that_loses_its_post_handler_drops_its_successor_hooks(session: kpsdk.Session) -> None:
    """A return keeps the hook path with or without a post_handler (it is not boostable): when
    the post_handler's probe goes, the point's learned successor hooks go with it, and the
    other probe on the point goes on hitting."""
    last = probeable_instructions(session, "inc")[-1]
    at = probe_addr(session, last.address)
    plain = kpsdk.Kprobe(addr=at, pre_handler=lambda p, r: 0)
    posts: list[int] = []
    post = kpsdk.Kprobe(addr=at, post_handler=lambda p, r, f: posts.append(r.ip))
    session.register_kprobes([plain, post])
    assert session.call("loop", 2) == 3
    assert len(posts) == 2 and session.target.stepper.hooked >= 1  # type: ignore[attr-defined]
    session.unregister_kprobe(post)
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]
    assert session.call("loop", 3) == 6
    assert plain.hits == 5 and len(posts) == 2
    assert session.target.stepper.hooked == 0  # type: ignore[attr-defined]
