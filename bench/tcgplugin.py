"""The TCG plugin mechanism against gdb's breakpoints on Debian's kernels (amd64, ``--arch``: the others).

The guest boots Debian's kernel with a busybox initramfs whose workload is one busy phase:
``dd if=/dev/zero of=/dev/null bs=1 count=N`` (``--dd``, default 200,000), N ``read``
system calls, each through ``vfs_read``.  The guest times the phase itself (``/proc/uptime``
before and after, 10 ms resolution), so a row's phase time leaves out the boot's noise.
Rows, measured in interleaved rounds, each a boot from QEMU's start to the power-off:

- **QEMU 10 alone**: the same QEMU 10.0 binary the plugin path uses, no gdb, no plugin;
- **plugin, no probe**: ``kpsdk.open(..., mechanism="plugin")``, gdb attached, the plugin loaded;
- **plugin, counted**: a kprobe with no handler on ``vfs_read``, counted by the plugin alone;
- **plugin, pre_handler**: the same kprobe with an empty Python pre_handler (each hit's
  registers streamed to kpsdk and handed to the handler);
- **gdb, pre_handler**: hits per second of the same kprobe on the gdb path (the default
  mechanism), first hit to the ``--gdb-hits``-th; the whole boot would take hours.

Wall times on a shared, loaded machine swing by 2-4x between identical boots, so each row
also gives CPU seconds, which contention barely changes: QEMU's and gdb's (the children's
``getrusage``, once they are reaped) and kpsdk's own process (``time.process_time``, the
handlers included).  A plugin row's cost per hit is (its CPU seconds - the unprobed plugin
session's of the same round) / its hits; the mechanism's hits per second is the inverse
of the two costs added (QEMU's part runs in the vCPU thread, kpsdk's in Python).  The
load average is printed before and after.

``--ab N``: instead, N rounds of an A/B without gdb or kpsdk's run loop: QEMU 10 with the plugin
and an empty table, against the same with 19 hot kernel functions counted (about 1.2 million
hits from QEMU's start to the power-off of the default workload), QEMU's CPU seconds each:
the counted path's cost per hit, amplified.

``--arch ARCH``: the same rows on Debian's kernel of another arch (i386, arm, riscv64,
ppc64le: the kernels and busybox tests/test_kernel_arches.py boots, on the board kpsdk's
qemu-system target uses for it, with QEMU 10 of the same package); ``--ab`` is x86_64's only.

Run: ``python bench/tcgplugin.py [--arch ARCH] [--runs N] [--gdb-hits N] [--dd N] [--ab N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kpsdk
from kpsdk.fixtures import kernel
from kpsdk.targets.live.qemu10 import find_qemu

BUSY = "vfs_read"
TIMEOUT = 900.0
DD = 200_000
#: the kernel's arch (``--arch``)
ARCH = "x86_64"
_files: dict[tuple[str, int], tuple[Path, Path]] = {}


def workload(count: int) -> str:
    return f"""\
