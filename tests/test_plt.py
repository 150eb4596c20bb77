"""PLT stubs named ``SYM@plt`` (kpsdk/binfmt/pltstubs.py): where binutils puts them, and probes on them.

Ground truth: ``objdump -d`` of each arch's binutils names the stubs (BFD's synthetic
symbols, which gdb shows too); tests/libprogs/plts.c, built here with each (cross)
compiler, prints how often it called puts, which a probe on ``puts@plt`` must count.
"""

from __future__ import annotations

import errno
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk.binfmt.elfimage import load_elf, parse_elf
from kpsdk.binfmt.pltstubs import KIND
from kpsdk.errors import ImageFormatError
from tests.conftest import fuzz_examples, require_tool
from tests.test_libraries import COMPILERS, open_user

HERE = Path(__file__).parent / "libprogs"
#: per arch: its objdump and the Debian package that has it
OBJDUMPS = {
    "x86_64": ("objdump", "binutils"),
    "i386": ("i686-linux-gnu-objdump", "binutils-i686-linux-gnu"),
    "arm": ("arm-linux-gnueabihf-objdump", "binutils-arm-linux-gnueabihf"),
    "thumb": ("arm-linux-gnueabihf-objdump", "binutils-arm-linux-gnueabihf"),
    "riscv64": ("riscv64-linux-gnu-objdump", "binutils-riscv64-linux-gnu"),
    "ppc64": ("powerpc64-linux-gnu-objdump", "binutils-powerpc64-linux-gnu"),
    "aarch64": ("aarch64-linux-gnu-objdump", "binutils-aarch64-linux-gnu"),
}
#: objdump's label line of a stub: ``0000000000001040 <puts@plt>:``; ``*ABS*+0x9f550@plt`` (a
#: library's IRELATIVE stubs, no symbol) is not matched
LABEL = re.compile(r"^([0-9a-f]+) <([^<>@*]+)@plt>:$")
#: ARM's ``bx pc`` (Thumb), which starts a stub's Thumb prefix: kpsdk names the ARM code after it
BX_PC = re.compile(r"^\s*[0-9a-f]+:\s+[0-9a-f]{4}4778\s")


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """plts.c built for an arch on first use."""
    out = tmp_path_factory.mktemp("plts")

    class Builds(dict[str, Path]):
        def __missing__(self, arch: str) -> Path:
            cc, package, flags = COMPILERS[arch]
            prog = out / f"plts-{arch}"
            cmd = [require_tool(cc, package), *flags, "-O0", "-fno-builtin", "-o", str(prog), str(HERE / "plts.c")]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr}"
            self[arch] = prog
            return prog

    return Builds()


def objdump_stubs(path: Path, arch: str) -> dict[str, int]:
    """``NAME -> address`` of every ``NAME@plt`` label objdump prints (x86's ``.plt.got`` too)."""
    tool, package = OBJDUMPS[arch]
    text = subprocess.run([require_tool(tool, package), "-d", str(path)], capture_output=True, text=True,
                          check=True, timeout=120).stdout
    lines = text.splitlines()
    found = {}
    for i, line in enumerate(lines):
        if m := LABEL.match(line):
            # objdump labels a Thumb-prefixed ARM stub at its prefix; every caller reaches 4 bytes on
            prefixed = arch in ("arm", "thumb") and i + 1 < len(lines) and BX_PC.match(lines[i + 1])
            found[m.group(2)] = int(m.group(1), 16) + (4 if prefixed else 0)
    return found


def kpsdk_stubs(path: Path) -> dict[str, int]:
    return {sym.name.removesuffix("@plt"): sym.address for sym in load_elf(path).symbols if sym.kind == KIND}


@pytest.mark.parametrize("arch", sorted(OBJDUMPS))
def test_stub_addresses_are_objdumps(arch: str, programs: dict[str, Path]) -> None:
    prog = programs[arch]
    theirs = objdump_stubs(prog, arch)
    assert {"puts", "malloc", "printf"} <= set(theirs)
    assert kpsdk_stubs(prog) == theirs
    if arch in ("x86_64", "i386"):
        assert "__cxa_finalize" in theirs  # a .plt.got stub


@pytest.mark.parametrize(("arch", "path"), [
    ("x86_64", "/bin/ls"),  # stripped, bound at load time, .plt.got stubs (malloc@plt)
    ("x86_64", "/bin/busybox"),  # static: a .rela.plt of IRELATIVE relocations linked to no symbols
    ("x86_64", "/lib/x86_64-linux-gnu/libc.so.6"),  # IRELATIVE relocations after the others
    ("i386", "/usr/i686-linux-gnu/lib/libc.so.6"),
    ("arm", "/usr/arm-linux-gnueabihf/lib/libc.so.6"),  # Thumb-prefixed stubs
    ("riscv64", "/usr/riscv64-linux-gnu/lib/libc.so.6"),
    ("ppc64", "/usr/powerpc64-linux-gnu/lib/libc.so.6"),
    ("aarch64", "/usr/aarch64-linux-gnu/lib/libc.so.6"),
])
def test_debian_libraries_stubs_are_objdumps(arch: str, path: str) -> None:
    """Debian's own programs and C libraries: every stub objdump names, kpsdk names alike."""
    if path == "/bin/busybox":
        require_tool("busybox", "busybox-static")
    elif not Path(path).exists():
        require_tool(COMPILERS[arch][0], COMPILERS[arch][1])  # the sysroot comes with the compiler
    theirs = objdump_stubs(Path(path), arch)
    assert kpsdk_stubs(Path(path)) == theirs
    assert theirs or path == "/bin/busybox"


