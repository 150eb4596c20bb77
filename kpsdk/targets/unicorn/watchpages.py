"""Write watchpoints that cost only where they watch: the watched page write-protected in the
engine, its stores handed to hooks, every other access on Unicorn's fast path.

A data watchpoint served by a memory hook (:mod:`.watch`) costs every load and store of every
block translated while the hook exists: Unicorn 2.1.4 compiles each of them to a call of its
slow-path helper (``tcg_uc_has_hookmem``), 15.7-17.4x on a load/store loop.  A write
watchpoint here uses no memory hook.  Its pages lose their write permission in the engine
(never in kpsdk's table of the process's mappings, which the Linux layer reads), and two
``UC_HOOK_MEM_WRITE_PROT`` hooks, which Unicorn does not count as memory hooks when it
translates, see the stores that reach them:

* one bounded to the page, in C (``kpsdk_page_allow`` in tlbfill.c; a Python callback
  without gcc), makes every store that touches no watched range of the page itself, into the
  page's host memory (Unicorn discards a store to a page it sees read-only even when a hook
  lets it go on), and none where the page is not the program's to write;
* one bounded to the watched range, the watch engine's (:meth:`UcWatch._on_prot
  <kpsdk.targets.unicorn.watch.UcWatch._on_prot>`), records the access as the memory hook
  did and lets it go on, or refuses it at a site's first hit (the slow path that learns the
  site, as before).

A store to the page after a TLB fill reaches these hooks because the page's write
protection hooks keep Unicorn from ever marking the page dirty (``notdirty_write``), so its
stores stay on the slow path; the TLB fill lets them reach the hooks (``set_traps``: it
would otherwise refuse a store to a page the engine sees unwritable).  Loads and other
pages are untouched.  A refused store stops the run precisely only through Unicorn's exit
check after it, so the checks stay on while a trapped watchpoint is armed (:mod:`.engine`;
they cost a memory-dense loop ~2x, against 15x for the memory hook).

A page the program keeps writing beside the watched word (a stack page, a hot global's
neighbours) pays a hook call per store, ~1 us with Unicorn's restore of the CPU state
before it: 24x on a loop storing to that page, against 16x for the memory hook.  So a page
that took :data:`HOT_STORES` such stores has its watchpoints moved to the memory
hook when the next run starts (:meth:`UcWatch.before_run
<kpsdk.targets.unicorn.watch.UcWatch.before_run>`).

The engine's protection follows the process's: after every mapping call (an ``mprotect``, a
switch to another process's memory) the trapped pages are protected again from kpsdk's
table.  Read watchpoints (``r``, ``rw``) keep the memory hook: Unicorn checks a load's
permission only at a TLB fill, so protecting a page cannot catch its loads.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.targets.unicorn.layout import PAGE

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.host import UnicornHost
    from kpsdk.targets.unicorn.tlb import TlbFill

#: watched ranges one page may hold (tlbfill.c's kpsdk_page_trap)
RANGES_PER_PAGE = 16
#: stores beside the watched ranges that move a page's watchpoints to the memory hook at the
#: next run (:meth:`PageTraps.hot`)
HOT_STORES = 10_000


class _PageTrap(ctypes.Structure):
    """``struct kpsdk_page_trap`` (tlbfill.c)."""

    _fields_ = [("allowed", ctypes.c_int64), ("n", ctypes.c_uint64), ("lo", ctypes.c_uint64 * RANGES_PER_PAGE),
                ("hi", ctypes.c_uint64 * RANGES_PER_PAGE), ("page", ctypes.c_uint64), ("host", ctypes.c_uint64),
                ("big", ctypes.c_int64), ("outside", ctypes.c_uint64), ("ctl", ctypes.c_void_p),
                ("flush_control", ctypes.c_int64)]


#: ``uc_cb_eventmem_t``: ``bool (uc_engine *, uc_mem_type, uint64_t addr, int size, int64_t value, void *)``
HOOK_EVENTMEM = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int,
                                 ctypes.c_int64, ctypes.c_void_p)


@dataclass
class _Page:
    trap: _PageTrap
    hook: int = 0
    ranges: list[tuple[int, int, Any]] = field(default_factory=list)  # (first, last, watchpoint)


def store(trap: _PageTrap, addr: int, size: int, value: int) -> None:
    """kpsdk_page_store in Python: the store's bytes that fall in the trapped page, written into
    its host memory (Unicorn discards its own write to a page it sees read-only)."""
    data = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "big" if trap.big else "little")
    lo, hi = max(addr, trap.page), min(addr + size, trap.page + PAGE)
    if lo < hi:
        ctypes.memmove(trap.host + lo - trap.page, data[lo - addr:hi - addr], hi - lo)


def _allow_py(uc: int, kind: int, addr: int, size: int, value: int, user: int) -> bool:
    """kpsdk_page_allow in Python (no gcc): the same answer, the same store, the same flush."""
    trap = _PageTrap.from_address(user)
    if not trap.allowed:
        return False
    last = addr + max(size - 1, 0)
    if any(addr <= trap.hi[i] and last >= trap.lo[i] for i in range(trap.n)):
        return False
    store(trap, addr, size, value)
    trap.outside += 1
    if trap.flush_control:
        _flush(uc)
    return True


def _flush(uch: int) -> None:
    """Empty the TLB of the engine ``uch`` (a handle, from inside a hook)."""
    uclib.uc_ctl(ctypes.c_void_p(uch), ctypes.c_int((unicorn.UC_CTL_IO_WRITE << 30) | unicorn.UC_CTL_TLB_FLUSH))


_ALLOW_PY = HOOK_EVENTMEM(_allow_py)
#: ``UC_CTL_WRITE(UC_CTL_TLB_FLUSH, 0)``
_FLUSH = (unicorn.UC_CTL_IO_WRITE << 30) | unicorn.UC_CTL_TLB_FLUSH


class PageTraps:
    """The write-protected pages of one target's write watchpoints (see the module docstring).
    ``on_prot`` is the watch engine's range hook (the binding's callback signature)."""

    def __init__(self, target: UnicornHost, tlb: TlbFill, on_prot: Callable[..., bool],
                 native_allow: int | None) -> None:
        self.t = target
        self.uc = target.uc
        self._tlb = tlb
        self._on_prot = on_prot
        self._allow = native_allow if native_allow is not None else ctypes.cast(_ALLOW_PY, ctypes.c_void_p).value
        self._pages: dict[int, _Page] = {}
        self._hooks: dict[Any, int] = {}  # watchpoint -> its range hook
        self._reasserting = False
        self._big = target.arch.endian == "big"
        tlb.listeners.append(self.reassert)

    def __contains__(self, wp: Any) -> bool:
        return wp in self._hooks

    def eligible(self, wp: Any) -> bool:
        """A write watchpoint armed outside a run on pages the process may write, within the limits."""
        if wp.type != "w" or self.t.running or wp.length <= 0:
            return False
        pages = self._pages_of(wp)
        if len(set(pages) | set(self._pages)) > 64:
            return False
        for page in pages:
            region = self.t.space.region_at(page)
            if region is None or not region.prot & unicorn.UC_PROT_WRITE or region.prot & unicorn.UC_PROT_EXEC \
                    or region.end < page + PAGE:
                return False  # (code: a store made by hand would not drop its translations)
            known = self._pages.get(page)
            if known is not None and len(known.ranges) >= RANGES_PER_PAGE:
                return False
        return True

    @staticmethod
    def _pages_of(wp: Any) -> list[int]:
        first, last = wp.address & ~(PAGE - 1), (wp.address + wp.length - 1) & ~(PAGE - 1)
        return list(range(first, last + PAGE, PAGE))

    def arm(self, wp: Any) -> None:
        first, last = wp.address, wp.address + wp.length - 1
        for page in self._pages_of(wp):
            known = self._pages.get(page)
            if known is None:
                region = self.t.space.region_at(page)
                assert region is not None  # eligible() checked it
                known = self._pages[page] = _Page(_PageTrap(allowed=1, page=page, big=int(self._big),
                                                            ctl=ctypes.cast(uclib.uc_ctl, ctypes.c_void_p).value,
                                                            flush_control=_FLUSH if self._tlb.refusing else 0))
                known.trap.host = region.host_address() + page - region.start
                handle = uc_hook_h()
                status = uclib.uc_hook_add(self.uc._uch, ctypes.byref(handle), unicorn.UC_HOOK_MEM_WRITE_PROT,
                                           ctypes.c_void_p(self._allow), ctypes.byref(known.trap),
                                           ctypes.c_uint64(page), ctypes.c_uint64(page + PAGE - 1))
                if status != unicorn.UC_ERR_OK:
                    raise unicorn.UcError(status)
                known.hook = int(handle.value)
            known.ranges.append((max(first, page), min(last, page + PAGE - 1), wp))
            self._write_ranges(known)
        self._hooks[wp] = self.uc.hook_add(unicorn.UC_HOOK_MEM_WRITE_PROT, self._on_prot, wp, first, last)
        self._tlb.set_traps(list(self._pages))
        self.reassert()

    def disarm(self, wp: Any) -> None:
        handle = self._hooks.pop(wp, None)
        if handle is None:
            return
        self.uc.hook_del(handle)
        for page in self._pages_of(wp):
            known = self._pages.get(page)
            if known is None:
                continue
            known.ranges = [r for r in known.ranges if r[2] is not wp]
            self._write_ranges(known)
            if not known.ranges:
                del self._pages[page]
                uclib.uc_hook_del(self.uc._uch, uc_hook_h(known.hook))
                region = self.t.space.region_at(page)
                if region is not None and self._engine_has(page):
                    self._protect(page, region.prot)
        self._tlb.set_traps(list(self._pages))

    @staticmethod
    def _write_ranges(page: _Page) -> None:
        trap = page.trap
        trap.n = 0
        for i, (lo, hi, _wp) in enumerate(page.ranges):
            trap.lo[i], trap.hi[i] = lo, hi
        trap.n = len(page.ranges)

    def store(self, addr: int, size: int, value: int) -> bool:
        """Make a store the watch engine let go on into a trapped page (Unicorn discards its
        own); False where the program may not write there (its process's permission)."""
        known = self._pages.get(addr & ~(PAGE - 1))
        if known is None or not known.trap.allowed:
            return False
        store(known.trap, addr, size, value)
        if (addr + size - 1) & ~(PAGE - 1) != addr & ~(PAGE - 1):  # its tail on a trapped next page too
            following = self._pages.get((addr + size - 1) & ~(PAGE - 1))
            if following is not None:
                store(following.trap, addr, size, value)
        if self._tlb.refusing and self.uc._uch is not None:  # the next store into the page is filled again
            _flush(self.uc._uch.value or 0)
        return True

    def hot(self) -> list[Any]:
        """The watchpoints whose pages took :data:`HOT_STORES` stores beside the watched ranges
        since they were trapped (each one a hook call with Unicorn's restore of the CPU state,
        ~1 us: on such a page the memory hook's ~50 ns per access of the whole program is
        cheaper)."""
        out = []
        for known in self._pages.values():
            if known.trap.outside >= HOT_STORES:
                out += [wp for _lo, _hi, wp in known.ranges if wp not in out]
        return out

    def reassert(self) -> None:
        """After a mapping call: each trapped page write-protected again in the engine, and
        allowed its stores where the process's table lets it write there."""
        if self._reasserting or not self._pages:
            return
        self._reasserting = True
        try:
            for page, known in self._pages.items():
                region = self.t.space.region_at(page)
                known.trap.allowed = int(region is not None and bool(region.prot & unicorn.UC_PROT_WRITE))
                if region is not None:  # another process's memory: its own buffer
                    known.trap.host = region.host_address() + page - region.start
                if region is not None and self._engine_has(page):
                    self._protect(page, region.prot & ~unicorn.UC_PROT_WRITE)
        finally:
            self._reasserting = False

    def _engine_has(self, page: int) -> bool:
        return self.t.space.active and self.t.space.region_at(page) is not None

    def _protect(self, page: int, prot: int) -> None:
        """The engine's permissions of ``page`` (not the table's); nothing where the engine has
        no such page now (a switch between processes' memories is under way)."""
        was, self._reasserting = self._reasserting, True
        try:
            self.uc.mem_protect(page, PAGE, prot)
        except unicorn.UcError:
            pass  # not mapped in the engine at this moment: protected again after the next mapping call
        finally:
            self._reasserting = was
