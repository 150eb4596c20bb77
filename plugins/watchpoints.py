"""The watchpoints probe type: a handler when data is accessed or code executed.

``Watchpoint(addr= | symbol_name=, length, type, handler, priority=0, strict=True)``
is kwatch's ``register_kwatch(addr, length, type, handler)`` (docs/semantics.md
lists the sources; the kernel's own interface is hw_breakpoint's
``register_wide_hw_breakpoint``, kernel/events/hw_breakpoint.c): ``type`` is
``x`` (execute), ``w`` (write), ``r`` (read) or ``rw``, and
``s.register_watchpoint(wp)`` returns the slot number (the debug register
the watchpoint went into).  ``handler(wp, regs, access)`` gets an
:class:`Access`: the address and size accessed, the kind, the value (old and
new for writes) and the pc of the accessing instruction where the target
knows it.  Data watchpoints fire after the access (memory already changed),
execute ones before the instruction.

The rules (W1 in docs/semantics.md; Guts section 8.2; hw_breakpoint's
``hw_breakpoint_arch_parse`` for what the hardware allows):

* **The architecture's rules by default** (``Arch.watch``, a
  :class:`~kpsdk.arch.WatchRules` each backend declares): a type, length or
  alignment the hardware cannot watch is ``EINVAL``; no slot left is ``ENOSPC``.
  ``strict=False`` lifts them where the target is an emulator that needs no
  debug registers (Unicorn): such a watchpoint takes none of the architecture's
  slots, gets a number from ``slots`` upwards, and is never preempted.
* **Slots are shared by priority** (:mod:`kpsdk.wpslots`): a request that
  finds every slot taken takes the slot of the lowest-priority holder whose
  priority is lower than its own.  The loser stays registered but disarmed
  (``wp.slot is None``) and is told through its ``on_preempt(wp)`` callback;
  when a slot frees up it is re-armed there and told through ``on_rearm(wp)``.
* Reentrancy as for kprobes (K6): an access while any probe handler runs
  counts in ``nmissed`` and runs no handler.

How a target watches is its own business (``Target.watch_engine()``): Unicorn
with bound memory hooks and a precise re-execution (:mod:`kpsdk.targets.unicorn.watch`),
live targets with gdb watchpoints (:mod:`kpsdk.targets.live.watch`).
"""

from __future__ import annotations

import errno
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kpsdk import hookimpl
from kpsdk.errors import KprobeError, ProbeHandlerError, TargetError
from kpsdk.probe import (
    BOOL,
    HANDLER,
    INT,
    KPROBE_FLAG_DISABLED,
    OPT_INT,
    STR,
    TRAP_HANDLER_EXCEPTION,
    FaultHandler,
    Probe,
    ProbeType,
    check_address_range,
    check_fields,
    fault_claimed,
)
from kpsdk.wpslots import SlotTable

if TYPE_CHECKING:
    from kpsdk.arch import WatchRules
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

TYPES = ("x", "w", "r", "rw")


@dataclass(frozen=True, slots=True)
class Access:
    """One access a watchpoint saw.

    :param addr: the first byte accessed (live targets: the watched address).
    :param size: bytes accessed (live targets: the watched length).
    :param kind: ``"r"``, ``"w"`` or ``"x"``.
    :param value: the value read or written, an unsigned integer in the
        target's byte order (``None`` for ``x``).
    :param old: for a write, the value before it; ``None`` otherwise.
    :param new: for a write, the value after it (= ``value``); ``None`` otherwise.
    :param pc: the address of the accessing instruction, ``None`` where the
        target cannot tell (live targets report the stop after it).
    """

    addr: int
    size: int
    kind: str
    value: int | None = None
    old: int | None = None
    new: int | None = None
    pc: int | None = None


WatchHandler = Callable[["Watchpoint", "PtRegs", Access], Any]


