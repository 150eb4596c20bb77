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
from elftools.elf.relocation import Relocation, RelocationSection
from hypothesis import given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk.binfmt.linkmap import LinkMap, parse_auxv
from kpsdk.errors import (
    ExecNotFollowedWarning,
    KpsdkError,
    NeverMappedWarning,
    TargetError,
    TargetFault,
    ToolMissingError,
)
from kpsdk.plugins import uprobes as uprobes_plugin
from kpsdk.targets.live.qemu import choose_sysroot
from tests.conftest import FIXTURES, LIVE_ARCHS, QEMU, fuzz_examples, require_tool

HERE = Path(__file__).parent / "libprogs"
#: per fixture: the compiler (the host's own gcc where it builds the arch), its Debian packages
#: and the flags that pick the instruction set (the fixture's own, where the arch has several)
COMPILERS = {f.name: (f.compilers[-1] if f.on_native_host else f.compilers[0], f.libc_packages,
                      f.cflags if len(f.arch.isets) > 1 else ()) for f in FIXTURES}
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


#: relocation types whose slot gets an IFUNC resolver's choice (the psABIs; glibc elf/elf.h)
IRELATIVE = {"EM_X86_64": {37}, "EM_386": {42}, "EM_PPC64": {247, 248}, "EM_ARM": {160}, "EM_RISCV": {58},
             "EM_AARCH64": {1032}}


def has_irelative_slot(path: Path, name: str) -> bool:
    """Whether the library has an IRELATIVE relocation for its IFUNC ``name``, read with
    pyelftools: the addend is the resolver (ppc64 ELFv1: its descriptor, the symbol's value)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        value = next(s["st_value"] for s in elf.get_section_by_name(".dynsym").iter_symbols() if s.name == name)
        types = IRELATIVE[elf["e_machine"]]
        loads = [(seg["p_vaddr"], seg.data()) for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
        word = elf.elfclass // 8
        endian = "little" if elf.little_endian else "big"

        def addend(reloc: Relocation) -> int | None:
            if reloc.is_RELA():
                return int(reloc["r_addend"])
            at = reloc["r_offset"]  # REL (i386, ARM): the addend is the word the slot holds in the file
            return next((int.from_bytes(data[at - base: at - base + word], endian)
                         for base, data in loads if base <= at < base + len(data)), None)

        return any(r["r_info_type"] in types and addend(r) == value
                   for sec in elf.iter_sections() if isinstance(sec, RelocationSection)
                   for r in sec.iter_relocations())


def libc_of(s: kpsdk.Session) -> kpsdk.target.MappedFile:
    return next(mf for mf in s.target.mapped_files() if mf.path.name == LIBC)


# -- the link map against dl_iterate_phdr, and every probe against the program's report ----------


@pytest.mark.parametrize("arch", LIVE_ARCHS)
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
        # an IFUNC is the loader's choice, read from libc's IRELATIVE slot (tests/test_ifunc.py);
        # without one (i386's strlen) it is refused
        strlen_refused = is_ifunc(libc.path, "strlen") and not has_irelative_slot(libc.path, "strlen")
        if strlen_refused:
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
        if not strlen_refused:
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


# -- Debian's own programs (stripped, nothing of kpsdk's) -------------------------------------------


def test_ls_writes_and_mallocs_seen_in_libc() -> None:
    """/bin/ls: every byte it prints went through libc's write, as the probe saw it; its
    mallocs were seen with the sizes asked for, and each returned block was non-null."""
    written = bytearray()
    sizes: list[int] = []
    blocks: list[int] = []
    s = open_user(Path("/bin/ls"), "x86_64", args=["-l", str(HERE)])
    try:
        s.register_uprobe(kpsdk.Uprobe.parse(f"{LIBC}:write", pre_handler=lambda p, r: written.extend(
            s.read_memory(r.arg(1), r.arg(2))) if r.arg(0) == 1 else None))
        s.register_uprobe(kpsdk.Uprobe.parse(f"{LIBC}:malloc", pre_handler=lambda p, r: sizes.append(r.arg(0))))
        s.register_uretprobe(kpsdk.Uretprobe.parse(f"{LIBC}:malloc", handler=lambda ri, r: blocks.append(
            r.return_value)))
        assert s.run(timeout=120) == 0
        out = s.console
    finally:
        s.close()
    native = subprocess.run(["/bin/ls", "-l", str(HERE)], capture_output=True, text=True, check=True).stdout
    assert out == native and bytes(written) == native.encode()
    assert sizes and len(blocks) == len(sizes) and all(blocks)


def test_sort_reads_stdin_and_its_output_is_seen_in_write(tmp_path: Path) -> None:
    """/usr/bin/sort with stdin= a file: the sorted lines (as a native sort prints them) are
    exactly what the probe on libc's write saw; the bare name libc.so.6 found the mapped libc."""
    data = tmp_path / "words"
    data.write_text("".join(f"{w}\n" for w in ["pear", "apple", "kiwi", "fig", "banana"] * 3))
    written = bytearray()
    s = open_user(Path("/usr/bin/sort"), "x86_64", stdin=data, cwd=tmp_path)
    try:
        up = kpsdk.Uprobe.parse(f"{LIBC}:write", pre_handler=lambda p, r: written.extend(
            s.read_memory(r.arg(1), r.arg(2))))
        assert up.path == str(libc_of(s).path)
        s.register_uprobe(up)
        assert s.run(timeout=120) == 0
    finally:
        s.close()
    native = subprocess.run(["/usr/bin/sort"], stdin=data.open(), capture_output=True, text=True, check=True).stdout
    assert bytes(written).decode() == native and up.hits >= 1


