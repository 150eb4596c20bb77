"""The DWARF test corpus: kpsdk's fixture (tests/programs/dwfix.c) and a real C project (LZ4,
from its PyPI sdist) built with each cross compiler, and the oracles that judge kpsdk's answers
on it: ``perf probe`` (``-V``, ``-L``) and gdb (values and backtraces at a breakpoint, under
qemu-user for other architectures).

Builds are cached for the session by the ``dwarf_corpus`` fixture (tests/test_dwarf*.py);
each oracle is a function that returns what the tool printed, parsed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kpsdk.cache import cache_root
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "programs" / "dwfix.c"
GDB_SCRIPT = REPO / "tests" / "dwarf_gdbcheck.py"
#: the real project: LZ4's library, as the lz4 PyPI sdist bundles it (lz4libs/)
LZ4_SDIST = "lz4==4.4.5"


@dataclass(frozen=True)
class Toolchain:
    """How to build and run programs of one architecture."""

    arch: str
    gcc: str
    gcc_package: str
    flags: tuple[str, ...] = ()
    qemu: str | None = None
    sysroot: str | None = None

    def require(self) -> str:
        return require_tool(self.gcc, self.gcc_package)


TOOLCHAINS = {
    "x86_64": Toolchain("x86_64", "x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu"),
    "i386": Toolchain("i386", "i686-linux-gnu-gcc", "gcc-i686-linux-gnu", (), "qemu-i386", "/usr/i686-linux-gnu"),
    "arm": Toolchain("arm", "arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf", ("-marm",), "qemu-arm",
                     "/usr/arm-linux-gnueabihf"),
    "thumb": Toolchain("thumb", "arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf", ("-mthumb",), "qemu-arm",
                       "/usr/arm-linux-gnueabihf"),
    "riscv64": Toolchain("riscv64", "riscv64-linux-gnu-gcc", "gcc-riscv64-linux-gnu", (), "qemu-riscv64",
                         "/usr/riscv64-linux-gnu"),
    "ppc64": Toolchain("ppc64", "powerpc64-linux-gnu-gcc", "gcc-powerpc64-linux-gnu", (), "qemu-ppc64",
                       "/usr/powerpc64-linux-gnu"),
    "aarch64": Toolchain("aarch64", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", (), "qemu-aarch64",
                         "/usr/aarch64-linux-gnu"),
    "ppc64le": Toolchain("ppc64le", "powerpc64le-linux-gnu-gcc", "gcc-powerpc64le-linux-gnu", (), "qemu-ppc64le",
                         "/usr/powerpc64le-linux-gnu"),
    "mips": Toolchain("mips", "mips-linux-gnu-gcc", "gcc-mips-linux-gnu", (), "qemu-mips", "/usr/mips-linux-gnu"),
    "mipsel": Toolchain("mipsel", "mipsel-linux-gnu-gcc", "gcc-mipsel-linux-gnu", (), "qemu-mipsel",
                        "/usr/mipsel-linux-gnu"),
    "mips64el": Toolchain("mips64el", "mips64el-linux-gnuabi64-gcc", "gcc-mips64el-linux-gnuabi64", (),
                          "qemu-mips64el", "/usr/mips64el-linux-gnuabi64"),
}

#: the fixture's functions every oracle is asked about
FIXTURE_FUNCTIONS = ("parse_line", "many_locals", "use_inline", "walk", "deep1", "deep2", "deep3", "fact", "main",
                     "scale")


def build(tc: Toolchain, sources: list[Path], out: Path, opt: str, dwarf: str = "", extra: tuple[str, ...] = ()) \
        -> Path:
    """Compile and link ``sources`` with ``tc`` at ``-O<opt>`` with ``-g`` (or ``-gdwarf-<dwarf>``)."""
    tc.require()
    debug = f"-gdwarf-{dwarf}" if dwarf else "-g"
    cmd = [tc.gcc, f"-O{opt}", debug, *tc.flags, *extra, "-w", *map(str, sources), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return out


def split_debug(program: Path) -> tuple[Path, Path]:
    """A stripped copy of ``program`` with a ``.gnu_debuglink`` to its debug file (objcopy's
    ``--only-keep-debug``): (stripped, debug file)."""
    require_tool("objcopy", "binutils")
    debug = program.with_name(program.name + ".debug")
    stripped = program.with_name(program.name + ".stripped")
    subprocess.run(["objcopy", "--only-keep-debug", str(program), str(debug)], check=True, timeout=60)
    subprocess.run(["objcopy", "--strip-debug", "--strip-unneeded", f"--add-gnu-debuglink={debug}", str(program),
                    str(stripped)], check=True, timeout=60)
    return stripped, debug


def lz4_sources(into: Path) -> list[Path]:
    """LZ4's library sources, from the lz4 sdist on PyPI (pip download), unpacked in ``into``."""
    cache = cache_root() / "test-sources"
    cache.mkdir(parents=True, exist_ok=True)
    archives = sorted(cache.glob("lz4-*.tar.gz"))
    if not archives:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d",
                            str(cache), LZ4_SDIST], capture_output=True, text=True, timeout=600)
        archives = sorted(cache.glob("lz4-*.tar.gz"))
        if not archives:
            message = f"the lz4 sdist could not be downloaded from PyPI: {r.stderr[-300:]}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    with tarfile.open(archives[-1]) as tar:
        members = [m for m in tar.getmembers() if "/lz4libs/" in m.name and m.isfile()]
        tar.extractall(into, members=members, filter="data")
    lib = next(into.glob("lz4-*/lz4libs"))
    return [lib / "lz4.c", lib / "lz4hc.c", lib / "lz4frame.c", lib / "xxhash.c"]


