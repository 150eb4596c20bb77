"""The probe manager: probe points, validation and the handler protocol.

One module, because the K1-K7 rules all read and change the same table of probe points.

This is the part of kprobes that does not depend on how a target traps: the
hash of probe points (``points``, O(1) by address), aggregate probes (several
probes on one address, handlers newest first as in the kernel: K5 in
docs/semantics.md), reentrancy (a hit while handlers run only counts
``nmissed``: K6, Guts section 4.4), fault handling and the two global knobs.  Targets call :meth:`ProbeManager.pre`
and :meth:`ProbeManager.post` from their trap or hook; the manager calls
:meth:`Target.sync_point` whenever what a point needs has changed, and the
target picks the mechanism (breakpoint, booster, hook).
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kpsdk.arch.insn import Decoded
from kpsdk.binfmt.symbols import decode_span, shown_name
from kpsdk.errors import DebugInfoError, KprobeError, ProbeHandlerError, SymbolError, TargetFault
from kpsdk.probe import TRAP_HANDLER_EXCEPTION, Probe, check_address_range, fault_claimed, handler_arg

if TYPE_CHECKING:
    from kpsdk.arch import InstructionSet
    from kpsdk.regs import PtRegs
    from kpsdk.target import Target


@dataclass(eq=False, slots=True)
class ProbePoint:
    """One probed address and everything registered there."""

    addr: int
    iset: InstructionSet
    insn: Decoded
    probes: list[Probe] = field(default_factory=list)
    #: probes whose handlers run on a hit (registered, enabled, knob on)
    active: tuple[Probe, ...] = ()
    #: set by the target: "breakpoint", "hook" or None when disarmed
    mechanism: str | None = None
    optimized: bool = False
    #: the target's own per-point state (slot address, hook handle...)
    state: dict[str, object] = field(default_factory=dict)
    #: a post_handler must run after the instruction, so the point cannot be
    #: boosted; computed with ``active`` because every hit reads it
    needs_step: bool = False
    #: set by a target re-entering the instruction after arming a step
    resuming: bool = False
    #: kpsdk's own point (the kretprobe trampoline): in its reserved area, and
    #: armed whatever the knobs say (a disarmed trampoline would lose returns)
    internal: bool = False
    #: :meth:`ProbeManager.pre` for this point, specialized to its active probes by the
    #: manager whenever they change (see :meth:`ProbeManager.pre_function`); hit paths call it
    run_pre: Callable[[PtRegs], int | None] | None = None
    #: :meth:`ProbeManager.post` for this point, likewise (``(regs, next_ip)``)
    run_post: Callable[[PtRegs, int], None] | None = None
    #: ``(probe, the p its handlers get)`` when exactly one probe is active, else None:
    #: what a target's hit path that runs one probe inline reads (one attribute, no
    #: ``len(active)`` and index, no ``handler_arg`` test per hit)
    only: tuple[Probe, Any] | None = None


#: the largest ``offset`` a probe may have (``struct kprobe``'s is an ``unsigned int``)
OFFSET_MAX = 0xFFFFFFFF


class ProbeManager:
    """Probe points of one session."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.points: dict[int, ProbePoint] = {}
        self._enabled = True
        self._optimization = True
        self.busy = False  # a handler is running (the kernel's current_kprobe)
        self.blacklist: set[str] = set()
        self._point_of: dict[int, ProbePoint] = {}  # id(probe) -> its point, for O(1) unregister
        #: whose hits count: None, every task's; else called at each hit, False when the task
        #: running is not followed (``kpsdk.open(..., follow=False)``: the first process only),
        #: and then the hit is as if no probe were there (no handler, no count; K6 untouched)
        self.task_filter: Callable[[], bool] | None = None

    def set_task_filter(self, task_filter: Callable[[], bool] | None) -> None:
        """Follow only the tasks ``task_filter`` accepts (see :attr:`task_filter`); the points'
        hit functions are remade: with a filter every hit takes :meth:`pre`/:meth:`post`, which
        ask it (the inlined one-probe bodies of the targets' hit paths are off)."""
        self.task_filter = task_filter
        for point in self.points.values():
            self._sync(point)

    # -- knobs -------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """The global arm/disarm knob (``/sys/kernel/debug/kprobes/enabled``)."""
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._enabled = bool(value)
        self.resync_all()

    @property
    def optimization(self) -> bool:
        """The optimization knob (``debug.kprobes_optimization``)."""
        return self._optimization

    @optimization.setter
    def optimization(self, value: bool) -> None:
        self._optimization = bool(value)
        # unoptimize first so the freed hook slots go to the right points
        for point in sorted(self.points.values(), key=lambda p: not p.optimized):
            self.target.sync_point(point, force=True)

    def resync_all(self) -> None:
        for point in list(self.points.values()):
            self._sync(point)

    # -- registration ------------------------------------------------------

    def resolve(self, probe: Probe) -> int:
        """The address a probe asks for: ``addr`` or ``symbol_name``, plus ``offset`` (K1).

        As the kernel's ``_kprobe_addr``: exactly one of the two (``EINVAL``), an
        unknown symbol is ``ENOENT``, and the offset, an ``unsigned int`` in
        ``struct kprobe``, is added to either; a negative one is ``EINVAL``.
        """
        if (probe.addr is None) == (probe.symbol_name is None):
            raise KprobeError(errno.EINVAL, "give exactly one of symbol_name and addr")
        if not 0 <= probe.offset <= OFFSET_MAX:
            raise KprobeError(errno.EINVAL, f"offset {probe.offset} is outside 0..{OFFSET_MAX:#x} "
                              "(the kernel's offset is an unsigned int, added to addr or the symbol)")
        if probe.symbol_name is not None:
            try:
                sym = self.target.symbols.get(probe.symbol_name)
            except SymbolError:
                source = self._source_address(probe)
                if source is not None:
                    return source + probe.offset
                from kpsdk.binfmt.symbols import did_you_mean

                symbols = self.target.symbols
                raise KprobeError(errno.ENOENT, f"no symbol {probe.symbol_name!r} in the target"
                                  + (did_you_mean(symbols.suggest(probe.symbol_name)) if len(symbols) else
                                     " (it has no symbols at all: a kernel target opened without kernel= or "
                                     "symbols=?)")) from None
            base = sym.address
            if probe.offset == 0 and sym.kind == "func":
                base += self._local_entry(base) + self._kernel_entry_skip(base)
        else:
            assert probe.addr is not None
            base = probe.addr
        return base + probe.offset

    def _source_address(self, probe: Probe) -> int | None:
        """A ``symbol_name`` no symbol has, read as a source probe point (``parse_line:12``,
        ``demo.c:40``, a function only inlined) through the debug information
        (:meth:`kpsdk.debuginfo.SessionDebug.points`): its one address; None when it is no
        such point.  ``ENOENT`` when the point is not there (the DWARF reader says why),
        ``EINVAL`` when it is at several addresses (an inlined function's copies: the
        decorator ``s.kprobe(POINT)`` and ``kpsdk probe --kprobe POINT`` put a probe on each)."""
        from kpsdk.debuginfo import is_source_point

        name = probe.symbol_name
        session = getattr(self.target, "session", None)
        if name is None or session is None:
            return None
        if not is_source_point(name) and not session.debug.inlined_copies(name):
            return None
        if name.endswith("%return"):
            raise KprobeError(errno.EINVAL, f"{name!r} is a return probe: a Kretprobe on {name[:-7]!r}")
        try:
            points = session.debug.points(name)
        except DebugInfoError as e:
            raise KprobeError(errno.ENOENT, f"{name!r}: {e}") from None
        if len(points) != 1:
            where = ", ".join(f"{p.point.where} ({p.address:#x})" for p in points)
            raise KprobeError(errno.EINVAL, f"{name!r} is at {len(points)} addresses ({where}): one Kprobe goes on "
                              f"one; @s.kprobe({name!r}) puts one on each")
        return points[0].address

    def _local_entry(self, addr: int) -> int:
        """How far past ``addr`` a function's ELFv2 local entry is (0 without one, or where
        its code cannot be read: :meth:`check_address` reports that).  A probe by name with
        no offset goes there, as the kernel's ``kprobe_lookup_name`` does on ppc64 ELFv2
        (arch/powerpc/kernel/kprobes.c), so it sees calls through either entry."""
        local_entry = self.target.arch.local_entry
        if local_entry is None:
            return 0
        try:
            return local_entry(self.target.read_memory(addr, 8))
        except TargetFault:
            return 0

    def _kernel_entry_skip(self, addr: int) -> int:
        """On a kernel, how far past ``addr`` a probe by name goes: x86's kernel puts a kprobe on
        a function that starts with ``endbr`` (IBT; or the nop that seals an unused one) after it,
        at SYM+0x4 (arch/x86/kernel/kprobes/core.c ``arch_adjust_kprobe_addr``), and its trace
        lines say so.  0 on other targets, or where the code cannot be read."""
        skip = self.target.arch.kernel_entry_skip
        if skip is None or getattr(self.target, "abi_kind", "user") != "kernel":
            return 0
        try:
            return skip(self.target.read_memory(addr, 4))
        except TargetFault:
            return 0

    def check_address(self, addr: int, internal: bool = False) -> tuple[int, InstructionSet, Decoded]:
        """Validate a probe address (K1) and decode the instruction there.

        Returns the address without any Thumb bit, its instruction set and the
        decoded instruction.  Raises ``EINVAL`` (beyond the arch's word, unmapped,
        blacklisted, refused instruction) or ``EILSEQ`` (inside an instruction).  ``internal``: kpsdk
        probing its own area (the kretprobe trampoline).
        """
        target = self.target
        check_address_range(target.arch, addr)
        sym = target.symbols.containing(addr & ~1 if target.arch.has_thumb else addr)
        iset = target.iset_at(addr, sym)
        addr &= ~1 if iset.thumb_bit else ~0
        if not target.is_mapped(addr) or not target.is_executable(addr):
            raise KprobeError(errno.EINVAL, f"{addr:#x} is not mapped executable memory in the target")
        if target.is_reserved(addr) and not internal:
            raise KprobeError(errno.EINVAL, f"{addr:#x} is in kpsdk's own area (blacklisted)")
        if sym is not None and sym.name in self.blacklist and not internal:
            raise KprobeError(errno.EINVAL, f"{shown_name(sym.name)} is on the no-probe blacklist")
        start, end = decode_span(sym, addr)
        insn = target.decode_at(addr, start, iset, end)
        if insn is None:
            where = target.symbols.format(addr)
            raise KprobeError(errno.EILSEQ, f"{where} ({addr:#x}) is not on an instruction boundary")
        if insn.refused:
            raise KprobeError(errno.EINVAL, insn.refused)
        return addr, iset, insn

    def add(self, probe: Probe, addr: int, internal: bool = False) -> ProbePoint:
        """Put a resolved, validated probe on its point and arm it.

        ``internal``: kpsdk's own probe in its reserved area (see ``ProbePoint.internal``).
        """
        if probe.registered:
            raise KprobeError(errno.EINVAL, f"{probe!r} is already registered")
        addr, iset, insn = self.check_address(addr, internal)
        point = self.points.get(addr)
        if point is None:
            point = ProbePoint(addr, iset, insn, internal=internal)
        self._check_step(probe, point)
        self._attach(probe, point)
        try:
            self._sync(point)
        except BaseException:
            self._detach(point, probe)
            raise
        return point

    def add_many(self, probes: list[Probe], check: Callable[[Probe], None] | None = None) -> None:
        """Register ``probes`` exactly as :meth:`resolve` and :meth:`add` would one by one
        (after ``check``, the type's own test of each probe), all or none (K8).

        A batch of 10,000 spent most of its time on what a batch can share (issue 19):
        decoding the instructions outside any function, one capstone call each.  So it goes
        in passes: every probe is checked and resolved in order (up to the first that
        fails); the addresses are decoded together (:func:`kpsdk.arch.decode.prime`) and K1's
        checks run on each in order (up to the first that fails); then the probes before
        that one are attached and armed in order, as one by one.  The error raised is the
        one the first failing probe gives one by one: an arming error (``ENOMEM``: kpsdk's
        slot area full) of an earlier probe comes before a later probe's check error, and a
        probe given twice is found registered at its second turn.  On any error the probes
        armed are unregistered, newest first."""
        from kpsdk.arch.decode import forget_primed  # loads with the first decode, not with kpsdk

        addrs: list[int] = []
        failure: KprobeError | None = None
        for probe in probes:
            try:
                if check is not None:
                    check(probe)
                addr = self.resolve(probe)
                if probe.registered:
                    raise KprobeError(errno.EINVAL, f"{probe!r} is already registered")
            except KprobeError as exc:  # raised in its turn, after the probes before it are armed
                failure = exc
                break
            addrs.append(addr)
        placed: list[tuple[Probe, ProbePoint]] = []
        new: dict[int, ProbePoint] = {}
        try:
            self._prime_decodes(addrs)
            for probe, addr in zip(probes, addrs, strict=False):  # addrs stops at a failing probe
                try:
                    addr, iset, insn = self.check_address(addr)
                    point = self.points.get(addr) or new.get(addr)
                    if point is None:
                        point = new[addr] = ProbePoint(addr, iset, insn)
                    self._check_step(probe, point)
                except KprobeError as exc:
                    failure = exc
                    break
                placed.append((probe, point))
        finally:
            forget_primed()  # the batch's own: a later registration reads the code afresh
        armed: list[tuple[Probe, ProbePoint]] = []
        try:
            for probe, point in placed:
                if probe.registered:  # given twice in this batch: registered by its first turn
                    raise KprobeError(errno.EINVAL, f"{probe!r} is already registered")
                self._attach(probe, point)
                armed.append((probe, point))
                self._sync(point)
            if failure is not None:
                raise failure
        except BaseException:
            for probe, point in reversed(armed):
                self._detach(point, probe)
            raise

    def _check_step(self, probe: Probe, point: ProbePoint) -> None:
        """``EINVAL`` for a post_handler where the target cannot run one after the instruction."""
        if probe.post_handler is not None and not self.target.can_step(point):
            raise KprobeError(errno.EINVAL, f"a post_handler cannot follow {point.insn} at "
                              f"{self.target.symbols.format(point.addr)}")

    def _attach(self, probe: Probe, point: ProbePoint) -> None:
        """Put a checked probe on its point, the point in :attr:`points` (not armed yet: :meth:`_sync`)."""
        self.points[point.addr] = point
        if probe.symbol_name is None and not probe.offset:  # addr as registered (no Thumb bit)
            probe.addr = point.addr
        probe.session = self.target.session
        point.probes.insert(0, probe)  # K5: the newest first, as the kernel's add_new_kprobe
        self._point_of[id(probe)] = point
        probe.nmissed = 0

    def _prime_decodes(self, addrs: list[int]) -> None:
        """Hand :func:`kpsdk.arch.decode.prime` those of ``addrs`` that :meth:`check_address` will
        decode on their own (no function holds them, or it is too long to walk)."""
        target = self.target
        if len(addrs) < 2 or getattr(target, "code_generation", None) is None:
            return  # nothing to share, or a target whose code may change under it (live): no priming
        from kpsdk.arch.decode import MAX_LINEAR, prime  # loads with the first decode, not with kpsdk

        arch = target.arch
        wanted = []
        for addr in addrs:
            if not 0 <= addr <= arch.word_mask:
                continue  # check_address says why
            sym = target.symbols.containing(addr & ~1 if arch.has_thumb else addr)
            start, _ = decode_span(sym, addr)
            if start == addr or addr - start > MAX_LINEAR:
                iset = target.iset_at(addr, sym)
                wanted.append((addr & ~1 if iset.thumb_bit else addr, iset))
        prime(target, wanted)

    def remove(self, probe: Probe) -> None:
        point = self.point_of(probe)
        if point is None:
            raise KprobeError(errno.EINVAL, f"{probe!r} is not registered in this session")
        self._detach(point, probe)

    def _detach(self, point: ProbePoint, probe: Probe) -> None:
        if probe in point.probes:
            point.probes.remove(probe)
        self._point_of.pop(id(probe), None)
        probe.session = None
        if not point.probes:
            point.active = ()
            point.only = None
            point.needs_step = False
            point.run_pre = point.run_post = None
            self.target.sync_point(point)
            self.points.pop(point.addr, None)
        else:
            self._sync(point)

    def point_of(self, probe: Probe) -> ProbePoint | None:
        point = self._point_of.get(id(probe))
        return point if point is not None and probe in point.probes else None

    def set_disabled(self, probe: Probe, disabled: bool) -> None:
        point = self.point_of(probe)
        if point is None:
            raise KprobeError(errno.EINVAL, f"{probe!r} is not registered in this session")
        from kpsdk.probe import KPROBE_FLAG_DISABLED

        probe.flags = probe.flags | KPROBE_FLAG_DISABLED if disabled else probe.flags & ~KPROBE_FLAG_DISABLED
        self._sync(point)

    def _sync(self, point: ProbePoint) -> None:
        probes = point.probes
        if not (self._enabled or point.internal):
            active: tuple[Probe, ...] = ()
        elif len(probes) == 1:  # the usual point (10,000 registered in a batch: issue 19)
            active = () if probes[0].disabled else (probes[0],)
        else:
            active = tuple(p for p in probes if not p.disabled)
        point.active = active
        point.only = (active[0], handler_arg(active[0])) if len(active) == 1 and self.task_filter is None else None
        point.needs_step = any(p.post_handler is not None for p in active)
        point.run_pre = self.pre_function(point)
        point.run_post = self.post_function(point) if point.needs_step else None
        self.target.sync_point(point)

    # -- the handler protocol (called by targets on a hit) ------------------

    def pre(self, point: ProbePoint, regs: PtRegs) -> int | None:
        """Run the pre_handlers of a hit.

        Returns the address to resume at when a pre_handler changed the path
        (K2: it returned non-zero), else ``None`` (execute the instruction).
        A hit while another probe's handlers run is a reentrant hit: handlers
        are skipped and ``nmissed`` counts it (K6).
        """
        if self.task_filter is not None and not point.internal and not self.task_filter():
            return None
        if self.busy:
            for p in point.active:
                p.nmissed += 1
            return None
        self.busy = True
        hit = regs._hit
        hit[0] = None
        hit[1] = point.addr
        hit[2] = None
        try:
            for p in point.active:
                p.hits += 1
                handler = p.pre_handler
                if handler is None:
                    continue
                try:  # the truth test is the handler's too: a return value whose bool() raises
                    if not handler(handler_arg(p), regs):
                        continue
                except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
                    self._fault(p, point, regs, exc, "pre_handler")
                    continue
                if hit[0] is None:
                    raise ProbeHandlerError(
                        p, point.addr, self.target.symbols.format(point.addr), "pre_handler",
                        ValueError("returned non-zero without setting regs.ip: it would loop forever"),
                    )
                return hit[0]
            return None
        finally:
            self.busy = False

    def pre_function(self, point: ProbePoint) -> Callable[[PtRegs], int | None]:
        """:meth:`pre` for ``point``, specialized to what its hits need.

        The common case, one active probe, gets a body with no loop and no lookups
        of the point: about half of a hook-path hit was this generic dispatch
        (docs/performance.md).  It does exactly what :meth:`pre` does for one
        probe (K2, K4, K6), reading ``pre_handler`` at each hit as :meth:`pre`
        does.  Other points get :meth:`pre` itself.  Rebuilt by :meth:`_sync`,
        which runs whenever ``point.active`` changes.  The one-probe body is the
        bound method of a small slotted object rather than a closure: a million
        points each held ~430 bytes of function and cells, ~120 this way (issue 38),
        and a hit reads slots as fast as cells.
        """
        if len(point.active) != 1 or self.task_filter is not None:
            return functools.partial(self.pre, point)
        p = point.active[0]
        return _PreOne(self, point, p, handler_arg(p), point.addr).run

    def path_change(self, p: Probe, point: ProbePoint, new: int | None) -> int:
        """K2: ``p``'s pre_handler returned non-zero; ``new`` is the ``regs.ip`` it set.
        Without one the CPU would run the handler again forever: an error."""
        if new is None:
            raise ProbeHandlerError(
                p, point.addr, self.target.symbols.format(point.addr), "pre_handler",
                ValueError("returned non-zero without setting regs.ip: it would loop forever"),
            )
        return new

    def post(self, point: ProbePoint, regs: PtRegs, next_ip: int) -> None:
        """Run the post_handlers once the instruction has executed (K3)."""
        if self.busy or self.task_filter is not None and not point.internal and not self.task_filter():
            return
        self.busy = True
        try:
            regs._reset(next_ip)
            for p in point.active:
                if p.post_handler is None:
                    continue
                try:
                    p.post_handler(handler_arg(p), regs, 0)
                except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
                    self._fault(p, point, regs, exc, "post_handler")
        finally:
            self.busy = False

    def post_function(self, point: ProbePoint) -> Callable[[PtRegs, int], None]:
        """:meth:`post` for ``point``, as :meth:`pre_function` is for :meth:`pre`: one active
        probe gets a body with no loop, the others :meth:`post` itself."""
        if len(point.active) != 1 or self.task_filter is not None:
            post = self.post
            return lambda regs, next_ip: post(point, regs, next_ip)
        p = point.active[0]
        me = handler_arg(p)
        manager = self

        def post_one(regs: PtRegs, next_ip: int) -> None:
            if manager.busy:
                return
            handler = p.post_handler
            if handler is None:
                return
            manager.busy = True
            hit = regs._hit
            hit[0] = None
            hit[1] = next_ip
            hit[2] = None
            try:
                handler(me, regs, 0)
            except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
                manager._fault(p, point, regs, exc, "post_handler")
            finally:
                manager.busy = False

        return post_one

    def _fault(self, p: Probe, point: ProbePoint, regs: PtRegs, exc: Exception, phase: str) -> None:
        """K4: a handler raised.  Its fault_handler may claim it (return 1).

        A :class:`ProbeHandlerError` that the probe's type raised for it (a
        kretprobe's entry_handler) already names it, and its fault_handler had
        its say.
        """
        if isinstance(exc, ProbeHandlerError) and exc.probe is p:
            raise exc
        where = self.target.symbols.format(point.addr)
        if fault_claimed(p, regs, TRAP_HANDLER_EXCEPTION, point.addr, where):
            return
        raise ProbeHandlerError(p, point.addr, where, phase, exc) from exc

    def instruction_fault(self, point: ProbePoint, regs: PtRegs, trapnr: int) -> bool:
        """K4: the probed instruction itself faulted; True if a fault_handler handled it."""
        regs._reset(point.addr)
        where = self.target.symbols.format(point.addr)
        return any(fault_claimed(p, regs, trapnr, point.addr, where) for p in point.active)

    # -- reports --------------------------------------------------------------

    def list_lines(self, extra: list[tuple[int, str, str, str]] | None = None) -> str:
        """The debugfs ``kprobes/list`` text (K9)."""
        width = self.target.arch.word_size * 2
        rows: list[tuple[int, str, str, str]] = []
        for addr, point in sorted(self.points.items()):
            mark = self.target.list_flag(point)
            for p in point.probes:
                flags = ("[DISABLED]" if p.disabled else "") + ("[OPTIMIZED]" if point.optimized else "") + mark
                rows.append((addr, p.letter, p.label or self.target.symbols.format(addr), flags))
        rows.extend(extra or [])
        rows.sort(key=lambda r: r[0])
        return "".join(f"{a:0{width}x}  {k}  {w}  {f}".rstrip() + "\n" for a, k, w, f in rows)

    def profile_rows(self) -> list[tuple[str, int, int]]:
        """``(name, hits, misses)`` per probe, the ``kprobe_profile`` content."""
        out = []
        for addr, point in sorted(self.points.items()):
            for p in point.probes:
                name = p.name or f"{p.letter}_{self.target.symbols.format(addr).replace('+', '_')}"
                out.append((name, p.hits, p.nmissed))
        return out


class _PreOne:
    """:meth:`ProbeManager.pre` for a point with one active probe (see
    :meth:`ProbeManager.pre_function`)."""

    __slots__ = ("manager", "point", "p", "me", "addr")

    def __init__(self, manager: ProbeManager, point: ProbePoint, p: Probe, me: Any, addr: int) -> None:
        self.manager, self.point, self.p, self.me, self.addr = manager, point, p, me, addr

    def run(self, regs: PtRegs) -> int | None:
        manager = self.manager
        p = self.p
        if manager.busy:  # K6
            p.nmissed += 1
            return None
        p.hits += 1
        handler = p.pre_handler
        if handler is None:
            return None
        manager.busy = True
        hit = regs._hit
        hit[0] = None
        hit[1] = self.addr
        hit[2] = None
        try:
            try:  # the truth test is the handler's too: a return value whose bool() raises
                if not handler(self.me, regs):
                    return None
            except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
                manager._fault(p, self.point, regs, exc, "pre_handler")
                return None
            return manager.path_change(p, self.point, hit[0])
        finally:
            manager.busy = False