# -- kprobes at library addresses, the CLI, trace lines ------------------------------------------------


def test_kprobe_by_address_and_by_name_inside_libc(built: dict[str, tuple[Path, Path]]) -> None:
    """A kprobe at libc's malloc by absolute address (bias + the symbol's value in the file,
    read with pyelftools) and one by the name: both fire on the program's calls."""
    prog, _ = built["thumb"]
    s = open_user(prog, "thumb")
    try:
        libc = libc_of(s)
        with open(libc.path, "rb") as f:
            value = next(sym["st_value"] for sym in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                         if sym.name == "malloc")
        assert value & 1  # ARM's libc is Thumb code
        by_addr: list[int] = []
        by_name: list[int] = []
        s.register_kprobe(kpsdk.Kprobe(addr=libc.bias + value, pre_handler=lambda p, r: by_addr.append(r.arg(0))))
        s.register_kprobe(kpsdk.Kprobe(symbol_name="malloc", pre_handler=lambda p, r: by_name.append(r.arg(0))))
        data = next(seg for seg in libc.image.segments if not seg.executable)
        with pytest.raises(kpsdk.KprobeError) as not_code:  # libc's data: mapped, not executable
            s.register_kprobe(kpsdk.Kprobe(addr=libc.bias + data.vaddr))
        assert not_code.value.errno == errno.EINVAL and "executable" in str(not_code.value)
        assert s.run(timeout=60) == 0
        sizes = [int(size) for size, _ in report(s.console, "malloc")]
    finally:
        s.close()
    assert by_addr[:3] == by_name[:3] == sizes == [37, 4096, 100003]


def test_cli_probe_on_a_library_symbol() -> None:
    from typer.testing import CliRunner

    from kpsdk.cli import app

    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    write = "/lib/x86_64-linux-gnu/libc.so.6:write"
    result = CliRunner().invoke(app, ["probe", "--target", "qemu-user:/bin/ls", "--arg", str(HERE),
                                      "--uprobe", f"{LIBC}:malloc", "--uprobe", write])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    hits = {line.rsplit(":", 1)[0][2:]: int(line.rsplit(":", 1)[1].split()[0])
            for line in result.stdout.splitlines() if line.startswith("u ")}
    assert set(hits) == {f"{LIBC}:malloc", write}
    assert hits[f"{LIBC}:malloc"] > 0 and hits[write] == 1  # ls writes its one line once


