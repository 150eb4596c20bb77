"""Kernel benchmark: Debian's kernels under qemu-system (TCG), per architecture.

For each arch, on the kernel and busybox initramfs of ``python -m kpsdk.fixtures.kernel
--arch ARCH`` (the default workload, traced by the guest itself):

- **unprobed**: boot to power-off with QEMU alone (``kpsdk.fixtures.kernel.boot``);
- **attached**: the same boot through kpsdk with no probe (QEMU's gdbstub, gdb and
  the stop at ``start_kernel``): what attaching costs before any hit;
- **3 probes**: the same boot with the guest's own three definitions as kpsdk probes
  (a kprobe on ``do_sys_openat2``, kretprobes on ``do_sys_openat2`` and ``kernel_clone``,
  empty handlers): the hits of a whole boot;
- **hits/s**: a kprobe with an empty handler on a busy kernel function (the slab
  allocator's ``kmem_cache_alloc``), timed from its first hit to its ``--hits``-th.

Each boot is timed ``--runs`` times; the table gives the median and the range.  With
``--accel X`` given more than once (QEMU's ``-accel`` value: ``tcg,thread=single`` is kpsdk's,
``tcg`` QEMU's default), each boot runs under each in turn, interleaved, one row per value.  The host's
load average is printed before and after, since every number here is wall time under TCG
on a machine that may be shared: compare arches measured in one run, not across runs.

Run: ``python bench/kernels.py [--arch A ...] [--runs N] [--hits N] [--accel X ...] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import kpsdk
import kpsdk.targets.live.qemu as qemu_launcher
from kpsdk.fixtures import kernel

ARCHS = ("x86_64", "i386", "arm", "riscv64", "ppc64le")
#: the busy function, by its name in each kernel (6.12's slab allocator adds _noprof)
BUSY = ("kmem_cache_alloc", "kmem_cache_alloc_noprof")
TIMEOUT = 900.0


def files(arch: str) -> tuple[Path, Path]:
    return kernel.fetch_arch_kernel(arch), kernel.initramfs_for(arch)


def unprobed(arch: str, accel: str) -> float:
    image, initrd = files(arch)
    result = kernel.boot(image, initrd, arch=arch, timeout=TIMEOUT, accel=accel)
    if result.returncode != 0 or "KPSDK-POWEROFF" not in result.console:
        raise RuntimeError(f"{arch}: the unprobed boot did not power off:\n{result.console[-1000:]}")
    return result.seconds


def probed(arch: str, probes: bool, accel: str) -> tuple[float, int]:
    """Seconds from kpsdk.open to the guest's power-off, and the hits the probes saw."""
    image, initrd = files(arch)
    qemu_launcher.TCG_ACCEL = accel
    hits = [0]

    def count(*_args: object) -> int:
        hits[0] += 1
        return 0

    start = time.monotonic()
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        if probes:
            s.register_kprobe(kpsdk.Kprobe(symbol_name="do_sys_openat2", pre_handler=count))
            for name in ("do_sys_openat2", "kernel_clone"):
                s.register_kretprobe(kpsdk.Kretprobe(symbol_name=name, handler=count))
        status = s.run(timeout=TIMEOUT)
    seconds = time.monotonic() - start
    if status != 0:
        raise RuntimeError(f"{arch}: the probed boot ended with {status!r}")
    return seconds, hits[0]


def hit_rate(arch: str, count: int, accel: str) -> tuple[str, float]:
    """Hits per second of an empty kprobe on the busy function, first hit to last."""
    image, initrd = files(arch)
    qemu_launcher.TCG_ACCEL = accel
    times: list[float] = []
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        name = next(n for n in BUSY if n in s.symbols)

        def hit(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            times.append(time.perf_counter())
            if len(times) == count:
                s.stop()
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name=name, pre_handler=hit))
        s.run(timeout=TIMEOUT)
    if len(times) < count:
        raise RuntimeError(f"{arch}: {name} was hit {len(times)} times, not {count}")
    return name, (count - 1) / (times[-1] - times[0])


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", action="append", choices=ARCHS, help="repeatable (default: all five)")
    parser.add_argument("--runs", type=int, default=3, help="boots per configuration (default 3)")
    parser.add_argument("--hits", type=int, default=2000, help="hits timed on the busy function (default 2000)")
    parser.add_argument("--accel", action="append", help="QEMU -accel value, repeatable: interleaved "
                        f"(default: kpsdk's {qemu_launcher.TCG_ACCEL})")
    parser.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    archs = args.arch or list(ARCHS)
    accels = args.accel or [qemu_launcher.TCG_ACCEL]
    load_before = os.getloadavg()
    lines = [
        f"Debian kernels under qemu-system (TCG), {args.runs} boots each (median, min-max), "
        f"cpus={os.cpu_count()}, load average before {load_before[0]:.1f}",
        "",
        "| arch | -accel | unprobed boot (s) | attached, no probe (s) | 3 probes (s) | hits of the 3 | busy function "
        "| hits/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arch in archs:
        files(arch)  # fetch and build before anything is timed
        plain: dict[str, list[float]] = {a: [] for a in accels}
        attached: dict[str, list[float]] = {a: [] for a in accels}
        three: dict[str, list[tuple[float, int]]] = {a: [] for a in accels}
        rates: dict[str, tuple[str, float]] = {}
        for _ in range(args.runs):  # each configuration in turn, so that all see the same load
            for accel in accels:
                plain[accel].append(unprobed(arch, accel))
                attached[accel].append(probed(arch, False, accel)[0])
                three[accel].append(probed(arch, True, accel))
        for accel in accels:
            rates[accel] = hit_rate(arch, args.hits, accel)
        for accel in accels:
            name, rate = rates[accel]
            hits = sorted({h for _, h in three[accel]})
            row = (f"| {arch} | {accel} | {_cell(plain[accel])} | {_cell(attached[accel])} | "
                   f"{_cell([t for t, _ in three[accel]])} | {'/'.join(map(str, hits))} | `{name}` | {rate:.0f} |")
            print(row, flush=True)
            lines.append(row)
    lines.append("")
    lines.append(f"load average after {os.getloadavg()[0]:.1f}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
