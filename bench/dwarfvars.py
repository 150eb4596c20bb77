"""A hit reading three DWARF variables by name against one reading three registers by name.

A small C program (built here with gcc ``-O1 -g``, no libc) has ``loop(n)`` call ``account(a, by,
tag)`` n times; a kprobe on ``account`` runs one of the handlers below, and the cost per hit is
the run's time minus the unprobed run's (interleaved rounds, best taken, CPU time of this
process: the machine is shared), as bench/hitregs.py measures register reads:

- ``empty``: the hit alone;
- ``3 registers``: ``regs.rdi``, ``regs.rsi``, ``regs.rdx`` (the three arguments, by name);
- ``3 DWARF variables``: ``regs.var("by")``, ``regs.var("a->total")``, ``regs.var("tag")`` (a
  register, a member read through a pointer, a pointer), each a typed value.

The goal (issue 34): the DWARF hit costs at most twice the register hit.  Public API only::

    python bench/dwarfvars.py [--n 20000] [--reps 7]

prints one JSON object: us per hit for each handler, the ratio, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import per_hit_us, race  # noqa: E402

import kpsdk  # noqa: E402

SOURCE = r"""
struct acc { long total; int calls; };
__attribute__((noinline)) long account(struct acc *a, int by, const char *tag)
{
    a->total += by + tag[0];
    a->calls++;
    return a->total;
}
__attribute__((noinline)) long loop(long n)
{
    struct acc a = { 0, 0 };
    for (long i = 0; i < n; i++)
        account(&a, (int)i, "x");
    return a.total;
}
void _start(void)
{
    loop(3);
    __asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall");
}
"""


def build(work: Path) -> Path:
    (work / "acc.c").write_text(SOURCE)
    program = work / "acc"
    subprocess.run(["gcc", "-O1", "-g", "-static", "-nostdlib", "-fno-pie", "-no-pie", str(work / "acc.c"),
                    "-o", str(program)], check=True)
    return program


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="hits per run")
    ap.add_argument("--reps", type=int, default=7, help="interleaved rounds (best taken)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = kpsdk.open(f"elf:{build(Path(tmp))}")

        def empty(p: Any, regs: Any) -> int:
            return 0

        def registers(p: Any, regs: Any) -> int:
            regs.rdi  # noqa: B018 - the read is what is measured
            regs.rsi  # noqa: B018
            regs.rdx  # noqa: B018
            return 0

        def variables(p: Any, regs: Any) -> int:
            regs.var("by")
            regs.var("a->total")
            regs.var("tag")
            return 0

        run = lambda: s.call("loop", args.n)  # noqa: E731
        probes = {name: kpsdk.Kprobe(symbol_name="account", pre_handler=h)
                  for name, h in (("empty", empty), ("3 registers", registers), ("3 DWARF variables", variables))}
        configs: dict[str, Any] = {"base": (run, None, None)}
        configs.update({name: (run, lambda p=p: s.register_kprobe(p), lambda p=p: s.unregister_kprobe(p))
                        for name, p in probes.items()})
        load = os.getloadavg()[0]
        best = race(configs, args.reps, clock=time.process_time)
        s.close()
    out: dict[str, Any] = {name: round(per_hit_us(best[name], best["base"], args.n), 3) for name in probes}
    out["ratio"] = round(out["3 DWARF variables"] / out["3 registers"], 3)
    out["load"], out["load_after"] = load, os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
