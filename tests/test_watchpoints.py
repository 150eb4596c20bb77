"""Watchpoint probes on Unicorn (W1): the fixture programs on the five archs Unicorn runs.

Ground truth for the counter test comes from outside the watchpoint code: the
arguments ``bump`` was called with (a kprobe on its entry) and the value the
program itself prints (``counter=N``).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.plugins.watchpoints import check_rules
from tests.conftest import UNICORN_ARCHS, instructions, probe_addr


@pytest.fixture
def elf(arch: str) -> Iterator[kpsdk.Session]:
    s = kpsdk.open(f"elf:{fixtures.path(arch)}")
    yield s
    s.close()


def counter_of(s: kpsdk.Session) -> int:
    return s.symbols.get("counter").address


def printed(s: kpsdk.Session, name: str) -> int:
    """A value the program printed (``name=N``)."""
    return int(dict(line.split("=") for line in s.console.splitlines())[name])


def spare(s: kpsdk.Session, n: int) -> list[int]:
    """n 8-byte-aligned words on counter's page that do not overlap it (bump writes only counter)."""
    c = counter_of(s)
    page = c & ~0xFFF
    return [a for a in range(page, page + 0x1000, 8) if a + 8 <= c or a >= c + 4][:n]


def next_insn(s: kpsdk.Session, pc: int) -> int:
    """The address after the instruction at pc (decoded by capstone from target memory)."""
    for insn in instructions(s, s.symbols.containing(pc).name):
        if insn.address == pc:
            return int(insn.address + insn.size)
    raise AssertionError(f"no instruction at {pc:#x}")


def test_every_write_to_counter_in_order_with_old_and_new(elf: kpsdk.Session) -> None:
    s = elf
    args: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(symbol_name="bump", pre_handler=lambda p, r: args.append(r.arg(0))))
    seen: list[tuple[Any, int, int, int]] = []

    def on_write(wp: kpsdk.Watchpoint, regs: kpsdk.regs.PtRegs, access: Any) -> None:
        # fired after the access: memory already holds the new value
        seen.append((access, s.read_int(access.addr, 4), regs.ip, regs.sp))

    start = s.read_int(counter_of(s), 4)
    slot = s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4, type="w", handler=on_write))
    assert slot == 0
    assert s.run(timeout=30) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT
    expected, value = [], start
    for by in args:
        expected.append((value, value + by))
        value += by
    assert [(a.old, a.new) for a, _, _, _ in seen] == expected  # every write, in order, nothing else
    assert value == printed(s, "counter")  # what the program printed at the end
    assert ("w_counter_0x0", len(expected), 0) in s.profile_rows()
    bump = s.symbols.get("bump")
    for access, in_memory, ip, _sp in seen:
        assert access.kind == "w" and access.addr == counter_of(s) and access.size == 4
        assert access.value == access.new == in_memory
        assert bump.address <= access.pc < bump.address + bump.size  # only bump writes it
        assert ip == next_insn(s, access.pc)  # regs: the CPU after the accessing instruction


def test_read_and_rw_types_and_values(elf: kpsdk.Session) -> None:
    s = elf
    c = counter_of(s)
    reads: list[Any] = []
    both: list[Any] = []
    # x86 has no read-only type, ppc64 one slot (its DAWR) for the two: only as strict=False
    strict = "r" in s.arch.watch.types and s.arch.watch.slots >= 2
    r = kpsdk.Watchpoint(addr=c, length=4, type="r", strict=strict, handler=lambda wp, regs, a: reads.append(a))
    rw = kpsdk.Watchpoint(addr=c, length=4, type="rw", handler=lambda wp, regs, a: both.append(a))
    s.register_watchpoint(r)
    s.register_watchpoint(rw)
    s.write_memory(c, (10).to_bytes(4, s.arch.endian))
    s.call("bump", 7)
    assert [(a.kind, a.value) for a in reads] == [("r", 10)]
    assert [(a.kind, a.value, a.old, a.new) for a in both] == [("r", 10, None, None), ("w", 17, 10, 17)]
    assert s.read_int(c, 4) == 17


