"""Register reads in handlers on Unicorn, against the official binding's ``uc.reg_read``.

``regs.arg(n)`` and the argument registers' properties read a per-hit snapshot
of the register arguments (one C call for all of them, kpsdk/targets/unicorn/fast.py):
these tests check that what a handler sees is the CPU's state at that moment,
on every Unicorn arch, read in any order, after its own writes, in the next
hit, in a return handler and after a run; the ground truth is the program's
own call arguments and ``uc.reg_read`` called in the same handler.
"""

from __future__ import annotations

from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures


def truth(s: kpsdk.Session, name: str) -> int:
    """The register as the official binding reads it, masked to its width."""
    reg = s.arch.register(name)
    return int(s.target.uc.reg_read(reg.uc)) & reg.mask


def test_arguments_and_registers_in_any_order_match_the_binding(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        names = s.arch.user_abi.args
        every = [r.name for r in s.arch.registers if r.name != s.arch.pc]
        seen: list[dict[str, Any]] = []

        def look(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
            got: dict[str, Any] = {"late": regs.arg(6), "first": regs.arg(1)}  # a stack one and a register one
            got["props"] = {n: getattr(regs, n) for n in reversed(every)}  # the arg registers among the rest
            got["items"] = {n: regs[n] for n in names}
            got["args"] = [regs.arg(i) for i in range(7)]
            got["truth"] = {n: truth(s, n) for n in every}
            seen.append(got)
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="sum7", pre_handler=look))
        s.call("sum7", 7, 6, 5, 4, 3, 2, 1)
        s.call("sum7", 70, 60, 50, 40, 30, 20, 10)  # the next hit reads its own arguments
        assert [h["args"] for h in seen] == [[7, 6, 5, 4, 3, 2, 1], [70, 60, 50, 40, 30, 20, 10]]
        for h, want in zip(seen, ([7, 6, 5, 4, 3, 2, 1], [70, 60, 50, 40, 30, 20, 10]), strict=True):
            assert (h["first"], h["late"]) == (want[1], want[6])
            assert h["props"] == h["truth"]
            assert [h["items"][n] for n in names[:7]] == want[:len(names)]  # riscv64/ppc64 have 8


def test_writes_are_seen_by_every_read_and_by_the_program(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        names = s.arch.user_abi.args
        seen: list[tuple[int, ...]] = []

        def rewrite(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
            if not names:  # i386 cdecl: no register arguments to write
                seen.append((regs.arg(0), regs.arg(1)))
                return 0
            first, second = names[0], names[1]
            before = (regs.arg(0), getattr(regs, second))
            regs[first] = 1000
            setattr(regs, second, 2000)
            seen.append((*before, regs.arg(0), regs.arg(1), getattr(regs, first), regs[second],
                         truth(s, first), truth(s, second)))
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=rewrite))
        result = s.call("add", 2, 3)
        if names:
            assert seen == [(2, 3, 1000, 2000, 1000, 2000, 1000, 2000)] and result == 3000
        else:
            assert seen == [(2, 3)] and result == 5


@pytest.mark.parametrize("detour", [True, False], ids=["detour", "hooked-entry"])
def test_return_handlers_and_reads_after_a_run_see_the_cpu(arch: str, detour: bool) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        if not detour:  # the entry on the hook path and the return through the trampoline
            s.target.detours.plan = lambda point: None
        names = s.arch.user_abi.args
        entry: list[int] = []
        back: list[tuple[int, ...]] = []

        def on_entry(ri: Any, regs: kpsdk.regs.PtRegs) -> int:
            entry.append(regs.arg(0))  # takes the snapshot at the entry
            return 0

        def on_return(ri: Any, regs: kpsdk.regs.PtRegs) -> None:
            back.append(tuple(getattr(regs, n) for n in names) + tuple(truth(s, n) for n in names))

        # sum7 reuses argument registers (x86_64: rsi holds d at the return), so a snapshot
        # kept from the entry would differ from the CPU there
        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="sum7", entry_handler=on_entry, handler=on_return))
        assert s.call("sum7", 7, 6, 5, 4, 3, 2, 1) == 7 + 12 + 15 + 16 + 15 + 12 + 7
        assert entry == [7]
        half = len(names)
        assert len(back) == 1 and back[0][:half] == back[0][half:]
        regs = s.regs()
        assert [getattr(regs, n) for n in names] == [truth(s, n) for n in names]
        assert [regs.arg(i) for i in range(len(names))] == [truth(s, n) for n in names]
        s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, r: entry.append(r.arg(0))))
        s.call("add", 5, 6)  # a hit inside the run reads the arguments; the run then moves on
        assert entry[-1] == 5
        assert [getattr(regs, n) for n in names] == [truth(s, n) for n in names]  # no s.regs() in between
        assert [regs.arg(i) for i in range(len(names))] == [truth(s, n) for n in names]
        depth: list[tuple[int, list[int]]] = []  # entries of one run: each reads its own call's argument
        s.register_kretprobe(kpsdk.Kretprobe(
            symbol_name="fact", handler=lambda ri, r: None,
            entry_handler=lambda ri, r: depth.append((r.arg(0), [truth(s, n) for n in names[:1]])) or 0))
        s.call("fact", 5)
        assert [a for a, _ in depth] == [5, 4, 3, 2, 1]
        assert all(want[:1] == [a][:len(want)] for a, want in depth)


def test_every_hit_of_one_run_reads_its_own_arguments(arch: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        first = s.arch.user_abi.args[:1]
        seen: list[tuple[int, list[int]]] = []

        def look(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
            seen.append((regs.arg(0), [getattr(regs, n) for n in first] + [truth(s, n) for n in first]))
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=look))
        assert s.run(timeout=10) == 0
        args = [a for a, _ in seen]
        assert len(args) > 2 and args == sorted(args, reverse=True) and len(set(args)) == len(args)
        assert all(pair[:len(first)] == pair[len(first):] == [a][:len(first)] for a, pair in seen)


@pytest.mark.parametrize("bad", [-1, -7, "0", 1.0, None])
def test_an_argument_number_that_is_not_one_is_refused(arch: str, bad: Any) -> None:
    """``regs.arg(-1)`` used to read the last register argument silently (a Python
    index), ``regs.arg("0")`` raised a bare TypeError: both are kpsdk's ArgumentError,
    which the run reports as the handler's error, and the handler's next read works."""
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        errors: list[Exception] = []
        good: list[int] = []

        def look(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
            try:
                regs.arg(bad)
            except kpsdk.ArgumentError as e:
                errors.append(e)
            good.append(regs.arg(0))
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="sum7", pre_handler=look))
        s.call("sum7", 7, 6, 5, 4, 3, 2, 1)
        assert good == [7]
        assert len(errors) == 1 and "argument number from 0" in str(errors[0])


def test_the_generic_argument_reader_refuses_the_same_numbers() -> None:
    """Targets without a fast reader (the plugin's snapshot, live targets) share
    ``_args_reader``: the same refusal, and register arguments still read."""
    from kpsdk.registry import get_registry
    from kpsdk.targets.live.tcg.target import SnapshotRegs

    arch = get_registry().arch("x86_64")
    io = SnapshotRegs(arch)
    io.cache.update({"rdi": 5, "rsi": 6, "rsp": 0x1000})
    regs = kpsdk.regs.PtRegs.create(arch, io, arch.abi("kernel"), lambda addr, n: bytes(n))
    assert (regs.arg(0), regs.arg(1)) == (5, 6)
    for bad in (-1, "0", 2.0):
        with pytest.raises(kpsdk.ArgumentError, match="argument number from 0"):
            regs.arg(bad)
