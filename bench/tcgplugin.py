"""The TCG plugin mechanism against gdb's breakpoints on Debian's amd64 kernel.

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

A plugin row's cost per hit is (its dd phase - the unprobed plugin session's dd phase of
the same round) / its hits.  The load average is printed before and after: every number is
wall time under TCG on a shared machine.

Run: ``python bench/tcgplugin.py [--runs N] [--gdb-hits N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kpsdk
from kpsdk.fixtures import kernel
from kpsdk.targets.qemu10 import find_qemu

BUSY = "vfs_read"
TIMEOUT = 900.0
DD = 200_000
_files: dict[int, tuple[Path, Path]] = {}


def workload(count: int) -> str:
    return f"""\
read a b < /proc/uptime
dd if=/dev/zero of=/dev/null bs=1 count={count} 2>/dev/null
read c d < /proc/uptime
echo "KPSDK dd start=$a end=$c"
"""


def files(count: int = DD) -> tuple[Path, Path]:
    if count not in _files:
        directory = Path(kernel.cache_root()) / "bench"
        directory.mkdir(parents=True, exist_ok=True)
        initrd = kernel.build_initramfs(directory / f"dd-{count}.cpio.gz", workload(count))
        _files[count] = (kernel.fetch_kernel(), initrd)
    return _files[count]


def dd_seconds(console: str) -> float:
    (marker,) = [m for m in kernel.parse_markers(console) if m.action == "dd"]
    return float(marker.fields["end"]) - float(marker.fields["start"])


def qemu_alone() -> tuple[float, float]:
    image, initrd = files()
    qemu = find_qemu("qemu-system-x86_64")
    cmd = kernel.qemu_command(image, initrd, qemu=str(qemu.binary),
                              extra=["-audio", "none", *(["-L", str(qemu.datadir)] if qemu.datadir else [])])
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0 or "KPSDK-POWEROFF" not in proc.stdout:
        raise RuntimeError(f"QEMU 10 alone did not power off:\n{proc.stdout[-1000:]}{proc.stderr[-1000:]}")
    return seconds, dd_seconds(proc.stdout)


def plugin_boot(kind: str) -> tuple[float, float, int]:
    """Seconds from kpsdk.open to power-off on the plugin mechanism, the dd phase's seconds,
    and the probe's hits."""
    image, initrd = files()
    start = time.monotonic()
    with kpsdk.open("qemu-system:x86_64", kernel=str(image), initrd=str(initrd), mechanism="plugin") as s:
        probe = None
        if kind == "counted":
            probe = kpsdk.Kprobe(symbol_name=BUSY)
        elif kind == "pre_handler":
            probe = kpsdk.Kprobe(symbol_name=BUSY, pre_handler=lambda p, regs: 0)
        if probe is not None:
            s.register_kprobe(probe)
        status = s.run(timeout=TIMEOUT)
        if probe is not None and probe.nmissed:
            raise RuntimeError(f"{kind}: {probe.nmissed} hits dropped by the full ring")
        console = s.console
    seconds = time.monotonic() - start
    if status != 0:
        raise RuntimeError(f"plugin {kind}: the boot ended with {status!r}")
    return seconds, dd_seconds(console), probe.hits if probe is not None else 0


def gdb_rate(hits: int) -> float:
    """Hits per second of an empty pre_handler on the gdb path, first hit to the last."""
    image, initrd = files()
    times: list[float] = []
    with kpsdk.open("qemu-system:x86_64", kernel=str(image), initrd=str(initrd)) as s:
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


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main(argv: list[str] | None = None) -> int:
    global DD
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--gdb-hits", type=int, default=200)
    parser.add_argument("--dd", type=int, default=DD)
    args = parser.parse_args(argv)
    DD = args.dd
    print(f"load average before: {os.getloadavg()}", flush=True)
    kinds = ("alone", "none", "counted", "pre_handler")
    boot: dict[str, list[float]] = {k: [] for k in kinds}
    phase: dict[str, list[float]] = {k: [] for k in kinds}
    hits: dict[str, list[int]] = {"counted": [], "pre_handler": []}
    per_hit: dict[str, list[float]] = {"counted": [], "pre_handler": []}
    gdb: list[float] = []
    for r in range(args.runs):
        b, d = qemu_alone()
        boot["alone"].append(b)
        phase["alone"].append(d)
        for kind in kinds[1:]:
            b, d, n = plugin_boot(kind)
            boot[kind].append(b)
            phase[kind].append(d)
            if kind in hits:
                hits[kind].append(n)
                per_hit[kind].append((d - phase["none"][-1]) / n)
        gdb.append(gdb_rate(args.gdb_hits))
        print(f"round {r + 1}: " + ", ".join(f"{k}={boot[k][-1]:.1f}s/dd {phase[k][-1]:.2f}s" for k in kinds)
              + f" hits={hits['counted'][-1]},{hits['pre_handler'][-1]} gdb={gdb[-1]:.0f}/s "
              f"load={os.getloadavg()[0]:.1f}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print()
    print("| row | boot s | dd phase s | hits | cost per hit | hits/s of the mechanism |")
    print("|---|---|---|---|---|---|")
    labels = {"alone": "QEMU 10 alone", "none": "plugin, no probe", "counted": f"plugin, `{BUSY}` counted",
              "pre_handler": f"plugin, `{BUSY}` empty pre_handler"}
    for kind in kinds:
        cells = [spread(boot[kind]), spread(phase[kind], "{:.2f}")]
        if kind in hits:
            us = [x * 1e6 for x in per_hit[kind]]
            rate = [1 / x for x in per_hit[kind] if x > 0]
            cells += [f"{int(statistics.median(hits[kind])):,}", spread(us, "{:.2f}") + " us",
                      f"{statistics.median(rate):,.0f}" if rate else "not measurable"]
        else:
            cells += ["-", "-", "-"]
        print(f"| {labels[kind]} | " + " | ".join(cells) + " |")
    print(f"| gdb, `{BUSY}` empty pre_handler | - | - | {args.gdb_hits} per round | - | {spread(gdb, '{:.0f}')} |")
    ratio = statistics.median(boot["counted"]) / statistics.median(boot["none"])
    print(f"boot with {int(statistics.median(hits['counted'])):,} counted hits: {ratio:.2f}x the unprobed plugin "
          f"session; {statistics.median(boot['counted']) / statistics.median(boot['alone']):.2f}x QEMU 10 alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
