"""kretprobes (R1) on real cross-built code, on every Unicorn arch.

Each ``session`` test runs on x86_64, i386, arm, thumb and riscv64, with the
entry probe on both mechanisms (the optimized hook path and the breakpoint +
booster path).  What the handlers see is checked against the program's own
output (which test_ground_truth.py checks against qemu-user) and against
qemu-user directly where a handler changes the output.
"""

from __future__ import annotations

import errno
import re

import capstone
import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.backtrace import Frame, is_call
from kpsdk.regs import PtRegs
from kpsdk.target import Target
from tests.conftest import instructions, local_entry_offset, probe_addr
from tests.test_ground_truth import qemu_output

Ri = kpsdk.KretprobeInstance


def first_arg(s: kpsdk.Session, regs: PtRegs) -> int:
    """Argument 0 at a function entry, by the user ABI (i386: on the stack)."""
    return regs.arg(0)


def assert_nothing_in_flight(s: kpsdk.Session, *probes: kpsdk.Kretprobe) -> None:
    rethook = s.target.rethook
    assert rethook is None or rethook.in_flight() == []
    for rp in probes:
        assert rp.in_flight == 0
        if rp.rethook is not None:
            assert len(rp.rethook.free_nodes) == rp.rethook.count  # every instance back in its pool


def call_site_before(s: kpsdk.Session, ret_addr: int) -> capstone.CsInsn:
    """The instruction that ends at a return address (it must be a call), or a delay slot before it (MIPS)."""
    addr = ret_addr & ~1 if s.arch.has_thumb else ret_addr
    sym = s.symbols.containing(addr)
    assert sym is not None
    slot = s.arch.iset_for_address(ret_addr).delay_slot
    before = [i for i in instructions(s, sym.name) if i.address + i.size + slot == addr]
    assert len(before) == 1
    return before[0]


# -- R1: what the handlers see ------------------------------------------------------------


def test_data_return_values_and_return_addresses(session: kpsdk.Session) -> None:
    s = session
    seen: list[tuple[int, int, str, int]] = []

    def entry(ri: Ri, regs: PtRegs) -> int:
        ri.data[:8] = first_arg(s, regs).to_bytes(8, "little")
        return 0

    def ret(ri: Ri, regs: PtRegs) -> None:
        assert ri.rp is rp and ri.task == s.target.current_task() == 1000 and regs.ip == ri.ret_addr
        seen.append((int.from_bytes(ri.data[:8], "little"), regs.signed(s.arch.return_value),
                     s.symbols.format(ri.ret_addr & ~1).partition("+")[0], ri.ret_addr))

    rp = kpsdk.Kretprobe(symbol_name="fact", handler=ret, entry_handler=entry, data_size=8)
    s.register_kretprobe(rp)
    assert s.run(timeout=10) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT
    # innermost call returns first; each instance carries its own n
    assert [(n, v) for n, v, _, _ in seen] == [(1, 1), (2, 2), (3, 6), (4, 24), (5, 120)]
    assert seen[-1][1] == fixtures.EXPECTED["fact"]
    assert [caller for _, _, caller, _ in seen] == ["fact"] * 4 + ["main"]
    for *_, ret_addr in seen:  # ri.ret_addr is right after the call instruction
        site = call_site_before(s, ret_addr)
        assert is_call(s.arch.iset_for_address(ret_addr), site)  # capstone's group, or the arch's rule (ppc's bl)
        imm = [op.imm for op in site.operands if op.type == capstone.CS_OP_IMM]
        # the call enters at fact's local entry on ppc64le (ELFv2), past its TOC set-up
        fact = s.symbols.resolve("fact") + local_entry_offset(s.target.mapped_files()[0].path, "fact")
        assert fact in {imm[-1], site.address + imm[-1]}  # capstone: riscv is pc-relative
    assert rp.nmissed == 0 and rp.hits == 5
    assert_nothing_in_flight(s, rp)