def test_execute_watchpoint_fires_before_the_instruction(elf: kpsdk.Session) -> None:
    s = elf
    hits: list[tuple[int, int, int, int]] = []

    def on_exec(wp: kpsdk.Watchpoint, regs: kpsdk.regs.PtRegs, access: Any) -> None:
        hits.append((regs.arg(0), regs.arg(1), regs.ip, access.pc))
        # nothing of add has run yet: a changed argument changes its result
        abi = s.arch.user_abi
        if abi.args:
            regs[abi.args[0]] = 10
        else:  # i386 cdecl: on the stack
            s.write_memory(regs.sp + abi.stack_args_offset, (10).to_bytes(4, "little"))

    add = s.symbols.get("add")
    strict = "x" in s.arch.watch.types  # ppc64's DAWR watches data only: strict=False lifts that on Unicorn
    s.register_watchpoint(kpsdk.Watchpoint(symbol_name="add", type="x", strict=strict, handler=on_exec))
    assert s.call("add", 2, 3) == 13
    assert hits == [(2, 3, add.address, add.address)]


def test_rules_of_each_arch_and_strict_false(elf: kpsdk.Session) -> None:
    s = elf
    rules = s.arch.watch
    base = counter_of(s) & ~0xFF  # an aligned spot in the data segment, with room for every length

    def err(**kw: Any) -> int:
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_watchpoint(kpsdk.Watchpoint(handler=lambda *a: None, **kw))
        return info.value.errno

    longest = max(rules.lengths)
    assert err(addr=base, length=longest + 1) == errno.EINVAL
    if 3 not in rules.lengths:  # ppc64's DAWR takes any length up to 512
        assert err(addr=base, length=3) == errno.EINVAL
    if rules.aligned or rules.window == 4:
        assert err(addr=base + 1, length=4) == errno.EINVAL  # misaligned (x86, riscv) / across a word (arm)
    assert err(addr=base, length=4, type="wx") == errno.EINVAL
    if 4 not in rules.exec_lengths:
        assert err(addr=base, length=4, type="x") == errno.EINVAL
    if "r" not in rules.types:
        assert err(addr=base, length=4, type="r") == errno.EINVAL
    assert err(addr=base, symbol_name="counter", length=4) == errno.EINVAL  # both
    assert err(symbol_name="no_such_symbol", length=4) == errno.ENOENT
    assert err(addr=0x10, length=4) == errno.EINVAL  # unmapped
    slots = [s.register_watchpoint(kpsdk.Watchpoint(addr=base + 8 * i, length=4, handler=lambda *a: None))
             for i in range(rules.slots)]
    assert slots == list(range(rules.slots))
    assert err(addr=base + 8 * rules.slots, length=4) == errno.ENOSPC  # slot count + 1
    # execute watchpoints: the same pool (x86's DR0-DR3, riscv's triggers) or their own (ARM's BRPs)
    code = [i.address for i in instructions(s, "main")]
    x = lambda a: kpsdk.Watchpoint(addr=a, type="x", handler=lambda *args: None)  # noqa: E731
    if "x" not in rules.types:  # ppc64: the DAWR watches data only
        assert err(addr=code[0], type="x") == errno.EINVAL
    elif rules.exec_slots is None:
        assert err(addr=code[0], type="x") == errno.ENOSPC
    else:
        assert [s.register_watchpoint(x(a)) for a in code[:rules.exec_slots]] == list(range(rules.exec_slots))
        assert err(addr=code[rules.exec_slots], type="x") == errno.ENOSPC
    # strict=False: none of those rules, and none of the architecture's slots
    loose = [kpsdk.Watchpoint(addr=base + 1, length=3, type="r", strict=False, handler=lambda *a: None),
             kpsdk.Watchpoint(addr=base + 2, length=longest + 5, strict=False, handler=lambda *a: None)]
    assert [s.register_watchpoint(wp) for wp in loose] == [rules.slots, rules.slots + 1]