def test_trace_lines_with_library_symbols_and_offsets(built: dict[str, tuple[Path, Path]]) -> None:
    """``p LIB:SYM`` and ``p LIB:0xOFF`` (the offset computed with pyelftools, as uprobe_events
    users do), and ``r LIB:SYM``: the values the program printed, on Thumb ARM."""
    from typer.testing import CliRunner

    from kpsdk.cli import app

    prog, lib = built["thumb"]
    require_tool("qemu-arm", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    mix_offset = file_offset(lib, "lib_mix")
    result = CliRunner().invoke(app, [
        "trace", f"qemu-user:{prog}", "--arg", str(lib), "--console", "--no-prefix",
        "-e", f"p:m {LIBC}:malloc size=%r0:u32",
        "-e", f"p:x {lib}:{mix_offset:#x} a=%r0:s32 b=%r1:s32",
        "-e", f"r:xr {lib}:lib_mix ret=$retval:s32"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    out = result.stderr  # --console: what the program printed, on stderr
    mallocs = [int(line.rsplit("size=", 1)[1]) for line in lines if line.startswith("m:")]
    assert mallocs[:3] == [int(size) for size, _ in report(out, "malloc")]
    assert [line.split(") ", 1)[1] for line in lines if line.startswith("x:")] == [
        f"a={a} b={b}" for a, b, _ in report(out, "lib_mix")]
    assert [line.rsplit("ret=", 1)[1] for line in lines if line.startswith("xr:")] == [
        r for _, _, r in report(out, "lib_mix")]


def file_offset(path: Path, name: str) -> int:
    """A dynamic symbol's file offset, from the program headers (pyelftools), Thumb bit dropped."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        value = next(s["st_value"] for s in elf.get_section_by_name(".dynsym").iter_symbols() if s.name == name) & ~1
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_filesz"]:
                return int(value - seg["p_vaddr"] + seg["p_offset"])
    raise AssertionError(name)


def test_fork_the_parent_is_probed_the_child_runs_without(tmp_path: Path) -> None:
    """Documented (docs/api/probes.md, "Fork and exec: not yet"): the session follows the process it
    started; a forked child runs unprobed and the run ends normally with the parent."""
    compiler = require_tool("gcc", "gcc")
    prog = tmp_path / "forks"
    subprocess.run([compiler, "-O0", "-fno-builtin", "-o", str(prog), str(HERE / "forks.c")], check=True,
                   timeout=120)
    sizes: list[int] = []
    s = open_user(prog, "x86_64")
    try:
        s.register_uprobe(kpsdk.Uprobe.parse(f"{LIBC}:malloc", pre_handler=lambda p, r: sizes.append(r.arg(0))))
        assert s.run(timeout=60) == 0
        child, parent = (int(word) for word in s.console.split()[1::2])
    finally:
        s.close()
    assert parent in sizes and child not in sizes


# -- files that are never mapped, sysroots ------------------------------------------------------------------


def test_a_copy_of_libc_is_reported_as_never_mapped(tmp_path: Path) -> None:
    copy = tmp_path / LIBC
    shutil.copy2("/lib/x86_64-linux-gnu/libc.so.6", copy)
    s = open_user(Path("/bin/true"), "x86_64")
    try:
        up = kpsdk.Uprobe.parse(f"{copy}:malloc")
        s.register_uprobe(up)
        with pytest.warns(NeverMappedWarning, match=f"{copy} was never mapped; this program maps "
                                                    "/lib/x86_64-linux-gnu/libc.so.6 \\(a different file\\)"):
            assert s.run(timeout=60) == 0
    finally:
        s.close()
    assert up.hits == 0


def test_not_an_elf_file_is_einval(tmp_path: Path) -> None:
    text = tmp_path / "libnotes.so"
    text.write_text("not an ELF file\n")
    with pytest.raises(kpsdk.KprobeError) as e:
        kpsdk.register_uprobe(kpsdk.Uprobe(text, 0))
    assert e.value.errno == errno.EINVAL


def test_the_cross_sysroot_is_the_default_and_its_absence_names_the_package(
        built: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    from kpsdk.binfmt.elfimage import load_elf

    prog, _ = built["riscv64"]
    image = load_elf(prog)
    arch = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian)
    assert choose_sysroot(image, arch, None) == Path("/usr/riscv64-linux-gnu")
    with pytest.raises(ToolMissingError) as missing:
        choose_sysroot(image, replace(arch, multiarch="riscv64-nowhere-gnu"), None)
    assert missing.value.package == "libc6-riscv64-cross" and "libc6-riscv64-cross" in str(missing.value)
    with pytest.raises(TargetError, match="not a directory"):
        choose_sysroot(image, arch, tmp_path / "missing")
    assert choose_sysroot(load_elf("/bin/true"), arch, None) is None  # the host's own program


def test_an_explicit_sysroot_is_where_libraries_come_from(built: dict[str, tuple[Path, Path]],
                                                           tmp_path: Path) -> None:
    """sysroot=DIR: a copy of the loader and C library of Debian's riscv64 sysroot; the libc
    the program maps is the copy (its identity), and a probe by the sysroot-relative path finds it."""
    prog, _ = built["riscv64"]
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    for name in ("ld-linux-riscv64-lp64d.so.1", LIBC, "libdl.so.2"):
        if (Path("/usr/riscv64-linux-gnu/lib") / name).exists():
            shutil.copy2(Path("/usr/riscv64-linux-gnu/lib") / name, root / "lib" / name)
    s = open_user(prog, "riscv64", sysroot=root)
    try:
        libc = libc_of(s)
        assert libc.path == root / "lib" / LIBC and libc.name == f"/lib/{LIBC}"
        assert libc.identity == (os.stat(root / "lib" / LIBC).st_dev, os.stat(root / "lib" / LIBC).st_ino)
        seen: list[int] = []
        up = kpsdk.Uprobe.parse(f"/lib/{LIBC}:malloc", pre_handler=lambda p, r: seen.append(r.arg(0)))
        assert up.path == str(root / "lib" / LIBC)
        s.register_uprobe(up)
        assert s.run(timeout=60) == 0
        assert seen[:3] == [int(size) for size, _ in report(s.console, "malloc")]
    finally:
        s.close()


# -- bad input: fuzzed locations, link maps in hostile memory -----------------------------------------------


@pytest.mark.fuzz
@settings(max_examples=fuzz_examples(60))
@given(st.text(max_size=60))
def test_fuzzed_library_locations_give_typed_errors(text: str) -> None:
    try:
        uprobes_plugin.parse_location(f"{LIBC}:{text}")
        uprobes_plugin.parse_location(f"{text}:malloc")
    except KpsdkError:
        pass


@pytest.mark.fuzz
@settings(max_examples=fuzz_examples(100))
@given(st.binary(min_size=0, max_size=512), st.integers(0, 600), st.sampled_from([(4, "little"), (8, "big")]))
def test_link_map_walks_in_hostile_memory_end(memory: bytes, head: int, layout: tuple[int, str]) -> None:
    """Random memory as the loader's structures: the walk ends (no loop, bounded), and the
    only error is the reader's own (a TargetFault outside the memory)."""
    word, endian = layout

    def read(addr: int, size: int) -> bytes:
        if addr < 0 or addr + size > len(memory):
            raise TargetFault("outside", addr)
        return memory[addr: addr + size]

    lm = LinkMap(read, word, endian)
    auxv = parse_auxv(memory, word, endian)  # type: ignore[arg-type]
    try:
        lm.loaded(auxv)
        lm.objects(head)
    except TargetFault:
        pass


@pytest.mark.fuzz
@settings(max_examples=fuzz_examples(60))
@given(st.one_of(st.text(max_size=40), st.binary(max_size=20), st.integers(), st.none()))
def test_fuzzed_sysroot_cwd_and_stdin_values_give_typed_errors(value: object) -> None:
    """sysroot=, cwd= and stdin= of any type and text: a directory or file, or a TargetError."""
    from kpsdk.binfmt.elfimage import load_elf
    from kpsdk.targets.live.qemu import _directory, _input

    image = load_elf("/bin/true")
    arch = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian)
    for call in (lambda: choose_sysroot(image, arch, value),  # type: ignore[arg-type]
                 lambda: _directory(value, "cwd"),  # type: ignore[arg-type]
                 lambda: _input(value).__enter__()):  # type: ignore[arg-type]
        try:
            got = call()
        except TargetError:
            continue
        if isinstance(got, Path):
            assert got.is_dir()


@pytest.mark.fuzz
@settings(max_examples=fuzz_examples(60))
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=" \t\n\r\0"),
               min_size=1, max_size=40))
