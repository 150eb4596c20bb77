"""kprobes semantics K1-K10 and O1 on real cross-built code, on every Unicorn arch.

Each test runs on x86_64, i386, arm, thumb and riscv64, on both probe
mechanisms (the optimized hook path and the breakpoint + booster path), and
checks what a user would see against the program's own output (which
test_ground_truth.py checks against qemu-user).
"""

from __future__ import annotations

import errno
import re

import capstone
import pytest

import kpsdk
from kpsdk import fixtures
from tests.conftest import fall_through, instructions, local_entry_offset, probe_addr, return_instruction


def test_program_runs_to_its_expected_output(session: kpsdk.Session) -> None:
    assert session.run(timeout=10) == 0
    assert session.console == fixtures.EXPECTED_OUTPUT


def test_arguments_and_return_value_match_the_program(session: kpsdk.Session) -> None:
    entry, returns = [], []
    session.register_kprobe(kpsdk.Kprobe(symbol_name="add",
                                         pre_handler=lambda p, r: entry.append((r.arg(0), r.arg(1)))))
    ret = return_instruction(session, "add")
    session.register_kprobe(kpsdk.Kprobe(addr=probe_addr(session, ret.address),
                                         pre_handler=lambda p, r: returns.append(r.return_value)))
    assert session.run(timeout=10) == 0
    assert entry == [(2, 3)]  # main calls add(2, 3)
    assert returns == [fixtures.EXPECTED["add"]]
    assert session.call("add", 40, 2) == 42
    assert entry[-1] == (40, 2) and returns[-1] == 42


def test_seven_arguments_including_stack_ones(session: kpsdk.Session) -> None:
    seen = []
    session.register_kprobe(kpsdk.Kprobe(symbol_name="sum7",
                                         pre_handler=lambda p, r: seen.append([r.arg(i) for i in range(7)])))
    session.run(timeout=10)
    assert seen == [[1, 2, 3, 4, 5, 6, 7]]
    assert "sum7=140\n" in session.console
    assert session.call("sum7", 7, 6, 5, 4, 3, 2, 1) == 7 + 12 + 15 + 16 + 15 + 12 + 7
    assert seen[-1] == [7, 6, 5, 4, 3, 2, 1]


def test_recursion_is_seen_at_every_depth(session: kpsdk.Session) -> None:
    seen = []
    session.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=lambda p, r: seen.append(r.arg(0))))
    session.run(timeout=10)
    assert seen == [5, 4, 3, 2, 1]
    assert session.call("fact", 10) == 3628800


def test_fault_injection_changes_the_program_output(session: kpsdk.Session) -> None:
    ret = return_instruction(session, "add")

    def inject(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        regs.return_value = 99
        return 0

    session.register_kprobe(kpsdk.Kprobe(addr=probe_addr(session, ret.address), pre_handler=inject))
    session.run(timeout=10)
    assert session.console.splitlines()[0] == "add=99"
    assert session.console.splitlines()[1:] == fixtures.EXPECTED_OUTPUT.splitlines()[1:]


def test_k2_pre_handler_changes_the_execution_path(session: kpsdk.Session) -> None:
    posts = []
    sub = session.symbols.resolve("sub")

    def redirect(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        regs.ip = sub
        return 1

    kp = kpsdk.Kprobe(symbol_name="add", pre_handler=redirect, post_handler=lambda p, r, f: posts.append(1))
    session.register_kprobe(kp)
    assert session.call("add", 7, 3) == 4  # ran sub(7, 3)
    assert posts == []  # no single-step, no post_handler
    session.unregister_kprobe(kp)
    assert session.call("add", 7, 3) == 10


def test_k3_post_handler_runs_after_a_conditional_branch(session: kpsdk.Session) -> None:
    branch = next(i for i in instructions(session, "check")
                  if capstone.CS_GRP_JUMP in i.groups and any(o.type == capstone.CS_OP_IMM for o in i.operands))
    after: list[int] = []
    session.register_kprobe(kpsdk.Kprobe(addr=probe_addr(session, branch.address),
                                         post_handler=lambda p, r, f: after.append(r.ip)))
    assert session.call("check", 5) == 0
    assert session.call("check", 50) == 1
    fallthrough = fall_through(session, branch)
    assert len(after) == 2 and after[0] != after[1]
    assert fallthrough in after  # one call fell through, the other took the branch


def test_k4_handler_exception_surfaces_with_probe_context(session: kpsdk.Session) -> None:
    def broken(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        raise ValueError("boom")

    session.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=broken))
    with pytest.raises(kpsdk.ProbeHandlerError, match=r"pre_handler of .*add\+0x0.*ValueError: boom") as info:
        session.run(timeout=10)
    assert isinstance(info.value.__cause__, ValueError)


def test_k4_fault_handler_can_claim_the_fault(session: kpsdk.Session) -> None:
    trapnrs = []
    session.register_kprobe(kpsdk.Kprobe(
        symbol_name="add", pre_handler=lambda p, r: 1 / 0,
        fault_handler=lambda p, r, trapnr: trapnrs.append(trapnr) or 1))
    assert session.run(timeout=10) == 0
    assert session.console == fixtures.EXPECTED_OUTPUT
    assert trapnrs == [kpsdk.TRAP_HANDLER_EXCEPTION]


def test_k5_aggregate_probes_run_newest_first(session: kpsdk.Session) -> None:
    """The kernel adds a probe at the head of the aggregate's list (add_new_kprobe's
    list_add_rcu), so the one registered last runs first; list() shows them so too."""
    order = []
    probes = [kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, r, n=n: order.append(n)) for n in range(3)]
    for kp in probes:
        session.register_kprobe(kp)
    session.disable_kprobe(probes[1])
    session.call("add", 1, 2)
    assert order == [2, 0]
    session.enable_kprobe(probes[1])
    session.unregister_kprobe(probes[0])
    session.call("add", 1, 2)
    assert order == [2, 0, 2, 1]
    stop_early = kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, r: order.append(3) or 0)
    session.register_kprobe(stop_early)
    session.call("add", 1, 2)
    assert order[-3:] == [3, 2, 1]


