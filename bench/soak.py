#!/usr/bin/env python3
"""kpsdk soak: long runs, memory that must stay flat.

Usage: ``python bench/soak.py [--hits N] [--returns N] [--cycles N] [--out FILE]``
(``nox -s soak``; not a timed test).

Three measurements, each reporting the resident set size (RSS) sampled ten
times along the way:

* **kprobe hits**: ``--hits`` (default 1,000,000) hits of a kprobe on the
  bench's x86_64 loop (``bench/workload.py``), in runs of 100,000;
* **kretprobe returns**: ``--returns`` (default 200,000) returns of a
  kretprobe on the fixture's ``inc`` called by ``loop``, once where its entry
  is detoured (riscv64) and once on the hook path (x86_64, too short for a
  detour);
* **register + hit + unregister cycles**: ``--cycles`` (default 20,000)
  kprobes registered on the loop's ``inc``, hit once and unregistered, on the
  hook path and on the breakpoint path, and next to each what it asks of
  Unicorn done with no kpsdk (a code hook added, a run, the hook deleted; the
  code rewritten, a run, written back): growth per cycle for both.

Growth is the RSS after the last sample minus the RSS after the first
(warm-up excluded), so allocations that stay for good show and one-time
caches do not.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import unicorn  # noqa: E402
from workload import CODE, END_OFF, INC_OFF, loop_code  # noqa: E402

import kpsdk  # noqa: E402
from kpsdk.fixtures import path as fixture_path  # noqa: E402

SAMPLES = 10


def rss_kib() -> int:
    """The process's resident set size now (``VmRSS`` of /proc/self/status), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def sampled(total: int, step: Callable[[int], None]) -> list[int]:
    """Run ``step(n)`` until ``total`` units are done, in SAMPLES + 1 parts (the first
    a warm-up); the RSS after each part."""
    part = max(1, total // SAMPLES)
    step(part)  # warm-up: caches, translations, first allocations
    gc.collect()
    out = [rss_kib()]
    for _ in range(SAMPLES):
        step(part)
        gc.collect()
        out.append(rss_kib())
    return out


def kprobe_hits(total: int) -> list[int]:
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    hits = [0]

    def pre(p: object, regs: object) -> int:
        hits[0] += 1
        return 0

    per_run = min(100_000, max(1, total // SAMPLES))
    s.target.write_memory(CODE, loop_code(per_run))  # type: ignore[attr-defined]
    s.register_kprobe(kpsdk.Kprobe(addr=CODE + INC_OFF, pre_handler=pre))

    def step(n: int) -> None:
        for _ in range(max(1, n // per_run)):
            s.call(CODE)

    rss = sampled(total, step)
    assert hits[0] >= total, hits
    return rss


def kretprobe_returns(arch: str, total: int) -> tuple[list[int], str]:
    s = kpsdk.open(f"elf:{fixture_path(arch)}")
    returns = [0]

    def on_return(ri: object, regs: object) -> None:
        returns[0] += 1

    s.register_kretprobe(kpsdk.Kretprobe(symbol_name="inc", handler=on_return))
    mechanism = s.target.manager.points[s.symbols.resolve("inc")].mechanism
    per_call = 10_000

    def step(n: int) -> None:
        for _ in range(max(1, n // per_call)):
            s.call("loop", per_call)

    rss = sampled(total, step)
    assert returns[0] >= total, returns
    return rss, str(mechanism)


def kpsdk_cycles(total: int, optimization: bool) -> list[int]:
    """Register, hit once, unregister: on the hook path (optimization on) or the
    breakpoint path (a trap written into the code and taken out again)."""
    s = kpsdk.open("unicorn:x86_64")
    s.kprobes_optimization = optimization
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.write_memory(CODE, loop_code(1))  # type: ignore[attr-defined]

    def step(n: int) -> None:
        for _ in range(n):
            kp = kpsdk.Kprobe(addr=CODE + INC_OFF, pre_handler=lambda p, regs: 0)
            s.register_kprobe(kp)
            s.call(CODE)
            assert kp.hits == 1
            s.unregister_kprobe(kp)

    return sampled(total, step)


def unicorn_cycles(total: int, hook: bool) -> list[int]:
    """What the two kpsdk cycles ask of Unicorn, with no kpsdk: a code hook added,
    one run, the hook deleted; or the code rewritten, one run, written back."""
    uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    uc.mem_map(CODE, 0x1000)
    uc.mem_map(0x7FF00000, 0x10000)
    code = loop_code(1)
    uc.mem_write(CODE, code)
    hits = [0]

    def on_code(uc: unicorn.Uc, addr: int, size: int, user: object) -> None:
        hits[0] += 1

    def run() -> None:
        uc.reg_write(unicorn.x86_const.UC_X86_REG_RSP, 0x7FF08000)
        uc.emu_start(CODE, CODE + END_OFF)
        hits[0] += not hook

    def step(n: int) -> None:
        for _ in range(n):
            if hook:
                handle = uc.hook_add(unicorn.UC_HOOK_CODE, on_code, begin=CODE + INC_OFF, end=CODE + INC_OFF)
                uc.ctl_remove_cache(CODE + INC_OFF, CODE + INC_OFF + 1)
                run()
                uc.hook_del(handle)
            else:
                uc.mem_write(CODE + INC_OFF, b"\x0f\x1f\x00")  # a 3-byte nop over the probed lea
                run()
                uc.mem_write(CODE + INC_OFF, code[INC_OFF:INC_OFF + 3])

    rss = sampled(total, step)
    assert hits[0] >= total, hits
    return rss


def growth(rss: list[int]) -> int:
    return rss[-1] - rss[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=1_000_000)
    parser.add_argument("--returns", type=int, default=200_000)
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = parser.parse_args()
    ctypes.CDLL(None)  # no-op: keeps libc loaded the same way in every measurement
    rows: list[tuple[str, list[int], str]] = []
    print(f"kprobe hits ({args.hits:,}) ...", file=sys.stderr, flush=True)
    rows.append((f"kprobe hits, {args.hits:,}", kprobe_hits(args.hits), ""))
    for arch in ("riscv64", "x86_64"):
        print(f"kretprobe returns on {arch} ({args.returns:,}) ...", file=sys.stderr, flush=True)
        rss, mechanism = kretprobe_returns(arch, args.returns)
        rows.append((f"kretprobe returns, {args.returns:,} ({arch} inc, {mechanism})", rss, ""))
    print(f"register + hit + unregister ({args.cycles:,} each) ...", file=sys.stderr, flush=True)
    per = lambda rss: f"{growth(rss) * 1024 / (args.cycles * SAMPLES / (SAMPLES + 1)):.0f} B/cycle"  # noqa: E731
    for optimization, path, bare in ((True, "hook path", "hook_add + run + hook_del"),
                                     (False, "breakpoint path", "code write + run + write back")):
        mine, theirs = kpsdk_cycles(args.cycles, optimization), unicorn_cycles(args.cycles, optimization)
        rows.append((f"kpsdk register + hit + unregister ({path}), {args.cycles:,} cycles", mine, per(mine)))
        rows.append((f"bare Unicorn {bare}, {args.cycles:,} cycles", theirs, per(theirs)))
    lines = ["| soak | RSS after warm-up | RSS at the end | growth | per cycle |", "|---|---|---|---|---|"]
    for name, rss, note in rows:
        lines.append(f"| {name} | {rss[0] / 1024:.1f} MiB | {rss[-1] / 1024:.1f} MiB | "
                     f"{growth(rss):+d} KiB | {note} |")
    table = "\n".join(lines)
    print(table)
    for name, rss, _ in rows:
        print(f"  {name}: " + " ".join(f"{r}" for r in rss) + " KiB")
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
