"""Shared libraries under qemu-user: the link map, uprobes in libc and in a dlopen'ed
library, symbols from .dynsym, sysroots, on every architecture.

Ground truth is the program itself: tests/libprogs/calls.c, built here with Debian's
(cross) compilers, prints the objects dl_iterate_phdr(3) reports, the values it passed to
malloc, strlen and a dlopen'ed library's lib_mix and what they returned; the probes must
see the same values, in the same order.  Debian's own /bin/ls and /usr/bin/sort (stripped
programs, nothing of kpsdk's) are checked against their output and a native run.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import given
from hypothesis import strategies as st

import kpsdk
from kpsdk.errors import KpsdkError, NeverMappedWarning, TargetError, TargetFault, ToolMissingError
from kpsdk.linkmap import LinkMap, parse_auxv
from kpsdk.plugins import uprobes as uprobes_plugin
from kpsdk.targets.qemu import choose_sysroot
from tests.conftest import QEMU, fuzz_examples, require_tool

HERE = Path(__file__).parent / "libprogs"
#: per arch: the compiler, its Debian package and the flags that pick the instruction set
COMPILERS = {
    "x86_64": ("gcc", "gcc", ()),
    "i386": ("i686-linux-gnu-gcc", "gcc-i686-linux-gnu", ()),
    "arm": ("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf", ("-marm",)),
    "thumb": ("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf", ("-mthumb",)),
    "riscv64": ("riscv64-linux-gnu-gcc", "gcc-riscv64-linux-gnu", ()),
    "ppc64": ("powerpc64-linux-gnu-gcc", "gcc-powerpc64-linux-gnu", ()),
}
LIBC = "libc.so.6"


@pytest.fixture(autouse=True)
def _no_system_wide_leftovers() -> Iterator[None]:
    yield
    for up in list(uprobes_plugin._system.values()):
        kpsdk.unregister_uprobe(up)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """calls.c and mix.c built for an arch on first use: ``built[arch] -> (program, library)``."""
    out = tmp_path_factory.mktemp("libprogs")

    class Builds(dict[str, tuple[Path, Path]]):
        def __missing__(self, arch: str) -> tuple[Path, Path]:
            cc, package, flags = COMPILERS[arch]
            compiler = require_tool(cc, package)
            prog, lib = out / f"calls-{arch}", out / f"libmix-{arch}.so"
            for cmd in ([compiler, *flags, "-O0", "-fno-builtin", "-o", str(prog), str(HERE / "calls.c"), "-ldl"],
                        [compiler, *flags, "-O0", "-shared", "-fPIC", "-o", str(lib), str(HERE / "mix.c")]):
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr}"
            self[arch] = (prog, lib)
            return prog, lib

    return Builds()


def open_user(prog: Path, arch: str, **options: object) -> kpsdk.Session:
    require_tool(QEMU[arch], "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    return kpsdk.open(f"qemu-user:{prog}", **options)  # type: ignore[arg-type]


def report(console: str, word: str) -> list[list[str]]:
    """The program's report lines starting with ``word``, split into fields."""
    return [line.split()[1:] for line in console.splitlines() if line.split()[:1] == [word]]


def is_ifunc(path: Path, name: str) -> bool:
    """Whether the file's dynamic symbol ``name`` is STT_GNU_IFUNC, read with pyelftools directly."""
    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".dynsym")
        return any(sym.name == name and sym["st_info"]["type"] in ("STT_LOOS", "STT_GNU_IFUNC")
                   for sym in table.iter_symbols())


def libc_of(s: kpsdk.Session) -> kpsdk.target.MappedFile:
    return next(mf for mf in s.target.mapped_files() if mf.path.name == LIBC)


# -- the link map against dl_iterate_phdr, and every probe against the program's report ----------


