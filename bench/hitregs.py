"""Register reads inside a hit, per arch: what a handler pays for ``regs.arg(n)`` and ``regs.<name>``.

Each fixture's ``loop(n)`` calls ``inc`` n times; a kprobe on ``inc`` runs one of
the handlers below and the cost per hit is the run's time minus the unprobed
run's (interleaved rounds, best taken, CPU time of this process: the machine is
shared).  Reads are what a real handler does, once per hit, so the per-hit
snapshot of the register arguments is taken at every hit here (a ``timeit``
of ``regs.arg(0)`` outside a hit measures the snapshot's reuse instead).

Public API only, so the same script measures another checkout (``PYTHONPATH``)::

    python bench/hitregs.py [--n 20000] [--reps 7] [--arch x86_64 ...]

prints one JSON object: per arch, us per hit for each handler, and the uprobe
and kprobe of an empty handler on x86_64's ``inc``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import per_hit_us, race  # noqa: E402

import kpsdk  # noqa: E402
from kpsdk.fixtures import path as fixture_path  # noqa: E402

ARCHES = ("x86_64", "i386", "arm", "thumb", "riscv64", "ppc64", "aarch64")


def handlers(s: Any) -> dict[str, Callable[[Any, Any], int]]:
    """The handlers compared, for this session's arch (argument registers by their names)."""
    names = s.arch.user_abi.args
    a0, a1 = (names[0], names[1]) if names else (s.arch.sp, s.arch.sp)  # i386: no register arguments
    sp = s.arch.sp

    def empty(p: Any, regs: Any) -> int:
        return 0

    def two_args(p: Any, regs: Any) -> int:
        regs.arg(0)
        regs.arg(1)
        return 0

    def one_arg(p: Any, regs: Any) -> int:
        regs.arg(0)
        return 0

    def two_names(p: Any, regs: Any) -> int:
        getattr(regs, a0)
        getattr(regs, a1)
        return 0

    def sp_name(p: Any, regs: Any) -> int:
        getattr(regs, sp)
        return 0

    out = {"empty": empty, "arg(0)": one_arg, "arg(0),arg(1)": two_args, "sp by name": sp_name}
    if names:
        out[f"{a0},{a1} by name (getattr)"] = two_names
    return out


class Probe:
    """A kprobe (or uprobe) on ``inc``, registered only around its own timed runs."""

    def __init__(self, s: Any, handler: Callable[[Any, Any], int], uprobe: str | None = None) -> None:
        self.s = s
        self.p = (kpsdk.Uprobe(spec=uprobe, pre_handler=handler) if uprobe
                  else kpsdk.Kprobe(symbol_name="inc", pre_handler=handler))

    def on(self) -> None:
        (self.s.register_uprobe if isinstance(self.p, kpsdk.Uprobe) else self.s.register_kprobe)(self.p)

    def off(self) -> None:
        (self.s.unregister_uprobe if isinstance(self.p, kpsdk.Uprobe) else self.s.unregister_kprobe)(self.p)


def bench_arch(arch: str, n: int, reps: int) -> dict[str, float]:
    s = kpsdk.open(f"elf:{fixture_path(arch)}")
    run = lambda: s.call("loop", n)  # noqa: E731
    probes = {name: Probe(s, h) for name, h in handlers(s).items()}
    configs: dict[str, Any] = {"base": (run, None, None)}
    configs.update({name: (run, p.on, p.off) for name, p in probes.items()})
    best = race(configs, reps, clock=time.process_time)
    s.close()
    return {name: round(per_hit_us(best[name], best["base"], n), 3) for name in probes}


def bench_uprobe(n: int, reps: int) -> dict[str, float]:
    prog = fixture_path("x86_64")
    s = kpsdk.open(f"elf:{prog}")
    run = lambda: s.call("loop", n)  # noqa: E731
    empty = handlers(s)["empty"]
    k, u = Probe(s, empty), Probe(s, empty, uprobe=f"{prog}:inc")
    best = race({"base": (run, None, None), "k": (run, k.on, k.off), "u": (run, u.on, u.off)}, reps,
                clock=time.process_time)
    s.close()
    kp, up = per_hit_us(best["k"], best["base"], n), per_hit_us(best["u"], best["base"], n)
    return {"kprobe_us": round(kp, 3), "uprobe_us": round(up, 3), "ratio": round(up / kp, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="hits per run")
    ap.add_argument("--reps", type=int, default=7, help="interleaved rounds (best taken)")
    ap.add_argument("--arch", action="append", choices=ARCHES, help="arches (default: all)")
    ap.add_argument("--no-uprobe", action="store_true", help="skip the uprobe/kprobe pair")
    args = ap.parse_args()
    out: dict[str, Any] = {"load": os.getloadavg()[0]}
    for arch in args.arch or ARCHES:
        out[arch] = bench_arch(arch, args.n, args.reps)
    if not args.no_uprobe:
        out["uprobe"] = bench_uprobe(args.n, args.reps)
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
