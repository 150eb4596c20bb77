"""What following a program's libraries costs on qemu-user: stops per dlopen/dlclose, and time.

A program (built here with gcc) dlopen()s and dlclose()s a small library N times.  It runs
under kpsdk three ways, each timed from ``run()`` to the exit: with kpsdk's stop on the
loader's ``r_brk`` (the default), with that stop removed (no library tracking), and with a
uprobe on the library's function (armed at every dlopen, removed at every dlclose).

Run: ``python bench/dlopen.py [--cycles N]`` (needs gcc, qemu-user, gdb-multiarch).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kpsdk

PROGRAM = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int n = atoi(argv[2]);
    long total = 0;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(argv[1], RTLD_NOW);
        long (*f)(long) = (long (*)(long))dlsym(h, "twice");
        total += f(i);
        dlclose(h);
    }
    printf("%ld\n", total);
    return 0;
}
"""
LIBRARY = "long twice(long x) { return 2 * x; }\n"


def build(work: Path) -> tuple[Path, Path]:
    (work / "loop.c").write_text(PROGRAM)
    (work / "twice.c").write_text(LIBRARY)
    prog, lib = work / "loop", work / "libtwice.so"
    subprocess.run(["gcc", "-O1", "-o", str(prog), str(work / "loop.c"), "-ldl"], check=True)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(work / "twice.c")], check=True)
    return prog, lib


def timed(prog: Path, lib: Path, cycles: int, mode: str) -> tuple[float, int, int]:
    """Seconds of run(), r_brk stops, probe hits."""
    s = kpsdk.open(f"qemu-user:{prog}", args=[str(lib), str(cycles)])
    stops = [0]
    try:
        libs = s.target.libraries  # type: ignore[attr-defined]
        assert libs is not None and libs.brk is not None
        if mode == "untracked":
            del s.target._stop_hooks[libs.brk]  # type: ignore[attr-defined]
            s.target._remove_breakpoint(libs.brk)  # type: ignore[attr-defined]
        else:
            hook = s.target._stop_hooks[libs.brk]  # type: ignore[attr-defined]

            def counted() -> None:
                stops[0] += 1
                hook()

            s.target._stop_hooks[libs.brk] = counted  # type: ignore[attr-defined]
        up = kpsdk.Uprobe.parse(f"{lib}:twice") if mode == "uprobe" else None
        if up is not None:
            s.register_uprobe(up)
        start = time.perf_counter()
        status = s.run(timeout=600)
        elapsed = time.perf_counter() - start
        assert status == 0, s.console
        assert int(s.console.split()[0]) == cycles * (cycles - 1)
        return elapsed, stops[0], up.hits if up is not None else 0
    finally:
        s.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        prog, lib = build(Path(tmp))
        print(f"{args.cycles} dlopen/dlclose cycles under qemu-x86_64")
        base = None
        for mode in ("untracked", "tracked", "uprobe"):
            elapsed, stops, hits = timed(prog, lib, args.cycles, mode)
            base = base if base is not None else elapsed
            extra = (elapsed - base) / args.cycles * 1000
            print(f"  {mode:9}  {elapsed:6.2f} s  r_brk stops {stops:5}  ({stops / args.cycles:.1f} a cycle)  "
                  f"uprobe hits {hits:4}  +{extra:.2f} ms a cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