LZ4_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "lz4.h"
#include "lz4hc.h"
#include "lz4frame.h"
int main(void)
{
    static char src[4096], dst[8192], back[4096];
    for (int i = 0; i < (int)sizeof(src); i++)
        src[i] = "the quick brown fox jumps over the lazy dog"[i % 43] ^ (char)(i / 512);
    int n = LZ4_compress_default(src, dst, sizeof(src), sizeof(dst));
    int h = LZ4_compress_HC(src, dst, sizeof(src), sizeof(dst), 9);
    int m = LZ4_decompress_safe(dst, back, h, sizeof(back));
    size_t f = LZ4F_compressFrame(dst, sizeof(dst), src, sizeof(src), NULL);
    printf("%d %d %d %zu %d\n", n, h, m, f, memcmp(src, back, sizeof(src)));
    return 0;
}
"""


# -- perf probe ------------------------------------------------------------------------------------


def perf() -> str:
    return require_tool("perf", "linux-perf")


def _parse_vars(text: str) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """``perf probe -V`` output: function -> probe point (``@<fn+off>``) -> [(type, name)]."""
    out: dict[str, dict[str, list[tuple[str, str]]]] = {}
    points: dict[str, list[tuple[str, str]]] | None = None
    current = None
    for line in text.splitlines():
        if line.startswith("Available variables at "):
            points = out.setdefault(line.removeprefix("Available variables at ").strip(), {})
            current = None
        elif line.startswith("\t@<") and points is not None:
            current = line.strip()
            points.setdefault(current, [])
        elif line.startswith("\t\t") and points is not None and current is not None:
            text_ = line.strip()
            if not text_.startswith("(No matched variables)"):
                kind, _, name = text_.rpartition("\t")
                points[current].append((kind, name))
    return out


def perf_vars(program: Path, spec: str) -> dict[str, list[tuple[str, str]]] | None:
    """``perf probe -x PROGRAM -V SPEC``: probe point (``@<fn+off>``) -> [(type, name)]; None
    when perf finds no such probe point."""
    return perf_vars_many(program, [spec]).get(spec)


def perf_vars_many(program: Path, specs: list[str], batch: int = 40) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """:func:`perf_vars` of many specs, ``batch`` to a perf run (perf stops at the first spec it
    cannot find: that batch is asked again one spec at a time)."""
    out: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for i in range(0, len(specs), batch):
        group = specs[i:i + batch]
        args = [a for spec in group for a in ("-V", spec)]
        r = subprocess.run([perf(), "probe", "-x", str(program), *args], capture_output=True, text=True, timeout=300)
        found = _parse_vars(r.stdout)
        if r.returncode != 0 and len(group) > 1:
            for spec in group:
                if spec not in found:
                    found.update(perf_vars_many(program, [spec]))
        out.update(found)
    return out


def perf_lines(program: Path, function: str) -> list[int] | None:
    """``perf probe -L FUNCTION``'s numbered lines (offsets from the declaration line)."""
    r = subprocess.run([perf(), "probe", "-x", str(program), "-L", function], capture_output=True, text=True,
                       timeout=120)
    if not r.stdout.startswith("<"):
        return None
    return [int(m.group(1)) for line in r.stdout.splitlines()[1:] if (m := re.match(r"\s*(\d+)\s\s", line))]


