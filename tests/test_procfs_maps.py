"""``/proc/self/maps`` as the Unicorn target's Linux layer renders it (kpsdk.targets.linux.procfs).

The programs' own reading of it is tested against qemu-user in tests/test_linux_programs.py;
here, any layout of regions and names: every mapped byte is on exactly one line, in address
order, with its region's permissions and the name (and file offset) given for it, the way
glibc's ``pthread_getattr_np`` and any ``maps`` parser read the lines.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from kpsdk.targets.linux.procfs import maps, own_entry
from tests.conftest import fuzz_examples

PAGE = 0x1000
LINE = re.compile(r"^([0-9a-f]{8,})-([0-9a-f]{8,}) ([r-][w-][x-])p ([0-9a-f]{8,}) 00:00 0(?: +(\S+))?$")


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


def test_own_entries_are_self_thread_self_and_the_pid_only() -> None:
    assert own_entry("/proc/self/maps", "/", 1000) == "maps"
    assert own_entry("/proc/thread-self/maps", "/", 1000) == "maps"
    assert own_entry("/proc/1000/environ", "/", 1000) == "environ"
    assert own_entry("self/exe", "/proc", 1000) == "exe"
    assert own_entry("../proc/./self/cmdline", "/tmp", 1000) == "cmdline"
    assert own_entry("/proc/self", "/", 1000) == ""
    assert own_entry("/proc/1/maps", "/", 1000) is None
    assert own_entry("/proc/cpuinfo", "/", 1000) is None
    assert own_entry("/procx/self/maps", "/", 1000) is None
