"""What every probe type shares: the ``Probe`` base and the ``ProbeType`` plugin face.

The core never names a probe type.  A probe type plugin returns a
:class:`ProbeType` from the ``kpsdk_probe_types`` hook; the session derives the
kernel-style verbs from its name (``register_kprobe``, ``register_kprobes``,
``unregister_kprobe(s)``, ``enable_kprobe``, ``disable_kprobe`` and the
decorator ``s.kprobe(...)``), and ``kpsdk`` exports its public classes.
"""

from __future__ import annotations

import errno
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

# defined in argcheck, below the ELF and symbol readers that use them too; kpsdk.probe's callers read them here
from kpsdk.argcheck import is_int as is_int
from kpsdk.argcheck import parse_number as parse_number
from kpsdk.errors import FieldTypeError, KprobeError, LocationError, ProbeHandlerError, shown

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.regs import PtRegs
    from kpsdk.rethook import Rethook
    from kpsdk.session import Session

PreHandler = Callable[["Probe", "PtRegs"], Any]
PostHandler = Callable[["Probe", "PtRegs", int], Any]
FaultHandler = Callable[["Probe", "PtRegs", int], Any]

#: ``flags`` bit: register the probe disabled (the kernel's KPROBE_FLAG_DISABLED).
KPROBE_FLAG_DISABLED = 2
#: ``flags`` bit set by kpsdk when the probe's address is gone (``[GONE]``).
KPROBE_FLAG_GONE = 1
#: ``trapnr`` given to a fault_handler when a handler raised a Python exception.
TRAP_HANDLER_EXCEPTION = -1


@dataclass(frozen=True)
class FieldKind:
    """What a probe field may hold: ``accepts`` checks a value, ``want`` says it in a message.

    Fields are checked when a probe is made and again when it is registered
    (a field may have been set in between), so that a wrong type is a
    :class:`~kpsdk.errors.FieldTypeError` naming the field, never a TypeError
    from deep inside registration or a failure at every hit.
    """

    want: str
    accepts: Callable[[object], bool]
    #: types whose every value ``accepts`` takes, so :func:`check_fields` need not ask it
    #: (a registration checks seven fields: calling ``accepts`` for each was 10% of a batch)
    plain: frozenset[type] = frozenset()


_NONE = type(None)
INT = FieldKind("an int", is_int, frozenset({int}))
OPT_INT = FieldKind("an int or None", lambda v: v is None or is_int(v), frozenset({int, _NONE}))
STR = FieldKind("a str", lambda v: isinstance(v, str), frozenset({str}))
OPT_STR = FieldKind("a str or None", lambda v: v is None or isinstance(v, str), frozenset({str, _NONE}))
BOOL = FieldKind("True or False", lambda v: isinstance(v, bool), frozenset({bool}))
HANDLER = FieldKind("a callable or None", lambda v: v is None or callable(v),
                    frozenset({_NONE, types.FunctionType, types.MethodType, types.BuiltinFunctionType}))


def check_fields(probe: object, fields: Mapping[str, FieldKind]) -> None:
    """:class:`~kpsdk.errors.FieldTypeError` (``EINVAL``) naming the first of ``fields`` whose
    value ``probe`` holds is of the wrong type."""
    for name, kind in fields.items():
        value = getattr(probe, name)
        if type(value) not in kind.plain and not kind.accepts(value):
            raise FieldTypeError(type(probe).__name__, name, value, kind.want)


def check_address_range(arch: Arch, addr: int, what: str = "address") -> None:
    """``EINVAL`` for an address the architecture's word cannot hold (negative, or ``2**70``):
    such an address cannot be mapped, and the message says why rather than "not mapped"."""
    if not 0 <= addr <= arch.word_mask:
        raise KprobeError(errno.EINVAL, f"{what} {addr:#x} is outside {arch.name}'s "
                                        f"{8 * arch.word_size}-bit address space")


def _looks_numeric(text: str) -> bool:
    """Starts as a number does (``12``, ``-3``, ``+0x``): a symbol never does."""
    return text[:1].isdigit() or (text[:1] in "+-" and text[1:2].isdigit())


