"""Values read at kpsdk's hits (``regs.var``) and kpsdk's backtraces (``s.backtrace``), against gdb.

- **Values**: the corpus fixture runs in Unicorn with a kprobe at each function's probe address
  and each line's first address; at the first hit of each, ``regs.var(path)`` reads every scalar
  gdb printed at the first stop at that pc when the same program ran natively under gdb
  (tests/dwarf_gdbcheck.py: ``print`` of each variable in scope, flattened to ``buf.fl.mode``).
  Two runs are compared, so what differs between runs is left out, and counted: pointers (the
  stack and the loader's mappings are elsewhere in Unicorn than under Linux) and what was read
  through them or left on the stack by earlier code.  Goal: equal on >= 99% of the rest.
- **Backtraces**: Debian's own code, built without frame pointers: ``sort`` and libc natively
  (x86_64, the machine's), and the corpus's aarch64 program with Debian's arm64 libc under
  qemu-aarch64; at the first call of libc's ``write``, kpsdk's stack (CFI through libc) must
  be gdb's ``bt`` frame for frame, as (file, link-time address), down to ``_start``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import site
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk.binfmt.dwarf import DebugInfo, line_at
from kpsdk.errors import DebugInfoError, TargetFault
from tests.conftest import require_tool
from tests.dwarfcorpus import (
    FIXTURE_FUNCTIONS,
    REPO,
    TOOLCHAINS,
    Corpus,
    _free_port,
    _listening,
    gdb_check,
    shared_corpus,
)
from tests.test_dwarf_gdb import stops_of

BT_SCRIPT = REPO / "tests" / "source_btcheck.py"


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return shared_corpus(tmp_path_factory)


def hit_values(spec: str, wanted: dict[int, list[str]], **options: Any) -> dict[tuple[int, str], Any]:
    """``regs.var(path)`` for each (file pc, path) at the first hit of a kprobe at that pc, on the
    target ``spec``; a value as a comparable number, ``("pointer",)`` for pointers, or the
    error's name."""
    s = kpsdk.open(spec, **options)
    bias = s.debug.program().bias
    got: dict[tuple[int, str], Any] = {}

    def reader(pc: int) -> Any:
        def pre(p: Any, regs: Any) -> int:
            if (pc, "") in got:
                return 0
            got[(pc, "")] = True
            for path in wanted[pc]:
                try:
                    value = regs.var(path)
                except (DebugInfoError, TargetFault) as e:
                    got[(pc, path)] = type(e).__name__
                    continue
                real = value.type.strip()
                if real.kind == "pointer":
                    got[(pc, path)] = ("pointer",)
                elif real.encoding == "float":
                    got[(pc, path)] = value.float()
                else:
                    got[(pc, path)] = int(value) & ((1 << (8 * len(value.raw))) - 1)
            return 0

        return pre

    s.register_kprobes([kpsdk.Kprobe(addr=pc + bias, pre_handler=reader(pc)) for pc in wanted])
    s.run(timeout=120)
    s.close()
    return got


@pytest.mark.parametrize("opt", ["0", "2"])
@pytest.mark.parametrize("kind", ["native", "elf"])
def test_values_at_hits_equal_gdbs(corpus: Corpus, tmp_path: Path, opt: str, kind: str) -> None:
    """``native:``: the program runs natively under gdbserver, as under gdb, so even what earlier
    code left on the stack (an uninitialized local at -O0) is the same; ``elf:``: in Unicorn,
    whose startup leaves other bytes there (no vDSO: libc's start takes other paths)."""
    if kind == "native":
        require_tool("gdbserver", "gdbserver")
    program = corpus.fixture("x86_64", opt)
    result = gdb_check(TOOLCHAINS["x86_64"], program, stops_of(program, FIXTURE_FUNCTIONS), tmp_path)
    reads = [v for v in result["values"] if v["gdb"] is not None and v["gdb"] != "synthetic"]
    wanted: dict[int, list[str]] = {}
    for v in reads:
        wanted.setdefault(v["pc"], []).append(v["path"])
    if kind == "native":
        with same_layout_as_gdb():
            ours = hit_values(f"native:{program}", wanted)
    else:
        ours = hit_values(f"elf:{program}", wanted, sysroot="/")
    dbg = DebugInfo.open(program)
    compared = equal = pointers = unset = 0
    diffs = []
    for v in reads:
        mine = ours.get((v["pc"], v["path"]))
        if mine == ("pointer",) or "->" in v["path"] or v["path"].startswith("*"):
            pointers += 1  # an address, or read through one: where the runs put things differs
            continue
        if not_yet_set(dbg, v["pc"], v["path"]):
            unset += 1  # what earlier code left in its stack slot: the run's, not the program's
            continue
        compared += 1
        if mine == v["gdb"] or (isinstance(mine, float) and isinstance(v["gdb"], float) and
                                (mine != mine and v["gdb"] != v["gdb"])):
            equal += 1
        else:
            diffs.append(f"{v['pc']:#x} {v['function']} {v['path']}: gdb {v['gdb']}, kpsdk at a hit {mine}")
    print(f"x86_64 -O{opt} {kind}: {equal}/{compared} values read at kpsdk's hits equal gdb's print "
          f"({pointers} pointers and reads through them, {unset} locals not set yet, not compared); "
          f"differences: {diffs[:8]}")
    assert compared >= 300
    # in Unicorn, a slot no store reached (a store the compiler dropped: main's o1.in.b at -O2)
    # holds what its startup left, not what Linux's did: those few are allowed there
    assert equal / compared >= (0.99 if kind == "native" else 0.97), "\n".join(diffs[:30])


