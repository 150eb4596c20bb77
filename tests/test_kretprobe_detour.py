"""Kretprobe entries done in guest code on Unicorn (kpsdk/targets/unicorn/detour.py).

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
from tests.conftest import UNICORN_ARCHS, local_entry_offset

Ri = kpsdk.KretprobeInstance

#: functions of the fixture each arch detours (their first instructions are
#: boostable and no branch lands inside the bytes the jump covers)
DETOURED = {
    "x86_64": ("fact", "sum7", "loop", "check", "try_escape"),
    "i386": ("add", "fact", "inc", "loop", "twice", "try_escape"),
    "arm": ("add", "fact", "inc", "loop", "twice", "escape"),
    "thumb": ("add", "sum7", "inc", "loop", "twice"),
    "riscv64": ("add", "sum7", "inc", "loop", "twice"),
    "ppc64": ("add", "fact", "inc", "loop", "twice", "escape"),
    "ppc64le": ("add", "fact", "inc", "loop", "twice", "escape"),
    "aarch64": ("add", "fact", "inc", "loop", "twice", "escape"),
}
#: and some whose entry stays a code hook (the "hooked-entry" detour: the return
#: still comes back through the detour's return code), with why
NOT_DETOURED = {
    "x86_64": ("inc", "add"),  # 4 bytes (lea; ret): a 5-byte jmp does not fit
    "i386": ("escape",),  # the jmp covers 3 instructions and the function ends in ``jmp *%eax``
    "arm": (),
    "thumb": ("fact",),  # the 4-byte b.w would cover ``cmp; ble``: a branch cannot move
    "riscv64": ("fact",),  # the same: ``li; bge``
    "ppc64": ("try_escape",),  # ``mfcr r12`` (saving CR2-CR4) reads CR0 and the scratch r12 before writing it
    "ppc64le": ("try_escape",),  # the same
    "aarch64": ("bump",),  # ``adrp`` reads the pc: it cannot move out of line (the kernel simulates it)
}


def entry(s: kpsdk.Session, name: str) -> int:
    """Where a probe on ``name`` is: its first instruction, or ppc64le's local entry."""
    files = s.target.mapped_files()  # none on a blank CPU (unicorn:ARCH), whose symbols kpsdk was given
    return s.symbols.resolve(name) + (local_entry_offset(files[0].path, name) if files else 0)


def point(s: kpsdk.Session, name: str) -> ProbePoint:
    return s.target.manager.points[entry(s, name)]


def raw(s: kpsdk.Session, name: str, n: int) -> bytes:
    """Bytes as the CPU fetches them (no K10 overlay)."""
    return bytes(s.target.uc.mem_read(entry(s, name), n))  # type: ignore[attr-defined]


@pytest.fixture(params=[a for a in UNICORN_ARCHS if kpsdk.get_registry().arch(a).detours is not None])
def arch(request: pytest.FixtureRequest) -> str:
    """The arches whose backend writes detours (all of Unicorn's)."""
    return str(request.param)


@pytest.fixture
def s(arch: str) -> Iterator[kpsdk.Session]:
    session = kpsdk.open(f"elf:{fixtures.path(arch)}")
    yield session
    session.close()


def test_which_functions_get_a_detour(s: kpsdk.Session, arch: str) -> None:
    for name in DETOURED[arch] + NOT_DETOURED[arch]:
        rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None)
        s.register_kretprobe(rp)
        want = "detour" if name in DETOURED[arch] else "hooked-entry"
        assert point(s, name).mechanism == want, name
        s.unregister_kretprobe(rp)


def test_detoured_returns_match_the_program(s: kpsdk.Session, arch: str) -> None:
    """Every return of ``loop``'s callee and of ``loop`` is seen with the value the
    program computes, and reads of the patched entry show the original bytes."""
    name = "inc" if "inc" in DETOURED[arch] else "loop"
    before = s.target.read_memory(entry(s, name), 16)
    seen: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: seen.append(regs.signed(s.arch.return_value)))
    s.register_kretprobe(rp)
    assert point(s, name).mechanism == "detour"
    assert raw(s, name, 16) != before  # the CPU fetches the jump ...
    assert s.target.read_memory(entry(s, name), 16) == before  # ... reads show the function (K10)
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


