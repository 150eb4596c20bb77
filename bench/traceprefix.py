"""What the kernel trace line's prefix and guest clock cost at a hit, per architecture.

For each arch, one boot of Debian's kernel (``python -m kpsdk.fixtures.kernel --arch ARCH``)
with a kprobe on a busy function (``vfs_read``).  At each of ``--hits`` hits its
pre_handler times (``time.perf_counter``) the calls a trace event makes for its prefix,
and counts their requests to gdb's agent (each a round trip):

- ``target.task_info()``: current's comm, pid and flags read through the gdbstub (on
  i386, arm and ppc64le the first call also reads dump_stack_print_info's code: reported
  apart);
- ``target.clock_ns()``, where the board has a counter kpsdk reads (riscv64: mtime and
  the kernel's ``cd``).

The table gives the median and the 10th-90th percentile range of each, in microseconds of
wall time, and the host's load average before and after: every number here is gdbstub
round trips on a shared machine.

Run: ``python bench/traceprefix.py [--arch A ...] [--hits N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import kpsdk
from kpsdk.fixtures import kernel

ARCHS = ("i386", "arm", "ppc64le", "riscv64")
#: a function every arch's boot calls often (the shell and init read their scripts)
BUSY = ("vfs_read",)


def measure(arch: str, hits: int) -> dict[str, object]:
    image, initrd = kernel.fetch_arch_kernel(arch), kernel.initramfs_for(arch)
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        target = s.target
        tasks_note = target.prepare_tasks()
        clock_note = target.prepare_clock()
        task_us: list[float] = []
        clock_us: list[float] = []
        first: list[float] = []
        seen: list[tuple[str, int]] = []

        requests = [0]
        ask = target.link.request

        def counted(line: str) -> str:
            requests[0] += 1
            return ask(line)

        target.link.request = counted  # type: ignore[method-assign]
        per_call: list[int] = []

        def on_hit(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            before = requests[0]
            t0 = time.perf_counter()
            info = target.task_info()
            t1 = time.perf_counter()
            (first if not first else task_us).append((t1 - t0) * 1e6)
            per_call.append(requests[0] - before)
            if info is not None:
                seen.append((info.comm, info.pid))
            if clock_note:
                t2 = time.perf_counter()
                target.clock_ns()
                clock_us.append((time.perf_counter() - t2) * 1e6)
            if len(task_us) >= hits:
                s.stop()
            return 0

        busy = next(name for name in BUSY if name in s.symbols)
        s.register_kprobe(kpsdk.Kprobe(symbol_name=busy, pre_handler=on_hit))
        s.run(timeout=900)
    return {"arch": arch, "tasks": tasks_note, "clock": clock_note or "host", "first_us": first[0] if first else None,
            "task_us": task_us, "clock_us": clock_us, "tasks_seen": len(set(seen)),
            "requests": statistics.median(per_call[1:]) if len(per_call) > 1 else None}


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [values[0]] * 9
    return f"{statistics.median(values):.0f} ({q[0]:.0f}-{q[-1]:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", choices=ARCHS)
    parser.add_argument("--hits", type=int, default=200)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    print("| arch | task_info() us, median (p10-p90) | its requests to gdb's agent (median) "
          "| first call (reads the code) us | clock_ns() us | tasks seen |")
    print("|---|---|---|---|---|---|")
    for arch in args.arch or ARCHS:
        r = measure(arch, args.hits)
        first = r["first_us"]
        print(f"| {arch} | {summary(r['task_us'])} | {r['requests']} | {first:.0f} | {summary(r['clock_us'])} | "
              f"{r['tasks_seen']} |" if isinstance(first, float) else f"| {arch} | - | - | - | - | - |", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