@contextlib.contextmanager
def same_layout_as_gdb() -> Iterator[None]:
    """The programs started here laid out as gdb lays its out: without address randomization
    (gdb's ``disable-randomization``; children inherit the personality), so the addresses an
    uninitialized slot may hold are the same in both runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    old = libc.personality(0xFFFFFFFF)
    libc.personality(old | ADDR_NO_RANDOMIZE)
    try:
        yield
    finally:
        libc.personality(old)


#: personality(2)'s flag that turns address randomization off for the processes started after
ADDR_NO_RANDOMIZE = 0x0040000


def not_yet_set(dbg: DebugInfo, pc: int, path: str) -> bool:
    """A local at a pc on or before its declaration's line (the first hit is the first pass): its
    stack slot holds whatever the code before left there, which differs from run to run."""
    scope = dbg.scope(pc)
    var = scope.lookup(path.split(".")[0].split("[")[0])
    found = line_at(dbg, pc)
    if var is None or var.kind != "local" or found is None:
        return False
    return found[1] <= var.line


# -- backtraces ------------------------------------------------------------------------------------


def gdb_backtrace(spec: dict[str, Any], work: Path, gdb: str, qemu: list[str] | None = None) -> list[list[Any]]:
    """gdb's frames at the first stop of ``spec['break']`` (tests/source_btcheck.py)."""
    spec_path, out_path = work / "bt.spec.json", work / "bt.json"
    spec = dict(spec, out=str(out_path))
    env = dict(os.environ, KPSDK_GDB_SPEC=str(spec_path),
               KPSDK_GDB_SYSPATH=json.dumps([str(REPO), *site.getsitepackages()]))
    proc = None
    if qemu is not None:
        port = _free_port()
        proc = subprocess.Popen([*qemu[:1], "-g", str(port), *qemu[1:]], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=spec.get("cwd"))
        spec["remote"] = f"127.0.0.1:{port}"
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _listening(port) and proc.poll() is None:
            time.sleep(0.05)
    spec_path.write_text(json.dumps(spec))
    try:
        r = subprocess.run([gdb, "-nx", "-batch", "-x", str(BT_SCRIPT)], env=env, capture_output=True, text=True,
                           timeout=300, cwd=spec.get("cwd"))
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
    if not out_path.exists():
        raise AssertionError(f"gdb wrote no backtrace: {r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return list(json.loads(out_path.read_text())["frames"])


def kpsdk_backtrace(spec: str, function: str, **options: Any) -> list[tuple[str, int]]:
    """kpsdk's frames at the first hit of a uprobe on libc's ``function``, as (file, link address)."""
    s = kpsdk.open(spec, **options)
    frames: list[tuple[str, int]] = []

    @s.uprobe(f"libc.so.6:{function}")
    def on_call(p: Any, regs: Any) -> int:
        if not frames:
            for frame in s.backtrace(regs):
                where = s.debug.file_at(frame.pc)
                frames.append((where.path.name, frame.pc - where.bias) if where else ("?", frame.pc))
        return 0

    s.run(timeout=120)
    s.close()
    return frames


def _compare(theirs: list[list[Any]], ours: list[tuple[str, int]]) -> None:
    names = [name for _, _, name in theirs]
    # gdb goes on past _start into whatever the stack holds; the CFI of _start ends kpsdk's walk
    end = names.index("_start") + 1 if "_start" in names else len(theirs)
    want = [(file, address) for file, address, _ in theirs[:end]]
    assert len(want) >= 5, theirs
    assert ours[:len(want)] == want, f"gdb: {theirs}\nkpsdk: {ours}"


def test_debian_sort_backtrace_through_libc_equals_gdbs(tmp_path: Path) -> None:
    """x86_64: Debian's /usr/bin/sort (no frame pointers) at libc's write, natively under gdb."""
    gdb = require_tool("gdb", "gdb")
    data = tmp_path / "in.txt"
    data.write_text("banana\napple\ncherry\n")
    theirs = gdb_backtrace({"program": "/usr/bin/sort", "args": [str(data)], "break": "write"}, tmp_path, gdb)
    ours = kpsdk_backtrace("elf:/usr/bin/sort", "write", sysroot="/", args=[str(data)])
    _compare(theirs, ours)


def test_aarch64_backtrace_through_debians_libc_under_qemu_user_equals_gdbs(corpus: Corpus, tmp_path: Path) -> None:
    """aarch64: the corpus fixture (-O2) with Debian's arm64 libc (libc6-arm64-cross), under
    qemu-aarch64 and gdb-multiarch; in kpsdk, in Unicorn with the same sysroot."""
    gdb = require_tool("gdb-multiarch", "gdb-multiarch")
    qemu = require_tool("qemu-aarch64", "qemu-user")
    program = corpus.fixture("aarch64", "2")
    root = TOOLCHAINS["aarch64"].sysroot
    assert root is not None
    theirs = gdb_backtrace({"program": str(program), "break": "*write", "sysroot": root}, tmp_path, gdb,
                           [qemu, "-L", root, str(program)])
    ours = kpsdk_backtrace(f"elf:{program}", "write", sysroot=root)
    _compare(theirs, ours)
