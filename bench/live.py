"""Live-target benchmark: probe hits per second on qemu-user, per architecture.

Loops over the same binary (``bench/spin``: ``inc()`` called N times) and
the same QEMU, each timed for N hits and for 0 hits so start-up and exit
cancel out (rate = N / (T_N - T_0)), taking turns ``--repeats`` times (the
median is reported, with the spread):

- kpsdk: a kprobe on ``inc`` with an empty pre_handler;
- kpsdk post_handler: the same kprobe with a post_handler too (the
  instruction single-stepped, its end reported by the agent);
- kpsdk kretprobe: a kretprobe on ``inc`` (two breakpoint hits per call);
- gdb's own loop: ``break *inc`` with ``commands; silent; continue; end``;
- a plain pygdbmi loop: ``GdbController``, ``-exec-continue``, wait for ``*stopped``;
- with ``--floor``: gdb with a Python breakpoint whose ``stop()`` returns False and asks
  nobody, the floor of kpsdk's path (kpsdk's hit is this plus the round trip to the host).

Each arch is measured twice: on an idle machine, and with one competing busy
process (a Python ``while True: pass``) started for the time of the
measurement, as on a machine shared with other work (``--no-contended``
skips it; the plain pygdbmi loop runs only in the idle configuration).

The gdbserver row kind (``--gdbserver``): the same spin program run natively under Debian's
gdbserver, kpsdk's ``native:`` against gdb's ``commands`` loop on the same gdbserver (a
software breakpoint: gdbserver plants the trap), idle and next to ``yes > /dev/null``.

Run: ``python bench/live.py [--hits N] [--repeats R] [--arch A ...] [--floor] [--gdbserver]``
(``nox -s bench`` runs it too).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kpsdk
from kpsdk.binfmt.elfimage import load_elf

HERE = Path(__file__).resolve().parent
ARCHS = ("x86_64", "i386", "arm", "thumb", "riscv64", "ppc64")
QEMU = {"x86_64": "qemu-x86_64", "i386": "qemu-i386", "arm": "qemu-arm", "thumb": "qemu-arm",
        "riscv64": "qemu-riscv64", "ppc64": "qemu-ppc64"}


def spin(arch: str) -> Path:
    return HERE / "spin" / "bin" / f"spin-{arch}.elf"


def _qemu(arch: str, sock: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([QEMU[arch], "-g", str(sock), str(spin(arch))], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{QEMU[arch]} did not start its gdbstub")
        time.sleep(0.005)
    return proc


def _addresses(arch: str) -> tuple[int, int]:
    syms = load_elf(spin(arch)).symbols
    return syms.get("inc").address, syms.get("iterations").address


def run_kpsdk(arch: str, hits: int, kind: str = "pre_handler", scheme: str = "qemu-user") -> float:
    """kpsdk's loop: a probe on ``inc`` of ``kind`` (see :data:`KINDS`), every hit counted;
    ``scheme="native"``: the host's own run under gdbserver (the gdbserver rows)."""
    start = time.perf_counter()
    with kpsdk.open(f"{scheme}:{spin(arch)}") as s:
        s.write_memory(s.symbols.get("iterations").address, hits.to_bytes(4, s.arch.endian))
        seen: list[int] = []
        kp: kpsdk.Probe
        if hits and kind == "kretprobe":
            rp = kpsdk.Kretprobe(symbol_name="inc", handler=lambda ri, r: seen.append(1))
            s.register_kretprobe(rp)
            kp = rp
        elif hits:
            post = (lambda p, r, f: seen.append(1)) if kind == "post_handler" else None
            kp = kpsdk.Kprobe(symbol_name="inc", pre_handler=lambda p, r: 0, post_handler=post)
            s.register_kprobe(kp)
        assert s.run(timeout=600) is not None
        if hits:
            assert kp.hits == hits, (kp.hits, hits)
            assert kind == "pre_handler" or len(seen) == hits, (kind, len(seen), hits)
    return time.perf_counter() - start


#: kpsdk's probe kinds measured: an empty pre_handler, a kprobe with a post_handler (the
#: instruction single-stepped), a kretprobe with a return handler
KINDS = ("pre_handler", "post_handler", "kretprobe")


