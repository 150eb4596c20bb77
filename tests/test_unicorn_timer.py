"""A run's time limit kept by kpsdk's watchdog thread (kpsdk/targets/unicorn/timer.py), not by
Unicorn's timer, which wakes every 2 us and cost a busy program a third of its CPU."""

from __future__ import annotations

import time

import kpsdk
from kpsdk.targets.unicorn.timer import WATCHDOG, emu_start

CODE = 0x100000


def _spinning() -> kpsdk.Session:
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.write_memory(CODE, bytes.fromhex("ebfe"))  # jmp $
    return s


def test_a_spinning_run_stops_at_its_timeout_and_runs_on_after() -> None:
    s = _spinning()
    uc = s.target.uc  # type: ignore[attr-defined]
    stops = WATCHDOG.stops
    for limit in (0.2, 0.05):
        start = time.perf_counter()
        emu_start(uc, CODE, CODE + 0x100, int(limit * 1e6))
        took = time.perf_counter() - start
        assert limit <= took < limit + 2.0
    assert WATCHDOG.stops == stops + 2
    assert s.target.read_pc() == CODE  # type: ignore[attr-defined]


def test_a_run_that_ends_first_leaves_no_stop_for_the_next() -> None:
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.write_memory(CODE, bytes.fromhex("90" * 16))
    uc = s.target.uc  # type: ignore[attr-defined]
    for _ in range(200):  # each disarmed as it returns: none fires later
        emu_start(uc, CODE, CODE + 16, 50_000)
    stops = WATCHDOG.stops
    time.sleep(0.1)
    assert WATCHDOG.stops == stops
    assert not WATCHDOG._armed


def test_a_program_run_with_a_timeout_that_ends_first_exits() -> None:
    with kpsdk.open("elf:/bin/busybox", args=["true"]) as s:
        assert s.run(timeout=60) == 0


def test_a_huge_time_limit_leaves_the_next_ones_kept() -> None:
    """A limit of 1e20 s is more than one wait of the watchdog can be (OverflowError in its thread):
    the thread waited at most an hour at once since, and a dead one is started again; a later
    run's 0.2 s limit was never kept before (a test run hung on it)."""
    with _spinning() as s:
        uc = s.target.uc  # type: ignore[attr-defined]
        token = WATCHDOG.arm(uc, 1e20)
        time.sleep(0.2)  # the thread waits on it
        WATCHDOG.disarm(token)
        start = time.perf_counter()
        emu_start(uc, CODE, CODE + 0x100, int(0.2 * 1e6))
        assert 0.2 <= time.perf_counter() - start < 5
