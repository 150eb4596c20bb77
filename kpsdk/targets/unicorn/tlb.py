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

* a data access, the mapping's read and write permissions, plus execute when it
  is executable: such a page may hold translated code, so its stores stay on
  the slow path that finds and drops that code;
* an instruction fetch, every permission;
* a data access the mapping refuses (none there, an unreadable or unwritable
  one), while :meth:`TlbFill.refuse` is on: no entry, so that Unicorn raises
  the fault at once and precisely, as ``UC_ERR_EXCEPTION``, which
  :func:`run_error` names as Unicorn would have (a read or write, unmapped or
  protected).  It is on while Unicorn's exit checks after loads and stores may
  be off (:mod:`.engine`), because a store Unicorn refuses later in its store
  helper only asks the engine to exit and lets the block run on;
* a store into a page a write watchpoint traps (:mod:`.watchpages`): read and
  write when the storing instruction is one the watch engine has learned
  (:meth:`TlbFill.set_sites`), else refused, precisely, and learned.

Where the fill does not refuse, permissions are Unicorn's to enforce: it checks
the mapping's permissions on every slow-path access, which the first access to a
page after a fill always is.  Unicorn empties the TLB when a mapping is made or removed, and
when a ``mem_protect`` changes the write permission, not when it changes only
read or execute; so :func:`watch_mappings` empties it after every
``mem_protect``, and drops the translations of a range made executable (code
written while it was not: a JIT's write-then-protect).  Without the hook the
virtual mode gives each fill only the access's own permission, and a page both
read and written changes owner at every access (~380 ns a loop turn,
docs/performance.md, "Guest stores").

The fill runs at every TLB miss: a program that touches more pages than the TLB's 256
entries, in an order without locality (xz's 64 MB dictionary: 5.5 million misses for 1 MB),
pays it on each.  So it is C (``tlbfill.c``, built with gcc at first use by
:func:`kpsdk.nativebuild.build_shared_object`): ~0.1 us of its own where the Python fill,
kept as the fallback without gcc and as the reference the tests compare against, costs
~1.6-1.9 us.  Both answer the same, count their fills in :attr:`TlbFill.fills`, and let
Ctrl-C end a run of misses (the C fill calls a Python callback every :data:`POLL_EVERY`
fills, where the ``KeyboardInterrupt`` arrives; any other run hears Ctrl-C through
:mod:`.timer`).

ARM: Unicorn 2.1.4's virtual mode restores the CPU state of the accessing instruction at
every fill (``cpu_restore_state`` in ``unicorn_vtlb.c``), Thumb's IT state included, while
the instruction's translated block goes on running.  QEMU's translator keeps the IT state
in ``env`` zero for the whole of a block (zeroed at its start, written only when the block
is left inside an IT block), so a miss inside an IT block of a block that ended after it
left the state behind, and the next block ran as if inside it (Debian's armhf bzip2 wrote
a corrupt stream).  Both fills put the invariant back on a data access (one made from
inside a block, where the restore happened): IT bits found in CPSR there are cleared.  An
instruction fetch's fill comes from the translator, between blocks, where the IT state
is real, and is left alone (tests/test_uctlb.py).

An arena's pages (:class:`kpsdk.targets.unicorn.space.Arena`: many small anonymous
mappings in one engine mapping) are answered from the arena's byte per page, refused
where nothing is mapped or the permissions refuse the access, on every engine (the
engine's own checks would allow it: its mapping is read and write throughout);
:meth:`TlbFill.set_arenas` names the current space's.

The mappings are read from ``uc_mem_regions`` at the first fill after the memory
map may have changed; the fill is told so by :meth:`TlbFill.changed`, which
every mapping call made through the engine object reaches (:func:`watch_mappings`).

A TLB that keeps missing is made to grow: QEMU sizes its TLB only at a flush, so the C
fill flushes it after 1K, 2K, ... 128K fills (:data:`GROW_AT`): xz's 5.5 million misses
became 0.2-0.6 million.
"""

from __future__ import annotations

import bisect
import ctypes
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import unicorn
import unicorn.arm_const
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.errors import TargetError, ToolMissingError
from kpsdk.nativebuild import build_shared_object

#: ``uc_cb_tlbevent_t``: ``bool (uc_engine *, uint64_t vaddr, uc_mem_type, uc_tlb_entry *, void *)``.
#: The entry is seen as two native words: ``paddr``, then ``perms`` (an enum) and the struct's
#: padding, which is cheaper to write than a ``ctypes.Structure`` is to make (~0.5 us a fill)
HOOK_TLB_FILL = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p)

#: where ``perms`` sits in the second word: its low half on a little-endian host
_PERMS_SHIFT = 0 if sys.byteorder == "little" else 32
_ALL = unicorn.UC_PROT_ALL << _PERMS_SHIFT


#: each fill function's TlbFill, for :func:`_route_unraisable`; weak both ways, so that a
#: session's engine goes when the session does
_OWNERS: weakref.WeakKeyDictionary[Callable[..., Any], weakref.ref[TlbFill]] = weakref.WeakKeyDictionary()


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


#: pages a write watchpoint may trap at once, and instructions allowed to store into them
#: (tlbfill.c's MAX_TRAPS, MAX_SITES)
MAX_TRAPS, MAX_SITES = 64, 256
#: a refused access, by (its kind, why: 1 nothing mapped, 2 the permissions): the error Unicorn
#: would have named it with (tlbfill.c raises it as UC_ERR_EXCEPTION, precisely)
_ERRORS = {(unicorn.UC_MEM_READ, 1): unicorn.UC_ERR_READ_UNMAPPED,
           (unicorn.UC_MEM_READ, 2): unicorn.UC_ERR_READ_PROT,
           (unicorn.UC_MEM_WRITE, 1): unicorn.UC_ERR_WRITE_UNMAPPED,
           (unicorn.UC_MEM_WRITE, 2): unicorn.UC_ERR_WRITE_PROT}
#: each engine's fill, by the engine's handle (:func:`run_error`)
_BY_ENGINE: weakref.WeakValueDictionary[int, TlbFill] = weakref.WeakValueDictionary()


class _Native(ctypes.Structure):
    """``struct kpsdk_tlb`` (tlbfill.c): the C fill's state, owned by Python."""

    _fields_ = [("fills", ctypes.c_uint64), ("stale", ctypes.c_uint64), ("clear_it", ctypes.c_uint64),
                ("cpsr_reg", ctypes.c_int64), ("poll_every", ctypes.c_uint64), ("since_poll", ctypes.c_uint64),
                ("errors", ctypes.c_uint64), ("mem_regions", ctypes.c_void_p), ("uc_free", ctypes.c_void_p),
                ("reg_read", ctypes.c_void_p), ("reg_write", ctypes.c_void_p), ("poll", ctypes.c_void_p),
                ("ctl", ctypes.c_void_p), ("flush_control", ctypes.c_int64), ("since_flush", ctypes.c_uint64),
                ("grow_at", ctypes.c_uint64), ("grow_max", ctypes.c_uint64), ("grows", ctypes.c_uint64),
                ("refuse", ctypes.c_uint64), ("fault_type", ctypes.c_int64), ("fault_addr", ctypes.c_uint64),
                ("fault_why", ctypes.c_uint64), ("page_mask", ctypes.c_uint64), ("ntraps", ctypes.c_uint64),
                ("traps", ctypes.c_uint64 * MAX_TRAPS), ("pc_reg", ctypes.c_int64), ("nsites", ctypes.c_uint64),
                ("sites", ctypes.c_uint64 * MAX_SITES), ("once", ctypes.c_uint64), ("n", ctypes.c_uint64),
                ("cap", ctypes.c_uint64),
                ("regions", ctypes.c_void_p), ("narenas", ctypes.c_uint64), ("arenas", ctypes.c_void_p)]


class _Arena(ctypes.Structure):
    """``struct kpsdk_arena`` (tlbfill.c): an arena's range and its pages' bytes (:mod:`.space`)."""

    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("pages", ctypes.c_void_p)]


#: an arena page's byte (:class:`kpsdk.targets.unicorn.space.Arena`): mapped (with its read and
#: write bits), or carved (a mapping of its own in the engine); 0: nothing mapped
ARENA_MAPPED, ARENA_CARVED = 0x40, 0x80


SOURCE = Path(__file__).with_name("tlbfill.c")
#: fills between two calls of the C fill into Python (where Ctrl-C's KeyboardInterrupt arrives):
#: ~10 ms of misses, and a Python call per 64K fills costs nothing measurable
POLL_EVERY = 1 << 16
#: fills after which the C fill first flushes the TLB to make QEMU grow it (tlbfill.c; 4x its
#: first 256 entries), and the most fills between two such flushes (the TLB then holds 64K
#: pages, 256 MB: 2 MB of host memory for its table)
GROW_AT, GROW_MAX = 1 << 10, 1 << 17
_HOOK_POLL = ctypes.CFUNCTYPE(None)
_native: tuple[ctypes.CDLL, int, Any] | None = None
_native_tried = False


def _native_fill() -> tuple[ctypes.CDLL, int, Any] | None:
    """The C fill's library, its address and its release function; None where it cannot be
    built (no gcc: the Python fill serves)."""
    global _native, _native_tried
    if not _native_tried:
        _native_tried = True
        try:
            lib = ctypes.CDLL(str(build_shared_object("unicorn-native", SOURCE, "kpsdk's TLB fill")))
        except (ToolMissingError, TargetError, OSError):
            return None
        release = lib.kpsdk_tlb_release
        release.argtypes, release.restype = [ctypes.c_void_p], None
        address = ctypes.cast(lib.kpsdk_tlb_fill, ctypes.c_void_p).value
        assert address is not None
        _native = (lib, address, release)
    return _native


def _address(function: Any) -> int:
    address = ctypes.cast(function, ctypes.c_void_p).value
    assert address is not None
    return address


class TlbFill:
    """The virtual TLB of one Unicorn engine and its fill hook (see the module docstring).

    ``clear_it``: the engine is 32-bit ARM, whose IT state a data fill puts back to zero.
    ``prefer_native``: the C fill where it can be built (False: the Python fill, the
    reference the tests compare against).

    ``fail`` gets an exception raised inside the fill or its poll (a ``KeyboardInterrupt``
    arriving there): neither can raise into Unicorn, so the fill answers as the CPU's own
    fill would, or (an exception raised before its first line) ctypes answers False and
    Unicorn stops; either way the exception goes to ``fail``, which stops the run and has
    it re-raised."""

    def __init__(self, uc: unicorn.Uc, fail: Callable[[BaseException], None] | None = None,
                 clear_it: bool = False, prefer_native: bool = True, pc_reg: int = 0,
                 settle: Callable[[unicorn.Uc], None] | None = None) -> None:
        self._uc = uc
        self.fail = fail
        #: called after each fill of a data access (MIPS: ``DelaySlots.unicorn_settle``, since every
        #: fill restores the state of the accessing instruction, a delay slot's pending branch too);
        #: only the Python fill calls it (the caller asks for that fill where it needs one)
        self.settle = settle
        self._clear_it = clear_it
        #: the Python fill's mappings: starts, ends (inclusive) and permissions, sorted; None: to be re-read
        self._regions: tuple[list[int], list[int], list[int]] | None = None
        self._fills = 0
        #: the Python fill's last refused access (kind, address, why), and its trapped pages
        self._fault: tuple[int, int, int] | None = None
        self._traps: frozenset[int] = frozenset()
        self._sites: frozenset[int] = frozenset()
        self._once = 0
        self._pc_reg = pc_reg
        #: the current space's arenas (:meth:`set_arenas`): ``(start, end, pages)``, and what the C
        #: fill reads of them (kept alive here)
        self._arenas: list[tuple[int, int, Any]] = []
        self._arena_table: Any = None
        #: a store into a trapped page that the fill refused, by an instruction the watch engine
        #: had not learned: its address (:func:`run_error`; the watch engine takes it)
        self.trap_fault: int | None = None
        self._refuse = False
        #: called after every mapping call (:meth:`changed`)
        self.listeners: list[Callable[[], None]] = []
        #: the address of the refused access that ended the last run with an error (run_error)
        self.last_address: int | None = None
        if not getattr(sys.unraisablehook, "kpsdk_routes_fills", False):
            sys.unraisablehook = _route_unraisable(sys.unraisablehook)
        native = _native_fill() if prefer_native else None
        #: whether the C fill answers (else the Python one: ~1.9 us a miss)
        self.native = native is not None
        self._state: _Native | None = None
        if native is not None:
            _lib, address, self._release = native
            state = self._state = _Native()
            state.stale = 1
            state.clear_it = int(clear_it)
            state.cpsr_reg = unicorn.arm_const.UC_ARM_REG_CPSR
            state.poll_every = POLL_EVERY
            state.ctl = _address(uclib.uc_ctl)
            state.flush_control = (unicorn.UC_CTL_IO_WRITE << 30) | unicorn.UC_CTL_TLB_FLUSH
            state.grow_at, state.grow_max = GROW_AT, GROW_MAX
            state.refuse, state.fault_type, state.page_mask = 0, -1, ~0xFFF & (2**64 - 1)
            state.pc_reg = pc_reg
            state.mem_regions = _address(uclib.uc_mem_regions)
            state.uc_free = _address(uclib.uc_free)
            state.reg_read = _address(uclib.uc_reg_read)
            state.reg_write = _address(uclib.uc_reg_write)
            poll = _poll()
            _OWNERS[poll] = weakref.ref(self)
            self._callback: Any = _HOOK_POLL(poll)  # kept: the C fill holds only its address
            state.poll = _address(self._callback)
            hook, user = ctypes.c_void_p(address), ctypes.byref(state)
        else:
            fill = self._make_fill()
            _OWNERS[fill] = weakref.ref(self)
            self._callback = HOOK_TLB_FILL(fill)
            hook, user = ctypes.cast(self._callback, ctypes.c_void_p), None
        uc.ctl_set_tlb_mode(unicorn.UC_TLB_VIRTUAL)  # type: ignore[attr-defined]  # the stubs lack it
        handle = uc_hook_h()
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), unicorn.UC_HOOK_TLB_FILL, hook, user,
                                   ctypes.c_uint64(1), ctypes.c_uint64(0))
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)
        self._handle = handle
        if uc._uch is not None and uc._uch.value:
            _BY_ENGINE[uc._uch.value] = self
        if self._state is not None:  # the spans' memory goes with this object (and its engine)
            weakref.finalize(self, self._release, ctypes.byref(self._state))

    @property
    def fills(self) -> int:
        """Fills answered so far (docs/performance.md counts them per program)."""
        return int(self._state.fills) if self._state is not None else self._fills

    def changed(self) -> None:
        """The memory map may have changed: the next fill re-reads the mappings, and the
        listeners hear it (the write watchpoints' trapped pages: watchpages.py)."""
        if self._state is not None:
            self._state.stale = 1
        else:
            self._regions = None
        for listener in self.listeners:
            listener()

    def set_arenas(self, arenas: list[tuple[int, int, Any]]) -> None:
        """The arenas of the space now in the engine: ``(start, end, pages)``, ``pages`` a ctypes
        array of one byte per 4 KiB page (:class:`kpsdk.targets.unicorn.space.Arena`).  The fill
        answers their pages from those bytes, refusing what is not mapped there: the engine maps
        the whole arena.  The bytes are read at each fill: a change to them needs only
        :meth:`flush` (entries already made)."""
        self._arenas = list(arenas)
        if self._state is not None:
            table = (_Arena * max(len(arenas), 1))()
            for i, (start, end, pages) in enumerate(arenas):
                table[i].start, table[i].end, table[i].pages = start, end, ctypes.addressof(pages)
            self._state.narenas = 0
            self._arena_table = table
            self._state.arenas = ctypes.addressof(table)
            self._state.narenas = len(arenas)

    def flush(self) -> None:
        """Empty the TLB: an arena page changed (its entries, if any, are stale)."""
        flush_tlb(self._uc)

    def refuse(self, on: bool) -> None:
        """Whether the fill refuses what a mapping refuses (a precise fault at the access: see
        tlbfill.c), as it must while Unicorn's exit checks after stores are off (:mod:`.engine`);
        else it answers read and write wherever, and Unicorn's own checks find the fault."""
        self._refuse = on
        if self._state is not None:
            self._state.refuse = int(on)

    @property
    def refusing(self) -> bool:
        """The fill refuses what a mapping refuses (:meth:`refuse`)."""
        return self._refuse

    def set_traps(self, pages: list[int]) -> None:
        """The pages whose stores must reach Unicorn's write-protection hooks though their
        mapping (in the engine) is not writable: a write watchpoint's (watchpoints.py)."""
        if len(pages) > MAX_TRAPS:
            raise ValueError(f"more than {MAX_TRAPS} trapped pages")
        if self._state is not None:
            self._state.ntraps = 0
            for i, page in enumerate(pages):
                self._state.traps[i] = page
            self._state.ntraps = len(pages)
        else:
            self._traps = frozenset(pages)

    def set_sites(self, pcs: list[int]) -> None:
        """The instructions whose stores into a trapped page go on to its hooks (the watch
        engine's learned sites); any other one is refused at the fill, precisely."""
        pcs = pcs[:MAX_SITES]
        if self._state is not None:
            self._state.nsites = 0
            for i, pc in enumerate(pcs):
                self._state.sites[i] = pc
            self._state.nsites = len(pcs)
        else:
            self._sites = frozenset(pcs)

    def allow_once(self, pc: int) -> None:
        """Let the instruction at ``pc`` store into a trapped page while it is re-run recording
        (0: none; the watch engine clears it when the step ends)."""
        if self._state is not None:
            self._state.once = pc
        else:
            self._once = pc

    def take_fault(self) -> tuple[int, int, int] | None:
        """The access the fill last refused, ``(kind, address, why)``, and forget it."""
        if self._state is not None:
            state = self._state
            if state.fault_type < 0:
                return None
            out = (int(state.fault_type), int(state.fault_addr), int(state.fault_why))
            state.fault_type = -1
            return out
        fault, self._fault = self._fault, None
        return fault

    def _read_regions(self) -> tuple[list[int], list[int], list[int]]:
        regions = sorted(self._uc.mem_regions())
        self._regions = table = ([r[0] for r in regions], [r[1] for r in regions], [r[2] for r in regions])
        return table

    def _make_fill(self) -> Callable[[int, int, int, Any, int], bool]:
        """The Python fill, a closure (every attribute lookup saved is ~40 ns of each TLB miss):
        tlbfill.c's answers, line for line."""
        tlb, fetch, write, bisect_right = self, unicorn.UC_MEM_FETCH, unicorn.UC_MEM_WRITE, bisect.bisect_right
        clear_it, uc, cpsr = self._clear_it, self._uc, unicorn.arm_const.UC_ARM_REG_CPSR
        read_write, shift = unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE, _PERMS_SHIFT
        settle = self.settle

        def fill(uch: int, vaddr: int, kind: int, entry: Any, user: int) -> bool:
            entry[0] = vaddr
            entry[1] = _ALL  # the CPU's own answer, for a fetch
            try:
                tlb._fills += 1
                if kind == fetch:
                    return True
                if settle is not None:
                    settle(uc)
                for start, end, pages in tlb._arenas:  # tlbfill.c's arena_perms
                    if start <= vaddr < end:
                        page = pages[(vaddr - start) >> 12]
                        if page & ARENA_CARVED or (tlb._traps and vaddr & ~0xFFF in tlb._traps):
                            break
                        if not page & ARENA_MAPPED:
                            tlb._fault = (kind, vaddr, 1)
                            return False
                        if not page & (unicorn.UC_PROT_WRITE if kind == write else unicorn.UC_PROT_READ):
                            tlb._fault = (kind, vaddr, 2)
                            return False
                        if clear_it:
                            value = uc.reg_read(cpsr)
                            if value & _CPSR_IT:
                                uc.reg_write(cpsr, value & ~_CPSR_IT)
                        entry[1] = (page & read_write) << shift
                        return True
                starts, ends, perms = tlb._regions or tlb._read_regions()
                i = bisect_right(starts, vaddr) - 1
                refuse = tlb._refuse
                if i < 0 or vaddr > ends[i]:
                    if not refuse:
                        entry[1] = read_write << shift
                        return True
                    tlb._fault = (kind, vaddr, 1)
                    return False
                have = perms[i] & 7
                if not refuse:
                    have |= read_write
                elif not have & (unicorn.UC_PROT_WRITE if kind == write else unicorn.UC_PROT_READ):
                    if kind == write and vaddr & ~0xFFF in tlb._traps:
                        pc = uc.reg_read(tlb._pc_reg)
                        if not (tlb._once and tlb._once == pc) and pc not in tlb._sites:
                            tlb._fault = (kind, vaddr, 3)
                            return False
                        have |= read_write
                    else:
                        tlb._fault = (kind, vaddr, 2)
                        return False
                if clear_it:  # the IT state Unicorn's restore wrote (the module docstring)
                    value = uc.reg_read(cpsr)
                    if value & _CPSR_IT:
                        uc.reg_write(cpsr, value & ~_CPSR_IT)
                entry[1] = have << shift
            except BaseException as exc:  # noqa: BLE001 - handed to fail(), which stops the run
                if tlb.fail is not None:
                    tlb.fail(exc)
            return True

        return fill