def test_k6_reentrant_hit_is_counted_in_nmissed(session: kpsdk.Session) -> None:
    inner = kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, r: pytest.fail("reentrant handler ran"))
    results = []
    outer = kpsdk.Kprobe(symbol_name="inc", pre_handler=lambda p, r: results.append(session.call("add", 20, 22)))
    session.register_kprobes([inner, outer])
    assert session.call("loop", 3) == 1 + 2 + 3
    assert results == [42, 42, 42]
    assert (inner.nmissed, inner.hits) == (3, 0)
    assert (outer.nmissed, outer.hits) == (0, 3)


def test_k7_enable_disable_and_the_global_knob(session: kpsdk.Session) -> None:
    hits = []
    kp = kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, r: hits.append(1), flags=kpsdk.KPROBE_FLAG_DISABLED)
    session.register_kprobe(kp)
    assert "[DISABLED]" in session.list()
    session.call("add", 1, 1)
    assert hits == []
    session.enable_kprobe(kp)
    session.call("add", 1, 1)
    assert hits == [1]
    session.kprobes_enabled = False
    session.call("add", 1, 1)
    assert hits == [1] and "[DISABLED]" not in session.list()  # the knob leaves per-probe state alone
    session.kprobes_enabled = True
    session.call("add", 1, 1)
    assert hits == [1, 1]


def test_k8_batch_registration_rolls_back(session: kpsdk.Session) -> None:
    add = session.symbols.resolve("add")
    before = session.target.uc.mem_read(add, 16)  # raw memory, under kpsdk's view
    good = [kpsdk.Kprobe(symbol_name="add"), kpsdk.Kprobe(symbol_name="fact")]
    with pytest.raises(kpsdk.KprobeError) as info:
        session.register_kprobes([*good, kpsdk.Kprobe(symbol_name="no_such_function")])
    assert info.value.errno == errno.ENOENT
    assert session.list() == "" and not any(p.registered for p in good)
    assert session.target.uc.mem_read(add, 16) == before
    session.register_kprobes(good)
    session.unregister_kprobes(good)
    assert session.list() == ""


def test_k9_list_and_profile_formats(session: kpsdk.Session) -> None:
    session.register_kprobe(kpsdk.Kprobe(symbol_name="fact"))
    session.register_kprobe(kpsdk.Kprobe(symbol_name="add", offset=0, flags=kpsdk.KPROBE_FLAG_DISABLED))
    session.run(timeout=10)
    width = session.arch.word_size * 2
    lines = session.list().splitlines()
    assert all(re.fullmatch(rf"[0-9a-f]{{{width}}}  k  \w+\+0x[0-9a-f]+(  (\[DISABLED\])?(\[OPTIMIZED\])?)?", ln)
               for ln in lines), lines
    profile = {row[0]: row[1:] for row in session.profile_rows()}
    fact = local_entry_offset(session.target.mapped_files()[0].path, "fact")  # ppc64le: the local entry, +0x8
    assert profile == {f"k_fact_{fact:#x}": (5, 0), "k_add_0x0": (0, 0)}
    assert re.search(rf"^  k_fact_{fact:#x} +5 +0$", session.profile(), re.M)