class Watchpoint(Probe):
    """A watchpoint probe (kwatch's ``register_kwatch``; W1 in docs/semantics.md).

    :param addr: the address watched (or ``symbol_name`` [+ ``offset``]).
    :param length: bytes watched; for ``x`` the default is the architecture's
        execute length (x86_64: 8, as Linux wants ``sizeof(long)``).
    :param type: ``"x"``, ``"w"``, ``"r"`` or ``"rw"``.
    :param handler: ``handler(wp, regs, access)``; its return value is ignored.
    :param priority: who keeps a slot when they run out (higher wins).
    :param strict: check the architecture's rules (False: on emulators only).
    :param software: live targets without hardware watchpoints (qemu-user):
        use gdb's software watchpoints, which single-step the whole program
        (``w`` only, and only writes that change the value are seen).
    :param on_preempt: ``on_preempt(wp)`` when a higher-priority watchpoint
        took its slot (it stays registered, disarmed).
    :param on_rearm: ``on_rearm(wp)`` when it got a slot back (``wp.slot``).
    :param fault_handler: ``fault_handler(wp, regs, trapnr)`` when the handler
        raised; returning non-zero claims the exception (K4).
    """

    letter = "w"
    fields = {**Probe.fields, "length": OPT_INT, "type": STR, "handler": HANDLER, "priority": INT, "strict": BOOL,
              "software": BOOL, "on_preempt": HANDLER, "on_rearm": HANDLER}

    def __init__(
        self,
        *,
        addr: int | None = None,
        symbol_name: str | None = None,
        offset: int = 0,
        length: int | None = None,
        type: str = "w",  # noqa: A002 - register_kwatch's name for it
        handler: WatchHandler | None = None,
        priority: int = 0,
        strict: bool = True,
        software: bool = False,
        on_preempt: Callable[[Watchpoint], Any] | None = None,
        on_rearm: Callable[[Watchpoint], Any] | None = None,
        fault_handler: FaultHandler | None = None,
        flags: int = 0,
    ) -> None:
        super().__init__(symbol_name=symbol_name, offset=offset, addr=addr, fault_handler=fault_handler,
                         flags=flags)
        self.length = length
        self.type = type
        self.handler = handler
        self.priority = priority
        self.strict = strict
        self.software = software
        self.on_preempt = on_preempt
        self.on_rearm = on_rearm
        #: the resolved address watched (set at registration)
        self.address: int | None = None
        #: the target's mechanism holds it (registered, has a slot, enabled)
        self.armed = False
        check_fields(self, Watchpoint.fields)

    @property
    def slot(self) -> int | None:
        """The slot (debug register) number, None while preempted or unregistered."""
        state = _states.get(self.session) if self.session is not None else None
        return state.slot_of(self) if state is not None else None

    def fire(self, regs: PtRegs, kind: str, addr: int, size: int, value: int | None = None,
             old: int | None = None, pc: int | None = None) -> None:
        """Run the handler for one access (called by targets; the CPU is stopped).

        Skipped and counted in ``nmissed`` while another probe handler runs (K6).
        A handler exception goes to ``fault_handler``, else it is raised as a
        :class:`~kpsdk.errors.ProbeHandlerError` (the target stops the run).
        """
        session = self.session
        if session is None or self.handler is None:
            return
        manager = session.target.manager
        if manager.busy:
            self.nmissed += 1
            return
        access = Access(addr, size, kind, value, old if kind == "w" else None, value if kind == "w" else None, pc)
        manager.busy = True
        try:
            self.hits += 1
            try:
                self.handler(self, regs, access)
            except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
                at = self.address if self.address is not None else addr
                where = session.symbols.format(at)
                if fault_claimed(self, regs, TRAP_HANDLER_EXCEPTION, at, where):
                    return
                raise ProbeHandlerError(self, at, where, "handler", exc) from exc
        finally:
            manager.busy = False

    def where(self) -> str:
        at = super().where()
        return f"{at} len={self.length} type={self.type}"


# -- per-session state: the slot tables -------------------------------------------------


@dataclass
class _State:
    """The slot tables of one session (one pool, or data + execute on ARM)."""

    data: SlotTable
    exec: SlotTable
    virtual: dict[Watchpoint, int] = field(default_factory=dict)  # strict=False: numbers >= the slot count

    def table(self, wp: Watchpoint) -> SlotTable:
        return self.exec if wp.type == "x" else self.data

    def slot_of(self, wp: Watchpoint) -> int | None:
        if wp in self.virtual:
            return self.virtual[wp]
        return self.table(wp).slot_of(wp)


