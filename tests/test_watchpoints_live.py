"""Watchpoints on qemu-user through gdb: the six fixture programs, ppc64 included.

qemu-user's gdbstub has no hardware watchpoints, so data watchpoints are refused
with EOPNOTSUPP unless they ask for gdb's software ones.  Ground truth: the
arguments ``bump`` is called with (a kprobe, a gdb breakpoint) and the counter the
program prints when qemu-user runs it without kpsdk.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

import pytest

import kpsdk
from tests.test_live import LIVE_ARCHS, open_live, qemu_truth


@pytest.fixture(params=LIVE_ARCHS)
def live(request: pytest.FixtureRequest) -> Iterator[tuple[str, kpsdk.Session]]:
    s = open_live(str(request.param))
    yield str(request.param), s
    s.close()


def test_software_watchpoint_sees_every_write_to_counter(live: tuple[str, kpsdk.Session]) -> None:
    arch, s = live
    truth = qemu_truth(arch)
    args: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(symbol_name="bump", pre_handler=lambda p, r: args.append(r.arg(0))))
    seen: list[tuple[Any, int]] = []
    start = s.read_int(s.symbols.resolve("counter"), 4)
    wp = kpsdk.Watchpoint(symbol_name="counter", length=4, software=True,
                          handler=lambda w, regs, a: seen.append((a, s.read_int(a.addr, 4))))
    assert s.register_watchpoint(wp) == 0
    assert s.run(timeout=120) == 0
    expected, value = [], start
    for by in args:
        if by:  # gdb reports a write only when it changes the value
            expected.append((value, value + by))
        value += by
    assert [(a.old, a.new) for a, _ in seen] == expected  # every write, in order, nothing else
    assert value == truth["counter"]
    assert all(a.kind == "w" and a.new == in_memory and a.size == 4 for a, in_memory in seen)


def test_hardware_data_watchpoints_are_refused_and_execute_ones_work(live: tuple[str, kpsdk.Session]) -> None:
    arch, s = live

    def err(**kw: Any) -> int:
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4, **kw))
        return info.value.errno

    assert err(type="w") == errno.EOPNOTSUPP  # no Z2 in qemu-user's gdbstub
    assert err(type="rw", software=True) == errno.EOPNOTSUPP  # gdb's software watchpoints see writes only
    assert err(type="w", strict=False, software=True) == errno.EINVAL  # no rules to lift on a live target
    if "x" not in s.arch.watch.types:  # ppc64: no execute type in the DAWR
        assert err(type="x") == errno.EINVAL
        return
    calls: list[tuple[int, int]] = []
    add = s.symbols.resolve("add")
    s.register_watchpoint(kpsdk.Watchpoint(addr=add, type="x",
                                           handler=lambda w, r, a: calls.append((r.arg(0), r.arg(1)))))
    assert s.run(timeout=60) == 0
    assert calls == [(2, 3)]  # main's add(2, 3), before it ran: printed add=5
    assert s.console.splitlines()[0] == f"add={qemu_truth(arch)['add']}"