@pytest.mark.parametrize("name", ["x86_64", "i386", "arm", "riscv64", "ppc64", "aarch64"])
def test_rules_data_match_the_arch_facts(name: str) -> None:
    """The per-arch rules as declared (each backend's ``source``: the manual and the kernel's hw_breakpoint),
    checked without a target (ppc64 has none on Unicorn)."""
    arch = kpsdk.get_registry().arch(name)
    rules = arch.watch
    wp = lambda t, n: kpsdk.Watchpoint(addr=0, length=n, type=t)  # noqa: E731

    def ok(t: str, addr: int, n: int) -> bool:
        try:
            check_rules(rules, name, wp(t, n), addr, n)
        except kpsdk.KprobeError as e:
            assert e.errno == errno.EINVAL
            return False
        return True

    facts = {"x86_64": (4, "x w rw"), "i386": (4, "x w rw"), "arm": (4, "x w r rw"), "riscv64": (2, "x w r rw"),
             "ppc64": (1, "w r rw"), "aarch64": (4, "x w r rw")}
    assert (rules.slots, " ".join(t for t in ("x", "w", "r", "rw") if t in rules.types)) == facts[name]
    if name == "ppc64":
        assert ok("w", 0x1000 + 0x180, 0x80) and ok("rw", 0x1000, 512) and ok("r", 0x1001, 3)
        assert not ok("w", 0x1000 + 0x1F0, 0x20)  # crosses a 512-byte boundary
        assert not ok("w", 0x1000, 513) and not ok("x", 0x1000, 4)
    if name == "arm":
        assert ok("w", 0x1003, 1) and ok("w", 0x1002, 2) and not ok("w", 0x1003, 2) and not ok("w", 0x1000, 8)
    if name == "aarch64":  # byte select in a doubleword, or a MASK range (a power of two, aligned)
        assert ok("w", 0x1003, 5) and not ok("w", 0x1005, 4) and ok("rw", 0x1000, 0x1000)
        assert not ok("w", 0x1800, 0x1000) and ok("r", 0, 1 << 31) and not ok("r", 0, 1 << 32)
        assert ok("x", 0x1000, 4) and not ok("x", 0x1000, 8)
    if name in ("x86_64", "i386"):
        assert ok("x", 0x1003, arch.word_size) and not ok("x", 0x1000, 1)  # Linux: exec length = sizeof(long)
        assert ok("w", 0x1008, 8) == (name == "x86_64")


def test_priority_preemption_and_rearm(elf: kpsdk.Session) -> None:
    s = elf
    rules = s.arch.watch
    c = counter_of(s)
    events: list[tuple[str, int | None]] = []
    writes: list[int] = []
    words = spare(s, rules.slots + 1)
    others = [kpsdk.Watchpoint(addr=a, length=4, priority=1, handler=lambda *a: None) for a in words[:-2]]
    for wp in others:
        s.register_watchpoint(wp)
    low = kpsdk.Watchpoint(addr=c, length=4, priority=0, handler=lambda wp, r, a: writes.append(a.new),
                           on_preempt=lambda wp: events.append(("preempted", wp.slot)),
                           on_rearm=lambda wp: events.append(("rearmed", wp.slot)))
    start = s.read_int(c, 4)
    low_slot = s.register_watchpoint(low)
    s.call("bump", 1)
    high = kpsdk.Watchpoint(addr=words[-2], length=4, priority=5, handler=lambda *a: None)
    assert s.register_watchpoint(high) == low_slot  # it took the lowest-priority holder's slot
    assert events == [("preempted", None)] and not low.armed and low.registered
    s.call("bump", 2)  # not seen: low has no slot
    same = kpsdk.Watchpoint(addr=words[-1], length=4, priority=1, handler=lambda *a: None)
    with pytest.raises(kpsdk.KprobeError) as info:
        s.register_watchpoint(same)  # no holder has a priority below 1
    assert info.value.errno == errno.ENOSPC
    listed = [line.split()[:3] for line in s.list().splitlines()]
    assert [f"{c:0{2 * s.arch.word_size}x}", "w", "counter+0x0"] in listed  # preempted, still registered
    assert len([row for row in listed if row[1] == "w"]) == len(others) + 2
    s.unregister_watchpoint(high)
    assert events[-1] == ("rearmed", low_slot) and low.armed
    s.call("bump", 4)
    assert writes == [start + 1, start + 1 + 2 + 4]  # bump(2) went unseen


