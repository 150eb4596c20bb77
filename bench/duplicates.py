"""Duplicate hits on qemu-system kernels: kpsdk's counts against the guest kernel's own.

Each boot runs Debian's kernel of an arch (``python -m kpsdk.fixtures.kernel --arch ARCH``)
with a busybox initramfs that

1. reads ``/proc/stat``'s ``processes`` (the guest's count of tasks created since boot), then
2. runs the default workload plus ``--spawns`` more ``cat`` processes under its own tracing
   (:func:`kpsdk.fixtures.kernel.traced_workload`: kprobe_events ``open``, ``openret`` and
   ``cloneret``; the function tracer on a kernel that refuses them).

kpsdk probes the same functions as tests/test_kernel_arches.py: a kprobe on
``do_sys_openat2``, kretprobes on ``do_sys_openat2`` and ``kernel_clone``, and
``rb_simple_write`` (``tracing_on``) to count over exactly the guest's recording window.
Two comparisons per boot:

- **whole boot**: ``kernel_clone`` entries kpsdk saw before the guest's ``show_stat``
  against the guest's ``processes`` (every entry creates one task during a boot);
- **window**: hits of each probe between the guest's ``tracing_on`` writes against the
  lines of the guest's own trace for the same definitions, and the return values in order.

A duplicate is a hit beyond the guest's count (what gdb did when QEMU ended its step over
a breakpoint having executed nothing: it evaluated the same breakpoint again); ``pid_twice``
counts the child pids ``kernel_clone`` was seen to return twice over the whole boot (a
return reported twice: each pid is returned once).  Each boot prints one JSON line; the summary gives duplicates per
boot for each arch and accelerator.

``--accel`` picks QEMU's ``-accel`` value (repeatable; several are run interleaved, boot
after boot, so that both see the same host load): ``tcg,thread=single`` is what kpsdk uses
(:data:`kpsdk.targets.live.qemu.TCG_ACCEL`), ``tcg`` is QEMU's default (one thread per vCPU).

Run: ``python bench/duplicates.py [--arch A ...] [--boots N] [--accel X ...] [--spawns N] [--jsonl FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import kpsdk
import kpsdk.targets.live.qemu as qemu_launcher
from kpsdk.fixtures import kernel

ARCHS = ("x86_64", "i386", "arm", "riscv64", "ppc64le")
TIMEOUT = 900.0
FORKS = "grep '^processes ' /proc/stat | sed 's/^processes /KPSDK forks count=/'\n"


def workload(spawns: int) -> str:
    """The forks count first, then the traced window: the default workload and ``spawns`` cats."""
    more = (f"i=0\nwhile [ $i -lt {spawns} ]; do cat /etc/kpsdk-hello > /dev/null; i=$((i+1)); done\n"
            if spawns else "")
    return FORKS + kernel.traced_workload(kernel.DEFAULT_WORKLOAD + more)


def guest_record(console: str, bits: int) -> tuple[str, dict[str, int], dict[str, list[int]]]:
    """The guest's own trace: its mode, lines per event, return values per return event
    (the same reading as tests/test_kernel_arches.py)."""
    (mode,) = [m.fields["mode"] for m in kernel.parse_markers(console) if m.action == "ktrace"]
    hits: dict[str, int] = {}
    values: dict[str, list[int]] = {}
    for line in console.splitlines():
        if not line.startswith("KTRACE "):
            continue
        if mode == "kprobe":
            m = re.search(r" (\w+): \(.*?\)(?: ret=(0x[0-9a-f]+))?$", line)
            if m is None:
                raise RuntimeError(f"unreadable trace line: {line!r}")
            if m.group(2) is not None:
                raw = int(m.group(2), 16) & ((1 << bits) - 1)
                values.setdefault(m.group(1), []).append(raw - (1 << bits) if raw >> (bits - 1) else raw)
            event = m.group(1)
        else:
            m = re.search(r" (\w+) <-\S+$", line)
            if m is None:
                raise RuntimeError(f"unreadable trace line: {line!r}")
            event = {"do_sys_openat2": "open", "kernel_clone": "cloneret"}[m.group(1)]
        hits[event] = hits.get(event, 0) + 1
    return mode, hits, values


def returned_twice(log: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """Each return of a pid already returned (``kernel_clone`` returns each child's pid once,
    so a second one is a return reported twice), with the three items before and after it.
    Entries at the same sp back to back prove nothing: on ARM kthreadd calls kernel_clone
    with the same sp again and again."""
    seen: set[int] = set()
    out = []
    for i, (kind, value) in enumerate(log):
        if kind == "R" and value > 0:
            if value in seen:
                out.append(log[max(0, i - 3):i + 4])
            seen.add(value)
    return out


def one_boot(arch: str, accel: str, initrd: Path) -> dict[str, Any]:
    image = kernel.fetch_arch_kernel(arch)
    bits = kpsdk.get_registry().arch(arch).bits
    qemu_launcher.TCG_ACCEL = accel
    start = time.monotonic()
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        window = [False]
        writes = [0]
        boot_log: list[tuple[str, int]] = []  # ("E", sp) / ("R", ret) of kernel_clone, whole boot
        at_stat: list[list[tuple[str, int]]] = []
        opens: list[tuple[str, int]] = []  # ("E", sp) of do_sys_openat2 in the window
        in_window: set[int] = set()
        returns: dict[str, list[int]] = {"openret": [], "cloneret": []}

        @s.kprobe(kernel.TRACING_ON_WRITE)
        def toggle(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            writes[0] += 1
            window[0] = writes[0] == 2
            return 0

        @s.kprobe("do_sys_openat2")
        def on_open(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            if window[0]:
                opens.append(("E", regs.sp))
            return 0

        @s.kprobe("show_stat")
        def on_stat(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            at_stat.append(list(boot_log))
            return 0

        def open_entry(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> int:
            return 0 if window[0] else 1

        def clone_entry(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> int:
            boot_log.append(("E", regs.sp))
            if window[0]:
                in_window.add(id(ri))
            else:
                in_window.discard(id(ri))
            return 0

        def clone_return(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> None:
            boot_log.append(("R", regs.signed("return_value")))
            if id(ri) in in_window:
                returns["cloneret"].append(regs.signed("return_value"))

        s.register_kretprobe(kpsdk.Kretprobe(
            symbol_name="do_sys_openat2", entry_handler=open_entry,
            handler=lambda ri, regs: returns["openret"].append(regs.signed("return_value"))))
        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="kernel_clone", entry_handler=clone_entry,
                                             handler=clone_return, maxactive=64))
        status = s.run(timeout=TIMEOUT)
        console = s.console
    seconds = time.monotonic() - start
    if status != 0 or writes[0] != 3 or len(at_stat) != 1:
        raise RuntimeError(f"{arch}: status {status!r}, {writes[0]} tracing_on writes, {len(at_stat)} "
                           f"reads of /proc/stat:\n{console[-1500:]}")
    (forks,) = [int(m.fields["count"]) for m in kernel.parse_markers(console) if m.action == "forks"]
    mode, hits, values = guest_record(console, bits)
    seen = at_stat[0]
    entries = sum(kind == "E" for kind, _ in seen)
    ours = {"open": len(opens), "openret": len(returns["openret"]), "cloneret": len(returns["cloneret"])}
    extra = {"clone_boot": entries - forks}
    extra.update({event: ours[event] - hits.get(event, 0) for event in ours if event in hits})
    same_values = {event: returns[event] == values[event] for event in values if event in returns}
    mismatched = {event: {"kpsdk": returns[event], "guest": values[event]}
                  for event, same in same_values.items() if not same}
    return {
        "arch": arch, "accel": accel, "seconds": round(seconds, 1), "load": round(os.getloadavg()[0], 1),
        "mode": mode, "forks": forks, "clone_entries": entries,
        "pids": len({v for kind, v in seen if kind == "R" and v > 0}),
        "guest": hits, "kpsdk": ours, "extra": extra, "same_values": same_values,
        "pid_twice": len(returned_twice(boot_log)),
        "duplicates": sum(max(0, n) for n in extra.values()),
        "lost": sum(max(0, -n) for n in extra.values()),
        "mismatched": mismatched,
        "repeats": returned_twice(boot_log),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", action="append", choices=ARCHS, help="repeatable (default: all five)")
    parser.add_argument("--boots", type=int, default=3, help="boots per arch and accelerator (default 3)")
    parser.add_argument("--accel", action="append", help="QEMU -accel value, repeatable "
                        f"(default: kpsdk's {qemu_launcher.TCG_ACCEL})")
    parser.add_argument("--spawns", type=int, default=40, help="extra cat processes in the window (default 40)")
    parser.add_argument("--jsonl", type=Path, help="append each boot's JSON line here too")
    args = parser.parse_args(argv)
    archs = args.arch or list(ARCHS)
    accels = args.accel or [qemu_launcher.TCG_ACCEL]
    initrds = {arch: kernel.initramfs_for(arch, workload(args.spawns),
                                          out=kernel.cache_root() / "initramfs" / f"kpsdk-dup-{arch}.cpio.gz")
               for arch in archs}
    print(f"cpus={os.cpu_count()} load average before {os.getloadavg()[0]:.1f}", flush=True)
    results: list[dict[str, Any]] = []
    for _ in range(args.boots):
        for arch in archs:
            for accel in accels:
                try:
                    row = one_boot(arch, accel, initrds[arch])
                except (RuntimeError, kpsdk.KpsdkError) as exc:
                    row = {"arch": arch, "accel": accel, "error": str(exc)[-800:]}
                print(json.dumps(row), flush=True)
                results.append(row)
                if args.jsonl is not None:
                    with args.jsonl.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print(f"load average after {os.getloadavg()[0]:.1f}")
    print("| arch | -accel | boots | duplicates per boot | lost | pids returned twice | boot (s) |")
    print("|---|---|---|---|---|---|---|")
    for arch in archs:
        for accel in accels:
            rows = [r for r in results if r["arch"] == arch and r["accel"] == accel and "error" not in r]
            failed = sum(r["arch"] == arch and r["accel"] == accel and "error" in r for r in results)
            if not rows:
                print(f"| {arch} | {accel} | 0 ({failed} failed) | | | | |")
                continue
            print(f"| {arch} | {accel} | {len(rows)}{f' ({failed} failed)' if failed else ''} | "
                  f"{' '.join(str(r['duplicates']) for r in rows)} | {sum(r['lost'] for r in rows)} | "
                  f"{sum(r['pid_twice'] for r in rows)} | "
                  f"{min(r['seconds'] for r in rows):.0f}-{max(r['seconds'] for r in rows):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