def test_recursion_deeper_than_maxactive_misses_exactly_the_excess(session: kpsdk.Session) -> None:
    s = session
    values: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, regs: values.append(regs.return_value))
    s.register_kretprobe(rp)
    assert rp.rethook is not None and rp.rethook.count == 10  # the default: max(10, 2 * ncpus), one CPU
    assert s.call("fact", 12) == 479001600
    assert rp.nmissed == 2  # depth 12, 10 instances: the two innermost calls go unhooked
    product, expected = 1, []
    for n in range(1, 13):
        product *= n
        expected.append(product)
    assert values == expected[2:]  # fact(3) .. fact(12), innermost first
    s.unregister_kretprobe(rp)

    few = kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, regs: values.append(regs.return_value), maxactive=3)
    values.clear()
    s.register_kretprobe(few)
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    assert few.nmissed == 5 - 3 and values == [6, 24, 120]
    assert_nothing_in_flight(s, few)


def test_entry_handler_veto_and_no_entry_handler_without_an_instance(session: kpsdk.Session) -> None:
    s = session
    entered: list[int] = []
    returned: list[int] = []

    def entry(ri: Ri, regs: PtRegs) -> int:
        n = first_arg(s, regs)
        entered.append(n)
        ri.data[0] = n
        return n % 2 == 0  # non-zero: no return probe for this call

    rp = kpsdk.Kretprobe(symbol_name="fact", entry_handler=entry, maxactive=2, data_size=1,
                         handler=lambda ri, regs: returned.append(ri.data[0]))
    s.register_kretprobe(rp)
    assert s.call("fact", 5) == 120
    # 5 takes an instance, 4 takes and gives back the other (vetoed), 3 takes it;
    # 2 and 1 find none: missed, their entry_handler skipped
    assert entered == [5, 4, 3]
    assert returned == [3, 5]
    assert rp.nmissed == 2
    assert_nothing_in_flight(s, rp)


def test_return_value_override_changes_the_program_output(session: kpsdk.Session, arch: str) -> None:
    s = session

    def flip(ri: Ri, regs: PtRegs) -> None:
        regs.return_value = 1 - regs.return_value

    def add(ri: Ri, regs: PtRegs) -> None:
        regs.return_value = 99

    s.register_kretprobes([kpsdk.Kretprobe(symbol_name="check", handler=flip),
                           kpsdk.Kretprobe(symbol_name="add", handler=add)])
    assert s.run(timeout=10) == 0
    truth = qemu_output(arch).splitlines()
    got = s.console.splitlines()
    changed = {"add": "add=99", "check5": "check5=1", "check50": "check50=0"}
    assert got == [changed.get(line.partition("=")[0], line) for line in truth]


def test_kprobe_and_kretprobe_on_one_function_both_fire_in_any_order(session: kpsdk.Session) -> None:
    s = session
    for kprobe_first in (True, False):
        entries: list[int] = []
        returns: list[int] = []
        kp = kpsdk.Kprobe(symbol_name="fact",
                          pre_handler=lambda p, regs, e=entries: e.append(first_arg(s, regs)) or 0)
        rp = kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, regs, r=returns: r.append(regs.return_value))
        s.register_many([kp, rp] if kprobe_first else [rp, kp])
        lines = s.list().splitlines()
        fact = local_entry_offset(s.target.mapped_files()[0].path, "fact")
        assert sum(bool(re.search(rf"  [kr]  fact\+{fact:#x}", ln)) for ln in lines) == 2
        assert any(re.search(r"  k  kretprobe_trampoline\+0x[0-9a-f]+", ln) for ln in lines)
        assert s.call("fact", 5) == 120
        assert entries == [5, 4, 3, 2, 1] and returns == [1, 2, 6, 24, 120]
        s.unregister_many([kp, rp])
        assert s.list() == ""


def test_two_kretprobes_on_one_function_return_in_reverse_entry_order(session: kpsdk.Session) -> None:
    """As in the kernel: the newest probe's entry runs first (K5) and hooks the return;
    the older one's entry chains to it, and the return runs the chain newest first,
    so the handlers run in registration order."""
    s = session
    order: list[tuple[str, int, int]] = []
    first = kpsdk.Kretprobe(symbol_name="add", handler=lambda ri, r: order.append(("first", r.return_value,
                                                                                   ri.ret_addr)))
    second = kpsdk.Kretprobe(symbol_name="add", handler=lambda ri, r: order.append(("second", r.return_value,
                                                                                    ri.ret_addr)))
    s.register_kretprobes([first, second])
    assert s.call("add", 40, 2) == 42
    assert [(n, v) for n, v, _ in order] == [("first", 42), ("second", 42)]
    assert order[0][2] == order[1][2] == s.target.sentinel  # both see the real return address
    assert_nothing_in_flight(s, first, second)


