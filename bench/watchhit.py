"""Bench row W (hits): the cost of a data watchpoint hit on Unicorn, next to its reference.

The reference is what the hardware-less limit looks like: a bare
``UC_HOOK_MEM_WRITE`` on a plain Unicorn running the same loop, recording
the access's address, size, old value (read from memory in the hook: the
store has not happened yet) and new value (issue 19 item 1b: goal <= 5x
that).  Both sides run the same bytes: ``n`` iterations of 2 loads + 2
stores + a store to the watched word.  Each configuration is timed against
the same loop with nothing watched, interleaved (``workload.race``), in CPU
time.

kpsdk is measured two ways:

- ``hit``: the watchpoint registered before each timed run and unregistered
  after it (the run's first hit learns the site: the slow path, once);
- ``steady``: one watchpoint registered for the whole race (every hit on the
  learned site), against an identical session with none.

Usage: ``python bench/watchhit.py [--quick] [--wall]`` prints the numbers as JSON
(``bench/run.py`` calls :func:`bench_watch_hits`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import unicorn  # noqa: E402
from workload import CODE, per_hit_us, race  # noqa: E402

import kpsdk  # noqa: E402

#: the loop's data page, and a watched word on it that the loop's other accesses never touch
WATCH_DATA = 0x500000
WATCH_WORD = WATCH_DATA + 0x100


def loop_asm(n: int, hit: bool) -> str:
    """n iterations of 2 loads + 2 stores (+ a store of ecx to the watched word when ``hit``)."""
    return (f"mov ecx, {n}; mov rbx, {WATCH_DATA:#x}; L: mov eax, dword ptr [rbx]; add eax, 1; "
            "mov dword ptr [rbx], eax; mov edx, dword ptr [rbx + 8]; mov dword ptr [rbx + 16], edx; "
            + (f"mov dword ptr [rbx + {WATCH_WORD - WATCH_DATA:#x}], ecx; " if hit else "")
            + "dec ecx; jnz L; ret")


def watch_loop_session(n: int, hit: bool = False) -> Any:
    """``unicorn:x86_64`` running the loop, ending in ``ret`` (``s.call(CODE)``)."""
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rx")
    s.target.map(WATCH_DATA, 0x1000, "rw")
    s.target.uc.mem_write(CODE, s.arch.assemble(loop_asm(n, hit), CODE))
    return s


def plain_loop(n: int, code: bytes) -> tuple[unicorn.Uc, Callable[[], None]]:
    """The same loop on a plain Unicorn (``code`` assembled by kpsdk's arch backend, without
    its final ``ret``: the run stops there)."""
    uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    uc.mem_map(CODE, 0x1000, unicorn.UC_PROT_READ | unicorn.UC_PROT_EXEC)
    uc.mem_map(WATCH_DATA, 0x1000, unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE)
    uc.mem_write(CODE, code)
    end = CODE + len(code) - 1  # the ret

    def run() -> None:
        uc.emu_start(CODE, end)

    return uc, run


class BareRecorder:
    """The reference: a ``UC_HOOK_MEM_WRITE`` bound to the watched word recording
    ``(address, size, old, new)`` per store, added before a run and deleted after it."""

    def __init__(self, uc: unicorn.Uc) -> None:
        self.uc = uc
        self.seen: list[tuple[int, int, int, int]] = []
        self.handle: int | None = None

    def on_write(self, uc: unicorn.Uc, access: int, addr: int, size: int, value: int, user: Any) -> None:
        old = int.from_bytes(uc.mem_read(addr, size), "little")
        self.seen.append((addr, size, old, value & ((1 << (8 * size)) - 1)))

    def on(self) -> None:
        self.handle = self.uc.hook_add(unicorn.UC_HOOK_MEM_WRITE, self.on_write, None, WATCH_WORD, WATCH_WORD + 3)
        self.uc.ctl_flush_tb()  # type: ignore[attr-defined]  # code translated before the hook never calls it

    def off(self) -> None:
        assert self.handle is not None
        self.uc.hook_del(self.handle)
        self.handle = None
        self.uc.ctl_flush_tb()  # type: ignore[attr-defined]


def bench_watch_hits(n: int, reps: int, log: Callable[[str], None] = print,
                     clock: Callable[[], float] = time.process_time) -> dict[str, Any]:
    """Per-hit cost (us) of a kpsdk watchpoint hit and of the bare recording hook, and how
    many hits each configuration saw (checked: every store of every run).  ``clock``: CPU
    time by default (on a loaded machine a kpsdk run, longer than a scheduler slice, is
    descheduled where the bare one is not: 64 us against 8.5 us at load 18), or wall
    time (``time.perf_counter``, ``--wall``)."""
    log(f"watchpoint hits: {n:,} per run, best of {reps}, kpsdk and a bare UC_HOOK_MEM_WRITE interleaved")
    h = watch_loop_session(n, hit=True)
    code = h.arch.assemble(loop_asm(n, True), CODE)
    uc, urun = plain_loop(n, code)
    bare = BareRecorder(uc)
    hwp = kpsdk.Watchpoint(addr=WATCH_WORD, length=4, type="w", handler=lambda wp, regs, a: None)
    steady, steady_base = watch_loop_session(n, hit=True), watch_loop_session(n, hit=True)
    swp = kpsdk.Watchpoint(addr=WATCH_WORD, length=4, type="w", handler=lambda wp, regs, a: None)
    steady.register_watchpoint(swp)
    hrun = lambda: h.call(CODE)  # noqa: E731
    best = race({
        "base": (hrun, None, None),
        "hit": (hrun, lambda: h.register_watchpoint(hwp), lambda: h.unregister_watchpoint(hwp)),
        "steady_base": (lambda: steady_base.call(CODE), None, None),
        "steady": (lambda: steady.call(CODE), None, None),
        "plain": (urun, None, None),
        "bare": (urun, bare.on, bare.off),
    }, reps, clock)
    # every configuration's hits, counted from outside the timing: all stores of every run
    if hwp.hits != n * reps or swp.hits != n * reps or len(bare.seen) != n * reps:
        raise SystemExit(f"hits: kpsdk {hwp.hits} / {swp.hits}, bare {len(bare.seen)}, expected {n * reps} each")
    if bare.seen[0][3] != n or bare.seen[1] != (WATCH_WORD, 4, n, n - 1):  # (the plain run left 1 there)
        raise SystemExit(f"the bare hook recorded {bare.seen[:2]}")
    out = {"hits_per_run": n, "reps": reps,
           "hit_us": per_hit_us(best["hit"], best["base"], n),
           "steady_us": per_hit_us(best["steady"], best["steady_base"], n),
           "bare_us": per_hit_us(best["bare"], best["plain"], n)}
    out["hit_ratio"] = out["hit_us"] / out["bare_us"]
    out["steady_ratio"] = out["steady_us"] / out["bare_us"]
    for s in (h, steady, steady_base):
        s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--wall", action="store_true", help="wall time (time.perf_counter) instead of CPU time")
    args = ap.parse_args()
    n = args.n or (1_000 if args.quick else 2_000)
    reps = args.reps or (9 if args.quick else 31)
    clock = time.perf_counter if args.wall else time.process_time
    out = bench_watch_hits(n, reps, lambda m: print(m, file=sys.stderr), clock)
    out["clock"] = "wall" if args.wall else "cpu"
    out["load"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
