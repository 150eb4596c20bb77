"""``register_kprobes`` in one pass (``ProbeManager.add_many``) against one by one.

A batch checks every probe first, decodes the instructions outside any function
together (``kpsdk.arch.decode.prime``: one capstone pass over neighbouring code instead of
one call per address) and arms each point once.  What a user sees must not change:
the same probes placed on the same instructions (``s.list()``, the decoded
instruction of each point), the same handlers run in the same order (K5), and for a
batch that fails, the error the first failing probe gives one by one, with nothing
left registered (K8).  Lone addresses are checked on random bytes, where a pass from
one address reaches only some of the others on a boundary.
"""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path
from typing import Any

import capstone
import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk import fixtures
from kpsdk.arch.insn import Decoded
from kpsdk.probe import register_all
from tests.conftest import UNICORN_ARCHS

CODE = 0x500000


def _outcome(s: kpsdk.Session, addr: int) -> tuple[int, str] | Decoded:
    """What registering one kprobe at ``addr`` gives one by one: the point's instruction,
    or the error (errno, message); the probe is unregistered again."""
    probe = kpsdk.Kprobe(addr=addr)
    try:
        s.register_kprobe(probe)
    except kpsdk.KprobeError as exc:
        return exc.errno, str(exc)
    point = s.target.manager.point_of(probe)
    assert point is not None
    insn = point.insn
    s.unregister_kprobe(probe)
    return insn


def _placed(s: kpsdk.Session, probes: list[Any]) -> dict[int, Decoded]:
    """Each registered probe's address and its point's instruction."""
    out = {}
    for p in probes:
        point = s.target.manager.point_of(p)
        assert point is not None and p.registered
        out[point.addr] = point.insn
    return out


def _batch_as_one_by_one(one: kpsdk.Session, s: kpsdk.Session, addrs: list[int]) -> tuple[list[Any], list[Any]]:
    """A kprobe at each of ``addrs`` registered one by one in ``one`` and as one batch in ``s``:
    the same points on the same instructions, the same ``list()``.  Returns (batch, singles)."""
    singles = [kpsdk.Kprobe(addr=a) for a in addrs]
    for p in singles:
        one.register_kprobe(p)
    probes = [kpsdk.Kprobe(addr=a) for a in addrs]
    s.register_kprobes(probes)
    assert _placed(s, probes) == _placed(one, singles)
    assert s.list() == one.list()
    return probes, singles


