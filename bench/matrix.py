#!/usr/bin/env python3
"""``kpsdk.matrix`` throughput and per-target overhead, against bare runs of the same targets.

Usage: ``python bench/matrix.py [--reps N] [--copies K] [--no-dask] [--out FILE]`` (5 reps of 22 targets)

The corpus: Debian's own programs of this machine (tests/matrix_scripts.py's, K copies each), run
by the Linux layer in Unicorn with sysroot ``/``, each with a uprobe on libc's ``malloc`` and
its return probe.  Measured, each ``--reps`` times (the machine may be shared: the spread is
printed, and the load average before and after):

1. bare: every target in one process (of its own), one after the other, after one warm-up
   target (:func:`kpsdk.matrixrun.child.run_here`: open, trace, run, close; no isolation);
2. the local pool with 1 and 2 workers (``LocalPool``, its fork hosts started and warmed by
   a one-target matrix first: what a long matrix amortizes);
3. Dask with 1 and 2 worker processes of one thread (a scheduler and workers started here,
   on loopback), likewise warmed (``--no-dask`` skips it).

Two phases, the pool's then Dask's (its processes up only then), each with its own bare
runs; within a phase the runs are interleaved, rep after rep, and each is measured in wall
time and in CPU time (an engine's: of this process tree, read from /proc), which other users
of the machine move less than the wall time.

Throughput ratio: 1 worker's time / 2 workers'.  Per-target overhead of an engine, two ways:
(its time with 1 worker - the bare time) / targets, which a shared machine's load moves by
tenths of a second between runs; and, less exposed to it, each target sent alone to the
engine, one after the other: the engine's wall time for it minus the time its own process
spent on it (open, run, close), the cost of the engine (the fork, the job and result
pickles, Dask's scheduling and transport) per target, median and 90th percentile.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import kpsdk  # noqa: E402
from kpsdk.matrixrun import LocalPool, MatrixTarget, TraceScript  # noqa: E402
from kpsdk.matrixrun.child import Job, run_here  # noqa: E402
from tests.matrix_scripts import LIBC_MALLOC, TEXT, corpus_programs  # noqa: E402


def corpus(data: Path, copies: int) -> list[MatrixTarget]:
    return [MatrixTarget(f"elf:{prog}", args=tuple(args), sysroot="/", name=f"{prog} {' '.join(args)} #{copy}")
            for copy in range(copies) for prog, args in corpus_programs(data)]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def spread(times: list[float]) -> dict[str, float]:
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


def tree_cpu(root: int | None = None) -> float:
    """CPU seconds of this process and every descendant: each live one's own and its reaped
    children's (a fork host's targets, reaped by the host, are in its ``cutime``)."""
    root = os.getpid() if root is None else root
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    spent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        spent[pid] = sum(int(f) for f in fields[11:15])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += spent.get(pid, 0)
        todo += children.get(pid, [])
    return total / tick


def measured(run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process tree) of ``run()``, measured between runs (no target
    process alive, every one reaped)."""
    cpu, start = tree_cpu(), time.perf_counter()
    run()
    return time.perf_counter() - start, tree_cpu() - cpu


def bare(targets: list[MatrixTarget], script: TraceScript) -> None:
    for i, target in enumerate(targets):
        result = run_here(Job(i, target, script))
        assert result.ok, result.error


def bare_alone(data: Path, copies: int) -> tuple[float, float]:
    """The bare run in a process of its own (this one has the engines' threads and a Dask client's
    event loop, which would slow it): its wall and CPU seconds, after its own warm-up."""
    proc = subprocess.run([sys.executable, __file__, "--bare", str(data), "--copies", str(copies)],
                          capture_output=True, text=True, timeout=3600, check=True)
    wall, cpu = json.loads(proc.stdout.splitlines()[-1])
    return float(wall), float(cpu)


def bare_here(data: Path, copies: int) -> None:
    """``--bare``: warm up, run the corpus bare, print [wall, CPU] seconds."""
    script = TraceScript(LIBC_MALLOC)
    run_here(Job(0, MatrixTarget("elf:/bin/true", sysroot="/"), script))
    targets = corpus(data, copies)
    cpu, start = time.process_time(), time.perf_counter()
    bare(targets, script)
    print(json.dumps([time.perf_counter() - start, time.process_time() - cpu]))


def latencies(targets: list[MatrixTarget], script: TraceScript, engine: object) -> list[float]:
    """Each target alone through ``engine``: its wall time minus its process's own time."""
    out = []
    for i, target in enumerate(targets):
        start = time.perf_counter()
        (result,) = list(engine.run([Job(i, target, script)]))  # type: ignore[attr-defined]
        out.append(time.perf_counter() - start - result.seconds)
        assert result.ok, result.error
    return out


def on_engine(targets: list[MatrixTarget], script: TraceScript, engine: object) -> None:
    result = kpsdk.matrix(script, targets, engine=engine, cache=False)  # type: ignore[arg-type]
    assert not result.failed, [(r.name, r.error) for r in result.failed]