def test_disable_keeps_the_slot_and_unregister_removes_the_memory_hook(elf: kpsdk.Session) -> None:
    s = elf
    hits: list[int] = []
    wp = kpsdk.Watchpoint(symbol_name="counter", length=4, handler=lambda w, r, a: hits.append(a.new))
    start = s.read_int(counter_of(s), 4)
    slot = s.register_watchpoint(wp)
    engine = s.target.watch_engine()
    assert engine.hooked == 1
    s.disable_watchpoint(wp)
    assert engine.hooked == 0 and wp.slot == slot
    s.call("bump", 1)
    s.enable_watchpoint(wp)
    s.call("bump", 1)
    hooks = set(s.target.uc._callbacks)  # the binding's own record of the hooks it installed
    s.unregister_watchpoint(wp)
    assert engine.hooked == 0 and wp.slot is None and not wp.registered
    assert len(hooks - set(s.target.uc._callbacks)) == 1  # its memory hook is gone from Unicorn too
    s.call("bump", 1)
    assert hits == [start + 2]  # only the write while enabled and registered
    with pytest.raises(kpsdk.KprobeError) as info:
        s.unregister_watchpoint(wp)
    assert info.value.errno == errno.EINVAL
    assert s.register_watchpoint(wp) == slot  # registrable again


def test_handler_errors_reentrancy_and_kprobe_on_the_accessing_instruction(session: kpsdk.Session) -> None:
    """With a kprobe on the store itself, on either kprobe mechanism (hook; breakpoint + booster slot)."""
    s = session
    c = counter_of(s)
    pcs: list[int] = []
    probe = kpsdk.Watchpoint(addr=c, length=4, handler=lambda wp, r, a: pcs.append(a.pc))
    s.register_watchpoint(probe)
    s.call("bump", 0)
    s.unregister_watchpoint(probe)
    store = pcs[0]
    inner: list[int] = []

    def reenter(wp: kpsdk.Watchpoint, regs: kpsdk.regs.PtRegs, a: Any) -> None:
        inner.append(a.new)
        if len(inner) == 1:
            s.call("bump", 100)  # a watched write while the handler runs: missed, not nested

    wp = kpsdk.Watchpoint(addr=c, length=4, handler=reenter)
    s.register_watchpoint(wp)
    # a kprobe on the store itself runs once, although the watchpoint re-executes the store
    kp_hits: list[int] = []
    ips: list[int] = []
    kp = kpsdk.Kprobe(addr=probe_addr(s, store), pre_handler=lambda p, r: kp_hits.append(1))
    s.register_kprobe(kp)
    wp.handler = lambda w, r, a: (ips.append(r.ip), pcs.append(a.pc), reenter(w, r, a))
    s.call("bump", 1)
    assert inner == [1] and wp.nmissed == 1 and s.read_int(c, 4) == 101
    assert kp_hits == [1] and kp.nmissed == 1  # the handler's bump ran while busy: missed (K6)
    assert pcs[-1] == store and ips == [next_insn(s, store)]  # the original addresses, not the booster's
    s.unregister_watchpoint(wp)
    bad = kpsdk.Watchpoint(addr=c, length=4, handler=lambda *a: 1 / 0)
    s.register_watchpoint(bad)
    with pytest.raises(kpsdk.ProbeHandlerError, match="ZeroDivisionError"):
        s.call("bump", 1)
    s.unregister_watchpoint(bad)
    claimed: list[int] = []
    s.register_watchpoint(kpsdk.Watchpoint(addr=c, length=4, handler=lambda *a: 1 / 0,
                                           fault_handler=lambda wp, r, trapnr: claimed.append(trapnr) or 1))
    s.call("bump", 1)
    assert claimed == [kpsdk.TRAP_HANDLER_EXCEPTION]


def test_writes_that_call_pushes_are_seen_on_the_stack() -> None:
    """A ``call`` writes the return address: the report comes at the callee, with the stack moved."""
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(0x400000, 0x1000, "rx")
    code = s.arch.assemble("call 0x400100; ret", 0x400000)
    s.target.uc.mem_write(0x400000, code)
    s.target.uc.mem_write(0x400100, s.arch.assemble("ret", 0x400100))
    seen: list[tuple[int, int, int]] = []
    sps: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(addr=0x400000, pre_handler=lambda p, r: sps.append(r.sp)))
    s.call(0x400000)
    sp = sps[0]
    wp = kpsdk.Watchpoint(addr=sp - 8, length=8, strict=False,
                          handler=lambda w, r, a: seen.append((a.new, r.ip, r.sp)))
    s.register_watchpoint(wp)
    s.call(0x400000)
    assert seen == [(0x400005, 0x400100, sp - 8)]
    s.close()


