"""A/B of kpsdk's live path between two source trees, next to gdb's own loop, interleaved.

Each tree is a checkout with its own virtualenv (``TREE/.venv/bin/python``, kpsdk installed
from that tree, e.g. ``git worktree add`` + ``pip install -e``).  Every round runs, each in
a fresh process: kpsdk's pre_handler loop of ``bench/live.py`` with tree A, the same with
tree B, gdb's ``commands`` loop and, with ``--floor``, gdb's Python breakpoint alone.  The
rate of each is :func:`live.rate` (N hits against 0, start-up subtracted).  Reported: the
medians with their range, the per-round B/A ratio, and the load average, since on a shared
machine the load moves every number; compare within a round, not across runs.

Run: ``python bench/live_ab.py --a /work/main --b . --arch ppc64 [--rounds 5] [--hits 1000]
[--busy] [--floor]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_rate(tree: Path, loop: str, arch: str, hits: int) -> float:
    """``live.rate(loop)`` in a fresh process of ``tree``'s virtualenv (``tree``'s bench too)."""
    code = (f"import sys; sys.path.insert(0, {str(tree / 'bench')!r}); import live as L; "
            f"loops = {{**L.LOOPS, 'floor': getattr(L, 'run_gdb_python', None)}}; "
            f"print(L.rate(loops[{loop!r}], {arch!r}, {hits}))")
    python = tree / ".venv" / "bin" / "python"
    out = subprocess.run([str(python), "-c", code], cwd=tree, capture_output=True, text=True, timeout=900,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: {loop} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.split()[-1])


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="tree A (the reference, e.g. main)")
    ap.add_argument("--b", type=Path, default=HERE.parent, help="tree B (default: this one)")
    ap.add_argument("--arch", default="x86_64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hits", type=int, default=1000)
    ap.add_argument("--busy", action="store_true", help="one competing busy process for the whole run")
    ap.add_argument("--floor", action="store_true", help="also gdb's Python breakpoint alone (tree B's bench)")
    args = ap.parse_args(argv)
    a, b = args.a.resolve(), args.b.resolve()
    loops = [("A", a, "kpsdk"), ("B", b, "kpsdk"), ("gdb", b, "gdb commands")]
    if args.floor:
        loops.append(("floor", b, "floor"))
    rates: dict[str, list[float]] = {name: [] for name, _, _ in loops}
    loads: list[float] = []
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for name, tree, loop in loops:
                rates[name].append(one_rate(tree, loop, args.arch, args.hits))
            print(f"round {r}: " + "  ".join(f"{n} {v[-1]:.0f}/s" for n, v in rates.items())
                  + f"  load {loads[-1]:.1f}", flush=True)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    print(f"{args.arch}, {args.hits} hits, {args.rounds} rounds{' next to a busy process' if args.busy else ''}, "
          f"load average {min(loads):.1f}-{max(loads):.1f}; A={a} B={b}")
    for name, values in rates.items():
        print(f"  {name:6} {_cell(values)} hits/s")
    rounds = range(args.rounds)
    print(f"  B/A per round {_ratio([rates['B'][i] / rates['A'][i] for i in rounds])}")
    for name in ("A", "B", *(("floor",) if args.floor else ())):
        print(f"  {name}/gdb per round {_ratio([rates[name][i] / rates['gdb'][i] for i in rounds])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
