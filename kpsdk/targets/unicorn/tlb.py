"""Guest stores at full speed: Unicorn's virtual TLB, filled by kpsdk.

In Unicorn 2.1.4's default TLB mode every guest store takes the slow store
path (~55 ns here, against ~3 ns for a load): the CPU's own fill gives each
page every permission, and Unicorn never marks a page dirty while its TLB
entry is executable (``notdirty_write`` in ``cputlb.c``), so every store goes
through the helper that, on a page of an executable mapping, looks for
translated code to throw away.  The virtual TLB mode (``UC_TLB_VIRTUAL``) asks
a ``UC_HOOK_TLB_FILL`` hook instead; a page whose TLB entry is not executable
is marked dirty at its first store and later stores take the inline fast path.

The fill here maps every page to itself, as the CPU's fill does on the
targets kpsdk runs (no guest page tables), and gives:

* a data access, read and write, plus execute when the page lies in an
  executable mapping: such a page may hold translated code, so its stores stay
  on the slow path that finds and drops that code;
* an instruction fetch, every permission.

Permissions themselves are still Unicorn's to enforce: it checks the mapping's
permissions on every slow-path access, which the first access to a page after a
fill always is.  Unicorn empties the TLB when a mapping is made or removed, and
when a ``mem_protect`` changes the write permission, not when it changes only
read or execute; so :func:`watch_mappings` empties it after every
``mem_protect``, and drops the translations of a range made executable (code
written while it was not: a JIT's write-then-protect).  Without the hook the
virtual mode gives each fill only the access's own permission, and a page both
read and written changes owner at every access (~380 ns a loop turn,
docs/performance.md, "Guest stores").

The fill is a Python callback, ~1.9 us where the CPU's own fill costs ~0.1 us:
a program that touches more pages than the TLB's 256 entries, in an order
without locality, pays that on each miss (docs/api/linux.md's limitations).

Not on ARM (``Arch.unicorn_tlb_fill``): Unicorn 2.1.4's virtual mode restores the CPU
state of the accessing instruction at every fill (``cpu_restore_state`` in
``unicorn_vtlb.c``), Thumb's IT state included, and a miss inside an IT block left that
state behind for the next translated block, which then ran as if inside it.  There
Unicorn's CPU fills its TLB, and :func:`watch_mappings` still empties it after every
``mem_protect``.

Which mappings are executable is read from ``uc_mem_regions`` at the first fill
after the memory map may have changed; the fill is told so by
:meth:`TlbFill.changed`, which every mapping call made through the engine
object reaches (:func:`watch_mappings`).
"""

from __future__ import annotations

import bisect
import ctypes
import sys
import weakref
from collections.abc import Callable
from typing import Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

#: ``uc_cb_tlbevent_t``: ``bool (uc_engine *, uint64_t vaddr, uc_mem_type, uc_tlb_entry *, void *)``.
#: The entry is seen as two native words: ``paddr``, then ``perms`` (an enum) and the struct's
#: padding, which is cheaper to write than a ``ctypes.Structure`` is to make (~0.5 us a fill)
HOOK_TLB_FILL = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p)

#: where ``perms`` sits in the second word: its low half on a little-endian host
_PERMS_SHIFT = 0 if sys.byteorder == "little" else 32
_DATA = (unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE) << _PERMS_SHIFT
_ALL = unicorn.UC_PROT_ALL << _PERMS_SHIFT


#: each fill function's TlbFill, for :func:`_route_unraisable`; weak both ways, so that a
#: session's engine goes when the session does
_OWNERS: weakref.WeakKeyDictionary[Callable[..., bool], weakref.ref[TlbFill]] = weakref.WeakKeyDictionary()


