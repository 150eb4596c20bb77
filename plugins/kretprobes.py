"""The kretprobes probe type: a handler when a function returns.

``Kretprobe(symbol_name=..., addr=..., handler=..., entry_handler=..., maxactive=...,
data_size=...)`` is registered as a probe on the function's entry (letter ``r`` in
``list()``), whose pre_handler takes an instance from the probe's pool, runs the
entry_handler and hooks the call's return (:mod:`kpsdk.rethook`, which also does
the matching of returns to instances, per task, by stack pointer).  The kernel's
rules (R1 in docs/semantics.md; kprobes.rst, "Return Probes" and "register_kretprobe";
Guts section 4.3):

* only at a function entry, else ``EINVAL`` (ppc64 ELFv2: the global or the
  local entry; ``symbol_name`` with offset 0 means the local one, where calls
  from the same module arrive);
* ``maxactive`` instances made at registration; ``<= 0`` means
  ``max(10, 2 * ncpus)``, more than 4096 is ``E2BIG``;
* ``data_size`` more than 4096 bytes is ``E2BIG`` (KRETPROBE_MAX_DATA_SIZE), negative ``EINVAL``;
* a call that finds no free instance goes unhooked and counts in ``nmissed``,
  its entry_handler skipped; so does a reentrant hit (K6);
* an entry_handler returning non-zero leaves that call unhooked;
* ``ri.data`` (``data_size`` bytes) goes from the entry to the return handler;
  ``ri.ret_addr``, ``ri.rp`` and ``ri.task`` as in ``struct kretprobe_instance``;
* after unregistration, the calls in flight return without running the handler.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from kpsdk import hookimpl
from kpsdk.errors import KprobeError, ProbeHandlerError, TargetError, TargetFault
from kpsdk.probe import (
    HANDLER,
    INT,
    TRAP_HANDLER_EXCEPTION,
    FaultHandler,
    Probe,
    ProbeType,
    check_fields,
    fault_claimed,
)
from kpsdk.rethook import Direct, Rethook, RethookNode, ShadowStacks

if TYPE_CHECKING:
    from collections.abc import Callable

    from kpsdk.binfmt.symbols import CodeAndSymbols
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: the most instances one kretprobe may ask for (the kernel's KRETPROBE_MAXACTIVE_MAX)
MAXACTIVE_MAX = 4096
#: the largest ``data_size`` (the kernel's KRETPROBE_MAX_DATA_SIZE)
DATA_SIZE_MAX = 4096


class KretprobeInstance(RethookNode):
    """``struct kretprobe_instance``: ``ri.rp``, ``ri.ret_addr``, ``ri.task``, ``ri.data``."""

    __slots__ = ()

    @property
    def rp(self) -> Any:
        """The :class:`Kretprobe` this instance belongs to."""
        return self.rethook.owner


class Kretprobe(Probe):
    """``struct kretprobe``.

    ``handler(ri, regs)`` runs when the function returns (``regs.return_value``
    is readable and writable, ``regs.ip`` is the real return address);
    ``entry_handler(ri, regs) -> int`` at its entry, a non-zero return leaves
    that call unhooked.  ``nmissed`` counts calls that went unhooked for want
    of a free instance or because a handler was running (reentrancy).
    """

    letter = "r"
    #: the class of this probe's instances (``ri``); a return-probe type built on
    #: kretprobes (uretprobes) gives its own, whose ``ri.rp`` is the user's object
    instance_class: type[KretprobeInstance] = KretprobeInstance
    fields = {**Probe.fields, "handler": HANDLER, "entry_handler": HANDLER, "maxactive": INT, "data_size": INT}

    def __init__(
        self,
        *,
        symbol_name: str | None = None,
        offset: int = 0,
        addr: int | None = None,
        handler: Callable[[KretprobeInstance, PtRegs], Any] | None = None,
        entry_handler: Callable[[KretprobeInstance, PtRegs], Any] | None = None,
        maxactive: int = 0,
        data_size: int = 0,
        fault_handler: FaultHandler | None = None,
        flags: int = 0,
    ) -> None:
        super().__init__(symbol_name=symbol_name, offset=offset, addr=addr, fault_handler=fault_handler,
                         flags=flags)
        self.handler = handler
        self.entry_handler = entry_handler
        self.maxactive = maxactive
        self.data_size = data_size
        self.rethook: Rethook | None = None
        check_fields(self, Kretprobe.fields)

    @property
    def kp(self) -> Kretprobe:
        """The embedded kprobe of ``struct kretprobe`` (this object: ``rp.kp.addr`` works)."""
        return self

    @property
    def in_flight(self) -> int:
        """Instances hooked and not yet returned (0 when not registered)."""
        return self.rethook.in_flight if self.rethook is not None else 0


def function_entry(target: CodeAndSymbols, rp: Kretprobe, addr: int) -> int:
    """The entry address a kretprobe resolves to; ``EINVAL`` anywhere else in a function.

    An address outside every known symbol is taken as an entry (code without
    symbols, common under emulation; the kernel would say ``ENOENT``).
    """
    arch = target.arch
    plain = addr & ~1 if arch.has_thumb else addr
    sym = target.symbols.containing(plain)
    if sym is None:
        return addr
    entries = {0}
    local_entry = arch.local_entry  # ppc64 ELFv2: the entry after the TOC set-up
    if local_entry is not None and sym.kind == "func":
        local = local_entry(target.read_memory(sym.address, 8))
        if local:
            entries.add(local)
            if rp.symbol_name is not None and plain == sym.address:
                return addr + local
    skip = arch.kernel_entry_skip  # x86 IBT kernels: after the function's endbr (arch_adjust_kprobe_addr)
    if skip is not None and sym.kind == "func" and getattr(target, "abi_kind", "user") == "kernel":
        try:
            entries.add(skip(target.read_memory(sym.address, 4)))
        except TargetFault:
            pass
    if sym.kind != "func" or plain - sym.address not in entries:
        raise KprobeError(errno.EINVAL, f"{target.symbols.format(plain)} is not a function entry: "
                          "a kretprobe goes on the first instruction of a function")
    return addr


def _entry(rp: Kretprobe, rh: Rethook, core: ShadowStacks) -> Callable[[Probe, PtRegs], int]:
    """The pre_handler of a kretprobe's entry probe (the kernel's pre_handler_kretprobe)."""
    free = rh.free_nodes
    prepare, push, recycle = core.prepare, core.push, rh.recycle

    def entry(p: Probe, regs: PtRegs) -> int:
        if not free:
            core.reclaim(regs)  # frames left by a longjmp may hold the pool
            if not free:
                p.nmissed += 1
                return 0
        ri = free.pop()
        prepare(ri, regs)
        handler = rp.entry_handler
        if handler is None:
            push(ri, regs)
            return 0
        vetoed = True
        try:  # the truth test is the handler's too: a return value whose bool() raises
            # the pool's nodes are KretprobeInstance (node_class): no cast() call, nor bool(), per hit
            if not handler(ri, regs):  # type: ignore[arg-type]
                vetoed = False
        except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
            recycle(ri)
            _fault(rp, regs, exc, "entry_handler")
            return 0
        if vetoed or rh.freed:  # vetoed, or unregistered by its own entry_handler
            recycle(ri)
            return 0
        push(ri, regs)
        return 0

    return entry


def _entry_call(rp: Kretprobe, rh: Rethook) -> Callable[[RethookNode, PtRegs], bool]:
    """The entry_handler for a target that hooks the entry by itself (``Rethook.entry``):
    True keeps the call hooked; False when the handler vetoed it or the probe was
    unregistered meanwhile, as :func:`_entry` decides.  An exception goes to the
    fault_handler (K4) and unhooks the call; an unclaimed one propagates."""

    def call(ri: RethookNode, regs: PtRegs) -> bool:
        handler = rp.entry_handler
        if handler is None:  # cleared by the user after registration
            return not rh.freed
        try:  # the truth test is the handler's too: a return value whose bool() raises
            if handler(ri, regs):  # type: ignore[arg-type]  # KretprobeInstance nodes, as above
                return False
        except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
            _fault(rp, regs, exc, "entry_handler")
            return False
        return not rh.freed

    return call


def _return(rp: Kretprobe) -> Callable[[RethookNode, PtRegs], None]:
    """What the rethook runs for each returning instance: the user's handler, with K4."""

    def on_return(ri: RethookNode, regs: PtRegs) -> None:
        handler = rp.handler
        if handler is None:
            return
        try:
            handler(ri, regs)  # type: ignore[arg-type]  # KretprobeInstance nodes, as above
        except Exception as exc:  # noqa: BLE001 - handed to fault_handler or re-raised with context
            _fault(rp, regs, exc, "handler")

    return on_return