def test_k10_memory_is_restored_byte_for_byte(session: kpsdk.Session) -> None:
    text = min(session.symbols.functions(), key=lambda s: s.address)
    end = max(s.address + s.size for s in session.symbols.functions())
    original = bytes(session.target.uc.mem_read(text.address, end - text.address))
    probes = [kpsdk.Kprobe(addr=probe_addr(session, i.address)) for name in ("add", "fact", "inc", "sum7")
              for i in instructions(session, name)]
    registered = []
    for kp in probes:
        try:
            session.register_kprobe(kp)
            registered.append(kp)
        except kpsdk.KprobeError as e:
            assert e.errno == errno.EINVAL  # a refused instruction (e.g. Thumb's IT)
    assert session.read_memory(text.address, len(original)) == original  # kpsdk's view: no breakpoints
    if not session.kprobes_optimization:
        assert bytes(session.target.uc.mem_read(text.address, len(original))) != original
    assert session.run(timeout=10) == 0 and session.console == fixtures.EXPECTED_OUTPUT
    session.unregister_kprobes(registered)
    assert bytes(session.target.uc.mem_read(text.address, len(original))) == original


def test_k1_registration_errors(session: kpsdk.Session) -> None:
    def err(kp: kpsdk.Kprobe) -> int:
        with pytest.raises(kpsdk.KprobeError) as info:
            session.register_kprobe(kp)
        return info.value.errno

    add = session.symbols.resolve("add")
    assert err(kpsdk.Kprobe(symbol_name="add", addr=add)) == errno.EINVAL
    assert err(kpsdk.Kprobe()) == errno.EINVAL
    assert err(kpsdk.Kprobe(symbol_name="nope")) == errno.ENOENT
    assert err(kpsdk.Kprobe(addr=0x10)) == errno.EINVAL  # unmapped
    assert err(kpsdk.Kprobe(addr=session.target.sentinel)) == errno.EINVAL  # kpsdk's own area
    long_insn = next(i for name in ("sum7", "main", "loop") for i in instructions(session, name) if i.size > 2)
    assert err(kpsdk.Kprobe(addr=probe_addr(session, long_insn.address + 2))) == errno.EILSEQ
    kp = kpsdk.Kprobe(symbol_name="add")
    session.register_kprobe(kp)
    assert err(kp) == errno.EINVAL  # the same object twice
    session.blacklist.add("fact")
    assert err(kpsdk.Kprobe(symbol_name="fact")) == errno.EINVAL


def test_o1_optimization_marks_and_knob(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        plain = kpsdk.Kprobe(symbol_name="add")
        with_post = kpsdk.Kprobe(symbol_name="fact", post_handler=lambda p, r, f: None)
        s.register_kprobes([plain, with_post])
        lines = dict(line.split("  ")[2:4] if line.count("  ") >= 3 else (line.split("  ")[2], "")
                     for line in s.list().splitlines())
        fact = local_entry_offset(fixtures.path(arch), "fact")
        assert lines == {"add+0x0": "[OPTIMIZED]", f"fact+{fact:#x}": ""}
        s.kprobes_optimization = False
        assert "[OPTIMIZED]" not in s.list()
        assert s.call("add", 1, 2) == 3 and plain.hits == 1
        s.kprobes_optimization = True
        assert "add+0x0  [OPTIMIZED]" in s.list()


def test_ppc64_runs_on_a_blank_unicorn_cpu() -> None:
    """64-bit big-endian code runs (arch_backends/ppc64.py: TLB off, MSR for a 64-bit process),
    and a kprobe's trap there is reported at its own address."""
    s = kpsdk.open("unicorn:ppc64")
    s.target.map(0x100000, 0x1000, "rx")
    # li r4, 5 ; add r3, r3, r4 ; rldicr r3, r3, 32, 31 ; blr: (x + 5) << 32, a 64-bit result
    s.write_memory(0x100000, bytes.fromhex("38800005" "7c632214" "786307c6" "4e800020"))
    seen: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(addr=0x100004, pre_handler=lambda p, regs: seen.append(regs.ip) or 0))
    s.kprobes_optimization = False  # the breakpoint path: a tw trap
    assert s.call(0x100000, 37, restype="ulong") == 42 << 32
    assert seen == [0x100004]