def location_fields(where: str | int) -> dict[str, Any]:
    """``"SYM"``, ``"SYM+OFF"``, ``"0xADDR"`` or an int -> the probe's location
    keyword arguments (``symbol_name`` + ``offset``, or ``addr``).

    Raises :class:`~kpsdk.errors.LocationError` (``EINVAL``, a ValueError)
    naming what is wrong; the CLI and the decorator forms share this one parser.
    Whether the address or symbol exists is for registration to say.
    """
    if is_int(where):
        return {"addr": where}
    if not isinstance(where, str):
        raise LocationError(errno.EINVAL, f"location {shown(where)}: want SYM, SYM+OFF, 0xADDR or an int, "
                                          f"not {type(where).__name__}")
    spec = where.strip()
    if _looks_numeric(spec):
        addr = parse_number(spec)
        if addr is None:
            raise LocationError(errno.EINVAL, f"{shown(where)}: not a number (decimal or 0x..) nor a symbol")
        return {"addr": addr}
    sym, plus, off = spec.partition("+")
    sym, off = sym.strip(), off.strip()
    if not sym:
        raise LocationError(errno.EINVAL, f"{shown(where)}: want SYM, SYM+OFF or 0xADDR")
    if plus and not off:
        raise LocationError(errno.EINVAL, f"{shown(where)}: the offset after '+' is missing (add+0x4)")
    offset = parse_number(off) if off else 0
    if offset is None:
        raise LocationError(errno.EINVAL, f"{shown(where)}: the offset must be a number (add+0x4)")
    return {"symbol_name": sym, "offset": offset}


def handler_arg(probe: Any) -> Any:
    """The object ``probe``'s handlers get as ``p``: the probe, or its :attr:`Probe.handler_arg`
    (a plugin's probe object that is no :class:`Probe` has none)."""
    arg = getattr(probe, "handler_arg", None)
    return probe if arg is None else arg


def fault_claimed(probe: Any, regs: PtRegs, trapnr: int, address: int, where: str) -> bool:
    """K4: whether ``probe``'s fault_handler handles ``trapnr`` (returns non-zero).

    A fault_handler that raises, or returns a value whose truth cannot be
    told, is itself a failed handler: a :class:`~kpsdk.errors.ProbeHandlerError`
    of phase ``fault_handler`` at ``address`` (``where``), the exception as
    its cause, never the bare exception.
    """
    handler = probe.fault_handler
    if handler is None:
        return False
    try:
        return bool(handler(handler_arg(probe), regs, trapnr))
    except Exception as exc:  # noqa: BLE001 - re-raised with the probe's context
        raise ProbeHandlerError(probe, address, where, "fault_handler", exc) from exc


def register_all(probes: Iterable[Any], register: Callable[[Any], Any], unregister: Callable[[Any], None]) -> None:
    """K8: register each of ``probes``, or none: on an error the ones already
    registered are unregistered, newest first, and the error goes on."""
    done: list[Any] = []
    try:
        for probe in probes:
            register(probe)
            done.append(probe)
    except BaseException:
        for probe in reversed(done):
            unregister(probe)
        raise


class Probe:
    """Fields every probe has, named as in ``struct kprobe``.

    The location fields keep what was given: a probe given by ``symbol_name``
    (or with an ``offset``) still has ``addr=None`` once registered, so that it
    can be registered again, and ``s.symbols.resolve("add+0x4")`` gives its
    address; one given by ``addr`` alone gets the address it registered at
    (without a Thumb bit).  ``nmissed`` counts hits whose handlers were skipped
    (reentrancy); ``hits`` counts hits whose handlers ran.
    """

    letter = "k"
    #: the object the handlers get as ``p`` when it is not the probe itself (None): a
    #: uprobe armed in a session hands its user's Uprobe to the user's own handlers, with
    #: no wrapper frame per hit.  Set it before the probe is registered: hit paths bind it
    #: when the point's probes change (ProbePoint.only, ProbeManager.pre_function).
    handler_arg: Any = None
    #: every field a registration checks the type of (a subclass adds its own)
    fields: ClassVar[Mapping[str, FieldKind]] = {
        "symbol_name": OPT_STR, "offset": INT, "addr": OPT_INT, "pre_handler": HANDLER,
        "post_handler": HANDLER, "fault_handler": HANDLER, "flags": INT,
    }

    def __init__(
        self,
        *,
        symbol_name: str | None = None,
        offset: int = 0,
        addr: int | None = None,
        pre_handler: PreHandler | None = None,
        post_handler: PostHandler | None = None,
        fault_handler: FaultHandler | None = None,
        flags: int = 0,
    ) -> None:
        self.symbol_name = symbol_name
        self.offset = offset
        self.addr = addr
        self.pre_handler = pre_handler
        self.post_handler = post_handler
        self.fault_handler = fault_handler
        self.flags = flags
        self.nmissed = 0
        self.hits = 0
        self.session: Session | None = None
        #: what ``list()`` and ``profile()`` call the probe
        self.name: str | None = None
        #: what ``list()`` shows in place of ``sym+0xoff`` (uprobes: ``path:0xOFFSET``)
        self.label: str | None = None
        #: set by a return-probe type whose pre_handler hooks the call's return
        #: into this rethook and runs the rethook's ``entry`` (the entry handler,
        #: if any) and nothing else: a target may then hook the call by itself,
        #: without the core's entry path (see Target.settle_returns)
        self.entry_rethook: Rethook | None = None
        check_fields(self, Probe.fields)

    @property
    def disabled(self) -> bool:
        return bool(self.flags & KPROBE_FLAG_DISABLED)

    @property
    def registered(self) -> bool:
        return self.session is not None

    def where(self) -> str:
        """``sym+0xoff``, ``0xaddr`` or ``0xaddr+0xoff``: the location as given."""
        if self.symbol_name:
            return f"{self.symbol_name}+{self.offset:#x}"
        base = f"{self.addr:#x}" if isinstance(self.addr, int) else "?"
        return f"{base}+{self.offset:#x}" if self.offset else base

    def __repr__(self) -> str:
        state = "registered" if self.registered else "unregistered"
        return f"<{type(self).__name__} {self.where()} {state}>"