read a b < /proc/uptime
dd if=/dev/zero of=/dev/null bs=1 count={count} 2>/dev/null
read c d < /proc/uptime
echo "KPSDK dd start=$a end=$c"
"""


def files(count: int | None = None) -> tuple[Path, Path]:
    count = DD if count is None else count
    if (ARCH, count) not in _files:
        directory = Path(kernel.cache_root()) / "bench"
        directory.mkdir(parents=True, exist_ok=True)
        if ARCH == "x86_64":
            initrd = kernel.build_initramfs(directory / f"dd-{count}.cpio.gz", workload(count))
            _files[ARCH, count] = (kernel.fetch_kernel(), initrd)
        else:  # the arch's own busybox-static
            initrd = kernel.initramfs_for(ARCH, workload(count), out=directory / f"dd-{ARCH}-{count}.cpio.gz")
            _files[ARCH, count] = (kernel.fetch_arch_kernel(ARCH), initrd)
    return _files[ARCH, count]


def dd_seconds(console: str) -> float:
    (marker,) = [m for m in kernel.parse_markers(console) if m.action == "dd"]
    return float(marker.fields["end"]) - float(marker.fields["start"])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def qemu_alone() -> tuple[float, float, float, float]:
    from kpsdk.targets.live.qemu import with_console

    image, initrd = files()
    cpu = children_cpu()
    board = kpsdk.get_registry().arch(ARCH).qemu_system
    assert board is not None
    qemu = find_qemu(board.binary)
    extra = ["-audio", "none", *(["-L", str(qemu.datadir)] if qemu.datadir else [])]
    if ARCH == "x86_64":
        cmd = kernel.qemu_command(image, initrd, qemu=str(qemu.binary), extra=extra)
    else:  # the board, memory and console kpsdk's qemu-system target gives this arch
        cmd = kernel.qemu_command(image, initrd, with_console("nokaslr panic=-1 quiet", board.console),
                                  qemu=str(qemu.binary), memory=board.memory, extra=[*board.command(), *extra])
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0 or "KPSDK-POWEROFF" not in proc.stdout:
        raise RuntimeError(f"QEMU 10 alone did not power off:\n{proc.stdout[-1000:]}{proc.stderr[-1000:]}")
    return seconds, dd_seconds(proc.stdout), children_cpu() - cpu, 0.0


def plugin_boot(kind: str) -> tuple[float, float, float, float, int]:
    """Seconds from kpsdk.open to power-off on the plugin mechanism, the dd phase's seconds,
    QEMU's and gdb's CPU seconds, kpsdk's CPU seconds, and the probe's hits."""
    image, initrd = files()
    cpu, own = children_cpu(), time.process_time()
    start = time.monotonic()
    with kpsdk.open(f"qemu-system:{ARCH}", kernel=str(image), initrd=str(initrd), mechanism="plugin") as s:
        probe = None
        if kind == "counted":
            probe = kpsdk.Kprobe(symbol_name=BUSY)
        elif kind == "pre_handler":
            probe = kpsdk.Kprobe(symbol_name=BUSY, pre_handler=lambda p, regs: 0)
        if probe is not None:
            s.register_kprobe(probe)
        status = s.run(timeout=TIMEOUT)
        if probe is not None and probe.nmissed:
            print(f"  {kind}: {probe.nmissed} hits dropped by the full ring", flush=True)
        console = s.console
    seconds = time.monotonic() - start
    if status != 0:
        raise RuntimeError(f"plugin {kind}: the boot ended with {status!r}")
    return (seconds, dd_seconds(console), children_cpu() - cpu, time.process_time() - own,
            probe.hits if probe is not None else 0)


def gdb_rate(hits: int) -> float:
    """Hits per second of an empty pre_handler on the gdb path, first hit to the last."""
    image, initrd = files()
    times: list[float] = []
    with kpsdk.open(f"qemu-system:{ARCH}", kernel=str(image), initrd=str(initrd)) as s:
        def pre(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            times.append(time.perf_counter())
            if len(times) > hits:
                s.stop()
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name=BUSY, pre_handler=pre))
        s.run(timeout=TIMEOUT)
    if len(times) <= hits:
        raise RuntimeError(f"gdb path: only {len(times)} hits")
    return hits / (times[hits] - times[0])


#: busy kernel functions for ``--ab`` (Debian 12's amd64 kernel)
HOT = ("__kmalloc", "kfree", "_raw_spin_lock", "_raw_spin_lock_irqsave", "_raw_spin_unlock_irqrestore", "mutex_lock",
       "mutex_unlock", "memset", "memcpy", "kmem_cache_free", "__cond_resched", "strlen", "strcmp", "__rcu_read_lock",
       "__rcu_read_unlock", "kmem_cache_alloc", "up_read", "down_read", "kernfs_find_ns")


def counted_boot(functions: tuple[str, ...]) -> tuple[float, float, int]:
    """QEMU 10 + the plugin, no gdb: wall and CPU seconds of a default boot, and the hits counted."""
    import tempfile

    from kpsdk.kernel.kallsyms import load_kernel_symbols
    from kpsdk.targets.live.tcg.plugin import ProbeTable, build_plugin

    image = kernel.fetch_kernel()
    initrd = kernel.build_initramfs(Path(kernel.cache_root()) / "initramfs" / "kpsdk-default.cpio.gz")
    qemu = find_qemu("qemu-system-x86_64")
    symbols = load_kernel_symbols(image)
    with tempfile.TemporaryDirectory(prefix="kpsdk-ab-") as tmp:
        table = ProbeTable(Path(tmp) / "table", capacity=64, ring_size=1 << 16)
        for ident, name in enumerate(functions, 1):
            table.put(ident, symbols.get(name).address, (), (), stream=False)
        table.commit()
        cmd = kernel.qemu_command(image, initrd, qemu=str(qemu.binary), extra=[
            "-audio", "none", *(["-L", str(qemu.datadir)] if qemu.datadir else []),
            "-plugin", f"{build_plugin()},table={table.path},regs={Path(tmp) / 'regs'}"])
        cpu, start = children_cpu(), time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        seconds, cpu = time.monotonic() - start, children_cpu() - cpu
        if "KPSDK-POWEROFF" not in proc.stdout:
            raise RuntimeError(f"the A/B boot did not power off: {proc.stderr[-1000:]}")
        hits = sum(table.hits(ident) for ident in range(1, len(functions) + 1))
        table.close()
    return seconds, cpu, hits


def ab(rounds: int) -> int:
    print(f"load average before: {os.getloadavg()}", flush=True)
    costs = []
    for r in range(rounds):
        a = counted_boot(())
        b = counted_boot(HOT)
        costs.append((b[1] - a[1]) / b[2] * 1e9)
        print(f"round {r + 1}: empty table wall {a[0]:.1f} s CPU {a[1]:.2f} s | {len(HOT)} counted wall {b[0]:.1f} s "
              f"CPU {b[1]:.2f} s, {b[2]:,} hits -> {costs[-1]:.0f} ns of CPU per hit; load {os.getloadavg()[0]:.1f}",
              flush=True)
    print(f"load average after: {os.getloadavg()}; CPU per counted hit: {spread(costs, '{:.0f}')} ns")
    return 0


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main(argv: list[str] | None = None) -> int:
    global DD, ARCH
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="x86_64", choices=("x86_64", "i386", "arm", "riscv64", "ppc64le"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--gdb-hits", type=int, default=200)
    parser.add_argument("--dd", type=int, default=DD)
    parser.add_argument("--ab", type=int, default=0, metavar="N", help="the counted path's A/B, N rounds")
    args = parser.parse_args(argv)
    ARCH = args.arch
    if args.ab:
        if ARCH != "x86_64":
            parser.error("--ab boots x86_64's kernel only")
        return ab(args.ab)
    DD = args.dd
    print(f"{ARCH}; load average before: {os.getloadavg()}", flush=True)
    kinds = ("alone", "none", "counted", "pre_handler")
    cols = ("boot", "dd", "qemu_cpu", "kpsdk_cpu")
    m: dict[str, dict[str, list[float]]] = {k: {c: [] for c in cols} for k in kinds}
    hits: dict[str, list[int]] = {"counted": [], "pre_handler": []}
    cost: dict[str, dict[str, list[float]]] = {k: {"qemu": [], "kpsdk": []} for k in hits}
    gdb: list[float] = []
    for r in range(args.runs):
        for kind in kinds:
            if kind == "alone":
                values = qemu_alone()
            else:
                *values, n = plugin_boot(kind)  # type: ignore[assignment]
            for c, v in zip(cols, values, strict=True):
                m[kind][c].append(v)
            if kind in hits:
                hits[kind].append(n)
                cost[kind]["qemu"].append((m[kind]["qemu_cpu"][-1] - m["none"]["qemu_cpu"][-1]) / n)
                cost[kind]["kpsdk"].append((m[kind]["kpsdk_cpu"][-1] - m["none"]["kpsdk_cpu"][-1]) / n)
        gdb.append(gdb_rate(args.gdb_hits))
        print(f"round {r + 1}: " + "; ".join(f"{k} " + " ".join(f"{c}={m[k][c][-1]:.2f}" for c in cols) for k in kinds)
              + f"; hits={hits['counted'][-1]},{hits['pre_handler'][-1]} gdb={gdb[-1]:.0f}/s "
              f"load={os.getloadavg()[0]:.1f}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print()
    print("| row | boot s | dd phase s | QEMU+gdb CPU s | kpsdk CPU s | hits | CPU per hit: QEMU / kpsdk | hits/s |")
    print("|---|---|---|---|---|---|---|---|")
    labels = {"alone": "QEMU 10 alone", "none": "plugin, no probe", "counted": f"plugin, `{BUSY}` counted",
              "pre_handler": f"plugin, `{BUSY}` empty pre_handler"}
    for kind in kinds:
        cells = [spread(m[kind]["boot"]), spread(m[kind]["dd"], "{:.2f}"), spread(m[kind]["qemu_cpu"]),
                 spread(m[kind]["kpsdk_cpu"], "{:.2f}") if kind != "alone" else "-"]
        if kind in hits:
            q = [x * 1e6 for x in cost[kind]["qemu"]]
            k = [x * 1e6 for x in cost[kind]["kpsdk"]]
            total = statistics.median(cost[kind]["qemu"]) + statistics.median(cost[kind]["kpsdk"])
            cells += [f"{int(statistics.median(hits[kind])):,}",
                      f"{spread(q, '{:.2f}')} / {spread(k, '{:.2f}')} us",
                      f"{1 / total:,.0f}" if total > 0 else "below noise"]
        else:
            cells += ["-", "-", "-"]
        print(f"| {labels[kind]} | " + " | ".join(cells) + " |")
    print(f"| gdb, `{BUSY}` empty pre_handler | - | - | - | - | {args.gdb_hits} per round | - | "
          f"{spread(gdb, '{:.0f}')} |")
    for c in ("boot", "qemu_cpu"):
        ratio = statistics.median(m["counted"][c]) / statistics.median(m["none"][c])
        ratio_h = statistics.median(m["pre_handler"][c]) / statistics.median(m["none"][c])
        print(f"{c}: counted {ratio:.2f}x, pre_handler {ratio_h:.2f}x the unprobed plugin session")
    return 0


if __name__ == "__main__":
    sys.exit(main())