@pytest.mark.parametrize("arch", ["x86_64", "i386", "arm", "thumb", "riscv64", "ppc64"])
def test_library_probes_see_what_the_program_passed(arch: str, built: dict[str, tuple[Path, Path]]) -> None:
    prog, lib = built[arch]
    mallocs: list[int] = []
    returned: list[int] = []
    lengths: list[tuple[str, int]] = []
    written = bytearray()
    mixes: list[tuple[int, int]] = []
    mix_returns: list[int] = []
    loaded: list[str] = []
    s = open_user(prog, arch, args=[str(lib)])
    try:
        main = s.target.mapped_files()[0]
        libc = libc_of(s)

        def from_main(ri: kpsdk.KretprobeInstance) -> bool:
            """A call the program made (not one inside libc): its return lands in the program."""
            return main.executable_at(ri.ret_addr & ~1)

        def on_malloc_return(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> None:
            if from_main(ri):
                returned.append(regs.return_value)

        def on_write(p: kpsdk.Uprobe, regs: kpsdk.PtRegs) -> int:
            if regs.arg(0) == 1:
                written.extend(s.read_memory(regs.arg(1), regs.arg(2)))
            return 0

        pending: list[str] = []

        def on_strlen_entry(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> int:
            pending.append(s.read_string(regs.arg(0)))
            return 0

        def on_strlen_return(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> None:
            word = pending.pop()
            if from_main(ri):
                lengths.append((word, regs.return_value))

        s.register_uprobe(kpsdk.Uprobe.parse(f"{LIBC}:malloc", pre_handler=lambda p, r: mallocs.append(r.arg(0))))
        s.register_uretprobe(kpsdk.Uretprobe.parse(f"{LIBC}:malloc", handler=on_malloc_return))
        s.register_uprobe(kpsdk.Uprobe.parse(f"{LIBC}:write", pre_handler=on_write))
        strlen_is_ifunc = is_ifunc(libc.path, "strlen")
        if strlen_is_ifunc:
            with pytest.raises(kpsdk.KprobeError) as refused:
                kpsdk.Uprobe.parse(f"{LIBC}:strlen")
            assert refused.value.errno == errno.EOPNOTSUPP and "IFUNC" in str(refused.value)
        else:
            s.register_uretprobe(kpsdk.Uretprobe.parse(f"{LIBC}:strlen", entry_handler=on_strlen_entry,
                                                    handler=on_strlen_return))
        # the library is not loaded yet: the probes wait for its dlopen
        s.register_uprobe(kpsdk.Uprobe.parse(f"{lib}:lib_mix", pre_handler=lambda p, r: mixes.append(
            (r.arg(0), r.arg(1)))))
        s.register_uretprobe(kpsdk.Uretprobe.parse(f"{lib}:lib_mix", handler=lambda ri, r: mix_returns.append(
            r.return_value)))
        s.registry.pm.register(_Loads(loaded), name=f"loads-{arch}")
        try:
            assert s.run(timeout=120) == 0
        finally:
            s.registry.pm.unregister(name=f"loads-{arch}")
        out = s.console
        objects = {name: int(bias, 16) for name, bias in report(out, "object")}
        mine = {mf.name: mf.bias for mf in s.target.mapped_files() if mf.name}
        assert mine and all(objects[name] == bias for name, bias in mine.items()), (objects, mine)
        assert objects["-"] == main.bias
        assert mallocs[:3] == [int(size) for size, _ in report(out, "malloc")]
        assert returned[:3] == [int(ptr, 16) for _, ptr in report(out, "malloc")]
        if not strlen_is_ifunc:
            assert lengths == [(" ".join(rest[1:]), int(rest[0])) for rest in report(out, "strlen")]
        assert bytes(written) == out.encode()
        assert mixes == [(int(a), int(b)) for a, b, _ in report(out, "lib_mix")] == [(1, 10), (2, 20), (3, 30)]
        assert mix_returns == [int(r) for _, _, r in report(out, "lib_mix")]
        assert loaded == [f"+{lib.name}", f"-{lib.name}"]
        assert not any(mf.path == lib for mf in s.target.mapped_files())  # dlclose'd
    finally:
        s.close()


class _Loads:
    """A plugin recording the library events of one session."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    @kpsdk.hookimpl
    def kpsdk_library_loaded(self, session: kpsdk.Session, library: kpsdk.target.MappedFile) -> None:
        self.seen.append(f"+{library.path.name}")

    @kpsdk.hookimpl
    def kpsdk_library_unloaded(self, session: kpsdk.Session, library: kpsdk.target.MappedFile) -> None:
        self.seen.append(f"-{library.path.name}")