@contextmanager
def dask_cluster(workers: int) -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="kpsdk-bench-dask-"))
    file = directory / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    quiet = {"cwd": directory, "env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(file)], **quiet)]
    try:
        deadline = time.monotonic() + 60
        while not file.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the Dask scheduler did not start")
            time.sleep(0.2)
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                       str(file), "--nworkers", str(workers), "--nthreads", "1", "--host",
                                       "127.0.0.1", "--no-dashboard"], **quiet))
        address = json.loads(file.read_text())["address"]
        import distributed

        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(workers, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--bare", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare is not None:
        bare_here(args.bare, args.copies)
        return 0
    data = Path(tempfile.mkdtemp(prefix="kpsdk-bench-matrix-")) / "in.txt"
    data.write_text(TEXT)
    targets = corpus(data, args.copies)
    script = TraceScript(LIBC_MALLOC)
    load_before = load()
    runs: dict[str, list[tuple[float, float]]] = {}
    lat: dict[str, list[float]] = {}
    phases = ["pool"] + ([] if args.no_dask else ["dask"])
    for phase in phases:  # the Dask processes are up in their phase only: their CPU is theirs
        with ExitStack() as stack:
            engines: dict[str, Any] = {}
            for workers in (1, 2):
                if phase == "pool":
                    engine: Any = stack.enter_context(LocalPool(workers))
                    engines[f"pool, {workers} worker{'s' if workers > 1 else ''}"] = engine
                else:
                    from kpsdk.matrixrun.engines import DaskEngine

                    engine = DaskEngine(stack.enter_context(dask_cluster(workers)))
                    stack.callback(engine.close)
                    engines[f"dask, {workers} worker process{'es' if workers > 1 else ''}"] = engine
            for engine in engines.values():  # every host started and warm, as in a long matrix
                on_engine(targets[:engine.workers * 2], script, engine)
            lat[phase] = latencies(targets, script, next(iter(engines.values())))
            for rep in range(args.reps):  # interleaved: a load that changes moves each the same way
                runs.setdefault(f"{BARE}, {phase} phase", []).append(bare_alone(data, args.copies))
                for name, engine in engines.items():
                    runs.setdefault(name, []).append(measured(lambda engine=engine: on_engine(targets, script,
                                                                                                engine)))
                print(f"{phase} rep {rep + 1}: " + ", ".join(f"{k}: {v[-1][0]:.1f} s ({v[-1][1]:.1f} s CPU)"
                                                             for k, v in runs.items() if k.startswith((BARE, phase))),
                      flush=True)
    report = render(runs, lat, len(targets), load_before, load())
    print(report)
    if args.out is not None:
        args.out.write_text(report)
    return 0


BARE = "bare (one process, sequential)"


def render(runs: dict[str, list[tuple[float, float]]], lat: dict[str, list[float]], n: int, load_before: str,
           load_after: str) -> str:
    lines = [f"# kpsdk.matrix: {n} Debian programs, libc malloc uprobe + return probe", "",
             f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"load average before {load_before}, after {load_after} (a shared machine: see the spread).", "",
             "| run | wall min (s) | wall median (s) | wall max (s) | CPU per target (s, median) | "
             "overhead per target vs bare: wall, CPU (s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, values in runs.items():
        phase = name.split(",")[0] if not name.startswith(BARE) else ""
        bare = runs.get(f"{BARE}, {phase} phase")
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        s = spread(walls)
        cpu = statistics.median(cpus)
        overhead = ""
        if bare is not None and " 1 worker" in name:
            overhead = (f"{(s['median'] - statistics.median(w for w, _ in bare)) / n:+.3f}, "
                        f"{(cpu - statistics.median(c for _, c in bare)) / n:+.3f}")
        lines.append(f"| {name} | {s['min']:.1f} | {s['median']:.1f} | {s['max']:.1f} | {cpu / n:.3f} | {overhead} |")
    lines.append("")
    for engine in ("pool", "dask"):
        one = [v for k, v in runs.items() if k.startswith(engine) and " 1 worker" in k]
        two = [v for k, v in runs.items() if k.startswith(engine) and " 2 worker" in k]
        if one and two:
            pairs = [a[0] / b[0] for a, b in zip(one[0], two[0], strict=True)]
            lines.append(f"- {engine}: 2 workers give {statistics.median(pairs):.2f}x the throughput of 1 (median of "
                         f"the reps' ratios; each rep: {', '.join(f'{r:.2f}x' for r in pairs)})")
    for engine, values in lat.items():
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        lines.append(f"- {engine}: a target alone costs the engine {statistics.median(values) * 1000:.0f} ms "
                     f"beyond its own process's time (median of {len(values)}; 90th percentile {p90 * 1000:.0f} ms)")
    lines += ["", "CPU: the bare run's own process time; an engine's, that of the whole process tree (this "
              "process, the fork hosts and their targets, and in the Dask phase the scheduler and workers, "
              "their heartbeats included), from /proc."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
