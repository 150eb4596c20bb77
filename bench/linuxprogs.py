#!/usr/bin/env python3
"""Real Linux programs on the embedded default: kpsdk's Unicorn Linux layer against
qemu-user and Qiling, in one run (``nox -s bench`` runs it after bench/run.py).

Usage: ``python bench/linuxprogs.py [--reps N] [--out FILE]``

1. Debian's busybox-static ``sort`` on 1,000 and 10,000 lines: wall time of kpsdk
   (in the process, after ``import kpsdk``, open + run), qemu-x86_64 (a whole process)
   and Qiling 1.4 (in its own venv, after its import, open + run); each output is
   checked against Python's ``sorted`` (Qiling's by SHA-256).
2. Issue 38's programs with no probe, CPU time (the machine may be loaded): ``sha512sum`` of
   10 MB, coreutils ``sort`` of 100,000 lines, ``xz -9 -T1`` of 1 MB, busybox ``sort`` of
   10,000 lines and ``/bin/true`` (a dynamic program's start-up), each the host's own binary:
   kpsdk's open + run in this process (``time.process_time``, after one warm-up run of the
   same program) against qemu-x86_64 as a child (``RUSAGE_CHILDREN``); outputs compared by
   SHA-256; median of ``--reps`` with the range.  Goals: <= 2x qemu-user, start-up <= 0.2 s.
3. A hot libc function: bench/programs/hotlibc.c (static, -O0) calls ``atoi`` N times;
   kpsdk's kprobe on ``atoi`` reading its argument against Qiling's ``hook_address`` on
   the same address reading ``rdi``.  Both counts are checked against N (the program
   prints it); the per-hit cost is (probed - unprobed run) / N, best of ``--reps``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import random
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
QILING_PY = BENCH_DIR / ".qiling-venv" / "bin" / "python"
BUSYBOX = Path("/bin/busybox")
HOT_SOURCE = BENCH_DIR / "programs" / "hotlibc.c"
HOT_N = 20_000

import kpsdk  # noqa: E402


def lines(n: int) -> bytes:
    rng = random.Random(n)
    return "".join(f"{rng.randrange(10**9)} line {i}\n" for i in range(n)).encode()


def best(reps: int, run: Callable[[], float]) -> tuple[float, float]:
    """The best and the worst of ``reps`` timings (the spread)."""
    times = [run() for _ in range(reps)]
    return min(times), max(times)


def kpsdk_sort(data: bytes, expected: bytes) -> float:
    start = time.perf_counter()
    with kpsdk.open(f"elf:{BUSYBOX}", args=["sort"], stdin=data) as s:
        status = s.run(timeout=600)
        out = s.console.encode()
    elapsed = time.perf_counter() - start
    if status != 0 or out != expected:
        raise SystemExit(f"kpsdk's busybox sort gave status {status} and {len(out)} bytes: not sorted input")
    return elapsed


def qemu_sort(data: bytes, expected: bytes) -> float:
    start = time.perf_counter()
    done = subprocess.run(["qemu-x86_64", str(BUSYBOX), "sort"], input=data, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or done.stdout != expected:
        raise SystemExit("qemu-x86_64's busybox sort differs from sorted()")
    return elapsed


def qiling_half(*args: str) -> dict[str, object]:
    if not QILING_PY.exists():
        return {"error": "Qiling venv absent (bench/run.py creates it on its first full run)"}
    done = subprocess.run([str(QILING_PY), str(BENCH_DIR / "qiling_linux.py"), *args], capture_output=True,
                          timeout=1800)
    last = [ln for ln in done.stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
    tail = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
    if done.returncode != 0 or not last:
        return {"error": tail[-1] if tail else f"exit {done.returncode}"}
    return {**json.loads(last[-1]), "stderr_tail": tail[-1] if tail else ""}


def bench_sort(reps: int) -> list[list[str]]:
    rows = []
    for n in (1_000, 10_000):
        data = lines(n)
        expected = b"".join(sorted(data.splitlines(keepends=True)))
        k, k_worst = best(reps, lambda: kpsdk_sort(data, expected))  # noqa: B023
        q, q_worst = best(reps, lambda: qemu_sort(data, expected))  # noqa: B023
        with tempfile.NamedTemporaryFile(suffix=".txt") as f:
            f.write(data)
            f.flush()
            runs = [qiling_half("sort", f.name) for _ in range(reps)]
        ok = [r for r in runs if "error" not in r and r.get("output_sha256") == hashlib.sha256(expected).hexdigest()]
        if ok:
            ql = min(float(str(r["seconds"])) for r in ok)
            qiling = f"{ql:.2f} s ({ql / k:.2f}x kpsdk)"
        else:
            why = next((str(r["error"]) for r in runs if "error" in r),
                       "wrong output: " + str(runs[0].get("stderr_tail") or "no message"))
            qiling = f"failed: {why[:90]}"
        rows.append([f"busybox sort, {n:,} lines", f"{k:.2f} s (worst {k_worst:.2f})",
                     f"{q:.2f} s (worst {q_worst:.2f})", f"{k / q:.1f}x", qiling])
        print(f"  sort {n}: kpsdk {k:.2f}-{k_worst:.2f} s, qemu-user {q:.2f}-{q_worst:.2f} s, Qiling {qiling}",
              flush=True)
    return rows


#: issue 38's programs: (row label, argv, input); coreutils sort with -S so that 100,000 lines
#: sort in memory (its default buffer follows the machine's memory, and the temporary files
#: it would write otherwise are another benchmark)
PROGRAMS: list[tuple[str, list[str], Callable[[], bytes]]] = [
    ("sha512sum of 10 MB", ["/usr/bin/sha512sum"], lambda: random.Random(1).randbytes(10 << 20)),
    ("coreutils sort of 100,000 lines", ["/usr/bin/sort", "-S", "200M"], lambda: lines(100_000)),
    ("xz -9 -T1 of 1 MB", ["/usr/bin/xz", "-9", "-T1", "-c"], lambda: lines(30_000)[:1 << 20]),
    ("busybox sort of 10,000 lines", [str(BUSYBOX), "sort"], lambda: lines(10_000)),
    ("/bin/true: a dynamic program's start-up", ["/bin/true"], lambda: b""),
]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def kpsdk_program(argv: list[str], data: bytes) -> tuple[float, bytes]:
    """CPU seconds of kpsdk.open + run in this process, and the output."""
    start = time.process_time()
    with kpsdk.open(f"elf:{argv[0]}", args=argv[1:], stdin=data, env={"LC_ALL": "C"}) as s:
        status = s.run(timeout=3600)
        out = s.console_bytes
    elapsed = time.process_time() - start
    if status != 0:
        raise SystemExit(f"kpsdk: {argv} exited {status}: {out[-300:]!r}")
    return elapsed, out


def qemu_program(argv: list[str], data: bytes) -> tuple[float, bytes]:
    """CPU seconds of qemu-x86_64 running ``argv`` (user + system of the child), and the output."""
    before = _children_cpu()
    done = subprocess.run(["qemu-x86_64", *argv], input=data, capture_output=True, env={"LC_ALL": "C"},
                          timeout=3600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"qemu-x86_64: {argv} exited {done.returncode}")
    return _children_cpu() - before, done.stdout


def bench_programs(reps: int) -> list[list[str]]:
    """Issue 38's rows: each program's CPU under kpsdk and qemu-user, median of ``reps``."""
    if shutil.which("qemu-x86_64") is None:
        return [["issue 38 programs", "skipped: qemu-x86_64 not found (Debian package qemu-user)", "", "", ""]]
    rows = []
    for label, argv, make in PROGRAMS:
        if not Path(argv[0]).exists():
            rows.append([label, f"skipped: {argv[0]} not found", "", "", ""])
            continue
        data = make()
        kpsdk_program(argv, data)  # warm-up: first-use imports and caches are start-up's row
        ks, qs = [], []
        for _ in range(reps):
            k, kout = kpsdk_program(argv, data)
            q, qout = qemu_program(argv, data)
            if hashlib.sha256(kout).digest() != hashlib.sha256(qout).digest():
                raise SystemExit(f"{label}: kpsdk's output differs from qemu-user's")
            ks.append(k)
            qs.append(q)
        k, q = statistics.median(ks), statistics.median(qs)
        goal = "<= 0.2 s" if argv[0] == "/bin/true" else "<= 2x"
        met = k <= 0.2 if argv[0] == "/bin/true" else k <= 2 * q
        rows.append([f"{label} (CPU; goal {goal}: {'met' if met else 'not met'})",
                     f"{k:.2f} s ({min(ks):.2f}-{max(ks):.2f})", f"{q:.2f} s ({min(qs):.2f}-{max(qs):.2f})",
                     f"{k / q:.1f}x" if q > 0 else "n/a", "outputs identical"])
        print(f"  {label}: kpsdk {k:.2f} s, qemu-user {q:.2f} s ({k / q if q else 0:.1f}x)", flush=True)
    return rows


def kpsdk_hot(prog: Path, probed: bool) -> tuple[float, int]:
    seen = [0]

    def on_atoi(p: object, regs: kpsdk.PtRegs) -> int:
        seen[0] += 1
        if regs.arg(0) == 0:
            print("null")
        return 0

    with kpsdk.open(f"elf:{prog}", args=[str(HOT_N)]) as s:
        if probed:
            s.register_kprobe(kpsdk.Kprobe(symbol_name="atoi", pre_handler=on_atoi))
        start = time.perf_counter()
        status = s.run(timeout=600)
        elapsed = time.perf_counter() - start
        if status != 0 or f"calls {HOT_N} " not in s.console:
            raise SystemExit(f"hotlibc under kpsdk: status {status}, output {s.console!r}")
    return elapsed, seen[0]


def bench_hot(reps: int) -> list[list[str]]:
    gcc = shutil.which("gcc")
    if gcc is None:
        return [["hot libc probe", "skipped: gcc not found (Debian package gcc)", "", "", ""]]
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "hotlibc"
        subprocess.run([gcc, "-static", "-O0", "-o", str(prog), str(HOT_SOURCE)], check=True)
        plain = min(kpsdk_hot(prog, False)[0] for _ in range(reps))
        runs = [kpsdk_hot(prog, True) for _ in range(reps)]
        probed = min(t for t, _ in runs)
        hits = {h for _, h in runs}
        k_us = (probed - plain) / HOT_N * 1e6
        q = qiling_half("hot", str(prog), str(HOT_N), str(reps))
    if "error" in q:
        qiling, ratio = f"failed: {str(q['error'])[:90]}", "n/a"
    else:
        q_us = (float(str(q["hooked_s"])) - float(str(q["plain_s"]))) / HOT_N * 1e6
        qiling = f"{q_us:.2f} us/hit, {q['hits']} hits"
        ratio = f"{q_us / k_us:.2f}x cheaper"
    print(f"  hot atoi: kpsdk {k_us:.2f} us/hit ({sorted(hits)} hits of {HOT_N}); Qiling {qiling}", flush=True)
    return [[f"kprobe on libc's atoi reading its argument, {HOT_N:,} calls",
             f"{k_us:.2f} us/hit, {'/'.join(map(str, sorted(hits)))} hits", f"true count {HOT_N}", ratio, qiling]]


def markdown(rows: list[list[str]], reps: int) -> str:
    head = ["measured", "kpsdk (Unicorn)", "qemu-user / truth", "ratio", "Qiling 1.4"]
    out = [f"Linux programs on the embedded default: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} "
           f"UTC, {platform.processor() or platform.machine()} ({os.cpu_count()} cores), Python "
           f"{platform.python_version()}, best of {reps} (worst in brackets), load {os.getloadavg()[0]:.1f}", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "linuxprogs.md")
    args = ap.parse_args()
    if not BUSYBOX.exists():
        raise SystemExit(f"{BUSYBOX} not found: install the Debian package busybox-static")
    print("Linux programs on Unicorn: issue 38's programs, busybox sort and a hot libc probe, kpsdk vs qemu-user "
          "vs Qiling", flush=True)
    rows = bench_programs(args.reps) + bench_sort(args.reps) + bench_hot(args.reps)
    text = markdown(rows, args.reps)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