class ProbeSet(list[Any]):
    """The probes one location made, one per address (``@s.kprobe("clamp")`` on a function
    inlined in three places): a list of them, whose ``hits`` and ``nmissed`` add up theirs.
    ``s.unregister_kprobes(probes)`` unregisters them."""

    @property
    def hits(self) -> int:
        return sum(p.hits for p in self)

    @property
    def nmissed(self) -> int:
        return sum(p.nmissed for p in self)

    @property
    def registered(self) -> bool:
        return any(p.registered for p in self)


@dataclass
class ProbeType:
    """A probe type, as a plugin declares it.

    :param name: the noun of the derived verbs (``kprobe`` -> ``register_kprobe``).
    :param probe_class: instances of it are what ``register_<name>`` accepts.
    :param register: ``(session, probe) -> None``; raise :class:`~kpsdk.errors.KprobeError`.
        A value it returns (a watchpoint's slot number) is what ``register_<name>`` returns.
    :param unregister: ``(session, probe) -> None``.
    :param exports: names added to the ``kpsdk`` namespace (``{"Kprobe": Kprobe}``).
    :param decorator_field: the handler a decorator's function becomes.
    :param parse_location: the decorator's location text (``"add+0x4"``, uprobes'
        ``"prog:add"``) -> the probe class's keyword arguments; raise
        :class:`~kpsdk.errors.LocationError` (a ValueError) for text of another shape.
    :param set_disabled: ``(session, probe, disabled) -> None`` for a type whose
        probes are not the probe manager's own (default: ``ProbeManager.set_disabled``).
    :param register_many: ``(session, probes) -> None`` for a type that registers a list of
        its probes in one pass (kprobes); the same errors as one by one, all or none.
    :param held: ``(session) -> [(address, probe), ...]`` for a type whose probes are
        not the probe manager's own (watchpoints): ``list()`` and ``profile()`` show
        them too, by their ``letter``, ``label`` (else the address's symbol), ``hits`` and ``nmissed``.
    """

    name: str
    probe_class: type
    register: Callable[[Session, Any], Any]
    unregister: Callable[[Session, Any], None]
    exports: dict[str, Any] = field(default_factory=dict)
    decorator_field: str = "pre_handler"
    description: str = ""
    parse_location: Callable[[Any], dict[str, Any]] = location_fields
    set_disabled: Callable[[Session, Any, bool], None] | None = None
    #: ``(session, probes) -> None``: register a list of its probes all or none (K8), faster
    #: than one by one (default: ``register`` for each, rolled back on an error)
    register_many: Callable[[Session, list[Any]], None] | None = None
    held: Callable[[Session], list[tuple[int, Any]]] | None = None
    #: ``(session, where) -> [fields, ...]``: the decorator's location text as one probe's
    #: keyword arguments per address, for a type whose text may name several (a source probe
    #: point on an inlined function: one probe on each copy, as perf puts them); default: one,
    #: from ``parse_location``
    expand_location: Callable[[Session, Any], list[dict[str, Any]]] | None = None