def run_error(uc: unicorn.Uc, error: unicorn.UcError) -> unicorn.UcError:
    """The error a run of ``uc`` ended with, as Unicorn's own checks would have named it: an
    access the fill refused ends the run as ``UC_ERR_EXCEPTION`` (precisely, at the access),
    and is a read or write to memory unmapped or protected (the fault's address is Unicorn's
    ``invalid_addr``, :mod:`.faults`)."""
    tlb = _BY_ENGINE.get(uc._uch.value) if uc._uch is not None and uc._uch.value else None
    if tlb is None:
        return error
    fault = tlb.take_fault()
    if error.errno != unicorn.UC_ERR_EXCEPTION or fault is None:
        return error
    if fault[2] == 3:  # a trapped page's store by an instruction the watch engine has not learned
        tlb.trap_fault = fault[1]
        return unicorn.UcError(unicorn.UC_ERR_WRITE_PROT)
    code = _ERRORS.get((fault[0], fault[2]))
    if code is None:
        return error
    tlb.last_address = fault[1]
    return unicorn.UcError(code)


def native_symbol(name: str) -> int | None:
    """The address of ``name`` in the C fill's library (tlbfill.c), or None without it."""
    native = _native_fill()
    if native is None:
        return None
    return ctypes.cast(getattr(native[0], name), ctypes.c_void_p).value


def forget_fault(uc: unicorn.Uc) -> None:
    """A run of ``uc`` starts: an access refused before it (a probing fill) names no error of it."""
    tlb = _BY_ENGINE.get(uc._uch.value) if uc._uch is not None and uc._uch.value else None
    if tlb is not None:
        tlb.take_fault()


def last_fault_address(uc: unicorn.Uc) -> int | None:
    """The address of the access whose refusal ended ``uc``'s last run with an error, if the
    fill refused it (:func:`run_error`)."""
    tlb = _BY_ENGINE.get(uc._uch.value) if uc._uch is not None and uc._uch.value else None
    return None if tlb is None else tlb.last_address


#: CPSR's IT[1:0] (bits 26:25) and IT[7:2] (bits 15:10)
_CPSR_IT = 0x0600FC00


def _poll() -> Callable[[], None]:
    """The C fill's call into Python every :data:`POLL_EVERY` fills: it does nothing, and a
    pending ``KeyboardInterrupt`` is raised at its first instruction, which ctypes reports as
    unraisable and :func:`_route_unraisable` hands to the fill's ``fail``."""

    def poll() -> None:
        return None

    return poll


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
