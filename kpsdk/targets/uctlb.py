"""Guest stores at full speed: Unicorn's virtual TLB, filled by kpsdk.

In Unicorn 2.1.4's default TLB mode every guest store takes the slow store
path (~85 ns here, against ~3 ns for a load): the CPU's own fill gives each
page every permission, and Unicorn never marks a page that is executable in
the TLB as dirty (``notdirty_write`` in ``cputlb.c``), so each store looks for
translated code to throw away.  The virtual TLB mode (``UC_TLB_VIRTUAL``) asks
a ``UC_HOOK_TLB_FILL`` hook instead; a page whose TLB entry is not executable
is marked dirty at its first store and later stores take the inline fast path.

The fill here maps every page to itself, as the CPU's fill does on the
targets kpsdk runs (no guest page tables), and gives:

* a data access, read and write, plus execute when the page lies in an
  executable mapping: such a page may hold translated code, so its stores stay
  on the slow path that finds and drops that code (self-modifying code keeps
  working, whatever the order in which the page was first read, written or run);
* an instruction fetch, every permission.

Permissions themselves are still Unicorn's to enforce: it checks the mapping's
permissions on every slow-path access, which the first access to a page after a
fill always is, and it flushes the TLB when a mapping or its permissions change.
Without the hook the virtual mode gives each fill only the access's own
permission, and a page both read and written changes owner at every access
(~370 ns a loop turn, measured in docs/performance.md).

Which mappings are executable is read from ``uc_mem_regions`` at the first fill
after the memory map may have changed; the fill hook is told so by
:meth:`TlbFill.changed`, which the target calls from its own mapping calls and
which the Linux layer's are routed through (:func:`watch_mappings`).
"""

from __future__ import annotations

import bisect
import ctypes
from typing import Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib


class _TlbEntry(ctypes.Structure):
    """``uc_tlb_entry`` (unicorn.h): the physical page and the permissions of one fill."""

    _fields_ = [("paddr", ctypes.c_uint64), ("perms", ctypes.c_uint32)]


#: ``uc_cb_tlbevent_t``: ``bool (uc_engine *, uint64_t vaddr, uc_mem_type, uc_tlb_entry *, void *)``
HOOK_TLB_FILL = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                 ctypes.POINTER(_TlbEntry), ctypes.c_void_p)

_DATA = unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE
_ALL = unicorn.UC_PROT_ALL


class TlbFill:
    """The virtual TLB of one Unicorn engine and its fill hook (see the module docstring)."""

    def __init__(self, uc: unicorn.Uc) -> None:
        self._uc = uc
        #: starts and ends (inclusive) of the executable mappings, sorted; None: to be re-read
        self._starts: list[int] | None = None
        self._ends: list[int] = []
        self.fills = 0
        self._callback = HOOK_TLB_FILL(self._fill)
        uc.ctl_set_tlb_mode(unicorn.UC_TLB_VIRTUAL)  # type: ignore[attr-defined]  # the stubs lack it
        handle = uc_hook_h()
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), unicorn.UC_HOOK_TLB_FILL,
                                   ctypes.cast(self._callback, ctypes.c_void_p), None,
                                   ctypes.c_uint64(1), ctypes.c_uint64(0))
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)
        self._handle = handle

    def changed(self) -> None:
        """The memory map may have changed: the next fill re-reads the executable mappings."""
        self._starts = None

    def _executable(self, addr: int) -> bool:
        starts = self._starts
        if starts is None:
            regions = sorted((s, e) for s, e, p in self._uc.mem_regions() if p & unicorn.UC_PROT_EXEC)
            self._starts = starts = [s for s, _ in regions]
            self._ends = [e for _, e in regions]
        i = bisect.bisect_right(starts, addr) - 1
        return i >= 0 and addr <= self._ends[i]

    def _fill(self, uch: int, vaddr: int, kind: int, entry: Any, user: int) -> bool:
        self.fills += 1
        e = entry[0]
        e.paddr = vaddr
        e.perms = _ALL if kind == unicorn.UC_MEM_FETCH or self._executable(vaddr) else _DATA
        return True


def watch_mappings(uc: unicorn.Uc, tlb: TlbFill) -> None:
    """Route ``uc``'s mapping calls through ``tlb.changed()``: the Linux layer's ``mmap``,
    ``mprotect``, ``munmap``, ``brk`` and ``mremap``, the watchpoints' traps and any caller
    holding the engine call the binding's methods on this object."""
    for name in ("mem_map", "mem_map_ptr", "mem_unmap", "mem_protect"):
        method = getattr(uc, name)

        def wrapped(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            try:
                return _method(*args, **kwargs)
            finally:
                tlb.changed()

        setattr(uc, name, wrapped)
