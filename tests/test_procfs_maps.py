"""``/proc/self/maps`` as the Unicorn target's Linux layer renders it (kpsdk.targets.unicorn.linux.procfs).

The programs' own reading of it is tested against qemu-user in tests/test_linux_programs.py;
here, any layout of regions and names: every mapped byte is on exactly one line, in address
order, with its region's permissions and the name (and file offset) given for it, the way
glibc's ``pthread_getattr_np`` and any ``maps`` parser read the lines.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpsdk.targets.unicorn.linux.files import Sysroot, _GuestErrno
from kpsdk.targets.unicorn.linux.procfs import maps
from tests.conftest import fuzz_examples

PAGE = 0x1000
LINE = re.compile(r"^([0-9a-f]{8,})-([0-9a-f]{8,}) ([r-][w-][x-])p ([0-9a-f]{8,}) 00:00 0 (?: *(\S+))?$")


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[tuple[int, int, int]], dict[tuple[int, int], tuple[str, int]]]:
    """Regions (start, end, Unicorn perms), page-aligned, apart or touching; names over some
    page ranges of them (a file's path with its offset, or a bracketed area's name)."""
    regions, at = [], PAGE
    for _ in range(draw(st.integers(0, 8))):
        at += PAGE * draw(st.integers(0, 3))
        size = PAGE * draw(st.integers(1, 6))
        regions.append((at, at + size, draw(st.integers(0, 7))))
        at += size
    names: dict[tuple[int, int], tuple[str, int]] = {}
    if regions:
        for _ in range(draw(st.integers(0, 4))):
            start = draw(st.integers(1, at // PAGE)) * PAGE
            end = start + PAGE * draw(st.integers(1, 8))
            if any(lo < end and start < hi for lo, hi in names):
                continue
            names[(start, end)] = (draw(st.sampled_from(["/lib/libc.so.6", "/bin/prog", "[stack]", "[heap]"])),
                                   PAGE * draw(st.integers(0, 16)))
    return regions, names


def _name_at(names: dict[tuple[int, int], tuple[str, int]], addr: int) -> tuple[str, int]:
    for (lo, hi), (name, offset) in names.items():
        if lo <= addr < hi:
            return name, offset + (addr - lo)
    return "", 0


@settings(max_examples=fuzz_examples(200))
@given(layouts(), st.sampled_from([4, 8]))
def test_every_mapped_page_is_on_one_line_with_its_perms_and_name(
        layout: tuple[list[tuple[int, int, int]], dict[tuple[int, int], tuple[str, int]]], word: int) -> None:
    regions, names = layout
    text = maps(regions, names, word).decode()
    assert text == "" or text.endswith("\n")
    seen: list[tuple[int, int]] = []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, line
        start, end, offset = int(m[1], 16), int(m[2], 16), int(m[4], 16)
        assert start < end and (not seen or seen[-1][1] <= start)
        seen.append((start, end))
        if m[5]:  # the name starts at Linux's column: 25 + 6 * pointer size
            assert line.index(m[5]) == 25 + 6 * word
        for page in range(start, end, PAGE):
            perms = next(p for lo, hi, p in regions if lo <= page < hi)
            assert m[3] == "".join(c if perms & bit else "-" for c, bit in (("r", 1), ("w", 2), ("x", 4)))
            name, at = _name_at(names, page)
            assert (m[5] or "") == name
            if name.startswith("/"):
                assert offset + (page - start) == at
    covered = sum(hi - lo for lo, hi in seen)
    assert covered == sum(hi - lo for lo, hi, _ in regions)


def test_the_walk_reaches_the_own_proc_however_it_is_named(tmp_path: Path) -> None:
    """/proc/self, /proc/thread-self and /proc/PID are the process's own entry, also through a
    link (/dev/stdin -> /proc/self/fd/0) and from a cwd inside it, in a sysroot without /proc;
    another pid's entry is the sysroot's (here: none)."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "dev" / "stdin").symlink_to("/proc/self/fd/0")
    root = Sysroot(tmp_path, own_pid=1000)
    for path, cwd, entry in [("/proc/self/maps", "/", "maps"), ("/proc/thread-self/maps", "/", "maps"),
                             ("/proc/1000/environ", "/", "environ"), ("self/exe", "/proc", "exe"),
                             ("../proc/./self/cmdline", "/tmp", "cmdline"), ("/proc/self", "/", ""),
                             ("maps", "/proc/1000", "maps"), ("/dev/stdin", "/", "fd/0")]:
        parts = root.walk(path, cwd)
        assert root.own(parts) == entry, (path, parts)
        with pytest.raises(_GuestErrno) as info:
            root.resolve(path, cwd)  # never a host file
        assert info.value.errno == errno.ENOENT
    assert root.own(root.walk("/proc/thread-self/task/1000/environ", "/")) == "environ"
    for path in ("/proc/1/maps", "/proc/cpuinfo", "/procx/self/maps"):
        with pytest.raises(_GuestErrno) as info:
            root.walk(path, "/")
        assert info.value.errno == errno.ENOENT, path
    assert Sysroot(tmp_path).own(["proc", "1000", "maps"]) is None  # no process: no own entry


