#!/usr/bin/env python3
"""Processes and threads on the embedded default, next to qemu-user (and Qiling where it runs
them), in one run (``nox -s bench`` runs it).

Usage: ``python bench/tasks.py [--reps N] [--out FILE]``

1. The costs of one operation (bench/programs/tasksbench.c, static): a thread switch (two
   threads taking turns through a condition variable), a fork of a 50 MB process (every page
   touched; the child exits at once, the parent waits), a pipe round trip between two
   processes (one byte there and back).  Each is (the run with N operations - the run with
   a few) / N, CPU time: kpsdk's own process time in this process, qemu-user's (and native)
   as child rusage.
2. Programs, CPU time: busybox ``sh`` running a 1,000-iteration loop of two-process
   pipelines, ``xz -T2`` of 1 MB, ``make -j2`` of a Makefile of 40 shell commands; each
   checked against the native run's output; Qiling where its venv exists
   (bench/.qiling-venv, made by bench/linuxprogs.py) and it runs the program.

Every figure is the median of ``--reps`` runs with the spread (min-max); the machine's load
average is printed with them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
SOURCE = BENCH_DIR / "programs" / "tasksbench.c"
QILING_PY = BENCH_DIR / ".qiling-venv" / "bin" / "python"
BUSYBOX = Path("/bin/busybox")

import kpsdk  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def native_cpu(argv: list[str], stdin: bytes = b"", cwd: str | None = None) -> tuple[float, bytes]:
    before = children_cpu()
    proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=900, check=True, cwd=cwd)
    return children_cpu() - before, proc.stdout


def kpsdk_cpu(argv: list[str], stdin: bytes = b"", cwd: str | None = None) -> tuple[float, bytes]:
    start = time.process_time()
    with kpsdk.open(f"elf:{argv[0]}", args=argv[1:], stdin=stdin, **({"cwd": cwd} if cwd else {})) as s:
        status = s.run()
        out = bytes(s.target._console)  # type: ignore[attr-defined]
    if status != 0:
        raise RuntimeError(f"{argv} exited {status} under kpsdk: {out[-500:]!r}")
    return time.process_time() - start, out


def median(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt(values: tuple[float, float, float], unit: float, suffix: str) -> str:
    mid, lo, hi = values
    return f"{mid * unit:.3g} {suffix} ({lo * unit:.3g}-{hi * unit:.3g})"


def per_operation(run: Callable[[list[str]], tuple[float, bytes]], exe: Path, mode: str, n: int,
                  reps: int) -> tuple[float, float, float]:
    """CPU per operation: (N operations - N/10 operations) / (N - N/10), over ``reps`` runs."""
    costs = []
    for _ in range(reps):
        base, _ = run([str(exe), mode, str(n // 10)])
        full, out = run([str(exe), mode, str(n)])
        if not out.strip() or int(out.split()[0]) < n:
            raise RuntimeError(f"{mode} {n}: unexpected output {out!r}")
        costs.append((full - base) / (n - n // 10))
    return median(costs)


def build() -> Path:
    out = Path(tempfile.mkdtemp(prefix="kpsdk-bench-tasks-")) / "tasksbench"
    subprocess.run(["gcc", "-O1", "-static", "-pthread", "-o", str(out), str(SOURCE)], check=True)
    return out


def qiling_cpu(argv: list[str]) -> float | None:
    """Qiling's CPU for the program, in its own venv, or None where it cannot run it."""
    if not QILING_PY.exists():
        return None
    script = ("import sys, time; from qiling import Qiling; from qiling.const import QL_VERBOSE\n"
              "t = time.process_time(); ql = Qiling(sys.argv[1:], '/', verbose=QL_VERBOSE.DISABLED); ql.run()\n"
              "print(time.process_time() - t)")
    try:
        proc = subprocess.run([str(QILING_PY), "-c", script, *argv], capture_output=True, text=True, timeout=900,
                              check=False)
    except subprocess.TimeoutExpired:
        return None
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if platform.machine() != "x86_64" or shutil.which("qemu-x86_64") is None:
        print("bench/tasks.py needs an x86_64 host with qemu-user", file=sys.stderr)
        return 1
    exe = build()
    qemu = lambda a: native_cpu(["qemu-x86_64", *a])  # noqa: E731
    lines = [f"## Tasks on the embedded default ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
             f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)", "",
             "| operation | kpsdk | qemu-user | native |", "|---|---|---|---|"]
    for mode, n, label, unit, suffix in (("switch", 4000, "a thread switch", 1e6, "us"),
                                         ("fork", 30, "a fork of a 50 MB process", 1e3, "ms"),
                                         ("pipe", 4000, "a pipe round trip between two processes", 1e6, "us")):
        k = per_operation(kpsdk_cpu, exe, mode, n, args.reps)
        q = per_operation(qemu, exe, mode, n, args.reps)
        nat = per_operation(native_cpu, exe, mode, n, args.reps)
        lines.append(f"| {label} | {fmt(k, unit, suffix)} | {fmt(q, unit, suffix)} | {fmt(nat, unit, suffix)} |")
        print(lines[-1], flush=True)
    lines += ["", "| program (CPU) | kpsdk | qemu-user | Qiling | kpsdk / qemu-user |", "|---|---|---|---|---|"]
    workdir = tempfile.mkdtemp(prefix="kpsdk-bench-make-")
    Path(workdir, "Makefile").write_text("all: " + " ".join(f"t{i}" for i in range(40)) + "\n" +
                                         "".join(f"t{i}:\n\t@echo {i} | tr 0-9 a-j\n" for i in range(40)))
    data = Path(sys.executable).read_bytes()[:1 << 20]
    loop = "i=0; while [ $i -lt 1000 ]; do echo $i | busybox cat >/dev/null; i=$((i+1)); done; echo $i"
    programs = [("busybox sh: 1,000 two-process pipelines", [str(BUSYBOX), "sh", "-c", loop], b"", None),
                ("xz -T2 of 1 MB", ["/usr/bin/xz", "-T2", "-c"], data, None),
                ("make -j2 of 40 shell commands", ["/usr/bin/make", "-j2", "-s"], b"", workdir)]
    for label, command, stdin, cwd in programs:
        _, expected = native_cpu(command, stdin, cwd)
        ks, qs = [], []
        for _ in range(args.reps):
            cpu, out = kpsdk_cpu(command, stdin, cwd)
            if sorted(out.splitlines()) != sorted(expected.splitlines()):
                raise RuntimeError(f"{label}: kpsdk's output differs from the native run's")
            ks.append(cpu)
            qs.append(native_cpu(["qemu-x86_64", *command], stdin, cwd)[0])
        q = qiling_cpu(command) if not stdin and cwd is None else None
        k_mid, q_mid = statistics.median(ks), statistics.median(qs)
        lines.append(f"| {label} | {fmt(median(ks), 1, 's')} | {fmt(median(qs), 1, 's')} | "
                     f"{'-' if q is None else f'{q:.3g} s'} | {k_mid / q_mid:.1f}x |")
        print(lines[-1], flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
