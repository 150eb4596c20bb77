"""Uprobes inside the shared libraries of a dynamically linked program on Unicorn.

On ``elf:PROG`` the program's own ``ld.so`` maps its libraries through the Linux layer's
``mmap``; each one is announced (``kpsdk_library_loaded``) once its segments are in place,
and a uprobe on that file is armed there, as under qemu-user.  Ground truth is the program
itself: tests/libprogs/calls.c mallocs known sizes and prints them; the probe on libc's
``malloc`` must see each of them, in the program's order.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

import kpsdk
from kpsdk import fixtures
from tests.test_libraries import built, report  # noqa: F401 - the module fixture that builds calls.c

#: the libc each arch's program maps: the host's own for x86_64 (sysroot "/"), else Debian's
#: cross sysroot (the Unicorn target's default sysroot for another architecture)
LIBC = {
    "x86_64": ("/", "/lib/x86_64-linux-gnu/libc.so.6"),
    "i386": ("/usr/i686-linux-gnu", "/usr/i686-linux-gnu/lib/libc.so.6"),
    "arm": ("/usr/arm-linux-gnueabihf", "/usr/arm-linux-gnueabihf/lib/libc.so.6"),
    "riscv64": ("/usr/riscv64-linux-gnu", "/usr/riscv64-linux-gnu/lib/libc.so.6"),
    "ppc64": ("/usr/powerpc64-linux-gnu", "/usr/powerpc64-linux-gnu/lib/libc.so.6"),
    "ppc64le": ("/usr/powerpc64le-linux-gnu", "/usr/powerpc64le-linux-gnu/lib/libc.so.6"),
    "aarch64": ("/usr/aarch64-linux-gnu", "/usr/aarch64-linux-gnu/lib/libc.so.6"),
}


@pytest.mark.parametrize("arch", sorted(LIBC))
def test_malloc_in_libc_sees_the_programs_sizes(arch: str, built: dict[str, tuple[Path, Path]]) -> None:  # noqa: F811
    prog, _lib = built[arch]
    sysroot, libc = LIBC[arch]
    sizes: list[int] = []
    up = kpsdk.Uprobe.parse(f"{libc}:malloc", pre_handler=lambda p, regs: sizes.append(regs.arg(0)))
    with kpsdk.open(f"elf:{prog}", sysroot=sysroot) as s:
        s.register_uprobe(up)
        status = s.run(timeout=120)
        libraries = [mf.path.name for mf in s.target.mapped_files()]
        console = s.console
    assert status == 0, console
    assert "libc.so.6" in libraries
    expected = [int(fields[0]) for fields in report(console, "malloc")]
    assert expected == [37, 4096, 100003]  # the program ran to its report
    seen = [n for n in sizes if n in expected]
    assert seen == expected, sizes
    assert up.hits == len(sizes)


@pytest.mark.parametrize("arch", sorted(LIBC))
def test_calls_into_libc_from_a_handler(arch: str, built: dict[str, tuple[Path, Path]]) -> None:  # noqa: F811
    """``s.call`` of libc's functions by name once ld.so has linked the program: ``getenv``
    reads libc's globals (on ppc64 ELFv1 through libc's own TOC, which the call loads from
    the function's descriptor), ``strlen`` is an IFUNC on most of these libcs (on ppc64 its
    resolver returns a function descriptor)."""
    prog, _lib = built[arch]
    sysroot, _libc = LIBC[arch]
    seen: list[tuple[str | None, int]] = []
    word = "kprobes outside the kernel"

    with kpsdk.open(f"elf:{prog}", sysroot=sysroot, env={"KPSDK_WORD": word}) as s:
        def on_main(p: kpsdk.Kprobe, regs: kpsdk.PtRegs) -> int:
            buf = regs.sp - 0x1000
            s.write_memory(buf, b"KPSDK_WORD\0")
            value = s.call("getenv", buf)
            s.write_memory(buf, word.encode()[:13] + b"\0")
            seen.append((s.read_string(value) if value else None, s.call("strlen", buf)))
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name="main", pre_handler=on_main))
        assert s.run(timeout=120) == 0, s.console
        console = s.console
    assert seen == [(word, 13)]
    assert [int(fields[0]) for fields in report(console, "malloc")] == [37, 4096, 100003]  # ran on unharmed


def sysroot_holding(arch: str, lib: Path, tmp: Path) -> tuple[Path, Path]:
    """A sysroot in which the program finds ``lib`` (the program sees only its sysroot): the
    host's own "/" for x86_64, else a small copy of Debian's cross sysroot's loader and libc
    with the library beside them.  Returns the sysroot and the library's host path in it."""
    root, _libc = LIBC[arch]
    if root == "/":
        return Path("/"), lib
    copy = tmp / "sysroot"
    (copy / "lib").mkdir(parents=True)
    for pattern in ("ld-*.so*", "ld64.so*", "libc.so.6", "libdl.so.2"):  # ld64.so.1/.2: ppc64's loaders
        for f in (Path(root) / "lib").glob(pattern):
            shutil.copy(f, copy / "lib" / f.name)
    if (Path(root) / "lib64").is_dir():  # ppc64's PT_INTERP is /lib64/ld64.so.1 (a link into lib/)
        shutil.copytree(Path(root) / "lib64", copy / "lib64", symlinks=True)
    shutil.copy(lib, copy / lib.name)
    return copy, copy / lib.name


