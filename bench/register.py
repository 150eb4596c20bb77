"""Bench row 5 (functions): registering kprobes inside functions, one by one and as a batch.

Row 5's registration figure puts 10,000 probes on never-run nops with no symbol,
where nothing is walked: each address is decoded on its own.  Real probes sit
inside functions, where K1 needs the instruction boundaries from the
function's start (``kpsdk/arch/decode.py``, which walks a function once and keeps
the walk).  This registers a kprobe at every instruction of every function
of a fixture, in address order, on a fresh session each round, one by one
and with ``register_kprobes``; the goal is issue 19's <= 30 us per probe.
It also registers 1, 100 and 10,000 kprobes on a region of never-run nops of a
blank ``unicorn:x86_64`` (no symbol, each address decoded on its own; past
the 32 hook-path slots every probe writes a trap and a booster slot), one by
one and as a batch: the per-probe cost at each count.
Called from ``bench/run.py``; the rows use its ``Row``.  ``python
bench/register.py [--quick]`` prints the numbers as JSON (A/B runs against
another kpsdk tree through ``PYTHONPATH``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import kpsdk
from kpsdk.fixtures import path as fixture_path

ARCHES = ("x86_64", "arm", "riscv64")
#: probe counts of the nops rows, and where the nops are
COUNTS = (1, 100, 10_000)
NOPS = 0x10000000


def _instructions(arch: str) -> list[int]:
    """Every instruction address of every function of the fixture (Thumb bit kept)."""
    with kpsdk.open(f"elf:{fixture_path(arch)}") as s:
        out = []
        for sym in s.symbols:
            if sym.kind != "func" or not sym.size or sym.name.startswith("_"):
                continue
            iset = s.target.iset_at(sym.address, sym)
            start = sym.address & ~1 if s.arch.has_thumb else sym.address
            at = start
            while at < start + sym.size:
                insn = s.target.decode_at(at, start, iset)
                if insn is None:
                    break
                out.append(at | (sym.address & 1 if s.arch.has_thumb else 0))
                at += insn.size
        return out


def _register(arch: str, addrs: list[int], batch: bool) -> tuple[float, int]:
    """CPU seconds to register a kprobe at each of ``addrs`` (those K1 refuses are skipped)."""
    with kpsdk.open(f"elf:{fixture_path(arch)}") as s:
        probes = [kpsdk.Kprobe(addr=a) for a in addrs]
        if batch:
            usable = []
            for p in probes:  # K1 refusals (kpsdk's blacklist...) known first: a batch is all or none
                try:
                    s.register_kprobe(p)
                    usable.append(p)
                except kpsdk.KprobeError:
                    pass
            s.unregister_kprobes(usable)
            probes = [kpsdk.Kprobe(addr=p.addr) for p in usable]
            t0 = time.process_time()
            s.register_kprobes(probes)
            return time.process_time() - t0, len(probes)
        n = 0
        t0 = time.process_time()
        for p in probes:
            try:
                s.register_kprobe(p)
                n += 1
            except kpsdk.KprobeError:
                pass
        return time.process_time() - t0, n


def bench_register(reps: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Per-probe registration cost (us, CPU time): median and range over ``reps`` rounds."""
    out: dict[str, Any] = {}
    for arch in ARCHES:
        addrs = _instructions(arch)
        log(f"registering a kprobe at each of the {len(addrs)} instructions of the {arch} fixture's functions")
        for batch in (False, True):
            per = []
            n = 0
            for _ in range(reps):
                t, n = _register(arch, addrs, batch)
                per.append(t / n * 1e6)
            out[f"{arch} {'batch' if batch else 'one by one'}"] = {
                "probes": n, "median_us": statistics.median(per), "min_us": min(per), "max_us": max(per)}
    return out


def _register_nops(count: int, batch: bool) -> float:
    """CPU seconds to register ``count`` kprobes on consecutive nops of a fresh blank session."""
    with kpsdk.open("unicorn:x86_64") as s:
        s.target.map(NOPS, max(count, 1) + 0x1000, "rx")
        s.target.uc.mem_write(NOPS, b"\x90" * count)
        probes = [kpsdk.Kprobe(addr=NOPS + i, pre_handler=_empty) for i in range(count)]
        t0 = time.process_time()
        if batch:
            s.register_kprobes(probes)
        else:
            for p in probes:
                s.register_kprobe(p)
        return time.process_time() - t0


def _empty(p: Any, regs: Any) -> int:
    return 0


def bench_register_nops(reps: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Per-probe registration cost (us, CPU time) at each of COUNTS, one by one and batch:
    median and range over ``reps`` rounds, the configurations interleaved per round."""
    log(f"registering 1, 100 and 10,000 kprobes on nops, one by one and batch, {reps} rounds")
    per: dict[str, list[float]] = {}
    for _ in range(reps):
        for count in COUNTS:
            for batch in (False, True):
                key = f"{count} {'batch' if batch else 'one by one'}"
                per.setdefault(key, []).append(_register_nops(count, batch) / count * 1e6)
    return {k: {"probes": int(k.split()[0]), "median_us": statistics.median(v), "min_us": min(v),
                "max_us": max(v)} for k, v in per.items()}


def rows(raw: dict[str, Any], row: Callable[..., Any], us: Callable[[float], str],
         status: Callable[[bool], str]) -> list[Any]:
    """Rows 5 for the table: ``row`` is bench/run.py's ``Row``."""
    out = []
    for label, r in raw.get("nops", {}).items():
        count, how = label.split(" ", 1)
        out.append(row("5", f"register {int(count):,} kprobes on never-run nops, {how} (CPU time per probe, median "
                       f"of rounds, range {us(r['min_us'])}-{us(r['max_us'])})", us(r["median_us"]), "", "",
                       "<= 30 us", status(r["median_us"] <= 30)))
    for label, r in raw.items():
        if label == "nops":
            continue
        out.append(row("5", f"register a kprobe at every instruction of the {label.split()[0]} fixture's functions, "
                       f"{label.split(' ', 1)[1]} ({r['probes']} probes; CPU time, median of rounds, range "
                       f"{us(r['min_us'])}-{us(r['max_us'])})", us(r["median_us"]), "", "", "<= 30 us",
                       status(r["median_us"] <= 30)))
    return out


def main() -> int:
    import json
    import os
    import sys

    reps = 3 if "--quick" in sys.argv else 7
    out = bench_register(reps, lambda m: print(m, file=sys.stderr))
    out["nops"] = bench_register_nops(reps, lambda m: print(m, file=sys.stderr))
    out["load"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