def test_a_sysroots_own_proc_link_is_followed_inside_it(tmp_path: Path) -> None:
    """A sysroot whose /proc is a link to / (or anything): the walk follows it inside the sysroot,
    as any link; /proc/etc/passwd is the sysroot's /etc/passwd, never the host's."""
    (tmp_path / "proc").symlink_to("/")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "motd").write_text("inside")
    root = Sysroot(tmp_path, own_pid=1000)
    assert root.walk("/proc/etc/motd", "/") == ["etc", "motd"]
    with pytest.raises(_GuestErrno) as info:
        root.walk("/proc/etc/passwd", "/")  # the host has one; the sysroot has none
    assert info.value.errno == errno.ENOENT


@pytest.mark.parametrize("word", [4, 8])
@pytest.mark.parametrize("total", [3 << 30, 24 << 30])
def test_sysinfo_fields_and_mem_unit(word: int, total: int) -> None:
    """struct sysinfo (include/uapi/linux/sysinfo.h): each field at its offset for the word
    size; the sizes in bytes (mem_unit 1) where they fit a word, else in 4096-byte pages."""
    import struct

    from kpsdk.targets.unicorn.linux.structs import pack_sysinfo

    data = pack_sysinfo(word, "<", 1234, (0.5, 1.0, 2.0), total, total // 3, 1)
    w = "Q" if word == 8 else "I"
    fields = struct.unpack_from(f"<{w}{w}{w}{w}{w}{w}", data, 0)
    unit = struct.unpack_from("<I", data, 104 if word == 8 else 52)[0]
    assert len(data) == (112 if word == 8 else 64)
    assert fields[0] == 1234 and fields[1:4] == (32768, 65536, 131072)
    assert unit == (1 if total < 1 << (8 * word) else 4096)
    assert fields[4] * unit == total and fields[5] * unit == total // 3 // unit * unit
    assert struct.unpack_from("<H", data, 80 if word == 8 else 40)[0] == 1  # procs


def test_file_names_follow_munmap_map_fixed_and_mremap() -> None:
    """What maps names a file mapping after the calls that cut, cover or move it: an unmapped
    middle splits the name (the part after keeps its file offset), an anonymous MAP_FIXED
    over a part drops it there, mremap moving takes it along; the pages mremap adds hold
    zeros (kpsdk does not read the file's next bytes into them) and show no name."""
    import unicorn

    from kpsdk.targets.unicorn.linux.memory import MAP_ANONYMOUS, MAP_FIXED, MAP_PRIVATE, MREMAP_MAYMOVE, AddressSpace
    from kpsdk.targets.unicorn.space import Space

    table = Space(unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64))
    table.active = True
    space = AddressSpace(table, 1 << 47, 0x10000000, [])
    lib = "/usr/lib/x.so"
    a = space.mmap(0, 4 * PAGE, 5, MAP_PRIVATE)
    space.name(a, a + 4 * PAGE, lib, 0)
    space.unmap(a + PAGE, a + 2 * PAGE)
    assert space.names == {(a, a + PAGE): (lib, 0), (a + 2 * PAGE, a + 4 * PAGE): (lib, 2 * PAGE)}
    space.mmap(a + 3 * PAGE, PAGE, 3, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS)
    assert space.names == {(a, a + PAGE): (lib, 0), (a + 2 * PAGE, a + 3 * PAGE): (lib, 2 * PAGE)}
    assert space.remap(a, PAGE, 2 * PAGE, 0) == a  # the unmapped page after it is free: in place
    new = space.remap(a + 2 * PAGE, PAGE, 2 * PAGE, MREMAP_MAYMOVE)  # the anonymous page is in the way
    assert new not in (a, a + 2 * PAGE)
    assert space.names == {(a, a + PAGE): (lib, 0), (new, new + PAGE): (lib, 2 * PAGE)}
    text = maps(table.regions(), space.names, 8).decode()
    named = [line for line in text.splitlines() if line.endswith(lib)]
    assert [line.split()[2] for line in named] == ["00000000", "00002000"]  # each at its file offset