# -- gdb -------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    """Whether something listens on ``port`` (from /proc/net/tcp: state 0A)."""
    try:
        table = Path("/proc/net/tcp").read_text()
    except OSError:
        return True
    return any(f":{port:04X} " in line and line.split()[3] == "0A" for line in table.splitlines()[1:])


def gdb_check(tc: Toolchain, program: Path, stops: list[int], work: Path,
              library_breaks: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``program`` under gdb (under qemu-user -g for a cross arch), stop at ``stops`` (file
    addresses) and compare there (tests/dwarf_gdbcheck.py); its JSON result."""
    spec_path, out_path = work / f"{program.name}.spec.json", work / f"{program.name}.gdb.json"
    spec: dict[str, object] = {"program": str(program), "stops": sorted(set(stops)), "out": str(out_path),
                               "library_breaks": list(library_breaks)}
    env = dict(os.environ, KPSDK_GDB_SPEC=str(spec_path),
               KPSDK_GDB_SYSPATH=json.dumps([str(REPO), *site.getsitepackages()]))
    qemu = None
    if tc.qemu is None:
        gdb = require_tool("gdb", "gdb")
    else:
        gdb = require_tool("gdb-multiarch", "gdb-multiarch")
        qemu_path = require_tool(tc.qemu, "qemu-user")
        port = _free_port()
        qemu = subprocess.Popen([qemu_path, "-g", str(port), "-L", str(tc.sysroot), str(program)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spec.update(remote=f"127.0.0.1:{port}", sysroot=tc.sysroot)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _listening(port) and qemu.poll() is None:
            time.sleep(0.05)  # (a test connection would be taken for gdb's, and its close for a detach)
    spec_path.write_text(json.dumps(spec))
    try:
        r = subprocess.run([gdb, "-nx", "-batch", "-x", str(GDB_SCRIPT)], env=env, capture_output=True, text=True,
                           timeout=300)
    finally:
        if qemu is not None:
            qemu.kill()
            qemu.wait(timeout=10)
    if not out_path.exists():
        raise AssertionError(f"gdb wrote no result: {r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return dict(json.loads(out_path.read_text()))


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


class Corpus:
    """The corpus of one test session: each program built once, on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[tuple[str, ...], Path] = {}

    def fixture(self, arch: str, opt: str = "2", dwarf: str = "") -> Path:
        """dwfix.c for ``arch`` at ``-O<opt>`` (``-gdwarf-<dwarf>``, else ``-g``: DWARF 5)."""
        key = ("dwfix", arch, opt, dwarf)
        if key not in self._built:
            name = f"dwfix-{arch}-O{opt}" + (f"-d{dwarf}" if dwarf else "")
            self._built[key] = build(TOOLCHAINS[arch], [FIXTURE], self.root / name, opt, dwarf)
        return self._built[key]

    def lz4(self, arch: str = "x86_64", opt: str = "2") -> Path:
        """LZ4's library and a small driver for ``arch`` at ``-O<opt>``."""
        key = ("lz4", arch, opt)
        if key not in self._built:
            srcdir = self.root / "lz4-src"
            if not srcdir.exists():
                srcdir.mkdir()
            sources = lz4_sources(srcdir)
            driver = srcdir / "lz4main.c"
            driver.write_text(LZ4_MAIN)
            self._built[key] = build(TOOLCHAINS[arch], [driver, *sources], self.root / f"lz4-{arch}-O{opt}", opt,
                                     extra=("-I", str(sources[0].parent)))
        return self._built[key]


_SHARED: list[Corpus] = []


def shared_corpus(factory: pytest.TempPathFactory) -> Corpus:
    """The session's one corpus (each test module's ``corpus`` fixture returns it)."""
    if not _SHARED:
        _SHARED.append(Corpus(factory.mktemp("dwarf-corpus")))
    return _SHARED[0]
