"""Where a kernel hit's time goes: wall time, CPU time per process, QEMU's cache flushes.

An empty kprobe on a busy kernel function (the slab allocator's ``kmem_cache_alloc``),
``--rounds`` rounds of ``--hits`` hits after one warm-up round.  For each round:

- wall time per hit;
- CPU time per hit of QEMU, gdb and this Python process (``/proc/PID/stat``), which the
  host's load does not inflate, unlike the wall time;
- translation-cache flushes per hit: QEMU's own ``TB flush count`` (``monitor info jit``,
  QEMU's monitor through gdb).

With ``--trace FILE``, QEMU also writes its gdbstub trace events with timestamps there
(``-trace 'gdbstub_*' -msg timestamp=on -D FILE``), and the medians of each phase of a hit
are printed: the run from the resume to the next hit, the stop at the hit (gdb, the agent
and the handler at work), the step over the breakpoint, the stop after the step.

Run: ``python bench/kernelhit.py [--arch A] [--hits N] [--rounds N] [--accel X] [--trace FILE]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import kpsdk
import kpsdk.targets.live.qemu as qemu_launcher
from kpsdk.fixtures import kernel

#: the busy function, by its name in each kernel (6.12's slab allocator adds _noprof)
BUSY = ("kmem_cache_alloc", "kmem_cache_alloc_noprof")
TIMEOUT = 600.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (fields 14 and 15 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flush_count(s: kpsdk.Session) -> int:
    out = s.target._mi().console_command("monitor info jit")  # type: ignore[attr-defined]
    m = re.search(r"TB flush count\s+(\d+)", out)
    if m is None:
        raise RuntimeError(f"QEMU's info jit printed no flush count: {out[-500:]!r}")
    return int(m.group(1))


def phases(trace: Path) -> dict[str, list[float]]:
    """Seconds of each phase of a hit, from QEMU's gdbstub trace events."""
    out: dict[str, list[float]] = {"run to the hit": [], "stop at the hit": [], "step": [],
                                   "stop after the step": []}
    state, since = "", 0.0
    for line in trace.read_text(errors="replace").splitlines():
        m = re.match(r"\d+@(\d+\.\d+):gdbstub_(op_stepping|op_continue_cpu|hit_\w+)", line)
        if m is None:
            continue
        t, event = float(m.group(1)), m.group(2)
        if event == "op_stepping":
            if state == "hit":
                out["stop at the hit"].append(t - since)
            state = "stepping"
        elif event == "op_continue_cpu":
            if state == "stepped":
                out["stop after the step"].append(t - since)
            state = "running"
        else:
            if state == "stepping":
                out["step"].append(t - since)
            elif state == "running":
                out["run to the hit"].append(t - since)
            state = "stepped" if state == "stepping" else "hit"
        since = t
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="i386", choices=("x86_64", "i386", "arm", "ppc64le"))
    parser.add_argument("--hits", type=int, default=200, help="hits per round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--accel", default=qemu_launcher.TCG_ACCEL, help="QEMU -accel value")
    parser.add_argument("--trace", type=Path, help="QEMU's gdbstub trace goes here; phases are printed")
    args = parser.parse_args(argv)
    qemu_launcher.TCG_ACCEL = args.accel
    extra = ["-trace", "gdbstub_*", "-msg", "timestamp=on", "-D", str(args.trace)] if args.trace else []
    image, initrd = kernel.fetch_arch_kernel(args.arch), kernel.initramfs_for(args.arch)
    with kpsdk.open(f"qemu-system:{args.arch}", kernel=str(image), initrd=str(initrd), qemu_args=extra) as s:
        name = next(n for n in BUSY if n in s.symbols)
        pids = {"qemu": s.target.processes[0].pid, "gdb": s.target._mi().proc.pid,  # type: ignore[attr-defined]
                "python": os.getpid()}
        hits = [0]

        def hit(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            hits[0] += 1
            if hits[0] % args.hits == 0:
                s.stop()
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name=name, pre_handler=hit))
        s.run(timeout=TIMEOUT)  # warm-up: the boot up to the first round of hits
        for _ in range(args.rounds):
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            flushes, load, start = flush_count(s), os.getloadavg()[0], time.perf_counter()
            s.run(timeout=TIMEOUT)
            wall = time.perf_counter() - start
            used = {k: (cpu_seconds(p) - before[k]) / args.hits * 1e3 for k, p in pids.items()}
            print(f"{args.arch} {args.accel} `{name}`, load {load:.1f}: wall {wall / args.hits * 1e3:.2f} ms/hit, "
                  "CPU ms/hit " + " ".join(f"{k} {v:.2f}" for k, v in used.items())
                  + f", TB flushes/hit {(flush_count(s) - flushes) / args.hits:.2f}", flush=True)
    if args.trace:
        for phase, values in phases(args.trace).items():
            if values:
                print(f"{phase}: n={len(values)} median {statistics.median(values) * 1e3:.2f} ms, "
                      f"mean {statistics.mean(values) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