# -- R1: lifetime of instances ----------------------------------------------------------------


def test_unregistration_with_calls_in_flight(session: kpsdk.Session) -> None:
    s = session
    returns: list[int] = []
    in_flight_then: list[int] = []
    listed_then: list[str] = []

    def entry(ri: Ri, regs: PtRegs) -> int:
        if first_arg(s, regs) == 1:
            s.unregister_kretprobe(rp)  # fact(5) .. fact(2) are in flight
            in_flight_then.append(len(s.target.rethook.in_flight()))  # type: ignore[union-attr]
            listed_then.append(s.list())
        return 0

    rp = kpsdk.Kretprobe(symbol_name="fact", entry_handler=entry, handler=lambda ri, r: returns.append(1))
    s.register_kretprobe(rp)
    assert s.run(timeout=10) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT  # every call in flight still returned where it should
    assert in_flight_then == [4]
    assert "kretprobe_trampoline" in listed_then[0] and "fact" not in listed_then[0]
    assert returns == []  # an unregistered kretprobe's handler never runs, as in the kernel
    assert s.list() == "" and s.target.rethook.in_flight() == []  # type: ignore[union-attr]
    rp.entry_handler = None
    s.register_kretprobe(rp)  # registered again: a fresh pool
    assert s.call("fact", 3) == 6 and returns == [1, 1, 1]


def test_unregistration_from_another_probe_mid_loop(session: kpsdk.Session) -> None:
    s = session
    returns: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name="loop", handler=lambda ri, r: returns.append(r.return_value))

    def on_inc(p: kpsdk.Probe, regs: PtRegs) -> int:
        if first_arg(s, regs) == 50 and rp.registered:
            s.unregister_kretprobe(rp)
        return 0

    s.register_kprobe(kpsdk.Kprobe(symbol_name="inc", pre_handler=on_inc))
    s.register_kretprobe(rp)
    assert s.call("loop", 100) == fixtures.EXPECTED["loop"]
    assert returns == [] and s.target.rethook.in_flight() == []  # type: ignore[union-attr]


def test_longjmp_like_escape_leaves_no_instance(session: kpsdk.Session) -> None:
    s = session
    escaped: list[int] = []
    returned: list[tuple[int, str]] = []
    never = kpsdk.Kretprobe(symbol_name="escape", maxactive=1, handler=lambda ri, r: escaped.append(1))
    outer = kpsdk.Kretprobe(symbol_name="try_escape", handler=lambda ri, r: returned.append(
        (r.return_value, s.symbols.format(ri.ret_addr & ~1).partition("+")[0])))
    s.register_kretprobe(never)
    # one instance, five escapes from the same depth: each entry finds the last one's frame gone
    assert s.call("escapes", 5) == 5
    assert escaped == [] and never.nmissed == 0
    assert_nothing_in_flight(s, never)
    s.register_kretprobe(outer)
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    assert returned == [(1, "escapes")] * fixtures.EXPECTED["escapes"]  # its escape() instance dropped unrun
    assert escaped == [] and never.nmissed == 0
    assert_nothing_in_flight(s, never, outer)


def test_program_ending_inside_probed_functions_leaves_no_instance(session: kpsdk.Session) -> None:
    s = session
    returns: list[str] = []
    start = kpsdk.Kretprobe(symbol_name="_start", handler=lambda ri, r: returns.append("_start"))
    main = kpsdk.Kretprobe(symbol_name="main", handler=lambda ri, r: returns.append(f"main={r.return_value}"))
    s.register_kretprobes([start, main])
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    assert returns == ["main=0"]  # _start never returns: it exits
    assert_nothing_in_flight(s, start, main)
    assert start.hits == 1