def test_list_shows_stubs_with_their_table(programs: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from kpsdk.cli import app

    prog = programs["riscv64"]
    result = CliRunner().invoke(app, ["list", str(prog), "--functions", "*@plt"])
    assert result.exit_code == 0, result.output
    rows = {cells[0]: cells for line in result.stdout.splitlines()
            if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) > 4}
    theirs = objdump_stubs(prog, "riscv64")
    assert {name.removesuffix("@plt") for name in rows if name.endswith("@plt")} == set(theirs)
    assert int(rows["puts@plt"][1], 16) == theirs["puts"] and rows["puts@plt"][-2] == ".plt"


def test_plt_name_is_never_the_function() -> None:
    """``puts@plt`` in a file with no such stub (objdump names none in libc) is ENOENT, not
    libc's puts (``@`` versions are dropped, ``@plt`` is not a version)."""
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    assert "puts" not in objdump_stubs(libc, "x86_64")
    assert "puts" in load_elf(libc).symbols and "puts@plt" not in load_elf(libc).symbols
    with pytest.raises(kpsdk.KprobeError) as e:
        kpsdk.Uprobe.parse(f"{libc}:puts@plt")
    assert e.value.errno == errno.ENOENT


# -- probes on stubs against what the program counted ------------------------------------------------


@pytest.mark.parametrize("arch", ["x86_64", "i386", "arm", "thumb", "riscv64"])
def test_puts_plt_fires_once_per_call(arch: str, programs: dict[str, Path]) -> None:
    """A uprobe on PROG:puts@plt and a kprobe on malloc@plt: one hit per call the program counted."""
    prog = programs[arch]
    s = open_user(prog, arch, args=["7"])
    try:
        puts = kpsdk.Uprobe.parse(f"{prog}:puts@plt")
        s.register_uprobe(puts)
        malloc = kpsdk.Kprobe(symbol_name="malloc@plt")
        s.register_kprobe(malloc)
        assert s.run(timeout=120) == 0
        counts = dict(zip(*[iter(s.console.split("\n")[-2].split())] * 2, strict=True))
    finally:
        s.close()
    assert counts == {"puts": "7", "malloc": "1"}
    assert (puts.hits, malloc.hits) == (7, 1)


def test_ppc64_glink_stub_fires_on_the_binding_call_only(programs: dict[str, Path]) -> None:
    """ppc64 ELFv1 (docs/api/probes.md, "Shared libraries (qemu-user)"): ``puts@plt`` is the glink
    stub, as gdb and objdump name it; calls go through the caller's plt_call stub, and reach glink
    only while puts is unbound (lazy binding: the first call)."""
    prog = programs["ppc64"]
    s = open_user(prog, "ppc64", args=["7"])
    try:
        puts = kpsdk.Uprobe.parse(f"{prog}:puts@plt")
        s.register_uprobe(puts)
        assert s.run(timeout=120) == 0
        assert "puts 7 malloc 1" in s.console
    finally:
        s.close()
    assert puts.hits == 1


def test_trace_line_on_a_stub(programs: dict[str, Path]) -> None:
    """``p PROG:puts@plt`` (uprobe) and ``p malloc@plt`` (kprobe) lines: one record per call,
    with the string puts was given."""
    from typer.testing import CliRunner

    from kpsdk.cli import app

    prog = programs["x86_64"]
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    result = CliRunner().invoke(app, ["trace", f"qemu-user:{prog}", "--arg", "3", "--no-prefix", "--console",
                                      "-e", f"p:pp {prog}:puts@plt s=+0(%di):string",
                                      "-e", "p:mm malloc@plt n=%di:u64"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("pp:")] == ['pp: (puts@plt+0x0/0x10) s="line"'] * 3
    assert [line for line in lines if line.startswith("mm:")] == ["mm: (malloc@plt+0x0/0x10) n=10"]
    assert "puts 3 malloc 1" in result.stderr


# -- hostile files ---------------------------------------------------------------------------------------


@pytest.mark.fuzz
@settings(max_examples=fuzz_examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupt_plt_relocations_give_format_errors(programs: dict[str, Path], data: st.DataObject) -> None:
    """Bytes of .rela.plt, .dynamic, the PLT's section headers or .dynsym changed: the file
    loads (stubs named or not) or is an ImageFormatError naming it; nothing else."""
    prog = programs["x86_64"]
    raw = bytearray(prog.read_bytes())
    from elftools.elf.elffile import ELFFile

    with open(prog, "rb") as f:
        elf = ELFFile(f)
        spans = [(s["sh_offset"], s["sh_size"]) for s in elf.iter_sections()
                 if s.name in (".rela.plt", ".dynamic", ".dynsym", ".plt")]
        header = elf.header
        spans.append((header["e_shoff"], header["e_shnum"] * header["e_shentsize"]))
    for _ in range(data.draw(st.integers(1, 4))):
        start, size = data.draw(st.sampled_from(spans))
        at = start + data.draw(st.integers(0, size - 1))
        raw[at] = data.draw(st.integers(0, 255))
    try:
        parse_elf(bytes(raw), prog)
    except ImageFormatError as e:
        assert str(prog) in str(e)