def test_an_entry_handler_keeps_the_detour(s: kpsdk.Session, arch: str) -> None:
    """The guest code hooks the call, then Python runs the entry handler (on the
    displaced instructions); tests/test_kretprobe_entry_paths.py compares it with
    the hook path."""
    name = "loop"
    entries: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None,
                         entry_handler=lambda ri, regs: entries.append(regs.ip))
    s.register_kretprobe(rp)
    assert point(s, name).mechanism == "detour"
    s.call("loop", 3)
    # the function's entry as the probe took it (ppc64le: the local entry, 8 bytes on)
    assert entries == [point(s, name).addr] and rp.hits == 1


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
    assert point(s, name).mechanism == "hooked-entry"
    assert s.run(timeout=10) == 0 and s.console == fixtures.EXPECTED_OUTPUT
    assert len(inside) == len(returns) == rp.hits > 0


def test_writing_over_a_detoured_entry_is_refused(s: kpsdk.Session, arch: str) -> None:
    name = DETOURED[arch][-1]
    rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs: None)
    s.register_kretprobe(rp)
    length = point(s, name).state["detour_plan"]
    assert isinstance(length, int)
    with pytest.raises(kpsdk.KprobeError) as e:
        s.target.write_memory(entry(s, name) + length - 1, b"\0")
    assert e.value.errno == errno.EBUSY


@pytest.mark.parametrize(("arch", "name"), [("x86_64", "try_escape"), ("i386", "try_escape"), ("arm", "escape"),
                                          ("ppc64", "escape")])
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


# -- the scratch register and flags a detour clobbers ------------------------------------------

#: per arch: a function that takes an argument in the detour's scratch register or in
#: the flags (a hand-written thunk), one shaped like it that does not, and a caller
#: that sets the scratch register and the carry flag, calls, and returns what it got
THUNKS = {
    "x86_64": ("lea rax, [r11 + 1]\nnop\nnop\nnop\nret", "lea rax, [rdi + 1]\nnop\nnop\nnop\nret",
               "mov r11, 41\nmov edi, 9\nstc\ncall {f}\nret"),
    "i386": ("setc al\nmovzx eax, al\nnop\nnop\nret", "xor eax, eax\nnop\nnop\nnop\nnop\nret",
             "stc\ncall {f}\nret"),
    "arm": ("add r0, ip, #1\nnop\nbx lr", "add r0, r0, #1\nnop\nbx lr",
            "push {{lr}}\nmov ip, #41\nmov r0, #9\nbl {f}\npop {{pc}}"),
    # r12 as ELFv2's global entry takes it; CR0 set by the caller's cmpdi
    "ppc64": ("addi 3, 12, 1\nnop\nblr", "addi 3, 3, 1\nnop\nblr",
              "mflr 0\nstd 0, 16(1)\nstdu 1, -32(1)\nli 12, 41\nli 3, 9\nbl {f}\naddi 1, 1, 32\n"
              "ld 0, 16(1)\nmtlr 0\nblr"),
    "ppc64-cr0": ("li 3, 1\nbeqlr\nli 3, 0\nblr", "li 3, 1\nnop\nli 3, 0\nblr",
                  "mflr 0\nstd 0, 16(1)\nstdu 1, -32(1)\ncmpdi 1, 1\nbl {f}\naddi 1, 1, 32\n"
                  "ld 0, 16(1)\nmtlr 0\nblr"),
}
THUNKS["ppc64le"], THUNKS["ppc64le-cr0"] = THUNKS["ppc64"], THUNKS["ppc64-cr0"]  # the same code, little-endian
THUNK_RESULTS = {"x86_64": (42, 10), "i386": (1, 0), "arm": (42, 10), "ppc64": (42, 10), "ppc64-cr0": (0, 0),
                 "ppc64le": (42, 10), "ppc64le-cr0": (0, 0)}