def _route_unraisable(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A ``sys.unraisablehook`` that gives an exception escaping a fill to its ``fail``.

    A signal's exception (Ctrl-C's ``KeyboardInterrupt``) is raised at the first
    Python instruction that runs after it, which in a run without probes is the
    fill's very first, before any ``try`` of its own: ctypes then reports it as
    unraisable and answers Unicorn False, and the run would end as a CPU fault.
    Every other unraisable exception goes to the hook that was there before."""

    def hook(unraisable: Any) -> None:
        try:
            owner = _OWNERS.get(unraisable.object)
        except TypeError:  # an unhashable object: not a fill
            owner = None
        tlb = owner() if owner is not None else None
        if tlb is not None and tlb.fail is not None and unraisable.exc_value is not None:
            tlb.fail(unraisable.exc_value)
            return
        previous(unraisable)

    hook.kpsdk_routes_fills = True  # type: ignore[attr-defined]
    return hook


class TlbFill:
    """The virtual TLB of one Unicorn engine and its fill hook (see the module docstring).

    ``fail`` gets an exception raised inside the fill (a ``KeyboardInterrupt``
    arriving there): the fill cannot raise into Unicorn, so it answers as the
    CPU's own fill would, or (an exception raised before its first line) ctypes
    answers False and Unicorn stops; either way the exception goes to ``fail``,
    which stops the run and has it re-raised."""

    def __init__(self, uc: unicorn.Uc, fail: Callable[[BaseException], None] | None = None,
                 settle: Callable[[unicorn.Uc], None] | None = None) -> None:
        self._uc = uc
        self.fail = fail
        #: called after each fill of a data access (MIPS: ``DelaySlots.unicorn_settle``, since every
        #: fill restores the state of the accessing instruction, a delay slot's pending branch too)
        self.settle = settle
        #: starts and ends (inclusive) of the executable mappings, sorted; None: to be re-read
        self._spans: tuple[list[int], list[int]] | None = None
        #: fills answered so far (docs/performance.md counts them per program)
        self.fills = 0
        fill = self._make_fill()
        _OWNERS[fill] = weakref.ref(self)
        if not getattr(sys.unraisablehook, "kpsdk_routes_fills", False):
            sys.unraisablehook = _route_unraisable(sys.unraisablehook)
        self._callback = HOOK_TLB_FILL(fill)
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
        self._spans = None

    def _read_spans(self) -> tuple[list[int], list[int]]:
        regions = sorted((s, e) for s, e, p in self._uc.mem_regions() if p & unicorn.UC_PROT_EXEC)
        self._spans = spans = ([s for s, _ in regions], [e for _, e in regions])
        return spans

    def _make_fill(self) -> Callable[[int, int, int, Any, int], bool]:
        """The fill, a closure: every attribute lookup saved is ~40 ns of each TLB miss."""
        tlb, fetch, bisect_right = self, unicorn.UC_MEM_FETCH, bisect.bisect_right
        settle, uc = self.settle, self._uc

        def fill(uch: int, vaddr: int, kind: int, entry: Any, user: int) -> bool:
            entry[0] = vaddr
            entry[1] = _ALL  # the CPU's own answer, until the page is known not to be executable
            try:
                tlb.fills += 1
                if kind != fetch:
                    starts, ends = tlb._spans or tlb._read_spans()
                    i = bisect_right(starts, vaddr) - 1
                    if i < 0 or vaddr > ends[i]:
                        entry[1] = _DATA
                    if settle is not None:
                        settle(uc)
            except BaseException as exc:  # noqa: BLE001 - handed to fail(), which stops the run
                if tlb.fail is not None:
                    tlb.fail(exc)
            return True

        return fill


def flush_tlb(uc: unicorn.Uc) -> None:
    """Empty ``uc``'s TLB (``UC_CTL_TLB_FLUSH``), whichever fills it."""
    uc.ctl(unicorn.UC_CTL_TLB_FLUSH, unicorn.UC_CTL_IO_WRITE)


def watch_mappings(uc: unicorn.Uc, tlb: TlbFill | None) -> None:
    """Route ``uc``'s mapping calls through ``tlb`` (None where Unicorn's CPU fills its TLB):
    the Linux layer's ``mmap``, ``mprotect``, ``munmap``, ``brk`` and ``mremap``, the
    watchpoints' traps and any caller holding the engine call the binding's methods on
    this object.

    After ``mem_protect`` the TLB is emptied (Unicorn keeps entries whose read or
    execute permission changed, in either TLB mode), and a range made executable loses
    its translations: code written into it while it was not executable was never
    checked against them."""

    def changing(method: Callable[..., Any], fill: TlbFill) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            finally:
                fill.changed()

        return call

    if tlb is not None:
        for name in ("mem_map", "mem_map_ptr", "mem_unmap"):
            setattr(uc, name, changing(getattr(uc, name), tlb))
    protect = uc.mem_protect

    def mem_protect(address: int, size: int, perms: int = unicorn.UC_PROT_ALL, keep_code: bool = False) -> None:
        """``keep_code``: the caller knows the bytes have not changed since they were last
        executable there (a parked mapping given back: :class:`kpsdk.targets.unicorn.space.Parking`)."""
        try:
            protect(address, size, perms)
        finally:
            if tlb is not None:
                tlb.changed()
            flush_tlb(uc)
        if perms & unicorn.UC_PROT_EXEC and size > 0 and not keep_code:
            uc.ctl_remove_cache(address, address + size)

    uc.mem_protect = mem_protect  # type: ignore[method-assign]