def _every_offset(s: kpsdk.Session) -> list[int]:
    """Every byte of every function of the fixture (Thumb bit where its code is Thumb)."""
    out = []
    for sym in s.symbols:
        if sym.kind == "func" and sym.size and not sym.name.startswith("_"):
            thumb = sym.address & 1 if s.arch.has_thumb else 0
            start = sym.address - thumb
            out += [(start + off) | thumb for off in range(sym.size)]
    return out


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_a_batch_places_what_one_by_one_places(arch: str) -> None:
    """Every byte of every function: one by one says which are instructions; a batch of
    all of those places each on the same instruction, ``list()`` shows the same lines, and
    a batch that adds one refused address raises its error and registers nothing."""
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as one, kpsdk.open(f"elf:{fixtures.path(arch)}") as batch:
        offsets = _every_offset(one)
        outcomes = {a: _outcome(one, a) for a in offsets}
        good = [a for a, o in outcomes.items() if isinstance(o, Decoded)]
        bad = [a for a, o in outcomes.items() if not isinstance(o, Decoded)]
        assert len(good) > 50 and bad, (len(good), len(bad))
        probes, singles = _batch_as_one_by_one(one, batch, good)
        assert [p.addr for p in probes] == [p.addr for p in singles]  # the address as registered
        batch.unregister_kprobes(probes)
        for a in bad[:: max(1, len(bad) // 12)]:
            again = [kpsdk.Kprobe(addr=g) for g in good[:40]] + [kpsdk.Kprobe(addr=a)]
            with pytest.raises(kpsdk.KprobeError) as err:
                batch.register_kprobes(again)
            assert (err.value.errno, str(err.value)) == outcomes[a]
            assert not any(p.registered for p in again) and not batch.target.manager.points


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_lone_addresses_in_a_batch_decode_as_each_on_its_own(arch: str, data: st.DataObject) -> None:
    """Code outside any function (random bytes, so a pass from one address lands inside
    the instructions of others): the batch of every address one by one accepts places
    each on the instruction decoded at that address alone."""
    code = data.draw(st.binary(min_size=8, max_size=96), label="code")
    offsets = sorted(data.draw(st.sets(st.integers(0, len(code) - 1), min_size=2, max_size=40), label="offsets"))
    with kpsdk.open(f"unicorn:{arch}") as one, kpsdk.open(f"unicorn:{arch}") as s:
        for session in (one, s):
            session.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
            session.target.uc.mem_write(CODE, code)  # type: ignore[attr-defined]
        thumb = 1 if arch == "thumb" else 0  # on arm, an odd address is Thumb code (as bit 0 says)
        good = [CODE + o | thumb for o in offsets if isinstance(_outcome(one, CODE + o | thumb), Decoded)]
        probes, _ = _batch_as_one_by_one(one, s, good)
        s.unregister_kprobes(probes)
        assert not s.target.manager.points


def test_a_failing_batch_raises_the_first_probe_error_in_order() -> None:
    """K8 in a batch: the error is the one the first failing probe gives one by one,
    whichever check finds it (a field's type, an unknown name, an address, a probe given
    twice), and no probe of the batch is left registered."""
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        inc = s.symbols.resolve("inc")

        def batch(*probes: Any) -> kpsdk.KprobeError:
            with pytest.raises(kpsdk.KprobeError) as err:
                s.register_kprobes(list(probes))
            assert not any(p.registered for p in probes) and not s.target.manager.points
            return err.value

        def bad_field() -> kpsdk.Kprobe:
            p = kpsdk.Kprobe(addr=inc)
            p.offset = "4"  # type: ignore[assignment]  # set after it was made: checked at registration
            return p

        unknown = kpsdk.Kprobe(symbol_name="no_such_function")
        assert batch(kpsdk.Kprobe(addr=inc), unknown, bad_field()).errno == errno.ENOENT
        assert isinstance(batch(kpsdk.Kprobe(addr=inc), bad_field(), unknown), kpsdk.FieldTypeError)
        assert "not on an instruction boundary" in str(batch(kpsdk.Kprobe(addr=inc + 1), unknown))
        twice = kpsdk.Kprobe(addr=inc)
        assert str(batch(twice, kpsdk.Kprobe(symbol_name="inc"), twice)) == \
            f"EINVAL: <Kprobe {inc:#x} registered> is already registered"  # found registered at its second turn
        ret = next(a for a in range(inc, inc + 64) if s.target.decode_at(a, inc, s.target.iset_at(inc, None))
                   and str(s.target.decode_at(a, inc, s.target.iset_at(inc, None))) == "ret")
        assert batch(kpsdk.Kprobe(addr=inc), unknown).errno == errno.ENOENT
        ok = kpsdk.Kprobe(addr=ret)
        s.register_kprobes([ok])  # a probe already registered, then given again in a batch
        with pytest.raises(kpsdk.KprobeError, match="already registered"):
            s.register_kprobes([kpsdk.Kprobe(addr=inc), ok])
        assert [p.addr for p in s.target.manager.points.values()] == [ret]


def test_probes_sharing_a_point_in_a_batch_run_newest_first() -> None:
    """K5: several probes on one address, registered in one batch, run their handlers in
    the order one by one gives them (the newest first), and each counts its hits."""
    order: list[str] = []

    def handler(name: str) -> Any:
        def pre(p: Any, regs: Any) -> int:
            order.append(name)
            return 0
        return pre

    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        probes = [kpsdk.Kprobe(symbol_name="inc", pre_handler=handler(n)) for n in "abc"]
        probes.append(kpsdk.Kprobe(symbol_name="inc", offset=0, pre_handler=handler("d"),
                                   post_handler=lambda p, regs, flags: order.append("post")))
        s.register_kprobes(probes)
        s.call("inc", 41)
        assert order == ["d", "c", "b", "a", "post"]
        assert [p.hits for p in probes] == [1, 1, 1, 1]


@pytest.mark.parametrize("arch", ["thumb", "x86_64"])
def test_a_batch_decodes_code_whose_decoder_keeps_state_as_one_by_one(arch: str) -> None:
    """Thumb's decoder carries an ``IT``'s condition into the instructions after it
    (``moveq``) within one pass, where the instruction alone is ``mov``: a batch decodes
    Thumb code each on its own, as one by one does.  x86's prefixes belong to the
    instruction they precede: a batch over ``lock``/``rep`` runs agrees too."""
    # the IT itself is refused (K1), so it is left out of the batch, but a pass from the
    # instruction before it would walk through it
    code = bytes.fromhex("1846" "08bf" "0846" "7047" if arch == "thumb" else "f0ff00" "f3a4" "66" "90" "c3")
    with kpsdk.open(f"unicorn:{arch}") as one, kpsdk.open(f"unicorn:{arch}") as s:
        for session in (one, s):
            session.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
            session.target.uc.mem_write(CODE, code)  # type: ignore[attr-defined]
        thumb = 1 if arch == "thumb" else 0
        good = [CODE + o | thumb for o in range(len(code)) if isinstance(_outcome(one, CODE + o | thumb), Decoded)]
        assert len(good) >= 3
        _batch_as_one_by_one(one, s, good)


def _nops(s: kpsdk.Session, count: int = 0x100) -> None:
    s.target.map(CODE, max(count, 0x100) + 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.uc.mem_write(CODE, b"\x90" * count + b"\xc3")  # type: ignore[attr-defined]


def _error_of(register: Any) -> tuple[str, int, str] | None:
    try:
        register()
    except kpsdk.KprobeError as exc:
        return type(exc).__name__, exc.errno, str(exc)
    return None


def test_a_batch_gives_the_hook_slots_to_the_points_one_by_one_gives_them() -> None:
    """The first OPT_LIMIT points armed get the ``[OPTIMIZED]`` hook path: a batch arms in
    the list's order, each probe in its turn, so a point whose needs change later in the list
    (a disabled probe, then an enabled one; a post_handler joining) ends as one by one."""
    from kpsdk.targets.unicorn.target import OPT_LIMIT

    def disabled_first() -> list[Any]:
        return ([kpsdk.Kprobe(addr=CODE, flags=kpsdk.KPROBE_FLAG_DISABLED)]
                + [kpsdk.Kprobe(addr=CODE + 1 + i) for i in range(OPT_LIMIT)] + [kpsdk.Kprobe(addr=CODE)])

    def post_later() -> list[Any]:
        return ([kpsdk.Kprobe(addr=CODE)] + [kpsdk.Kprobe(addr=CODE + 1 + i) for i in range(OPT_LIMIT)]
                + [kpsdk.Kprobe(addr=CODE, post_handler=lambda p, regs, flags: None), kpsdk.Kprobe(addr=CODE + 0x80)])

    for make in (disabled_first, post_later):
        with kpsdk.open("unicorn:x86_64") as one, kpsdk.open("unicorn:x86_64") as s:
            _nops(one)
            _nops(s)
            register_all(make(), one.register, one.unregister)
            s.register_kprobes(make())
            assert "[OPTIMIZED]" in one.list()
            assert s.list() == one.list()


def test_a_batch_fails_at_the_first_probe_one_by_one_fails_at() -> None:
    """Errors found at different stages, in one by one's order: a probe given twice is found
    registered at its second turn (its message names it as one by one does, Thumb bit dropped);
    kpsdk's slot area filling up (ENOMEM) comes before a later probe's unmapped address; and
    nothing is left registered."""
    with kpsdk.open(f"elf:{fixtures.path('thumb')}") as one, kpsdk.open(f"elf:{fixtures.path('thumb')}") as s:
        inc = one.symbols.resolve("inc") | 1  # Thumb code, given with its bit
        for session in (one, s):
            twice = kpsdk.Kprobe(addr=inc)
            other = kpsdk.Kprobe(symbol_name="fact")
            batch = [twice, other, twice, kpsdk.Kprobe(symbol_name="no_such_function")]
            if session is one:
                expected = _error_of(lambda b=batch: register_all(b, one.register, one.unregister))
            else:
                assert _error_of(lambda b=batch: s.register_kprobes(b)) == expected
            assert expected is not None and expected[2] == \
                f"EINVAL: <Kprobe {inc & ~1:#x} registered> is already registered", expected
            assert not session.target.manager.points
    slots = 0x1000  # more breakpoint-path probes than kpsdk's area is given room for here
    with kpsdk.open("unicorn:x86_64") as s:
        _nops(s, slots)
        s.target._code_end = s.target._next_slot + 0x800 * 32  # type: ignore[attr-defined]
        s.kprobes_optimization = False
        probes = [kpsdk.Kprobe(addr=CODE + i) for i in range(slots)] + [kpsdk.Kprobe(addr=0x10)]
        error = _error_of(lambda: s.register_kprobes(probes))
        assert error is not None and error[1] == errno.ENOMEM, error
        assert not s.target.manager.points and not any(p.registered for p in probes)


def test_a_failed_batch_leaves_nothing_decoded_for_later() -> None:
    """What a batch decoded for probes it never reached serves no later registration: code
    written into the engine afterwards (``uc.mem_write``, which kpsdk does not see) is read afresh."""
    with kpsdk.open("unicorn:x86_64") as s:
        s.target.map(CODE - 0x1000, 0x1000, "rw")  # type: ignore[attr-defined]
        _nops(s, 16)
        with pytest.raises(kpsdk.KprobeError, match="not mapped executable"):
            s.register_kprobes([kpsdk.Kprobe(addr=CODE - 4), kpsdk.Kprobe(addr=CODE), kpsdk.Kprobe(addr=CODE + 1)])
        s.target.uc.mem_write(CODE, bytes.fromhex("4889c3"))  # type: ignore[attr-defined]  # mov rbx, rax
        p = kpsdk.Kprobe(addr=CODE)
        s.register_kprobe(p)
        point = s.target.manager.point_of(p)
        assert point is not None and str(point.insn) == "mov rbx, rax"


def test_a_batch_on_debians_own_ls_places_and_runs_as_one_by_one() -> None:
    """Debian's /bin/ls, stripped: no function holds any address, so every one goes through the
    shared decode.  Every byte of the start of its .text: a batch of those one by one accepts
    places each on the same instruction; then, with a probe on every instruction boundary of
    that stretch (from a linear disassembly) registered as one batch, ``ls -l /usr`` prints
    what it prints natively, and the probes were hit."""
    ls = Path("/bin/ls")
    with ls.open("rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        start, code = text["sh_addr"], text.data()[:0x800]
    with kpsdk.open(f"elf:{ls}", sysroot="/") as one, kpsdk.open(f"elf:{ls}", sysroot="/") as s:
        at = one.target.mapped_files()[0].bias + start
        assert all(one.symbols.containing(at + i) is None for i in range(len(code)))
        good = [at + i for i in range(len(code)) if isinstance(_outcome(one, at + i), Decoded)]
        assert len(good) > len(code) // 2
        _batch_as_one_by_one(one, s, good)
    boundaries = [off for off, *_ in capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64).disasm_lite(code, 0)]
    native = subprocess.run([str(ls), "-l", "/usr"], capture_output=True, text=True, check=True).stdout
    with kpsdk.open(f"elf:{ls}", sysroot="/", args=["-l", "/usr"]) as s:
        at = s.target.mapped_files()[0].bias + start
        probes = [kpsdk.Kprobe(addr=at + off) for off in boundaries
                  if isinstance(_outcome(s, at + off), Decoded)]  # K1's refusals (syscall...) left out
        s.register_kprobes(probes)
        assert s.run(timeout=120) == 0
        assert s.console == native
        assert sum(p.hits for p in probes) > 0