@pytest.mark.parametrize("isa", sorted(THUNKS))
def test_a_thunk_taking_the_scratch_register_or_flags_keeps_the_hook_path(isa: str) -> None:
    s = kpsdk.open(f"unicorn:{isa.partition('-')[0]}")
    try:
        code = s.target._area - 0x10000  # type: ignore[attr-defined]  # near kpsdk's area: ARM's b reaches 32 MiB
        caller_at = code + 0x800
        s.target.map(code, 0x1000, "rx")  # type: ignore[attr-defined]
        thunk, plain, caller = THUNKS[isa]
        got: dict[str, str] = {}
        for name, text, at in (("thunk", thunk, code), ("plain", plain, code + 0x100)):
            body = s.arch.assemble(text, at)
            s.target.uc.mem_write(at, body)  # type: ignore[attr-defined]
            s.symbols.add(kpsdk.binfmt.symbols.Symbol(name, at, len(body), "func"))
        for name, want, at in zip(("thunk", "plain"), THUNK_RESULTS[isa], (code, code + 0x100), strict=True):
            returns: list[int] = []
            rp = kpsdk.Kretprobe(symbol_name=name, handler=lambda ri, regs, out=returns: out.append(regs.return_value))
            s.register_kretprobe(rp)
            got[name] = str(point(s, name).mechanism)
            stub = s.arch.assemble(caller.format(f=hex(at)), caller_at)
            s.target.uc.mem_write(caller_at, stub)  # type: ignore[attr-defined]
            s.target.uc.ctl_remove_cache(caller_at, caller_at + len(stub))  # type: ignore[attr-defined]
            assert s.call(caller_at) == want, name
            assert returns == [want], name
            s.unregister_kretprobe(rp)
        assert got == {"thunk": "hooked-entry", "plain": "detour"}  # no guest entry code for the thunk
    finally:
        s.close()


# -- calls in flight when a detour goes ---------------------------------------------------------


def test_a_detour_unregistered_mid_call_returns_through_its_code_and_its_block_waits(arch: str) -> None:
    """loop's detour goes while loop runs (a kprobe on inc unregisters it) and a
    kretprobe on add gets a detour in the same run: loop's call comes back through
    its old return code (now a jump to the shared trampoline, where the core
    finds it), and its block is reused only once nothing can return there."""
    s = kpsdk.open(f"elf:{fixtures.path(arch)}")
    try:
        outer: list[int] = []
        adds: list[int] = []
        rp = kpsdk.Kretprobe(symbol_name="loop", handler=lambda ri, r: outer.append(r.return_value))
        later = kpsdk.Kretprobe(symbol_name="add", handler=lambda ri, r: adds.append(r.return_value))

        def on_inc(p: kpsdk.Probe, regs: PtRegs) -> int:
            if rp.registered:
                s.unregister_kretprobe(rp)
                s.register_kretprobe(later)
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="inc", pre_handler=on_inc))
        s.register_kretprobe(rp)
        assert point(s, "loop").mechanism == "detour"
        old_block = s.target.detours.by_addr[entry(s, "loop")].block  # type: ignore[attr-defined]
        assert s.call("loop", 10) == sum(range(1, 11))
        assert outer == [] and s.target.rethook.in_flight() == []  # type: ignore[union-attr]
        if point(s, "add").mechanism == "detour":
            assert s.target.detours.by_addr[entry(s, "add")].block != old_block  # type: ignore[attr-defined]
        assert s.call("add", 2, 3) == 5 and adds == [5]
    finally:
        s.close()


def test_records_of_tail_calls_at_one_frame_settle_in_call_order() -> None:
    """Three detoured functions tail-calling each other share one frame; each
    entry found the previous one's return code as its return address.  Settling
    pushes them in that order whatever order they are read in."""
    from kpsdk.targets.unicorn.detour import _oldest_first

    class D:
        def __init__(self, tramp: int) -> None:
            self.tramp = tramp

    a, b, c, deeper = D(0x100), D(0x200), D(0x300), D(0x400)
    recs = [(0x7000, 0x200, 5, c), (0x7000, 0x1234, 3, a), (0x6F00, 0x1240, 2, deeper), (0x7000, 0x100, 4, b)]
    order = _oldest_first(recs)  # type: ignore[arg-type]
    assert [rec[3] for rec in order] == [a, b, c, deeper]


# -- detours come and go: blocks and indexes are reused -----------------------------------------


