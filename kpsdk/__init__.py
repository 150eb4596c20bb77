"""kpsdk: the Linux kprobes programming model for emulated and remote CPUs.

>>> import kpsdk
>>> s = kpsdk.open("elf:prog")                     # doctest: +SKIP
>>> @s.kprobe("add")                               # doctest: +SKIP
... def on_add(p, regs): print(regs.arg(0), regs.arg(1))

Probe classes such as ``Kprobe`` come from probe-type plugins and appear in
this namespace when first used (see :mod:`kpsdk.hookspecs`).
"""

from __future__ import annotations

from typing import Any

from kpsdk.errors import (
    ImageFormatError,
    KprobeError,
    KpsdkError,
    ProbeHandlerError,
    SymbolError,
    TargetError,
    TargetExited,
    TargetFault,
    ToolMissingError,
    UnknownNameError,
    UnsupportedTargetError,
)
from kpsdk.probe import KPROBE_FLAG_DISABLED, KPROBE_FLAG_GONE, TRAP_HANDLER_EXCEPTION, Probe, ProbeType
from kpsdk.registry import get_registry, hookimpl
from kpsdk.session import Session

__version__ = "0.1.0"

__all__ = [
    "KPROBE_FLAG_DISABLED", "KPROBE_FLAG_GONE", "TRAP_HANDLER_EXCEPTION",
    "ImageFormatError", "KpsdkError", "KprobeError", "ProbeHandlerError", "SymbolError", "TargetError", "TargetFault",
    "TargetExited", "ToolMissingError", "UnknownNameError", "UnsupportedTargetError", "Probe", "ProbeType", "Session",
    "hookimpl", "open", "get_registry",
]


def open(spec: str, **options: Any) -> Session:  # noqa: A001 - the public API name
    """Open a target: ``"elf:PATH"``, ``"unicorn:ARCH"``, ``"qemu-user:PROG"``,
    ``"qemu-system:ARCH"``, ``"gdb://HOST:PORT"`` (and the kinds plugins add).

    Options go to the target kind (``abi="kernel"``, ``noprobe=[...]``...).
    """
    registry = get_registry()
    scheme, sep, rest = spec.partition(":")
    if not sep:
        raise UnknownNameError("target spec", spec, [f"{k}:..." for k in registry.targets])
    kind = registry.target_kind(scheme)
    noprobe = options.pop("noprobe", ())
    target = kind.open(rest, registry, **options)
    session = Session(target, registry, spec)
    session.blacklist.update(noprobe)
    registry.pm.hook.kpsdk_session_start(session=session)
    return session


def __getattr__(name: str) -> Any:
    """Names exported by probe-type plugins (``kpsdk.Kprobe``)."""
    exports = get_registry().exports()
    if name in exports:
        return exports[name]
    raise AttributeError(f"module 'kpsdk' has no attribute {name!r}")