def test_fuzzed_trace_lines_with_library_symbols_give_definition_errors(where: str) -> None:
    """``p libc.so.6:WHERE`` (kpsdk's extension): an event, or the kernel-style error with a column."""
    from kpsdk.trace.grammar import Parser

    try:
        Parser().parse(f"p:m /lib/x86_64-linux-gnu/{LIBC}:{where} x=%di")
    except kpsdk.TraceDefinitionError as e:
        assert 0 <= e.column <= len(f"p:m /lib/x86_64-linux-gnu/{LIBC}:{where} x=%di") + 1


# -- one stop per dlopen/dlclose ------------------------------------------------------------------------------


@pytest.mark.parametrize("probe_there", [False, True])
def test_one_stop_per_library_change(built: dict[str, tuple[Path, Path]], probe_there: bool) -> None:
    """calls.c dlopens its library once and dlcloses it once: kpsdk stops on the loader's
    r_brk once for each (the agent continues the call before each change itself).  A kprobe
    on r_brk still sees every call the loader makes: two per change (r_state RT_ADD or
    RT_DELETE, then RT_CONSISTENT), as glibc's r_debug protocol has it."""
    prog, lib = built["x86_64"]
    s = open_user(prog, "x86_64", args=[str(lib)])
    stops: list[int] = []
    states: list[int] = []
    try:
        libs = s.target.libraries  # type: ignore[attr-defined]
        hook = s.target._stop_hooks[libs.brk]  # type: ignore[attr-defined]

        def counted() -> None:
            stops.append(libs.map.r_debug(libs.r_debug).state)
            hook()

        s.target._stop_hooks[libs.brk] = counted  # type: ignore[attr-defined]
        if probe_there:
            s.register_kprobe(kpsdk.Kprobe(addr=libs.brk, pre_handler=lambda p, r: states.append(
                libs.map.r_debug(libs.r_debug).state)))
        assert s.run(timeout=60) == 0
        assert report(s.console, "lib_mix")
    finally:
        s.close()
    if probe_there:
        assert states == [1, 0, 2, 0] and stops == states  # RT_ADD, RT_CONSISTENT, RT_DELETE, RT_CONSISTENT
    else:
        assert stops == [0, 0]


def test_exec_is_not_followed_and_says_so(tmp_path: Path) -> None:
    """Documented (docs/api/probes.md, "Fork and exec"): at the C library's execve kpsdk warns that
    the new program (/bin/echo here, which prints its argument) runs unprobed; the run ends
    with its exit status, and the probes saw the first program's calls."""
    compiler = require_tool("gcc", "gcc")
    prog = tmp_path / "execs"
    subprocess.run([compiler, "-O0", "-fno-builtin", "-o", str(prog), str(HERE / "execs.c")], check=True,
                   timeout=120)
    sizes: list[int] = []
    s = open_user(prog, "x86_64", args=["/bin/echo", "after-exec"])
    try:
        s.register_uprobe(kpsdk.Uprobe.parse(f"{LIBC}:malloc", pre_handler=lambda p, r: sizes.append(r.arg(0))))
        with pytest.warns(ExecNotFollowedWarning, match=r"called execve\('/bin/echo'\): kpsdk does not follow exec"):
            assert s.run(timeout=60) == 0
        out = s.console
    finally:
        s.close()
    assert out.splitlines()[-1] == "after-exec" and report(out, "malloc")[0][0] == "55"
    assert 55 in sizes