def test_register_unregister_cycles_reuse_retired_detours() -> None:
    """Each unregistration retires a detour (its block may still have a call
    returning there); with no call in flight the next registration takes it
    back, however many cycles run between runs (once, 241 cycles ran out)."""
    s = kpsdk.open(f"elf:{fixtures.path('x86_64')}")
    for _ in range(300):
        rp = kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, regs: None)
        s.register_kretprobe(rp)
        assert point(s, "fact").mechanism == "detour"
        s.unregister_kretprobe(rp)
    seen: list[int] = []
    s.register_kretprobe(kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, regs: seen.append(regs.return_value)))
    assert s.run(timeout=10) == 0 and seen == [1, 2, 6, 24, 120]


def _functions(s: kpsdk.Session, count: int) -> list[int]:
    """``count`` functions of the blank x86_64 target, each ``push rbp; mov rbp, rsp;
    lea rax, [rdi + 1]; pop rbp; ret`` (their first 5 bytes fit a detour's jump)."""
    base = s.target._area - 0x100000  # type: ignore[attr-defined]  # within a rel32 jump of kpsdk's area
    s.target.map(base, 0x10000, "rx")  # type: ignore[attr-defined]
    body = s.arch.assemble("push rbp; mov rbp, rsp; lea rax, [rdi + 1]; pop rbp; ret", 0)
    entries = [base + 16 * i for i in range(count)]
    for i, at in enumerate(entries):
        s.target.uc.mem_write(at, body)  # type: ignore[attr-defined]
        s.symbols.add(kpsdk.binfmt.symbols.Symbol(f"f{i}", at, len(body), "func"))
    return entries


def test_when_every_detour_is_in_use_the_next_kretprobe_takes_the_hook_path() -> None:
    from kpsdk.targets.unicorn.detour import MAX_DETOURS

    s = kpsdk.open("unicorn:x86_64")
    entries = _functions(s, MAX_DETOURS + 10)
    returns: list[int] = []
    probes = [kpsdk.Kretprobe(addr=at, maxactive=1, handler=lambda ri, regs: returns.append(regs.return_value))
              for at in entries]
    s.register_kretprobes(probes)
    mechanisms = [s.target.manager.points[at].mechanism for at in entries]
    assert mechanisms == ["detour"] * MAX_DETOURS + ["hook"] * 10
    for i, at in enumerate(entries):
        assert s.call(at, i) == i + 1
    assert returns == [i + 1 for i in range(len(entries))]
    s.unregister_kretprobes(probes)
    s.register_kretprobe(probes[-1])  # the retired detours came back
    assert s.target.manager.points[entries[-1]].mechanism == "detour"


def test_detours_retired_during_a_run_wait_for_its_end() -> None:
    """A handler that unregisters and registers a kretprobe over and over retires a
    detour each time; while the CPU runs none can be reused (the code may be
    executing), so past MAX_DETOURS the probe takes the hook path, and every
    return is still seen.  After the run they are free again."""
    from kpsdk.targets.unicorn.detour import MAX_DETOURS

    s = kpsdk.open("unicorn:x86_64")
    f, = _functions(s, 1)
    caller = f + 0x1000
    cycles = MAX_DETOURS + 20
    s.target.uc.mem_write(caller, s.arch.assemble(  # type: ignore[attr-defined]
        f"mov rbx, {cycles}; again: mov rdi, rbx; call {f:#x}; dec rbx; jnz again; ret", caller))
    returns: list[int] = []
    rp = kpsdk.Kretprobe(addr=f, handler=lambda ri, regs: returns.append(regs.return_value))
    mechanisms: list[str | None] = []

    def cycle(p: kpsdk.Probe, regs: PtRegs) -> int:  # on the call: the kretprobe comes back fresh for it
        if rp.registered:
            s.unregister_kretprobe(rp)
        s.register_kretprobe(rp)
        mechanisms.append(s.target.manager.points[f].mechanism)
        return 0

    s.register_kprobe(kpsdk.Kprobe(addr=caller + len(s.arch.assemble(f"mov rbx, {cycles}; mov rdi, rbx", 0)),
                                   pre_handler=cycle))
    s.call(caller)
    assert returns == list(range(cycles + 1, 1, -1))
    assert mechanisms == ["detour"] * MAX_DETOURS + ["hook"] * 20
    s.unregister_kretprobe(rp)
    s.register_kretprobe(rp)
    assert s.target.manager.points[f].mechanism == "detour"
