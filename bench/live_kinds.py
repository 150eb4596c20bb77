"""Where a live pre_handler hit's time goes: breakpoint kinds and the host's round trip.

``bench/live.py`` compares kpsdk with gdb's ``hbreak`` + ``commands`` loop.  This
bench splits the difference into what the breakpoint kind costs and what the
round trip to the host costs, with six loops over the same ``bench/spin``
binary, QEMU and gdb, taking turns in every round (rate = N / (T_N - T_0), as
in ``bench/live.py``):

- ``gdb hbreak`` / ``gdb break``: gdb's own ``commands; silent; continue; end``
  loop on a hardware / software breakpoint (``bench/live.py`` uses the first);
- ``floor hw`` / ``floor sw``: a ``gdb.Breakpoint`` of that kind whose ``stop()``
  returns False and asks nobody (kpsdk's path without the host);
- ``kpsdk hw`` / ``kpsdk sw``: a kprobe with an empty pre_handler, opened with
  ``hardware_breakpoints=True`` / False (x86 always uses hardware breakpoints:
  gdb's software ones there report the pc after the ``int3``).

kpsdk over the floor of the same kind is the price of the host round trip
(two cross-process wake-ups per hit: gdb's agent wakes the host, the host
wakes gdb); the floor over gdb's loop is what gdb's ``commands`` machinery
costs (per hit two more remote-protocol round trips, ``qfThreadInfo`` and
``qsThreadInfo``, on top of the same ``z``/``vCont;s``/``g``/``Z``/``vCont;c``).
docs/performance-history.md ("5b, measured") has the numbers and how the packets were
counted.  Not part of ``nox -s bench`` (about 90 s per arch and round).

Run: ``python bench/live_kinds.py [--arch A ...] [--rounds R] [--hits N] [--busy]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live  # noqa: E402  # bench/live.py, next to this file

import kpsdk  # noqa: E402

#: a gdb.Breakpoint of the given type that returns False at once (gdb script lines)
_FLOOR = ("python\nclass Floor(gdb.Breakpoint):\n    def stop(self):\n        return False\n"
          "Floor('*{inc}', type=gdb.%s, internal=True)\nend\n")


def run_kpsdk(arch: str, hits: int, hardware: bool = False) -> float:
    """Seconds for ``hits`` hits of an empty pre_handler on ``inc``, every hit counted."""
    start = time.perf_counter()
    with kpsdk.open(f"qemu-user:{live.spin(arch)}", hardware_breakpoints=hardware) as s:
        s.write_memory(s.symbols.get("iterations").address, hits.to_bytes(4, s.arch.endian))
        kp = kpsdk.Kprobe(symbol_name="inc", pre_handler=lambda p, r: 0)
        if hits:
            s.register_kprobe(kp)
        assert s.run(timeout=600) is not None
        assert kp.hits == hits, (kp.hits, hits)
    return time.perf_counter() - start


def _gdb(probe_lines: str) -> Callable[[str, int], float]:
    return lambda arch, hits: live._run_gdb_script(arch, hits, probe_lines)


LOOPS: dict[str, Callable[[str, int], float]] = {
    "gdb hbreak": _gdb("hbreak *{inc}\ncommands\nsilent\ncontinue\nend\n"),
    "gdb break": _gdb("break *{inc}\ncommands\nsilent\ncontinue\nend\n"),
    "floor hw": _gdb(_FLOOR % "BP_HARDWARE_BREAKPOINT"),
    "floor sw": _gdb(_FLOOR % "BP_BREAKPOINT"),
    "kpsdk hw": functools.partial(run_kpsdk, hardware=True),
    "kpsdk sw": functools.partial(run_kpsdk, hardware=False),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", action="append", choices=live.ARCHS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hits", type=int, default=1000)
    ap.add_argument("--busy", action="store_true", help="with one competing busy process")
    args = ap.parse_args(argv)
    for arch in args.arch or live.ARCHS:
        rates: dict[str, list[float]] = {name: [] for name in LOOPS}
        loads = []
        for _ in range(args.rounds):
            with live.busy_process() if args.busy else contextlib.nullcontext():
                for name, loop in LOOPS.items():
                    rates[name].append(live.rate(loop, arch, args.hits))
            loads.append(os.getloadavg()[0])
        med = {name: statistics.median(v) for name, v in rates.items()}
        for name, v in rates.items():
            print(f"{arch:8} {name:11} {med[name]:6.0f}/s ({min(v):.0f}-{max(v):.0f})")
        print(f"{arch:8} kpsdk sw / gdb hbreak {med['kpsdk sw'] / med['gdb hbreak']:.2f}x, "
              f"kpsdk sw / floor sw {med['kpsdk sw'] / med['floor sw']:.2f}x, "
              f"floor sw / gdb break {med['floor sw'] / med['gdb break']:.2f}x; "
              f"load {min(loads):.1f}-{max(loads):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
