"""Live-target benchmark: probe hits per second on qemu-user, per architecture.

Three loops over the same binary (``bench/spin``: ``inc()`` called N times)
and the same QEMU, each timed for N hits and for 0 hits so start-up and exit
cancel out (rate = N / (T_N - T_0)):

- kpsdk: a kprobe on ``inc`` with an empty pre_handler;
- gdb's own loop: ``break *inc`` with ``commands; silent; continue; end``;
- a plain pygdbmi loop: ``GdbController``, ``-exec-continue``, wait for ``*stopped``.

Each arch is measured twice: on an idle machine, and with one competing busy
process (a Python ``while True: pass``) started for the time of the
measurement, as on a machine shared with other work (``--no-contended``
skips it; the plain pygdbmi loop runs only in the idle configuration).

Run: ``python bench/live.py [--hits N] [--arch A ...]`` (``nox -s bench`` runs it too).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kpsdk
from kpsdk.elfimage import load_elf

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


def run_kpsdk(arch: str, hits: int) -> float:
    start = time.perf_counter()
    with kpsdk.open(f"qemu-user:{spin(arch)}") as s:
        s.write_memory(s.symbols.get("iterations").address, hits.to_bytes(4, s.arch.endian))
        if hits:
            kp = kpsdk.Kprobe(symbol_name="inc", pre_handler=lambda p, r: 0)
            s.register_kprobe(kp)
        assert s.run(timeout=600) is not None
        if hits:
            assert kp.hits == hits, (kp.hits, hits)
    return time.perf_counter() - start


def run_gdb_commands(arch: str, hits: int) -> float:
    inc, iterations = _addresses(arch)
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "gdb.sock"
        script = Path(tmp) / "loop.gdb"
        arch_name = kpsdk.get_registry().arch(arch).gdb_arch
        script.write_text(
            "set pagination off\nset confirm off\nset auto-connect-native-target off\n"
            f"set architecture {arch_name}\nfile {spin(arch)}\ntarget remote {sock}\n"
            f"set var *(int *){iterations:#x} = {hits}\n"
            f"hbreak *{inc:#x}\ncommands\nsilent\ncontinue\nend\ncontinue\n")
        start = time.perf_counter()
        qemu = _qemu(arch, sock)
        subprocess.run(["gdb-multiarch", "-nx", "-batch", "-x", str(script)], capture_output=True, check=True,
                       timeout=600)
        qemu.wait(timeout=30)
        return time.perf_counter() - start


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
                gdb.write(cmd)
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
}


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


def bench(archs: tuple[str, ...], hits: int, log: Callable[[str], None] = print,
          contended: bool = True) -> dict[str, Any]:
    """Hits per second per arch and loop, and kpsdk's ratio to gdb's own loop; with
    ``contended``, also kpsdk and gdb's loop next to one competing busy process."""
    results: dict[str, Any] = {}
    for arch in archs:
        if not spin(arch).exists() or not shutil.which(QEMU[arch]):
            log(f"  {arch}: skipped (no {spin(arch).name} or {QEMU[arch]})")
            continue
        row = {name: rate(loop, arch, hits) for name, loop in LOOPS.items()}
        row["ratio"] = row["kpsdk"] / row["gdb commands"]
        results[arch] = row
        log(f"  {arch:8} kpsdk {row['kpsdk']:6.0f}/s  gdb commands {row['gdb commands']:6.0f}/s  "
            f"pygdbmi {row['pygdbmi']:6.0f}/s  kpsdk/gdb {row['ratio']:.2f}x")
        if contended:
            with busy_process():
                busy = {name: rate(LOOPS[name], arch, hits) for name in ("kpsdk", "gdb commands")}
            busy["ratio"] = busy["kpsdk"] / busy["gdb commands"]
            row["contended"] = busy
            log(f"  {arch:8} with one busy process: kpsdk {busy['kpsdk']:6.0f}/s  "
                f"gdb commands {busy['gdb commands']:6.0f}/s  kpsdk/gdb {busy['ratio']:.2f}x")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hits", type=int, default=3000)
    ap.add_argument("--arch", action="append", choices=ARCHS)
    ap.add_argument("--out", type=Path, help="also write the table as markdown here")
    ap.add_argument("--no-contended", action="store_true", help="skip the runs next to a competing busy process")
    args = ap.parse_args(argv)
    print(f"live targets: {args.hits} probe hits on qemu-user, per arch")
    results = bench(tuple(args.arch or ARCHS), args.hits, contended=not args.no_contended)
    if args.out:
        import platform

        lines = [f"Live targets, {time.strftime('%Y-%m-%d')}, {platform.node()}: hits/s on qemu-user "
                 f"({args.hits} hits, start-up subtracted)", "",
                 "| arch | kpsdk | gdb `commands` loop | plain pygdbmi loop | kpsdk / gdb | with one busy process: "
                 "kpsdk | gdb loop | kpsdk / gdb |", "|---|---|---|---|---|---|---|---|"]
        for a, r in results.items():
            c = r.get("contended")
            busy = f"{c['kpsdk']:.0f} | {c['gdb commands']:.0f} | {c['ratio']:.2f}x" if c else "- | - | -"
            lines.append(f"| {a} | {r['kpsdk']:.0f} | {r['gdb commands']:.0f} | {r['pygdbmi']:.0f} | "
                         f"{r['ratio']:.2f}x | {busy} |")
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