@pytest.mark.parametrize("arch", sorted(LIBC))
def test_dlopened_library_is_probed_then_reported_unloaded(arch: str, built: dict[str, tuple[Path, Path]],  # noqa: F811
                                                           tmp_path: Path) -> None:
    """calls.c dlopen()s libmix.so, calls lib_mix(a, 10a) three times and dlclose()s it: a uprobe
    on the library (registered before it was ever mapped) sees the program's arguments in order,
    and the dlclose is heard as ``kpsdk_library_unloaded`` (the file leaves mapped_files())."""
    prog, built_lib = built[arch]
    sysroot, lib = sysroot_holding(arch, built_lib, tmp_path)
    calls: list[tuple[int, int]] = []
    events: list[tuple[str, str]] = []

    class Listener:
        @kpsdk.hookimpl
        def kpsdk_library_loaded(self, session: kpsdk.Session, library: kpsdk.target.MappedFile) -> None:
            events.append(("loaded", library.path.name))

        @kpsdk.hookimpl
        def kpsdk_library_unloaded(self, session: kpsdk.Session, library: kpsdk.target.MappedFile) -> None:
            events.append(("unloaded", library.path.name))

    listener = Listener()
    registry = kpsdk.get_registry()
    registry.pm.register(listener)
    try:
        up = kpsdk.Uprobe.parse(f"{lib}:lib_mix", pre_handler=lambda p, regs: calls.append((regs.arg(0), regs.arg(1))))
        with kpsdk.open(f"elf:{prog}", sysroot=sysroot, args=["/" + str(lib.relative_to(sysroot))]) as s:
            s.register_uprobe(up)
            status = s.run(timeout=120)
            still_mapped = [mf.path.name for mf in s.target.mapped_files()]
            console = s.console
    finally:
        registry.pm.unregister(listener)
    assert status == 0, console
    expected = [(int(a), int(b)) for a, b, _ in report(console, "lib_mix")]
    assert expected == [(1, 10), (2, 20), (3, 30)]  # the program called it and printed so
    assert calls == expected
    assert events.index(("loaded", lib.name)) < events.index(("unloaded", lib.name))
    assert lib.name not in still_mapped and "libc.so.6" in still_mapped


def test_a_bare_library_name_is_each_sessions_own(built: dict[str, tuple[Path, Path]]) -> None:  # noqa: F811
    """Two programs open at once, x86_64 and riscv64, each with its own ``libc.so.6``: a probe
    made for one session by its decorator names that session's libc and sees its program's
    mallocs; one made apart from any session cannot say which libc and is refused, naming both."""
    sessions = {arch: kpsdk.open(f"elf:{built[arch][0]}", sysroot=LIBC[arch][0]) for arch in ("x86_64", "riscv64")}
    try:
        with pytest.raises(kpsdk.KprobeError) as ambiguous:
            kpsdk.Uprobe.parse("libc.so.6:malloc")
        assert ambiguous.value.errno == errno.EINVAL
        assert LIBC["x86_64"][1] in str(ambiguous.value) and LIBC["riscv64"][1] in str(ambiguous.value)
        sizes: dict[str, list[int]] = {}
        for arch, s in sessions.items():
            seen = sizes.setdefault(arch, [])
            up = s.uprobe("libc.so.6:malloc")(lambda p, regs, seen=seen: seen.append(regs.arg(0)))
            assert up.path == LIBC[arch][1]
        for arch, s in sessions.items():
            assert s.run(timeout=120) == 0, s.console
            expected = [int(fields[0]) for fields in report(s.console, "malloc")]
            assert expected == [37, 4096, 100003]
            assert [n for n in sizes[arch] if n in expected] == expected, (arch, sizes[arch])
        sessions["riscv64"].close()  # one session left: the name is its libc again
        assert os.path.samefile(kpsdk.Uprobe.parse("libc.so.6:malloc").path, LIBC["x86_64"][1])  # as it maps it
        # a static program loads no library: its sysroot (Debian's riscv64 one) has no say
        sessions["static"] = kpsdk.open(f"elf:{fixtures.path('riscv64')}")
        assert sessions["static"].target.sysroot is not None
        assert os.path.samefile(kpsdk.Uprobe.parse("libc.so.6:malloc").path, LIBC["x86_64"][1])
    finally:
        for s in sessions.values():
            s.close()
