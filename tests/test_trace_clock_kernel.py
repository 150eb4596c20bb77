"""The trace's timestamps on the guest's own clock (kpsdk/kernel/guestclock.py), against the guest's ftrace.

Debian's riscv64 kernel under ``qemu-system:riscv64`` (the virt board, whose mtime counter
kpsdk reads at a physical address): the guest records its own ``do_sys_openat2`` calls with
its tracing (:func:`kpsdk.fixtures.kernel.traced_workload`; its trace clock is ``local``,
sched_clock) while kpsdk traces the same function from outside.  kpsdk's breakpoint stops
the machine before the guest's own probe runs, and after the guest's previous event: each
of kpsdk's timestamps must lie between the guest's stamps of the previous event and of the
same event.  A clock off by an offset larger than those gaps, or on the wrong scale, fails.

The other boards' counters are not readable through QEMU 7.2's gdbstub: there the header
says the timestamps are the host's (checked on i386, whose kernel boots fastest).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

KTRACE = re.compile(r"^KTRACE\s+(.+)-(\d+)\s+\[\d+\] \S+\s+(\d+\.\d+): (.*)$")


def _guest_opens(console: str) -> list[tuple[int, float]]:
    """(pid, seconds) of each do_sys_openat2 line of the guest's own trace, in order (a kprobe
    event ``open:`` or the function tracer's line, whichever the kernel took)."""
    out = []
    for line in console.splitlines():
        m = KTRACE.match(line)
        if m and (m[4].startswith("open: ") or m[4].startswith("do_sys_openat2 <-")):
            out.append((int(m[2]), float(m[3])))
    return out


def test_riscv64_timestamps_are_the_guests_sched_clock(arch_kernel: Callable[[str], Path],
                                                         arch_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel("riscv64"), arch_initramfs("riscv64", kernel.traced_workload())
    with kpsdk.open("qemu-system:riscv64", kernel=str(image), initrd=str(initrd)) as s:
        ours: list[tuple[int, float]] = []
        trace = s.trace(["p:kpsdk_open do_sys_openat2"], sink=lambda r: ours.append((r.pid, r.time)))
        assert "sched_clock" in trace.time_note and "mtime" in trace.time_note, trace.time_note
        assert s.run(timeout=600) == 0
        console = s.console
    guest = _guest_opens(console)
    assert len(guest) >= 3, console[-3000:]
    # the guest's opens are one run of ours (kpsdk traced the whole boot), by pid
    pids = [p for p, _ in ours]
    want = [p for p, _ in guest]
    starts = [i for i in range(len(ours) - len(guest) + 1) if pids[i:i + len(guest)] == want]
    assert len(starts) == 1, (guest, ours)
    matched = ours[starts[0]:starts[0] + len(guest)]
    previous = ours[starts[0] - 1][1] if starts[0] else 0.0
    gaps = []
    for (_, theirs), (_, mine), before in zip(guest, matched, [previous] + [t for _, t in guest[:-1]], strict=True):
        assert before <= mine <= theirs, (before, mine, theirs, guest, matched)
        gaps.append(theirs - mine)
    gaps.sort()
    print(f"guest - kpsdk per open: min {gaps[0] * 1e3:.3f} ms, median {gaps[len(gaps) // 2] * 1e3:.3f} ms, "
          f"max {gaps[-1] * 1e3:.3f} ms over {len(gaps)} opens")


def test_other_boards_say_the_host_clock(arch_kernel: Callable[[str], Path],
                                         arch_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel("i386"), arch_initramfs("i386", "true\n")
    with kpsdk.open("qemu-system:i386", kernel=str(image), initrd=str(initrd)) as s:
        times: list[float] = []
        trace = s.trace(["p:kpsdk_open do_sys_openat2"], sink=lambda r: times.append(r.time))
        assert "host's monotonic clock" in trace.time_note, trace.time_note
        assert s.run(timeout=600) == 0
    assert times and times == sorted(times)
