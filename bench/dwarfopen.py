"""DWARF benchmark: opening a large debug file and answering ``perf probe -V`` for one function.

Each round runs in a fresh process (as ``kpsdk list -V`` would) and times:

- **cold**: an empty index store: read the file, scan ``.debug_info`` into the index
  (:mod:`kpsdk.binfmt.dwarf.scan`), save it, then answer ``-V FUNC``;
- **cached**: the index read back from the store (kpsdk's private cache, by build ID), then
  the same answer;

and, once, ``perf probe -x PROG -V FUNC`` itself for comparison.  The rounds alternate cold and
cached; the table gives each median and range, wall time on a shared machine.

Run: ``python bench/dwarfopen.py PROGRAM FUNCTION [--runs N]`` (the number in docs/dwarf.md:
SQLite's amalgamation with its shell, built ``gcc -O2 -g``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import sys, time
t0 = time.perf_counter()
from kpsdk.binfmt.dwarf import DebugInfo
from kpsdk.binfmt.dwarf.probepoints import format_variables
from kpsdk.cache import PrivateStore
t1 = time.perf_counter()
dbg = DebugInfo.open(sys.argv[1], store=PrivateStore("dwarf"))
dbg.index
t2 = time.perf_counter()
text = format_variables(dbg, sys.argv[2])
t3 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f} {t3 - t2:.3f} {len(text.splitlines())}")
"""


def run_once(program: str, function: str, cache: str) -> tuple[float, float, float]:
    env = dict(os.environ, KPSDK_CACHE=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, program, function], env=env, capture_output=True, text=True,
                         check=True, timeout=1800).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program")
    parser.add_argument("function")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = subprocess.run(["readelf", "-S", "-W", args.program], capture_output=True, text=True).stdout
    debug_bytes = sum(int(line.split()[5], 16) for line in sizes.splitlines()
                      if "] .debug_" in line and len(line.split()) > 5)
    cold, cached = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(run_once(args.program, args.function, cache))
            cached.append(run_once(args.program, args.function, cache))
    perf = shutil.which("perf")
    perf_time = None
    if perf:
        t = time.perf_counter()
        subprocess.run([perf, "probe", "-x", args.program, "-V", args.function], capture_output=True, check=False)
        perf_time = time.perf_counter() - t

    def row(name: str, samples: list[tuple[float, float, float]]) -> str:
        totals = [sum(s) for s in samples]
        opens = [s[1] for s in samples]
        answers = [s[2] for s in samples]
        return (f"| {name} | {statistics.median(opens):.2f} s | {statistics.median(answers):.2f} s | "
                f"{statistics.median(totals):.2f} s ({min(totals):.2f}-{max(totals):.2f}) |")

    print(f"{args.program}: {debug_bytes / 1e6:.1f} MB of DWARF sections; -V {args.function}, {args.runs} runs")
    print("| | open + index | answer -V | total (range) |")
    print("|---|---|---|---|")
    print(row("cold (index built)", cold))
    print(row("cached (index read)", cached))
    if perf_time is not None:
        print(f"| perf probe -V | | | {perf_time:.2f} s |")


if __name__ == "__main__":
    main()
