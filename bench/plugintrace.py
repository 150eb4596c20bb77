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

Issue 38: the event's fetch program runs in the plugin at the hit (:mod:`kpsdk.targets.live.tcg.native`)
and its records reach kpsdk in batches.  Each round traces it on the plugin path four ways: run
natively or on the Python path (``kpsdk.trace.native.ENABLED = False``), each to a sink that keeps
the last record (a TraceRecord per record) and to a text writer on ``/dev/null`` (what ``kpsdk
trace`` writes).  ``--gdb-hits 0`` leaves the gdb path out.

Run: ``python bench/plugintrace.py [--rounds N] [--gdb-hits N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import tcgplugin
from tcgplugin import TIMEOUT, children_cpu, files, plugin_boot, spread

import kpsdk
from kpsdk.trace.events import TraceRecord

#: vfs_read(file, buf, count, pos) with the file's name, reached through struct file.f_path.dentry
#: (+24) and struct dentry.d_name.name (+40) on Debian 12's amd64 kernel
TRACE_DEF = "p:kpsdk/read vfs_read name=+0(+40(+24(%di))):string count=%dx:u64"


#: the traced configurations: (name, run natively, sink: "record" or "text")
CONFIGS = (("native-text", True, "text"), ("native-record", True, "record"), ("python-text", False, "text"),
           ("python-record", False, "record"))


def trace_boot(native: bool = True, sink_kind: str = "record") -> tuple[float, float, float, int, str]:
    """A plugin session tracing :data:`TRACE_DEF` to a sink that keeps the last record's text
    (``sink_kind`` "text": a text writer on /dev/null, the records counted by the trace): wall
    seconds, QEMU's and gdb's CPU seconds, kpsdk's, the records, the last one."""
    from kpsdk.trace import native as trace_native
    from kpsdk.trace.output import TextWriter, format_text

    trace_native.ENABLED = native
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

    with open(os.devnull, "w") as null, \
            kpsdk.open("qemu-system:x86_64", kernel=str(image), initrd=str(initrd), mechanism="plugin") as s:
        writer = TextWriter(null, prefix=True)
        trace = s.trace([TRACE_DEF], sink=writer.write if sink_kind == "text" else sink)
        status = s.run(timeout=TIMEOUT)
        writer.close()
        if sink_kind == "text":
            count[0] = trace.counts["read"]
            last.append(None)  # type: ignore[arg-type]
        ran_native = trace.native is not None and trace.native.is_native(trace.events[0])
    trace_native.ENABLED = True
    seconds = time.monotonic() - start
    if status != 0 or not last:
        raise RuntimeError(f"plugin trace: the boot ended with {status!r}, {count[0]} records")
    shown = format_text(last[0]) if last[0] is not None else "text"
    return seconds, children_cpu() - cpu, time.process_time() - own, count[0], f"{shown}; native={ran_native}"


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


def trace_ab(rounds: int, gdb_hits: int, names: list[str] | None = None) -> int:
    configs = [c for c in CONFIGS if names is None or c[0] in names]
    # imported before the first boot: with PYTHONDONTWRITEBYTECODE an import compiles the modules,
    # seconds of CPU the first traced boot would otherwise count as its records'
    import kpsdk.targets.live.tcg.native
    import kpsdk.trace.events
    import kpsdk.trace.nativetext  # noqa: F401
    print(f"load average before: {os.getloadavg()}; {TRACE_DEF}; dd {tcgplugin.DD:,} reads", flush=True)
    costs: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    kpsdk_costs: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    rates: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    gdb, loads = [], []
    for r in range(rounds):
        base = plugin_boot("none")
        print(f"round {r + 1}: unprobed wall {base[0]:.1f} s CPU {base[2]:.2f}+{base[3]:.2f} s", flush=True)
        for name, native, sink_kind in configs:
            wall, qemu_cpu, kpsdk_cpu, n, last = trace_boot(native, sink_kind)
            per_hit = ((qemu_cpu - base[2]) + (kpsdk_cpu - base[3])) / n
            costs[name].append(per_hit * 1e6)
            kpsdk_costs[name].append((kpsdk_cpu - base[3]) / n * 1e6)
            rates[name].append(1 / per_hit if per_hit > 0 else float("inf"))
            print(f"  {name}: wall {wall:.1f} s CPU {qemu_cpu:.2f}+{kpsdk_cpu:.2f} s, {n:,} records ({last}) -> "
                  f"{per_hit * 1e6:.2f} us CPU per record, {rates[name][-1]:,.0f}/s", flush=True)
        if gdb_hits:
            rate, gdb_last = gdb_trace_rate(gdb_hits)
            gdb.append(rate)
            print(f"  gdb {rate:.1f} records/s ({gdb_last})", flush=True)
        loads.append(os.getloadavg()[0])
        print(f"  load {loads[-1]:.1f}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    for name, _, _ in configs:
        print(f"{name}: {spread(costs[name], '{:.2f}')} us CPU per record (kpsdk's part "
              f"{spread(kpsdk_costs[name], '{:.2f}')} us), {spread(rates[name], '{:,.0f}')} records/s"
              + (f"; {statistics.median(rates[name]) / statistics.median(gdb):,.0f}x gdb's {spread(gdb)}/s"
                 if gdb else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gdb-hits", type=int, default=200)
    parser.add_argument("--dd", type=int, default=tcgplugin.DD, help="dd's one-byte reads (records per boot)")
    parser.add_argument("--configs", default=None,
                        help="which of " + ", ".join(c[0] for c in CONFIGS) + " (comma-separated)")
    args = parser.parse_args(argv)
    tcgplugin.DD = args.dd
    return trace_ab(args.rounds, args.gdb_hits, args.configs.split(",") if args.configs else None)


if __name__ == "__main__":
    sys.exit(main())
