"""Write watchpoints served by a write-protected page (kpsdk/targets/unicorn/watchpages.py):
the other stores to the page land, every hit is reported with old and new values, the
process keeps its own view of the page's permissions, and the C page hook and its Python
fallback (no gcc) behave the same."""

from __future__ import annotations

from typing import Any

import pytest

import kpsdk
from kpsdk.targets.unicorn import tlb, watch

CODE, DATA, OTHER = 0x100000, 0x500000, 0x600000

#: per arch: store a0 at [DATA+0x20] and a1 at [DATA+0x100] (the watched word), then return
#: the word at [DATA+0x20] (4-byte words)
PROGRAMS = {
    "x86_64": "mov rbx, {data:#x}; mov dword ptr [rbx + 0x20], edi; mov dword ptr [rbx + 0x100], esi; "
              "mov eax, dword ptr [rbx + 0x20]; ret",
    "ppc64": "lis 5, {hi}; stw 3, 0x20(5); stw 4, 0x100(5); lwz 3, 0x20(5); blr",
    "arm": "movw r2, #{lo}; movt r2, #{hi}; str r0, [r2, #0x20]; str r1, [r2, #0x100]; ldr r0, [r2, #0x20]; bx lr",
}


@pytest.fixture(params=["native", "python"])
def page_hook(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":  # as without gcc: the page hook in Python
        monkeypatch.setattr(watch, "native_symbol", lambda name: None)
    return str(request.param)


def _session(arch: str) -> kpsdk.Session:
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.target.map(OTHER, 0x1000, "rw")  # type: ignore[attr-defined]
    asm = PROGRAMS[arch].format(data=DATA, hi=DATA >> 16, lo=DATA & 0xFFFF)
    s.write_memory(CODE, s.arch.assemble(asm, CODE))
    return s


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_stores_beside_a_watched_word_land_and_each_hit_is_reported(arch: str, page_hook: str) -> None:
    s = _session(arch)
    seen: list[tuple[int, int, Any]] = []
    wp = kpsdk.Watchpoint(addr=DATA + 0x100, length=4, type="w",
                          handler=lambda w, r, a: seen.append((a.addr, a.value, a.old)))
    s.register_watchpoint(wp)
    assert wp in s.target.watch._traps  # type: ignore[attr-defined]  # no memory hook: a trapped page
    results = [s.call(CODE, 0x1000 + i, 0x2000 + i) for i in range(4)]
    assert results == [0x1000 + i for i in range(4)]  # the store beside the watched word landed
    assert seen == [(DATA + 0x100, 0x2000 + i, 0x2000 + i - 1 if i else 0) for i in range(4)]
    assert s.read_int(DATA + 0x100, 4) == 0x2003
    s.unregister_watchpoint(wp)
    assert s.call(CODE, 7, 8) == 7 and s.read_int(DATA + 0x100, 4) == 8 and len(seen) == 4


def test_a_watch_on_another_page_leaves_the_loop_s_page_alone(page_hook: str) -> None:
    s = _session("x86_64")
    seen: list[int] = []
    s.register_watchpoint(kpsdk.Watchpoint(addr=OTHER + 8, length=8, type="w",
                                           handler=lambda w, r, a: seen.append(a.value)))
    assert s.call(CODE, 5, 6) == 5 and not seen
    assert s.target.watch.hooked == 1  # type: ignore[attr-defined]
    regions = {start: perms for start, _end, perms in s.target.uc.mem_regions()}  # type: ignore[attr-defined]
    assert regions[DATA] == 3 and regions[OTHER] == 1  # only the watched page lost its write permission
    assert s.target._region(OTHER)[2] == 3  # type: ignore[attr-defined]  # kpsdk's table keeps the process's


def test_the_python_fill_and_page_hook_match_the_c_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No gcc at all: the Python TLB fill and the Python page hook give the same results."""
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path))
    monkeypatch.setattr("kpsdk.nativebuild.shutil.which", lambda name: None)
    monkeypatch.setattr(tlb, "_native", None)
    monkeypatch.setattr(tlb, "_native_tried", False)
    s = _session("x86_64")
    assert not s.target.tlb.native  # type: ignore[attr-defined]
    seen: list[int] = []
    s.register_watchpoint(kpsdk.Watchpoint(addr=DATA + 0x100, length=4, type="w",
                                           handler=lambda w, r, a: seen.append(a.value)))
    assert [s.call(CODE, i, 100 + i) for i in range(3)] == [0, 1, 2] and seen == [100, 101, 102]


def test_a_page_kept_written_beside_the_watch_moves_it_to_the_memory_hook(page_hook: str) -> None:
    """Each store beside the watched word on a trapped page is a hook call (~1 us): past
    HOT_STORES in a run, the next run serves the watchpoint with the memory hook, and hits
    are still reported."""
    from kpsdk.targets.unicorn.watchpages import HOT_STORES

    s = _session("x86_64")
    seen: list[int] = []
    wp = kpsdk.Watchpoint(addr=DATA + 0x100, length=4, type="w", handler=lambda w, r, a: seen.append(a.value))
    s.register_watchpoint(wp)
    for i in range(HOT_STORES + 1):  # two stores a call on the page, one of them watched
        s.call(CODE, i, i)
        if wp not in s.target.watch._traps:  # type: ignore[attr-defined]
            break
    assert wp not in s.target.watch._traps  # type: ignore[attr-defined]
    assert s.call(CODE, 1, 99) == 1 and seen[-1] == 99 and len(seen) == i + 2