def test_tail_call_returns_through_both_functions(session: kpsdk.Session) -> None:
    """twice() jumps to inc(): inc's one return instruction returns from both, so a
    kretprobe on inc fires more often than inc is called."""
    s = session
    seen: list[tuple[str, int, int]] = []

    def on(name: str) -> kpsdk.Kretprobe:
        return kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, r: seen.append(
            (name, r.return_value, ri.ret_addr)))

    inc = on("inc")
    s.register_kretprobe(inc)
    assert s.call("twice", 5) == 11
    assert seen == [("inc", 11, s.target.sentinel)]  # inc "returned" to twice's caller
    s.register_kretprobe(twice := on("twice"))
    seen.clear()
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    from_loop = [x for x in seen if s.symbols.format(x[2] & ~1).startswith("loop+")]
    assert len(from_loop) == 100  # loop() calls inc() 100 times
    tail = [x for x in seen if not s.symbols.format(x[2] & ~1).startswith("loop+")]
    assert [(n, v) for n, v, _ in tail] == [("inc", 11), ("twice", 11)]  # one return, both handlers
    assert tail[0][2] == tail[1][2] and s.symbols.format(tail[0][2] & ~1).startswith("main+")
    assert inc.hits == 1 + 101 and twice.hits == 1  # the call above, then loop's 100 calls and the tail call
    assert_nothing_in_flight(s, inc, twice)


# -- backtraces under kretprobes --------------------------------------------------------------


def test_backtrace_reports_real_return_addresses(session: kpsdk.Session) -> None:
    s = session
    traces: dict[str, list[Frame]] = {}
    raw: list[tuple[int, int]] = []

    def at_fact(p: kpsdk.Probe, regs: PtRegs) -> int:
        if first_arg(s, regs) == 1:
            traces[label] = s.backtrace(regs)
            link = s.arch.link
            ra = getattr(regs, link) if link else s.target.read_word(regs.sp)  # __builtin_return_address(0)
            raw.append((ra, s.real_return_address(ra, regs.sp)))
        return 0

    label = "plain"
    kp = kpsdk.Kprobe(symbol_name="fact", pre_handler=at_fact)
    s.register_kprobe(kp)
    assert s.call("fact", 5) == 120
    s.unregister_kprobe(kp)
    label = "kretprobe"
    rp = kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, r: traces.setdefault("return", s.backtrace(r)))
    s.register_kprobe(kp)
    s.register_kretprobes([rp])  # the newest runs first (K5): kp's handler sees fact(1)'s return hooked
    assert s.call("fact", 5) == 120

    plain, hooked = traces["plain"], traces["kretprobe"]
    assert [f.function for f in plain] == ["fact"] * 5  # and then kpsdk's call() sentinel: no code, the end
    assert [(f.pc, f.where) for f in hooked] == [(f.pc, f.where) for f in plain]
    assert [f.trampoline for f in hooked] == [False] + [True] * 4
    (ra_plain, _), (ra_hooked, real) = raw
    tramp = s.target.rethook.trampolines  # type: ignore[union-attr]
    assert ra_hooked in tramp and ra_plain not in tramp  # what the kernel's unwinders would show
    assert real == ra_plain
    # in the return handler of fact(1): the stack of its caller, fact(2) at its return address
    ret = traces["return"]
    assert ret[0].pc == plain[1].pc and [f.where for f in ret] == [f.where for f in plain[1:]]


def test_backtrace_of_the_whole_program(session: kpsdk.Session) -> None:
    s = session
    traces: list[list[str]] = []
    rp = kpsdk.Kretprobe(symbol_name="main", handler=lambda ri, r: None)
    s.register_kretprobes([rp, kpsdk.Kretprobe(symbol_name="loop", handler=lambda ri, r: None)])

    def at_inc(p: kpsdk.Probe, regs: PtRegs) -> int:
        if first_arg(s, regs) == 7:
            traces.append([f.function for f in s.backtrace(regs)])
        return 0

    s.register_kprobe(kpsdk.Kprobe(symbol_name="inc", pre_handler=at_inc))
    assert s.run(timeout=10) == 0
    assert traces == [["inc", "loop", "main", "_start"]]
    with pytest.raises(kpsdk.KpsdkError, match="pass its regs"):
        s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, r: s.backtrace()))
        s.call("add", 1, 2)


# -- registration, reports, knobs, errors ---------------------------------------------------