def test_ppc64_has_one_data_watchpoint_on_unicorn() -> None:
    """ppc64 runs on Unicorn with its DAWR's rules: one slot, no execute type."""
    assert "ppc64" in UNICORN_ARCHS
    with kpsdk.open(f"elf:{fixtures.path('ppc64')}") as s:
        s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4, handler=lambda *a: None))
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4, handler=lambda *a: None))
        assert info.value.errno == errno.ENOSPC
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_watchpoint(kpsdk.Watchpoint(symbol_name="add", type="x", handler=lambda *a: None))
        assert info.value.errno == errno.EINVAL


def test_register_and_unregister_from_a_handler_while_running(elf: kpsdk.Session) -> None:
    """Inside a run the engine invalidates code instead of flushing it (a flush there crashes ARM)."""
    s = elf
    args: list[int] = []
    seen: list[tuple[int, int]] = []
    reads: list[int] = []
    wp = kpsdk.Watchpoint(symbol_name="counter", length=4, handler=lambda w, r, a: seen.append((a.old, a.new)))
    rd = kpsdk.Watchpoint(symbol_name="counter", length=4, type="rw", strict=s.arch.watch.slots >= 2,
                          handler=lambda w, r, a: reads.append(a.value))

    def on_bump(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        args.append(regs.arg(0))
        if len(args) == 1:
            s.register_watchpoints([wp, rd])
        elif len(args) == 3:
            s.unregister_watchpoints([wp, rd])  # before bump's third store
        return 0

    s.register_kprobe(kpsdk.Kprobe(symbol_name="bump", pre_handler=on_bump))
    start = s.read_int(counter_of(s), 4)
    assert s.run(timeout=30) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT
    first, second = start + args[0], start + args[0] + args[1]
    assert seen == [(start, first), (first, second)]
    assert reads == [start, first, first, second]  # each bump: the load (r), then the store (w)
    assert s.target.watch_engine().hooked == 0


def test_batch_registration_rolls_back(elf: kpsdk.Session) -> None:
    s = elf
    wps = [kpsdk.Watchpoint(symbol_name="counter", length=4, handler=lambda *a: None)
           for _ in range(s.arch.watch.slots + 1)]
    with pytest.raises(kpsdk.KprobeError) as info:
        s.register_watchpoints(wps)
    assert info.value.errno == errno.ENOSPC
    assert not any(wp.registered for wp in wps) and s.target.watch_engine().hooked == 0
    s.register_watchpoints(wps[:-1])
    assert [wp.slot for wp in wps[:-1]] == list(range(s.arch.watch.slots))


# -- hits on a learned site (the fast path: recorded in the memory hook, reported at the successor) --


def test_one_site_hit_many_times_every_hit_exact(elf: kpsdk.Session) -> None:
    """bump's store hit 150 times across calls: the first hit learns the site, the rest take the
    fast path; every hit reports the same as the first (old/new from the arguments, the store's
    pc, the CPU after it)."""
    s = elf
    c = counter_of(s)
    seen: list[tuple[int, int, int, int, int]] = []
    s.register_watchpoint(kpsdk.Watchpoint(
        symbol_name="counter", length=4,
        handler=lambda wp, r, a: seen.append((a.old, a.new, s.read_int(c, 4), a.pc, r.ip))))
    engine = s.target.watch_engine()
    value = s.read_int(c, 4)
    expected = []
    for by in range(1, 151):
        s.call("bump", by)
        expected.append((value, value + by))
        value += by
    assert [(old, new) for old, new, _, _, _ in seen] == expected
    assert all(new == in_memory for _, new, in_memory, _, _ in seen)  # reported after the store
    store = seen[0][3]
    assert {pc for *_, pc, _ in seen} == {store}
    assert {ip for *_, ip in seen} == {next_insn(s, store)}
    assert s.read_int(c, 4) == value and engine.sites >= 1


def test_different_instructions_and_a_nested_access_on_learned_sites(elf: kpsdk.Session) -> None:
    """An ``rw`` watchpoint on counter sees bump's load and store (two sites), each hit many times,
    in program order; a handler calling bump itself (K6) misses those accesses, on learned sites."""
    s = elf
    c = counter_of(s)
    seen: list[tuple[str, int, int | None, int, int]] = []
    nested = []

    def handler(wp: kpsdk.Watchpoint, regs: kpsdk.regs.PtRegs, a: Any) -> None:
        seen.append((a.kind, a.value, a.old, a.pc, regs.ip))
        if len(seen) == 41:  # call 21's load is done: bump(1000) now, its store is overwritten next
            nested.append(s.call("bump", 1000))

    wp = kpsdk.Watchpoint(symbol_name="counter", length=4, type="rw", strict=s.arch.watch.slots >= 2,
                          handler=handler)
    s.register_watchpoint(wp)
    value = s.read_int(c, 4)
    expected = []
    for by in range(1, 41):
        s.call("bump", by)
        old = value + 1000 if by == 21 else value  # the nested bump stored in between
        expected += [("r", value, None), ("w", value + by, old)]
        value += by
    assert [(k, v, old) for k, v, old, _, _ in seen] == expected
    assert len(nested) == 1 and wp.nmissed == 2 and s.read_int(c, 4) == value
    load_pcs = {pc for k, _, _, pc, _ in seen if k == "r"}
    store_pcs = {pc for k, _, _, pc, _ in seen if k == "w"}
    assert len(load_pcs) == len(store_pcs) == 1 and load_pcs != store_pcs
    bump = s.symbols.get("bump")
    for _, _, _, pc, ip in seen:
        assert bump.address & ~1 <= pc < bump.address + bump.size and ip == next_insn(s, pc)


def test_a_handler_unregistering_on_a_learned_site_during_a_run(elf: kpsdk.Session) -> None:
    """The program's own run: the third write's handler unregisters its watchpoint (from inside
    the successor's hook); later writes are unseen, the run finishes, the successor hooks are gone."""
    s = elf
    args: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(symbol_name="bump", pre_handler=lambda p, r: args.append(r.arg(0))))
    seen: list[tuple[int, int]] = []
    engine = s.target.watch_engine()

    def handler(wp: kpsdk.Watchpoint, regs: kpsdk.regs.PtRegs, a: Any) -> None:
        seen.append((a.old, a.new))
        if len(seen) == 3:
            s.unregister_watchpoint(wp)

    start = s.read_int(counter_of(s), 4)
    s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4, handler=handler))
    for by in (1, 2):  # the site is learned before the run
        s.call("bump", by)
    s.write_memory(counter_of(s), start.to_bytes(4, s.arch.endian))  # the program prints counter
    assert engine.sites >= 1 and args == [1, 2]
    assert s.run(timeout=30) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT
    assert seen == [(start, start + 1), (start + 1, start + 3), (start, start + args[2])]
    assert len(args) > 3 and engine.sites == 0 and engine.hooked == 0