_states: weakref.WeakKeyDictionary[Session, _State] = weakref.WeakKeyDictionary()


def _state(session: Session) -> _State:
    state = _states.get(session)
    if state is None:
        rules = session.arch.watch
        count = rules.slots if rules is not None else 0
        data = SlotTable(count, f"{session.arch.name} watchpoint slots")
        if rules is not None and rules.exec_slots is not None:
            exe = SlotTable(rules.exec_slots, f"{session.arch.name} breakpoint slots (type x)")
        else:
            exe = data
        state = _states[session] = _State(data, exe)
    return state


# -- the rules ------------------------------------------------------------------------------


def _lengths(lengths: tuple[int, ...]) -> str:
    if len(lengths) > 4 and lengths == tuple(range(lengths[0], lengths[-1] + 1)):
        return f"{lengths[0]}-{lengths[-1]}"
    return ", ".join(map(str, lengths))


def check_rules(rules: WatchRules | None, arch: str, wp: Watchpoint, addr: int, length: int) -> None:
    """``EINVAL`` naming the first rule of the architecture's debug hardware that ``wp`` breaks."""
    if rules is None:
        raise KprobeError(errno.EOPNOTSUPP, f"{arch} declares no watchpoint hardware (use strict=False on Unicorn)")
    if wp.type not in rules.types:
        raise KprobeError(errno.EINVAL, f"{arch} cannot watch type {wp.type!r}: its debug hardware has "
                          f"{', '.join(t for t in TYPES if t in rules.types)}")
    if wp.type == "x":
        if length not in rules.exec_lengths:
            raise KprobeError(errno.EINVAL, f"an execute watchpoint on {arch} must have length "
                              f"{_lengths(rules.exec_lengths)}, not {length}")
        return
    if rules.is_masked(length) and length not in rules.lengths:
        if addr % length:  # a masked range (AArch64's MASK) is naturally aligned
            raise KprobeError(errno.EINVAL, f"{addr:#x} is not aligned to the watched length {length} ({arch} "
                              "watches ranges of a power of two on their own alignment)")
        return
    if length not in rules.lengths:
        ranges = "" if rules.masked is None else \
            f", or a power of two from {rules.masked[0]} to {rules.masked[1]} bytes on its alignment"
        raise KprobeError(errno.EINVAL, f"{arch} cannot watch {length} bytes: lengths {_lengths(rules.lengths)}"
                          + ranges)
    if rules.aligned and addr % length:
        raise KprobeError(errno.EINVAL, f"{addr:#x} is not aligned to the watched length {length} ({arch} "
                          "debug registers watch naturally aligned ranges)")
    if rules.window and addr // rules.window != (addr + length - 1) // rules.window:
        raise KprobeError(errno.EINVAL, f"{addr:#x}+{length} crosses a {rules.window}-byte boundary, which {arch}'s "
                          "debug hardware cannot watch")


# -- register / unregister -----------------------------------------------------------------