def test_registration_errors(session: kpsdk.Session) -> None:
    s = session

    def err(rp: kpsdk.Kretprobe) -> int:
        registered = rp.registered
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_kretprobe(rp)
        assert rp.registered == registered
        return info.value.errno

    second = instructions(s, "add")[1]
    assert err(kpsdk.Kretprobe(symbol_name="add", offset=second.address - s.symbols.resolve("add"))) == errno.EINVAL
    assert err(kpsdk.Kretprobe(addr=probe_addr(s, second.address))) == errno.EINVAL
    assert err(kpsdk.Kretprobe(symbol_name="add", maxactive=kpsdk.KRETPROBE_MAXACTIVE_MAX + 1)) == errno.E2BIG
    assert err(kpsdk.Kretprobe(symbol_name="add", data_size=-1)) == errno.EINVAL
    assert err(kpsdk.Kretprobe(symbol_name="nope")) == errno.ENOENT
    assert err(kpsdk.Kretprobe(symbol_name="add", addr=s.symbols.resolve("add"))) == errno.EINVAL
    assert err(kpsdk.Kretprobe(symbol_name="counter")) == errno.EINVAL  # data, not a function
    s.blacklist.add("sub")
    assert err(kpsdk.Kretprobe(symbol_name="sub")) == errno.EINVAL
    assert s.list() == ""  # nothing half-registered, not even the trampoline
    big = kpsdk.Kretprobe(symbol_name="add", maxactive=kpsdk.KRETPROBE_MAXACTIVE_MAX)
    s.register_kretprobe(big)
    assert big.rethook is not None and big.rethook.count == 4096
    assert err(big) == errno.EINVAL  # the same object twice


def test_list_profile_decorator_and_unregister(session: kpsdk.Session) -> None:
    s = session
    values: list[int] = []

    @s.kretprobe("fact", maxactive=4)
    def on_fact(ri: Ri, regs: PtRegs) -> None:
        values.append(regs.return_value)

    assert isinstance(on_fact, kpsdk.Kretprobe) and on_fact.registered
    width = s.arch.word_size * 2
    lines = s.list().splitlines()
    fact = local_entry_offset(s.target.mapped_files()[0].path, "fact")
    assert any(re.fullmatch(rf"[0-9a-f]{{{width}}}  r  fact\+{fact:#x}(  \[OPTIMIZED\])?", ln) for ln in lines), lines
    assert any(re.fullmatch(rf"[0-9a-f]{{{width}}}  k  kretprobe_trampoline\+0x[0-9a-f]+", ln) for ln in lines), lines
    assert s.run(timeout=10) == 0
    assert values == [2, 6, 24, 120]  # fact(1), the fifth call in flight, found no instance
    rows = {name: (hits, missed) for name, hits, missed in s.profile_rows()}
    assert rows[f"r_fact_{fact:#x}"] == (5, 1)
    trampolines = [hits for name, (hits, _) in rows.items() if name.startswith("kretprobe_trampoline")]
    assert sum(trampolines) == 4  # one hit per hooked return (ARM has an ARM and a Thumb trampoline)
    s.unregister_kretprobe(on_fact)
    assert s.list() == ""
    assert s.read_memory(s.symbols.resolve("fact"), 4) == bytes(s.target.uc.mem_read(s.symbols.resolve("fact"), 4))


def test_disable_enable_and_the_global_knob(session: kpsdk.Session) -> None:
    s = session
    values: list[int] = []

    def entry(ri: Ri, regs: PtRegs) -> int:
        if first_arg(s, regs) == 3:
            s.kprobes_enabled = False  # entries stop; the three calls in flight still return through the handler
        return 0

    rp = kpsdk.Kretprobe(symbol_name="fact", entry_handler=entry, handler=lambda ri, r: values.append(r.return_value))
    s.register_kretprobe(rp)
    assert s.call("fact", 5) == 120
    assert values == [6, 24, 120] and rp.hits == 3
    s.kprobes_enabled = True
    s.disable_kretprobe(rp)
    assert "[DISABLED]" in s.list()
    values.clear()
    assert s.call("fact", 2) == 2 and values == []
    s.enable_kretprobe(rp)
    assert s.call("fact", 2) == 2 and values == [1, 2]


