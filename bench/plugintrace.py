"""A trace definition with a string fetch on Debian's amd64 kernel: the TCG plugin mechanism
against gdb's breakpoints (issue 19, item 6's trace-style goal: >= 100x).

The workload and the boots are :mod:`tcgplugin`'s (``dd if=/dev/zero of=/dev/null bs=1
count=200000``: 200,000 ``read`` system calls through ``vfs_read``).  Each round:

- **unprobed**: a plugin session with no probe (:func:`tcgplugin.plugin_boot`);
- **traced**: ``s.trace()`` with :data:`TRACE_DEF` on the plugin path (the string, reached by
  a dereference chain, ``file->f_path.dentry->d_name.name``: ``"zero"`` for dd's reads, and
  ``current``'s task read by the plugin at the hit, the record evaluated by kpsdk), to a sink
  that keeps the last record; its cost per record is the difference in QEMU's, gdb's and
  kpsdk's CPU seconds with the unprobed session, divided by the records;
- **gdb**: the same definition through gdb's breakpoints, records per second from the first
  record to the ``--gdb-hits``-th.

Run: ``python bench/plugintrace.py [--rounds N] [--gdb-hits N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from tcgplugin import TIMEOUT, children_cpu, files, plugin_boot, spread

import kpsdk
from kpsdk.trace.events import TraceRecord

#: vfs_read(file, buf, count, pos) with the file's name, reached through struct file.f_path.dentry
#: (+24) and struct dentry.d_name.name (+40) on Debian 12's amd64 kernel
TRACE_DEF = "p:kpsdk/read vfs_read name=+0(+40(+24(%di))):string count=%dx:u64"


def trace_boot() -> tuple[float, float, float, int, str]:
    """A plugin session tracing :data:`TRACE_DEF` to a sink that keeps the last record's text:
    wall seconds, QEMU's and gdb's CPU seconds, kpsdk's, the records, the last one."""
    from kpsdk.trace.output import format_text

    image, initrd = files()
    cpu, own = children_cpu(), time.process_time()
    start = time.monotonic()
    last: list[TraceRecord] = []
    count = [0]

    def sink(record: TraceRecord) -> None:
        count[0] += 1
        if not last:
            last.append(record)
        else:
            last[0] = record

    with kpsdk.open("qemu-system:x86_64", kernel=str(image), initrd=str(initrd), mechanism="plugin") as s:
        s.trace([TRACE_DEF], sink=sink)
        status = s.run(timeout=TIMEOUT)
    seconds = time.monotonic() - start
    if status != 0 or not last:
        raise RuntimeError(f"plugin trace: the boot ended with {status!r}, {count[0]} records")
    return seconds, children_cpu() - cpu, time.process_time() - own, count[0], format_text(last[0])


def gdb_trace_rate(hits: int) -> tuple[float, str]:
    """Records per second of :data:`TRACE_DEF` on the gdb path, first record to the last, and the last."""
    from kpsdk.trace.output import format_text

    image, initrd = files()
    times: list[float] = []
    text: list[str] = []
    with kpsdk.open("qemu-system:x86_64", kernel=str(image), initrd=str(initrd)) as s:
        def sink(record: TraceRecord) -> None:
            times.append(time.perf_counter())
            if len(times) > hits:
                text.append(format_text(record))
                s.stop()

        s.trace([TRACE_DEF], sink=sink)
        s.run(timeout=TIMEOUT)
    if len(times) <= hits:
        raise RuntimeError(f"gdb trace: only {len(times)} records")
    return hits / (times[hits] - times[0]), text[0]


def trace_ab(rounds: int, gdb_hits: int) -> int:
    print(f"load average before: {os.getloadavg()}; {TRACE_DEF}", flush=True)
    costs, rates, gdb, loads = [], [], [], []
    for r in range(rounds):
        base = plugin_boot("none")
        wall, qemu_cpu, kpsdk_cpu, n, last = trace_boot()
        per_hit = ((qemu_cpu - base[2]) + (kpsdk_cpu - base[3])) / n
        costs.append(per_hit * 1e6)
        rates.append(1 / per_hit if per_hit > 0 else float("inf"))
        rate, gdb_last = gdb_trace_rate(gdb_hits)
        gdb.append(rate)
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}: unprobed wall {base[0]:.1f} s CPU {base[2]:.2f}+{base[3]:.2f} s | "
              f"traced wall {wall:.1f} s "
              f"CPU {qemu_cpu:.2f}+{kpsdk_cpu:.2f} s, {n:,} records ({last}) -> {per_hit * 1e6:.2f} us CPU per record, "
              f"{rates[-1]:,.0f}/s | gdb {rate:.1f} records/s ({gdb_last}); load {loads[-1]:.1f}", flush=True)
    ratio = statistics.median(rates) / statistics.median(gdb)
    print(f"load average after: {os.getloadavg()}; plugin: {spread(costs, '{:.2f}')} us CPU per record, "
          f"{spread(rates, '{:,.0f}')} records/s; gdb: {spread(gdb)} records/s; {ratio:,.0f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gdb-hits", type=int, default=200)
    args = parser.parse_args(argv)
    return trace_ab(args.rounds, args.gdb_hits)


if __name__ == "__main__":
    sys.exit(main())