def test_a_run_ending_in_an_error_between_the_access_and_its_report(elf: kpsdk.Session) -> None:
    """A kprobe on the store's successor (its hook runs before the watchpoint's there) raises: the
    call ends with ProbeHandlerError after the store was recorded.  The next call reports its own
    store only, exactly (nothing of the abandoned one is carried over)."""
    s = elf
    c = counter_of(s)
    probe = kpsdk.Watchpoint(addr=c, length=4, handler=lambda wp, r, a: None)
    s.register_watchpoint(probe)
    pcs: list[int] = []
    probe.handler = lambda wp, r, a: pcs.append(a.pc)
    s.call("bump", 0)
    s.unregister_watchpoint(probe)
    after = next_insn(s, pcs[0])
    fail = [False]

    def on_after(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        if fail[0]:
            raise RuntimeError("stop here")
        return 0

    s.register_kprobe(kpsdk.Kprobe(addr=probe_addr(s, after), pre_handler=on_after))
    calls: list[int] = [0]
    seen: list[tuple[int, int, int]] = []
    s.register_watchpoint(kpsdk.Watchpoint(addr=c, length=4,
                                           handler=lambda wp, r, a: seen.append((calls[0], a.old, a.new))))
    v = s.read_int(c, 4)
    s.call("bump", 1)  # learns the site
    calls[0], fail[0] = 1, True
    with pytest.raises(kpsdk.ProbeHandlerError, match="stop here"):
        s.call("bump", 2)
    calls[0], fail[0] = 2, False
    s.call("bump", 4)
    assert seen[0] == (0, v, v + 1)
    assert [(old, new) for n, old, new in seen if n == 2] == [(v + 3, v + 7)]
    assert s.read_int(c, 4) == v + 7