def register(session: Session, wp: Watchpoint) -> int:
    target = session.target
    check_fields(wp, type(wp).fields)
    if wp.registered:
        raise KprobeError(errno.EINVAL, f"{wp!r} is already registered")
    if wp.type not in TYPES:
        raise KprobeError(errno.EINVAL, f"watchpoint type {wp.type!r}: want one of {', '.join(TYPES)}")
    addr = session.target.manager.resolve(wp)
    rules = session.arch.watch
    if wp.type == "x" and session.arch.has_thumb:
        addr &= ~1
    length = wp.length
    if length is None:
        if wp.type != "x":
            raise KprobeError(errno.EINVAL, "a data watchpoint needs a length")
        length = rules.exec_lengths[0] if rules is not None and rules.exec_lengths else 1
    if length <= 0:
        raise KprobeError(errno.EINVAL, f"length {length} is not positive")
    check_address_range(session.arch, addr)
    check_address_range(session.arch, addr + length - 1, f"the end of {addr:#x}+{length},")
    try:
        engine = target.watch_engine()
    except TargetError as e:
        raise KprobeError(errno.EOPNOTSUPP, str(e)) from e
    if wp.strict:
        check_rules(rules, session.arch.name, wp, addr, length)
    elif not engine.emulator:
        raise KprobeError(errno.EINVAL, "strict=False lifts the architecture's rules only on emulator targets "
                          "(Unicorn); this target watches with the debug hardware's rules")
    if not (target.is_mapped(addr) and target.is_mapped(addr + length - 1)):
        raise KprobeError(errno.EINVAL, f"{addr:#x}+{length} is not mapped in the target")
    wp.address, wp.length = addr, length
    engine.check(wp)
    state = _state(session)
    if wp.strict:
        grant = state.table(wp).request(wp, wp.priority)
        slot, loser = grant.slot, grant.preempted
    else:
        base = rules.slots if rules is not None else 0
        used = set(state.virtual.values())
        slot, loser = next(n for n in range(base, base + len(used) + 1) if n not in used), None
        state.virtual[wp] = slot
    wp.session = session
    wp.nmissed = 0
    try:
        if isinstance(loser, Watchpoint):
            _disarm(loser)
        _arm(wp)
    except BaseException:
        wp.session = None
        _release(state, wp)
        raise
    if isinstance(loser, Watchpoint) and loser.on_preempt is not None:
        loser.on_preempt(loser)
    return slot


def unregister(session: Session, wp: Watchpoint) -> None:
    state = _states.get(session)
    if wp.session is not session or state is None:
        raise KprobeError(errno.EINVAL, f"{wp!r} is not registered in this session")
    _disarm(wp)
    wp.session = None
    _release(state, wp)


def _release(state: _State, wp: Watchpoint) -> None:
    """Free wp's slot; the waiting watchpoint that gets it is re-armed and told."""
    if state.virtual.pop(wp, None) is not None:
        return
    heir = state.table(wp).release(wp)
    if heir is not None and isinstance(heir[0], Watchpoint):
        _arm(heir[0])
        if heir[0].on_rearm is not None:
            heir[0].on_rearm(heir[0])


def _arm(wp: Watchpoint) -> None:
    if wp.armed or wp.disabled or wp.session is None:
        return
    wp.session.target.watch_engine().arm(wp)
    wp.armed = True


def _disarm(wp: Watchpoint) -> None:
    if wp.armed and wp.session is not None:
        wp.session.target.watch_engine().disarm(wp)
        wp.armed = False


def set_disabled(session: Session, wp: Watchpoint, disabled: bool) -> None:
    """Disabled keeps the slot (as the kernel's disable_kprobe keeps the probe) but disarms."""
    if wp.session is not session:
        raise KprobeError(errno.EINVAL, f"{wp!r} is not registered in this session")
    wp.flags = wp.flags | KPROBE_FLAG_DISABLED if disabled else wp.flags & ~KPROBE_FLAG_DISABLED
    if disabled:
        _disarm(wp)
    elif wp.slot is not None:
        _arm(wp)


def held(session: Session) -> list[tuple[int, Watchpoint]]:
    """This session's registered watchpoints (preempted ones included), for ``list()``
    and ``profile()``, by address."""
    state = _states.get(session)
    if state is None:
        return []
    tables = {id(state.data): state.data, id(state.exec): state.exec}.values()
    found = {*state.virtual}
    for table in tables:
        found.update(wp for wp in [*table.holders().values(), *table.waiting()] if isinstance(wp, Watchpoint))
    return sorted(((wp.address or 0, wp) for wp in found), key=lambda row: (row[0], row[1].slot or 0))


WATCHPOINT = ProbeType(
    name="watchpoint",
    probe_class=Watchpoint,
    register=register,
    unregister=unregister,
    exports={"Watchpoint": Watchpoint, "WatchAccess": Access},
    decorator_field="handler",
    description="a handler when data is read or written, or code executed (debug registers)",
    set_disabled=set_disabled,
    held=held,
)


@hookimpl
def kpsdk_probe_types() -> list[ProbeType]:
    return [WATCHPOINT]


@hookimpl
def kpsdk_session_finish(session: Session) -> None:
    _states.pop(session, None)