def test_ppc64le_runs_on_a_blank_unicorn_cpu() -> None:
    """Little-endian ppc64 runs on Unicorn's big-endian engine with MSR[LE] set (its
    little-endian mode is refused): the same code stored little-endian, a 64-bit result
    stored to memory little-endian, and the trap reported at its own address."""
    s = kpsdk.open("unicorn:ppc64le")
    s.target.map(0x100000, 0x1000, "rx")
    s.target.map(0x200000, 0x1000, "rw")
    # li r4, 5 ; add r3, r3, r4 ; rldicr r3, r3, 32, 31 ; lis r5, 0x20 ; std r3, 0(r5) ; blr
    words = (0x38800005, 0x7C632214, 0x786307C6, 0x3CA00020, 0xF8650000, 0x4E800020)
    s.write_memory(0x100000, b"".join(w.to_bytes(4, "little") for w in words))
    seen: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(addr=0x100004, pre_handler=lambda p, regs: seen.append(regs.ip) or 0))
    s.kprobes_optimization = False  # the breakpoint path: a tw trap, little-endian
    assert s.call(0x100000, 37, restype="ulong") == 42 << 32
    assert seen == [0x100004]
    assert s.read_memory(0x200000, 8) == (42 << 32).to_bytes(8, "little")


@pytest.mark.parametrize("optimize", [True, False], ids=["hook", "breakpoint"])
def test_k4_faulting_probed_instruction_goes_to_the_fault_handler(optimize: bool) -> None:
    s = kpsdk.open("unicorn:x86_64")
    s.kprobes_optimization = optimize
    s.target.map(0x100000, 0x1000, "rx")
    code = bytes.fromhex("488b042510000000") + bytes.fromhex("b807000000c3")  # mov rax,[0x10]; mov eax,7; ret
    s.write_memory(0x100000, code)
    trapnrs: list[int] = []
    kp = kpsdk.Kprobe(addr=0x100000, fault_handler=lambda p, r, t: trapnrs.append(t) or 1)
    s.register_kprobe(kp)
    assert s.call(0x100000) == 7  # handled: execution went on after the faulting instruction
    assert trapnrs and trapnrs[0] != kpsdk.TRAP_HANDLER_EXCEPTION
    s.unregister_kprobe(kp)
    s.register_kprobe(kpsdk.Kprobe(addr=0x100000, fault_handler=lambda p, r, t: 0))
    with pytest.raises(kpsdk.TargetFault, match=r"UC_ERR_READ_UNMAPPED"):
        s.call(0x100000)


def test_symbol_name_is_a_name_not_an_expression(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_kprobe(kpsdk.Kprobe(symbol_name="add+4"))
        assert info.value.errno == errno.ENOENT


@pytest.mark.parametrize("arm", ["arm", "thumb"])
@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "breakpoint"])
def test_arm_conditional_instruction_runs_handlers_only_when_it_executes(arm: str, optimize: bool) -> None:
    """The kernel's ARM kprobe_handler skips a probe whose condition fails (Thumb: in an IT block)."""
    with kpsdk.open(f"elf:{fixtures.path(arm)}") as s:
        s.kprobes_optimization = optimize
        movle = next(i for i in instructions(s, "check") if i.mnemonic == "movle")
        kp = kpsdk.Kprobe(addr=probe_addr(s, movle.address), pre_handler=lambda p, r: 0)
        s.register_kprobe(kp)
        assert s.call("check", 5) == 0  # 5 <= 10: movle executes
        assert s.call("check", 50) == 1  # condition fails: no hit
        assert (kp.hits, kp.nmissed) == (1, 0)


def test_argument_reads_see_the_handlers_own_register_writes(session: kpsdk.Session) -> None:
    abi = session.arch.user_abi.args
    seen = []

    def rewrite(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        before = regs.arg(0)
        if abi:  # register arguments: write one and read it back through arg()
            setattr(regs, abi[0], before + 100)
        seen.append((before, regs.arg(0), regs.arg(1)))
        return 0

    session.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=rewrite))
    result = session.call("add", 2, 3)
    if abi:
        assert seen == [(2, 102, 3)] and result == 105
    else:  # i386 cdecl: arguments are on the stack
        assert seen == [(2, 2, 3)] and result == 5
    assert session.call("add", 7, 8) == (115 if abi else 15)  # nothing cached from the last hit


def test_regs_by_name_alias_role_and_dump(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        seen: dict[str, object] = {}

        def look(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
            a = s.arch
            seen["dump"] = regs.dump()
            seen["sp"] = (regs.sp, regs[a.sp], getattr(regs, a.sp))
            seen["ip"] = regs.ip
            seen["alias"] = [getattr(regs, alias) == getattr(regs, r.name) for r in a.registers for alias in r.aliases
                             if alias not in ("ip", "pc")]
            with pytest.raises(AttributeError, match="has no register 'nope'.*registers: "):
                regs.nope  # noqa: B018 - the error is the point
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=look))
        s.call("add", 1, 2)
        dump = seen["dump"]
        assert isinstance(dump, dict) and set(dump) == set(s.arch.register_names)
        sp = seen["sp"]
        assert isinstance(sp, tuple) and len(set(sp)) == 1
        assert seen["ip"] == s.symbols.resolve("add") and all(seen["alias"])  # type: ignore[arg-type]