def test_handler_exceptions_go_to_the_fault_handler_or_surface(session: kpsdk.Session) -> None:
    s = session
    trapnrs: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name="add", handler=lambda ri, r: 1 / 0,
                         fault_handler=lambda p, r, trapnr: trapnrs.append(trapnr) or 1)
    s.register_kretprobe(rp)
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    assert trapnrs == [kpsdk.TRAP_HANDLER_EXCEPTION]
    s.unregister_kretprobe(rp)
    s.register_kretprobe(kpsdk.Kretprobe(symbol_name="sub", handler=lambda ri, r: 1 / 0))
    with pytest.raises(kpsdk.ProbeHandlerError, match=r"handler of <Kretprobe sub\+0x0 .*ZeroDivisionError"):
        s.call("sub", 5, 3)
    s2 = kpsdk.Kretprobe(symbol_name="inc", entry_handler=lambda ri, r: [][1])
    s.register_kretprobe(s2)
    with pytest.raises(kpsdk.ProbeHandlerError, match=r"entry_handler of <Kretprobe inc\+0x0 .*IndexError"):
        s.call("inc", 1)
    assert s2.rethook is not None and len(s2.rethook.free_nodes) == s2.rethook.count


def test_reentrant_entries_are_missed(session: kpsdk.Session) -> None:
    s = session
    adds: list[int] = []
    inner = kpsdk.Kretprobe(symbol_name="add", handler=lambda ri, r: adds.append(r.return_value))
    outer = kpsdk.Kretprobe(symbol_name="sub", handler=lambda ri, r: adds.append(s.call("add", 20, 22)))
    s.register_kretprobes([inner, outer])
    assert s.call("sub", 7, 3) == 4
    assert adds == [42]  # the nested add ran, its kretprobe did not (K6)
    assert (inner.nmissed, inner.hits) == (1, 0)
    assert_nothing_in_flight(s, inner, outer)


# -- targets ----------------------------------------------------------------------------------


def test_blank_target_code_without_symbols() -> None:
    with kpsdk.open("unicorn:x86_64") as s:
        s.target.map(0x100000, 0x1000, "rx")
        s.write_memory(0x100000, bytes.fromhex("488d0437c3"))  # lea rax, [rdi+rsi]; ret
        got: list[int] = []
        s.register_kretprobe(kpsdk.Kretprobe(addr=0x100000, handler=lambda ri, r: got.append(r.return_value)))
        assert s.call(0x100000, 20, 22) == 42 and got == [42]


def test_targets_without_return_hooks_refuse_kretprobes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Target defaults: a target kind that implements no return hooks refuses
    kretprobes with EOPNOTSUPP and keeps nothing of them."""
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        target = s.target
        for hook in ("attach_rethook", "hijack_return", "release_return", "current_task"):
            monkeypatch.setattr(target, hook, getattr(Target, hook).__get__(target))
        with pytest.raises(kpsdk.KprobeError, match="return probes are not supported") as info:
            s.register_kretprobe(kpsdk.Kretprobe(symbol_name="add"))
        assert info.value.errno == errno.EOPNOTSUPP
        assert s.list() == "" and target.current_task() == 0


def test_ppc64_elfv2_local_entry_counts_as_the_entry() -> None:
    """ppc64 runs on QEMU, not Unicorn: the entry rule is checked on a stand-in target."""
    from types import SimpleNamespace

    from kpsdk.binfmt.symbols import Symbol, SymbolTable
    from kpsdk.plugins.kretprobes import function_entry

    elfv2 = bytes.fromhex("3c4c0002" "38427f00" "7c0802a6" "f8010010")  # addis r2,r12; addi r2,r2; mflr; std
    elfv1 = bytes.fromhex("7c0802a6" "f8010010" "f821ff91" "60000000")
    for code, local in ((elfv2, 8), (elfv1, 0)):
        target = SimpleNamespace(arch=kpsdk.get_registry().arch("ppc64"),
                                 symbols=SymbolTable([Symbol("f", 0x1000, 16, "func")]),
                                 read_memory=lambda addr, size, code=code: code[addr - 0x1000:][:size])
        by_name = kpsdk.Kretprobe(symbol_name="f")
        assert function_entry(target, by_name, 0x1000) == 0x1000 + local  # where calls in the module arrive
        assert function_entry(target, kpsdk.Kretprobe(addr=0x1000), 0x1000) == 0x1000
        for offset in (4, 8):
            if offset == local:
                assert function_entry(target, kpsdk.Kretprobe(addr=0x1000 + offset), 0x1000 + offset) == 0x1008
            else:
                with pytest.raises(kpsdk.KprobeError) as info:
                    function_entry(target, kpsdk.Kretprobe(addr=0x1000 + offset), 0x1000 + offset)
                assert info.value.errno == errno.EINVAL
