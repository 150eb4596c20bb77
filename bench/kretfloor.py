"""The floor of a kretprobe with an entry_handler on Unicorn: what two calls into Python cost.

A detoured kretprobe's entry is guest code and its return one callback; an
entry_handler adds a second callback (the detour's resume hook).  This times,
in one process, every configuration interleaved, in CPU time (the machine is
shared): the unprobed call, a kprobe with an empty pre_handler, the detoured
kretprobe without an entry_handler, the same plus a raw code hook on the
resume instruction that does nothing or only calls the entry handler, and the
kretprobe with an entry_handler.  Not in ``bench/run.py`` (it is a study, not a
goal row); docs/performance-history.md ("Return probes with an entry handler:
the floor") has its numbers, and docs/performance.md ("Kretprobes", (a)) the
last run's.

    python bench/kretfloor.py --arch i386 --func inc --caller loop --rounds 7 --n 20000
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import kpsdk
from kpsdk.fixtures import path as fixture_path
from kpsdk.targets.unicorn import detour as ucdetour

CONFIGS = ("base", "kprobe", "kretprobe", "+empty callback", "+handler callback", "entry_handler")


def measure(arch: str, func: str, caller: str, rounds: int, n: int) -> dict[str, list[float]]:
    """Per-hit CPU us of each configuration (over the unprobed run of the same round), per round."""
    s = kpsdk.open(f"elf:{fixture_path(arch)}")
    t: Any = s.target
    seen = [0]

    def pre(p: Any, regs: Any) -> int:
        return 0

    def entry(ri: Any, regs: Any) -> int:
        seen[0] += 1
        return 0

    def ret(ri: Any, regs: Any) -> None:
        seen[0] += 1

    held: dict[str, Any] = {}

    def on(config: str) -> None:
        if config == "base":
            return
        if config == "kprobe":
            held["p"] = kpsdk.Kprobe(symbol_name=func, pre_handler=pre)
            s.register_kprobe(held["p"])
            return
        rp = kpsdk.Kretprobe(symbol_name=func, maxactive=64, handler=ret,
                             entry_handler=entry if config == "entry_handler" else None)
        s.register_kretprobe(rp)
        held["p"] = rp
        det = t.detours.by_addr.get(t.manager.point_of(rp).addr)
        if det is None or not det.original:
            raise SystemExit(f"{arch} {func}: not a detoured entry ({t.manager.point_of(rp).mechanism})")
        resume = det.block + ucdetour.RESUME_AT
        regs = t.hit_regs
        body: Callable[[int, int, int, int], None] | None = None
        if config == "+empty callback":
            def body(handle: int, addr: int, size: int, user: int) -> None:
                pass
        elif config == "+handler callback":
            def body(handle: int, addr: int, size: int, user: int) -> None:
                entry(None, regs)
        if body is not None:
            held["hook"] = t.hooks.code(body, resume, resume)

    def off(config: str) -> None:
        if config == "base":
            return
        if "hook" in held:
            t.hooks.delete(held.pop("hook"))
        p = held.pop("p")
        if config == "kprobe":
            s.unregister_kprobe(p)
        else:
            s.unregister_kretprobe(p)
        if p.hits != n or p.nmissed:
            raise SystemExit(f"{config}: {p.hits} hits, {p.nmissed} missed; expected {n}")

    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    s.call(caller, n)  # translations made before the first timed run
    gc.disable()
    try:
        for _ in range(rounds):
            for config in CONFIGS:
                on(config)
                t0 = time.process_time()
                s.call(caller, n)
                times[config].append(time.process_time() - t0)
                off(config)
    finally:
        gc.enable()
        s.close()
    return {c: [(x - b) / n * 1e6 for x, b in zip(times[c], times["base"], strict=True)]
            for c in CONFIGS if c != "base"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="i386")
    ap.add_argument("--func", default="inc", help="a function the detour planner accepts")
    ap.add_argument("--caller", default="loop", help="the fixture function that calls it n times")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--json", action="store_true", help="print the per-round numbers as JSON")
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    out = measure(a.arch, a.func, a.caller, a.rounds, a.n)
    if a.json:
        print(json.dumps({"load": load, "per_hit_us": out}))
        return
    print(f"{a.arch} {a.func}, {a.rounds} rounds of {a.caller}({a.n}), CPU time, load {' '.join(load)}")
    k = out["kprobe"]
    for config, v in out.items():
        ratio = statistics.median(x / y for x, y in zip(v, k, strict=True))
        print(f"  {config:18s} median {statistics.median(v):.2f} us ({min(v):.2f}-{max(v):.2f}), "
              f"per-round median {ratio:.2f}x the kprobe")


if __name__ == "__main__":
    main()
