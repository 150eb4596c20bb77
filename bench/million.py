#!/usr/bin/env python3
"""Issue 38's probe-count goals: a million kprobes registered in one session.

Usage: ``python bench/million.py [--counts 1,1000,100000,1000000] [--reps N] [--out FILE]``

For each count N, on a fresh blank ``unicorn:x86_64`` session: N - 1 kprobes on never-run
nops (no symbol, each address decoded on its own; past the 32 hook-path slots each writes a
trap and a booster slot) registered with one ``register_kprobes`` call, then the measured
probe on the ``inc`` of bench/workload.py's loop.  It reports

* registration CPU time per probe (goal <= 30 us);
* the process's resident memory growth per probe (``/proc/self/statm`` before and after the
  batch, goal <= 1 KB; the nops region itself is counted out);
* the per-hit cost of the measured probe (loop with the probe - the same loop unprobed, per
  hit, best of ``--reps``), against the same with one probe (goal <= 1.5x at 1M).

The sessions run one after the other (a million-probe session holds ~1 GB), each closed
before the next.  Called from ``bench/run.py`` (``--million``) or alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from workload import CODE, INC_OFF, NOPS, loop_code, per_hit_us  # noqa: E402

import kpsdk  # noqa: E402

HITS = 4_000


def rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _empty(p: Any, regs: Any) -> int:
    return 0


def measure(count: int, reps: int) -> dict[str, Any]:
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    twin = CODE + 0x100
    s.write_memory(CODE, loop_code(HITS))
    s.write_memory(twin, loop_code(HITS))
    nops = max(count - 1, 0)
    if nops:
        s.target.map(NOPS, nops + 0x1000, "rx")  # type: ignore[attr-defined]
        s.target.uc.mem_write(NOPS, b"\x90" * nops)  # type: ignore[attr-defined]
    probes = [kpsdk.Kprobe(addr=NOPS + i, pre_handler=_empty) for i in range(nops)]
    gc.collect()
    before = rss_kb()
    t0 = time.process_time()
    if probes:
        s.register_kprobes(probes)
    reg_s = time.process_time() - t0
    gc.collect()
    grew_kb = rss_kb() - before
    measured = kpsdk.Kprobe(addr=CODE + INC_OFF, pre_handler=_empty)
    s.register_kprobe(measured)
    probed, base = [], []
    for _ in range(reps):
        t = time.process_time()
        s.call(CODE)
        probed.append(time.process_time() - t)
        t = time.process_time()
        s.call(twin)
        base.append(time.process_time() - t)
    assert measured.hits == HITS * reps, measured.hits
    out = {"probes": count, "register_us": reg_s / max(nops, 1) * 1e6, "rss_kb_per_probe": grew_kb / max(nops, 1),
           "per_hit_us": per_hit_us(min(probed), min(base), HITS), "mechanism": measured_mechanism(s, measured)}
    # the breakpoint path (the optimization knob off for the measured point only: turning it off
    # re-arms every point): the measured probe is found by the interrupt hook's dict lookup among
    # all the others, as every one of them would be
    manager = s.target.manager  # type: ignore[attr-defined]
    manager._optimization = False
    point = manager.points[CODE + INC_OFF]
    s.target.sync_point(point, force=True)  # type: ignore[attr-defined]
    probed, base = [], []
    for _ in range(reps):
        t = time.process_time()
        s.call(CODE)
        probed.append(time.process_time() - t)
        t = time.process_time()
        s.call(twin)
        base.append(time.process_time() - t)
    out["bp_per_hit_us"] = per_hit_us(min(probed), min(base), HITS)
    out["bp_mechanism"] = measured_mechanism(s, measured)
    t0 = time.process_time()
    if probes:
        s.unregister_kprobes(probes)
    out["unregister_us"] = (time.process_time() - t0) / max(nops, 1) * 1e6
    s.close()
    del s, probes
    gc.collect()
    return out


def measured_mechanism(s: Any, probe: Any) -> str:
    point = s.target.manager.points.get(probe.addr)
    return "" if point is None else f"{point.mechanism}{' [OPTIMIZED]' if point.optimized else ''}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="1,1000,100000,1000000")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out")
    args = ap.parse_args()
    results = []
    for count in (int(c) for c in args.counts.split(",")):
        r = measure(count, args.reps)
        results.append(r)
        print(f"{count:>9,} probes: register {r['register_us']:.1f} us/probe, RSS {r['rss_kb_per_probe']:.2f} "
              f"KB/probe, hit {r['per_hit_us']:.2f} us ({r['mechanism']}); optimization off: hit "
              f"{r['bp_per_hit_us']:.2f} us ({r['bp_mechanism']}); unregister {r['unregister_us']:.1f} us/probe",
              file=sys.stderr, flush=True)
    one, bp_one = results[0]["per_hit_us"], results[0]["bp_per_hit_us"]
    for r in results:
        r["hit_vs_one"] = r["per_hit_us"] / one if one > 0 else None
        r["bp_hit_vs_one"] = r["bp_per_hit_us"] / bp_one if bp_one > 0 else None
    doc = {"date": time.strftime("%Y-%m-%d"), "load": os.getloadavg(), "results": results}
    print(json.dumps(doc))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