def _fault(rp: Kretprobe, regs: PtRegs, exc: Exception, phase: str) -> None:
    """K4 for the kretprobe's own handlers: its fault_handler may claim the exception."""
    session = rp.session
    point = session.target.manager.point_of(rp) if session is not None else None
    addr = point.addr if point is not None else rp.addr or 0
    where = session.symbols.format(addr) if session is not None else rp.where()
    if fault_claimed(rp, regs, TRAP_HANDLER_EXCEPTION, addr, where):
        return
    raise ProbeHandlerError(rp, addr, where, phase, exc) from exc


def check_limits(rp: Any) -> None:
    """register_kretprobe's checks of the pool a return probe asks for (uretprobes share them):
    ``maxactive`` above :data:`MAXACTIVE_MAX` or ``data_size`` above :data:`DATA_SIZE_MAX` is
    ``E2BIG``, a negative ``data_size`` ``EINVAL``.  ``maxactive <= 0`` means the default."""
    if rp.maxactive > MAXACTIVE_MAX:
        raise KprobeError(errno.E2BIG, f"maxactive {rp.maxactive} is more than {MAXACTIVE_MAX}")
    if rp.data_size < 0:
        raise KprobeError(errno.EINVAL, f"data_size {rp.data_size} is negative")
    if rp.data_size > DATA_SIZE_MAX:
        raise KprobeError(errno.E2BIG, f"data_size {rp.data_size} is more than {DATA_SIZE_MAX} bytes "
                                       "(the kernel's KRETPROBE_MAX_DATA_SIZE)")


