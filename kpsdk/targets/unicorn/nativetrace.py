"""Trace events run in C on Unicorn: a code hook per probe point runs fetch programs, writes records.

A ``kpsdk trace`` event whose probe needs nothing of Python at the hit (its fetch arguments
and filter compiled by :mod:`kpsdk.fetchprog`, no handler, no ``--stack``, no trigger that
wants the record) costs 10-12 us in Python, nearly all of it the fetches and the record.
Here the point gets a Unicorn code hook written in C (``tracehook.c``, built with gcc at
first use by :func:`kpsdk.nativebuild.build_shared_object`), which runs the programs of the
point's probes and appends binary records to a ring; Python takes the ring's records in
batches (when it is full, before a Python-path event of the same trace, at the end of every
run or call) and hands them to the trace's writers (:mod:`kpsdk.trace.native`).

What this module asks of the target is one object, :attr:`UnicornTarget.native_trace
<kpsdk.targets.unicorn.target.UnicornTarget.native_trace>`, and four calls from it: whether
a point is served here (:meth:`NativeTraceHost.serves`, in ``_choose``), arm and disarm
(the mechanism ``native``), :meth:`NativeTraceHost.refresh` where the running task may have
changed (each slice's start, after each system call), and :meth:`NativeTraceHost.drain`
after each run or call.  A record carries the task it ran in as a number the trace chose
(its ``task_stamp`` callback, asked at each refresh): the prefix's comm and pid come from
the target's :meth:`task_info` as on the Python path, without a call per hit.  Hits are
counted in C and added to the probes' ``hits`` at each drain.

Without gcc, or where the build fails, :func:`native_trace_host` gives None and every event
keeps the Python path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.errors import TargetError, ToolMissingError
from kpsdk.fetchprog import HEADER
from kpsdk.nativebuild import build_shared_object

if TYPE_CHECKING:
    from kpsdk.manager import ProbePoint
    from kpsdk.targets.unicorn.target import UnicornTarget

SOURCE = Path(__file__).with_name("tracehook.c")
#: programs one point runs natively (tracehook.c's KT_SLOTS); a point with more keeps Python's path
SLOTS = 8
#: probe points served by native hooks at once: each code hook is walked at every hooked
#: instruction's hit (design.md: 1,000 hooks make each hit ~6x dearer); more keep Python's path
NATIVE_LIMIT = 64
#: a ring's bytes (a batch: at ~80 bytes a record, ~13,000 records a drain)
RING_SIZE = 1 << 20
#: a record's header (tracehook.c's KT_HEAD)
RECORD_HEAD = 48


class _Ring(ctypes.Structure):
    pass


_DRAIN = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Ring))
_Ring._fields_ = [("buf", ctypes.c_void_p), ("size", ctypes.c_uint64), ("head", ctypes.c_uint64),
                  ("drain", _DRAIN), ("stamp", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                  ("dropped", ctypes.c_uint64)]


class _Slot(ctypes.Structure):
    _fields_ = [("prog", ctypes.c_void_p), ("ring", ctypes.POINTER(_Ring)), ("hits", ctypes.c_uint64),
                ("id", ctypes.c_uint32), ("records", ctypes.c_uint32), ("hist", ctypes.c_void_p)]


class _Site(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("nslots", ctypes.c_uint32), ("quiet", ctypes.c_uint32),
                ("sp_id", ctypes.c_int32), ("pad", ctypes.c_uint32), ("slot", _Slot * SLOTS)]


_library: Any = None
_tried = False


def _load() -> Any:
    """tracehook.c's shared object, initialised with Unicorn's functions (None: no gcc, or it did not build)."""
    global _library, _tried
    if not _tried:
        _tried = True
        try:
            lib = ctypes.CDLL(str(build_shared_object("unicorn-native", SOURCE, "kpsdk's native trace hook",
                                                      headers=[HEADER])))
        except (ToolMissingError, TargetError, OSError):
            return None
        lib.kpsdk_trace_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.kpsdk_trace_init(ctypes.cast(uclib.uc_reg_read, ctypes.c_void_p),
                             ctypes.cast(uclib.uc_mem_read, ctypes.c_void_p))
        _library = lib
    return _library


class NativeRing:
    """Where one trace's records go: a buffer the hooks append to, drained by ``consume``
    (which gets the records' bytes and their address, and must be done with them when it returns)."""

    def __init__(self, host: NativeTraceHost, consume: Callable[[memoryview, int], None],
                 task_stamp: Callable[[], int], size: int = RING_SIZE) -> None:
        self.host = host
        self.consume = consume
        self.task_stamp = task_stamp
        self.buffer = (ctypes.c_uint8 * size)()
        self.view = memoryview(self.buffer).cast("B")
        self.ring = _Ring(ctypes.addressof(self.buffer), size, 0)
        self._callback = _DRAIN(lambda _ring: host.drain_ring(self, in_hook=True))  # kept: C holds only its address
        self.ring.drain = self._callback
        self.ring.stamp = task_stamp()
        self.closed = False
        #: called after each drain at the end of a run or call (the trace reads its hist tables)
        self.settle: Callable[[], None] | None = None

    @property
    def dropped(self) -> int:
        return int(self.ring.dropped)


class NativeProgram:
    """A program in C memory, with the ring its records go to and their program id."""

    def __init__(self, ring: NativeRing, code: bytes, ident: int) -> None:
        self.ring = ring
        self.code = ctypes.create_string_buffer(code, len(code))
        self.ident = ident
        #: a hist trigger's table in C memory (``struct kfp_hist``), aggregated at each hit; the
        #: trace's (kpsdk.trace.nativehist) keeps it alive.  Armed points see a change at re-arming.
        self.hist: Any = None
        #: whether its records are written (False: only its hist trigger reads them)
        self.records = True


class NativeTraceHost:
    """The native trace hooks of one Unicorn target (see the module's docstring)."""

    def __init__(self, target: UnicornTarget, lib: Any) -> None:
        self.target = target
        self.lib = lib
        self.hook = ctypes.cast(lib.kpsdk_trace_hook, ctypes.c_void_p)
        self.rings: list[NativeRing] = []
        #: the points served here: point -> (hook handle, site, (probe, program) of each slot, and
        #: (hist, records) of each program as armed)
        self.sites: dict[ProbePoint, tuple[int, _Site, list[tuple[Any, NativeProgram]], list[tuple[Any, bool]]]] = {}
        self._next_ident = 1
        self._sp_id = target.arch.register(target.arch.sp).uc

    #: records carry the host's CLOCK_MONOTONIC; the trace's clock is its own (since it started)
    clock_is_trace_clock = False
    #: hist triggers are counted in the hook (kpsdk.trace.nativehist)
    counts_hists = True

    # -- what the trace side attaches -------------------------------------------------------

    def register_id(self, name: str) -> tuple[int, int]:
        """Unicorn's id of an arch register, and its mask (_NotNative where Unicorn has none)."""
        reg = self.target.arch.register(name)
        if reg.uc is None:
            from kpsdk.fetchprog import _NotNative

            raise _NotNative(f"Unicorn has no register {name}")
        return reg.uc, reg.mask

    def new_ring(self, consume: Callable[[memoryview, int], None], task_stamp: Callable[[], int],
                 size: int = RING_SIZE) -> NativeRing:
        ring = NativeRing(self, consume, task_stamp, size)
        self.rings.append(ring)
        return ring

    def program(self, ring: NativeRing, code: bytes) -> NativeProgram:
        """``code`` (a :class:`kpsdk.fetchprog.FetchProgram`'s) running into ``ring``; its id is in its records."""
        prog = NativeProgram(ring, code, self._next_ident)
        self._next_ident += 1
        return prog

    def close_ring(self, ring: NativeRing) -> None:
        """The trace is done with ``ring``: what it holds is taken first."""
        self.drain_ring(ring)
        ring.closed = True
        if ring in self.rings:
            self.rings.remove(ring)

    # -- the mechanism ----------------------------------------------------------------------

    def serves(self, point: ProbePoint) -> bool:
        """Every active probe of ``point`` has a native program (``probe.native_fetch``), there
        are at most :data:`SLOTS`, and the instruction needs nothing of Python's hook path
        (a step for post_handlers, an ARM condition to test)."""
        active = point.active
        if not active or len(active) > SLOTS or point.needs_step or point.insn.condition is not None:
            return False
        if point not in self.sites and len(self.sites) >= NATIVE_LIMIT:
            return False
        programs = [_program_of(p) for p in active]
        return all(prog is not None and not prog.ring.closed for prog in programs)

    def stale(self, point: ProbePoint) -> bool:
        """The point's hook runs other programs than its active probes' now."""
        entry = self.sites.get(point)
        return entry is not None and (entry[2] != [(p, _program_of(p)) for p in point.active]
                                      or entry[3] != [(prog.hist, prog.records) for _, prog in entry[2]])

    def arm(self, point: ProbePoint) -> None:
        site = _Site()
        site.addr = point.addr
        site.sp_id = self._sp_id
        pairs = [(p, prog) for p in point.active if (prog := _program_of(p)) is not None]
        site.nslots = len(pairs)
        for k, (_, prog) in enumerate(pairs):
            slot = site.slot[k]
            slot.prog = ctypes.cast(prog.code, ctypes.c_void_p)
            slot.ring = ctypes.pointer(prog.ring.ring)
            slot.id = prog.ident
            slot.records = int(prog.records)
            slot.hist = ctypes.addressof(prog.hist) if prog.hist is not None else None
        site.quiet = int(self._quiet(point, self.target.space))
        handle = uc_hook_h()
        uc = self.target.uc
        assert uc._uch is not None
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), unicorn.UC_HOOK_CODE, self.hook,
                                   ctypes.byref(site), ctypes.c_uint64(point.addr), ctypes.c_uint64(point.addr))
        if status != unicorn.UC_ERR_OK:
            raise TargetError(f"cannot add the native trace hook: {unicorn.UcError(status)}")
        self.sites[point] = (int(handle.value), site, pairs, [(prog.hist, prog.records) for _, prog in pairs])

    def disarm(self, point: ProbePoint) -> None:
        entry = self.sites.pop(point, None)
        if entry is None:
            return
        handle, site, pairs, _ = entry
        for ring in {prog.ring for _, prog in pairs}:
            self.drain_ring(ring)  # the records of its hits so far, before its programs may go
        self._credit(site, pairs)
        uc = self.target.uc
        if uc._uch is not None:
            uclib.uc_hook_del(uc._uch, uc_hook_h(handle))

    # -- between hits ------------------------------------------------------------------------

    def refresh(self) -> None:
        """The running task may have changed (a slice starts, a system call returned): each
        ring's task stamp asked again, and each point's quiet flag set as the hook path decides
        it (``point.state["excluded"]``: the process's memory holds other code there)."""
        for ring in self.rings:
            ring.ring.stamp = ring.task_stamp()
        space = self.target.space
        for point, (_, site, _, _) in self.sites.items():
            site.quiet = int(self._quiet(point, space))

    @staticmethod
    def _quiet(point: ProbePoint, space: object) -> bool:
        """The hook path's rule (processes.py keeps ``excluded`` for every code-hook point, these
        too): quiet in a process whose memory holds other code at the point's address."""
        excluded = point.state.get("excluded")
        return bool(excluded) and space in excluded  # type: ignore[operator]

    def drain(self) -> None:
        """Every ring's records to its trace, and the hits counted in C to the probes."""
        for ring in list(self.rings):
            self.drain_ring(ring)
        for _, site, pairs, _ in self.sites.values():
            self._credit(site, pairs)
        for ring in list(self.rings):
            if ring.settle is not None:
                ring.settle()

    def drain_ring(self, ring: NativeRing, in_hook: bool = False) -> None:
        """``ring``'s records to its trace; ``in_hook``: from the C hook (a full ring), where an
        error is stored for run() to raise, as a Python hook's is."""
        head = int(ring.ring.head)
        if not head:
            return
        try:
            ring.consume(ring.view[:head], ctypes.addressof(ring.buffer))
        except BaseException as exc:
            if not in_hook:
                raise
            self.target.fail(exc)
        finally:
            ring.ring.head = 0

    @staticmethod
    def _credit(site: _Site, pairs: list[tuple[Any, NativeProgram]]) -> None:
        for k, (probe, _) in enumerate(pairs):
            slot = site.slot[k]
            if slot.hits:
                probe.hits += int(slot.hits)
                slot.hits = 0


def _program_of(probe: Any) -> NativeProgram | None:
    """The native program a trace gave ``probe`` (``probe.native_fetch``), if any."""
    prog = getattr(probe, "native_fetch", None)
    return prog if isinstance(prog, NativeProgram) else None


def native_trace_host(target: UnicornTarget) -> NativeTraceHost | None:
    """The target's host, made at the first ask (None where the C hook cannot be built)."""
    lib = _load()
    return None if lib is None else NativeTraceHost(target, lib)