def _run_gdb_script(arch: str, hits: int, probe_lines: str) -> float:
    """Seconds for ``hits`` hits of ``inc`` under gdb alone: the spin program loaded, its
    iteration count set, then ``probe_lines`` (gdb script lines placing the probe) and ``continue``."""
    inc, iterations = _addresses(arch)
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "gdb.sock"
        script = Path(tmp) / "loop.gdb"
        arch_name = kpsdk.get_registry().arch(arch).gdb_arch
        script.write_text(
            "set pagination off\nset confirm off\nset auto-connect-native-target off\n"
            f"set architecture {arch_name}\nfile {spin(arch)}\ntarget remote {sock}\n"
            f"set var *(int *){iterations:#x} = {hits}\n"
            + probe_lines.format(inc=f"{inc:#x}") + "continue\n")
        start = time.perf_counter()
        qemu = _qemu(arch, sock)
        subprocess.run(["gdb-multiarch", "-nx", "-batch", "-x", str(script)], capture_output=True, check=True,
                       timeout=600)
        qemu.wait(timeout=30)
        return time.perf_counter() - start


@contextlib.contextmanager
def _gdbserver(prog: Path) -> Iterator[str]:
    """gdbserver running ``prog`` natively, on loopback: its remote, as gdb's ``target remote`` takes it."""
    import re

    proc = subprocess.Popen(["gdbserver", "--once", "127.0.0.1:0", str(prog)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    said = b""
    deadline = time.monotonic() + 10
    while (port := re.search(rb"Listening on port (\d+)", said)) is None:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"gdbserver did not start: {said!r}")
        said += proc.stderr.read1(256)
    try:
        yield f"127.0.0.1:{int(port.group(1))}"
    finally:
        proc.wait(timeout=30)


def run_gdb_commands_gdbserver(arch: str, hits: int) -> float:
    """gdb's own loop on gdbserver: a software breakpoint (gdbserver plants an int3) whose
    ``commands`` continue silently."""
    inc, iterations = _addresses(arch)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "loop.gdb"
        start = time.perf_counter()
        with _gdbserver(spin(arch)) as remote:
            script.write_text(
                "set pagination off\nset confirm off\n"
                f"file {spin(arch)}\ntarget remote {remote}\n"
                f"set var *(int *){iterations:#x} = {hits}\n"
                f"break *{inc:#x}\ncommands\nsilent\ncontinue\nend\ncontinue\n")
            subprocess.run(["gdb-multiarch", "-nx", "-batch", "-x", str(script)], capture_output=True, check=True,
                           timeout=600)
        return time.perf_counter() - start


#: the gdbserver row kind (``--gdbserver``): the host's own arch run natively under gdbserver
GDBSERVER_LOOPS: dict[str, Callable[[str, int], float]] = {
    "kpsdk": functools.partial(run_kpsdk, scheme="native"), "gdb commands": run_gdb_commands_gdbserver,
}


def run_gdb_commands(arch: str, hits: int) -> float:
    """gdb's own loop: a hardware breakpoint whose ``commands`` continue silently."""
    return _run_gdb_script(arch, hits, "hbreak *{inc}\ncommands\nsilent\ncontinue\nend\n")


def run_gdb_python(arch: str, hits: int) -> float:
    """The floor of kpsdk's path: gdb with a Python breakpoint (software, as kpsdk's) whose
    ``stop()`` returns False at once, with no host to ask.  kpsdk's hit is this plus the
    round trip to the host and the handler (``--floor``)."""
    return _run_gdb_script(arch, hits, "python\nclass Floor(gdb.Breakpoint):\n    def stop(self):\n"
                                       "        return False\nFloor('*{inc}', internal=True)\nend\n")


def run_pygdbmi(arch: str, hits: int) -> float:
    from pygdbmi.gdbcontroller import GdbController

    inc, iterations = _addresses(arch)
    arch_name = kpsdk.get_registry().arch(arch).gdb_arch
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "gdb.sock"
        start = time.perf_counter()
        qemu = _qemu(arch, sock)
        gdb = GdbController(["gdb-multiarch", "--nx", "--quiet", "--interpreter=mi3"])
        try:
            for cmd in ("-gdb-set auto-connect-native-target off", f"-gdb-set architecture {arch_name}",
                        f"-file-exec-and-symbols {spin(arch)}", f"-target-select remote {sock}",
                        f"-data-evaluate-expression *(int*){iterations:#x}={hits}", f"-break-insert -h *{inc:#x}"):
                gdb.write(cmd, timeout_sec=30)  # a loaded machine answers late
            seen = 0
            while True:  # the usual pygdbmi loop: write, then poll get_gdb_response
                gdb.write("-exec-continue", read_response=False)
                stopped = None
                deadline = time.monotonic() + 30
                while stopped is None and time.monotonic() < deadline:
                    for r in gdb.get_gdb_response(timeout_sec=0, raise_error_on_timeout=False):
                        if r["message"] == "stopped":
                            stopped = r["payload"] or {}
                if stopped is None:
                    raise RuntimeError("pygdbmi loop: no *stopped within 30 s")
                if str(stopped.get("reason", "")).startswith("exited"):
                    break
                seen += 1
            assert seen == hits, (seen, hits)
        finally:
            gdb.exit()
            qemu.wait(timeout=30)
        return time.perf_counter() - start


LOOPS: dict[str, Callable[[str, int], float]] = {
    "kpsdk": run_kpsdk, "gdb commands": run_gdb_commands, "pygdbmi": run_pygdbmi,
    "kpsdk post_handler": functools.partial(run_kpsdk, kind="post_handler"),
    "kpsdk kretprobe": functools.partial(run_kpsdk, kind="kretprobe"),
}
#: what runs next to a competing busy process
CONTENDED = ("kpsdk", "gdb commands")
#: ``--floor``: gdb's Python breakpoint alone, measured with the others (idle and contended)
FLOOR = "gdb python floor"


def rate(loop: Callable[[str, int], float], arch: str, hits: int) -> float:
    base = min(loop(arch, 0) for _ in range(2))
    return hits / max(1e-9, loop(arch, hits) - base)


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """One competing process that wants a whole CPU, for the contended configuration."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let it get going
        yield
    finally:
        proc.kill()
        proc.wait()


def interleaved(names: tuple[str, ...], arch: str, hits: int, repeats: int) -> dict[str, list[float]]:
    """Each loop's rate ``repeats`` times, the loops taking turns: a machine whose load
    changes during the run changes every loop's numbers alike."""
    rates: dict[str, list[float]] = {name: [] for name in names}
    loops = {**LOOPS, FLOOR: run_gdb_python}
    for _ in range(repeats):
        for name in names:
            rates[name].append(rate(loops[name], arch, hits))
    return rates


def summary(rates: dict[str, list[float]]) -> dict[str, Any]:
    """Medians (the row's numbers), the spread (min, max) of each, and the ratios."""
    row: dict[str, Any] = {name: statistics.median(v) for name, v in rates.items()}
    row["spread"] = {name: (min(v), max(v)) for name, v in rates.items()}
    row["ratio"] = row["kpsdk"] / row["gdb commands"]
    if FLOOR in row:
        row["floor/gdb"] = row[FLOOR] / row["gdb commands"]
        row["kpsdk/floor"] = row["kpsdk"] / row[FLOOR]
    if "kpsdk post_handler" in row:
        row["post/pre"] = row["kpsdk post_handler"] / row["kpsdk"]
        row["kretprobe/pre"] = row["kpsdk kretprobe"] / row["kpsdk"]
    return row


@contextlib.contextmanager
def busy_yes() -> Iterator[None]:
    """One competing process that wants a whole CPU: ``yes > /dev/null``."""
    proc = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        yield
    finally:
        proc.kill()
        proc.wait()


def bench_gdbserver(hits: int, repeats: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The gdbserver rows: kpsdk's ``native:`` against gdb's ``commands`` loop on the same
    gdbserver, idle and next to ``yes > /dev/null``, the loops taking turns."""
    arch = "x86_64"
    rows: dict[str, Any] = {}
    for config, context in (("idle", contextlib.nullcontext), ("one busy process", busy_yes)):
        rates: dict[str, list[float]] = {name: [] for name in GDBSERVER_LOOPS}
        with context():
            for _ in range(repeats):
                for name, loop in GDBSERVER_LOOPS.items():
                    rates[name].append(rate(loop, arch, hits))
        row = rows[config] = summary(rates)
        log(f"  gdbserver {config:16} kpsdk {_cell(row, 'kpsdk')}/s  gdb commands {_cell(row, 'gdb commands')}/s  "
            f"kpsdk/gdb {row['ratio']:.2f}x")
    return rows


def bench(archs: tuple[str, ...], hits: int, log: Callable[[str], None] = print,
          contended: bool = True, repeats: int = 3, floor: bool = False) -> dict[str, Any]:
    """Hits per second per arch and loop (medians of ``repeats`` interleaved runs), kpsdk's
    ratio to gdb's own loop, and post_handler and kretprobe hits against pre_handler hits;
    with ``contended``, also kpsdk and gdb's loop next to one competing busy process; with
    ``floor``, gdb's Python breakpoint alone (:func:`run_gdb_python`) in both."""
    extra = (FLOOR,) if floor else ()
    results: dict[str, Any] = {}
    for arch in archs:
        if not spin(arch).exists() or not shutil.which(QEMU[arch]):
            log(f"  {arch}: skipped (no {spin(arch).name} or {QEMU[arch]})")
            continue
        row = summary(interleaved((*LOOPS, *extra), arch, hits, repeats))
        results[arch] = row
        log(f"  {arch:8} kpsdk {row['kpsdk']:6.0f}/s  gdb commands {row['gdb commands']:6.0f}/s  "
            f"pygdbmi {row['pygdbmi']:6.0f}/s  kpsdk/gdb {row['ratio']:.2f}x")
        log(f"  {arch:8} post_handler {row['kpsdk post_handler']:6.0f}/s ({row['post/pre']:.2f}x pre)  "
            f"kretprobe {row['kpsdk kretprobe']:6.0f} calls/s ({row['kretprobe/pre']:.2f}x pre)")
        if floor:
            log(f"  {arch:8} gdb python floor {row[FLOOR]:6.0f}/s ({row['floor/gdb']:.2f}x gdb)  "
                f"kpsdk/floor {row['kpsdk/floor']:.2f}x")
        if contended:
            with busy_process():
                busy = summary(interleaved((*CONTENDED, *extra), arch, hits, repeats))
            row["contended"] = busy
            log(f"  {arch:8} with one busy process: kpsdk {busy['kpsdk']:6.0f}/s  "
                f"gdb commands {busy['gdb commands']:6.0f}/s  kpsdk/gdb {busy['ratio']:.2f}x")
            if floor:
                log(f"  {arch:8} with one busy process: gdb python floor {busy[FLOOR]:6.0f}/s "
                    f"({busy['floor/gdb']:.2f}x gdb)  kpsdk/floor {busy['kpsdk/floor']:.2f}x")
    return results


def _cell(row: dict[str, Any], name: str) -> str:
    low, high = row["spread"][name]
    return f"{row[name]:.0f} ({low:.0f}-{high:.0f})"


def table(results: dict[str, Any], hits: int, repeats: int) -> list[str]:
    """The markdown table of :func:`bench`'s results."""
    import platform

    lines = [f"Live targets, {time.strftime('%Y-%m-%d')}, {platform.node()}: hits/s on qemu-user "
             f"({hits} hits, start-up subtracted; median of {repeats} interleaved runs, (min-max))", "",
             "| arch | kpsdk pre_handler | gdb `commands` loop | plain pygdbmi loop | kpsdk / gdb | "
             "post_handler (/ pre) | kretprobe calls (/ pre) | with one busy process: kpsdk | gdb loop | "
             "kpsdk / gdb |", "|---|---|---|---|---|---|---|---|---|---|"]
    for a, r in results.items():
        c = r.get("contended")
        busy = (f"{_cell(c, 'kpsdk')} | {_cell(c, 'gdb commands')} | {c['ratio']:.2f}x" if c else "- | - | -")
        lines.append(f"| {a} | {_cell(r, 'kpsdk')} | {_cell(r, 'gdb commands')} | {_cell(r, 'pygdbmi')} | "
                     f"{r['ratio']:.2f}x | {_cell(r, 'kpsdk post_handler')} ({r['post/pre']:.2f}x) | "
                     f"{_cell(r, 'kpsdk kretprobe')} ({r['kretprobe/pre']:.2f}x) | {busy} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hits", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per loop (the median is reported)")
    ap.add_argument("--arch", action="append", choices=ARCHS)
    ap.add_argument("--out", type=Path, help="also write the table as markdown here")
    ap.add_argument("--no-contended", action="store_true", help="skip the runs next to a competing busy process")
    ap.add_argument("--gdbserver", action="store_true",
                    help="only the gdbserver rows: the host's x86_64 spin run natively under gdbserver")
    ap.add_argument("--floor", action="store_true",
                    help="also gdb's Python breakpoint alone, no host: the floor of kpsdk's path")
    args = ap.parse_args(argv)
    if args.gdbserver:
        print(f"gdbserver: {args.hits} probe hits, the host's own run, median of {args.repeats}")
        bench_gdbserver(args.hits, args.repeats)
        return 0
    print(f"live targets: {args.hits} probe hits on qemu-user, per arch, median of {args.repeats}")
    results = bench(tuple(args.arch or ARCHS), args.hits, contended=not args.no_contended, repeats=args.repeats,
                    floor=args.floor)
    if args.out:
        args.out.write_text("\n".join(table(results, args.hits, args.repeats)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