def register(session: Session, rp: Kretprobe) -> None:
    target = session.target
    manager = target.manager
    check_fields(rp, type(rp).fields)
    if rp.registered:
        raise KprobeError(errno.EINVAL, f"{rp!r} is already registered")
    check_limits(rp)
    addr = function_entry(target, rp, manager.resolve(rp))
    count = rp.maxactive if rp.maxactive > 0 else max(10, 2 * target.ncpus)
    core = ShadowStacks.of(target)
    try:
        rh = core.rethook(rp, _return(rp), count, rp.data_size, rp.instance_class)
    except KprobeError:
        raise  # already says why, with its errno (a capability the arch lacks)
    except TargetError as e:
        raise KprobeError(errno.EOPNOTSUPP, str(e)) from e
    rp.pre_handler = _entry(rp, rh, core)
    # the entry hooks the return and runs the entry_handler: a target may do both by itself
    rh.entry = _entry_call(rp, rh) if rp.entry_handler is not None else None
    rh.direct = Direct(rp, _fault)  # what _return and _entry_call do, for a target's hot path
    rp.entry_rethook = rh
    try:
        manager.add(rp, addr)
    except BaseException:
        rh.free()
        rp.pre_handler = rp.entry_rethook = None
        raise
    rp.rethook = rh


def unregister(session: Session, rp: Kretprobe) -> None:
    session.target.manager.remove(rp)
    rp.entry_rethook = None
    if rp.rethook is not None:
        rp.rethook.free()
        rp.rethook = None


KRETPROBE = ProbeType(
    name="kretprobe",
    probe_class=Kretprobe,
    register=register,
    unregister=unregister,
    exports={"Kretprobe": Kretprobe, "KretprobeInstance": KretprobeInstance,
             "KRETPROBE_MAXACTIVE_MAX": MAXACTIVE_MAX, "KRETPROBE_MAX_DATA_SIZE": DATA_SIZE_MAX},
    decorator_field="handler",
    description="a handler when a function returns",
)


@hookimpl
def kpsdk_probe_types() -> list[ProbeType]:
    return [KRETPROBE]
