"""The kprobes probe type: a handler on (almost) any instruction.

``Kprobe(symbol_name=..., offset=..., addr=..., pre_handler=..., post_handler=...,
fault_handler=..., flags=...)`` with the kernel's registration rules (K1):
a field of the wrong type is ``EINVAL`` (:class:`~kpsdk.errors.FieldTypeError`),
exactly one of ``addr`` and ``symbol_name`` (``EINVAL``), an unknown symbol is
``ENOENT``, an address inside an instruction ``EILSEQ``, a blacklisted or
unmapped one ``EINVAL``, the same object twice ``EINVAL``.  Everything a hit
does is the probe manager's (:mod:`kpsdk.manager`).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from kpsdk import hookimpl
from kpsdk.debuginfo import is_source_point
from kpsdk.errors import DebugInfoError, KprobeError
from kpsdk.probe import KPROBE_FLAG_DISABLED, Probe, ProbeType, check_fields, location_fields

if TYPE_CHECKING:
    from kpsdk.session import Session


class Kprobe(Probe):
    """``struct kprobe``: see :class:`kpsdk.probe.Probe` for the fields."""

    letter = "k"


def register(session: Session, probe: Probe) -> None:
    check_fields(probe, type(probe).fields)
    manager = session.target.manager
    addr = manager.resolve(probe)
    manager.add(probe, addr)


def register_many(session: Session, probes: list[Probe]) -> None:
    """All of ``probes`` or none (K8), each checked as :func:`register` checks it; the
    instructions outside any function decoded together, then each armed in its turn
    (:meth:`kpsdk.manager.ProbeManager.add_many`)."""
    session.target.manager.add_many(probes, lambda probe: check_fields(probe, type(probe).fields))


def unregister(session: Session, probe: Probe) -> None:
    session.target.manager.remove(probe)


def expand_location(session: Session, where: Any) -> list[dict[str, Any]]:
    """The decorator's location: ``SYM[+OFF]`` or an address as one probe's fields, or a source
    probe point (``parse_line:12``, ``demo.c:40``, ``parse_line;total +=*``, a function inlined
    in places) as one probe at each address it resolves to, as perf probes every copy.

    :raises KprobeError: ``ENOENT`` when the point is not in the debug information (why is
        said), ``EINVAL`` for ``%return`` (a kretprobe's)."""
    text = where.strip() if isinstance(where, str) else where
    if not isinstance(text, str) or not (is_source_point(text) or (text.isidentifier() and
                                                                  session.debug.inlined_copies(text))):
        return [location_fields(where)]
    if text.endswith("%return"):
        raise KprobeError(errno.EINVAL, f"{text!r} is a return probe: @s.kretprobe({text[:-7]!r})")
    try:
        points = session.debug.points(text)
    except DebugInfoError as e:
        raise KprobeError(errno.ENOENT, f"{text!r}: {e}") from None
    return [{"addr": p.address} for p in points]


KPROBE = ProbeType(
    name="kprobe",
    probe_class=Kprobe,
    register=register,
    unregister=unregister,
    register_many=register_many,
    expand_location=expand_location,
    exports={"Kprobe": Kprobe, "KPROBE_FLAG_DISABLED": KPROBE_FLAG_DISABLED},
    description="a pre/post handler on an instruction",
)


@hookimpl
def kpsdk_probe_types() -> list[ProbeType]:
    return [KPROBE]
