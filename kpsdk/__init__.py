"""kpsdk: the Linux kprobes programming model for emulated and remote CPUs.

>>> import kpsdk
>>> s = kpsdk.open("elf:prog")                     # doctest: +SKIP
>>> @s.kprobe("add")                               # doctest: +SKIP
... def on_add(p, regs): print(regs.arg(0), regs.arg(1))

Probe classes such as ``Kprobe`` come from probe-type plugins and appear in
this namespace when first used (see :mod:`kpsdk.hookspecs`).  The built-in
types' names are declared below for type checkers and listed by ``dir(kpsdk)``
(a mirror of the plugins' ``ProbeType.exports``, checked object by object by
tests/test_public_api.py); a plugin's own names (``kpsdk.Jprobe``) appear at run time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Unpack

from kpsdk.binfmt import archs as _file_archs
from kpsdk.errors import (
    ArgumentError,
    CapabilityError,
    DebugInfoError,
    DwarfFormatError,
    ExecNotFollowedWarning,
    FieldTypeError,
    FilterError,
    FixtureError,
    FunctionsError,
    GdbError,
    ImageFormatError,
    KprobeError,
    KpsdkError,
    LocationError,
    MatrixError,
    MemberPathError,
    NeverMappedWarning,
    NoDebugInfoError,
    NoSuchFunctionError,
    NoSuchLineError,
    NotEmulatedError,
    NotInScopeError,
    NotStaticError,
    OptimizedOutError,
    PerfSyntaxError,
    PluginLoadError,
    ProbeHandlerError,
    SourceNotFoundError,
    SplitDwarfError,
    SymbolError,
    TargetError,
    TargetExited,
    TargetFault,
    TargetStalled,
    ToolMissingError,
    TraceDefinitionError,
    TriggerError,
    UnknownNameError,
    UnsupportedTargetError,
    shown,
)

if TYPE_CHECKING:  # the core's names, imported on first use at run time (``_LAZY``)
    from kpsdk.arch import ArchRegistry
    from kpsdk.matrixrun.api import matrix
    from kpsdk.options import OpenOptions
    from kpsdk.probe import KPROBE_FLAG_DISABLED, KPROBE_FLAG_GONE, TRAP_HANDLER_EXCEPTION, Probe, ProbeType
    from kpsdk.registry import get_registry, hookimpl
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

if TYPE_CHECKING:  # the built-in probe types' exports; at run time they come from the registry (__getattr__)
    from kpsdk.plugins.kprobes import Kprobe as Kprobe
    from kpsdk.plugins.kretprobes import DATA_SIZE_MAX as KRETPROBE_MAX_DATA_SIZE
    from kpsdk.plugins.kretprobes import MAXACTIVE_MAX as KRETPROBE_MAXACTIVE_MAX
    from kpsdk.plugins.kretprobes import Kretprobe as Kretprobe
    from kpsdk.plugins.kretprobes import KretprobeInstance as KretprobeInstance
    from kpsdk.plugins.uprobes import Uprobe as Uprobe
    from kpsdk.plugins.uprobes import Uretprobe as Uretprobe
    from kpsdk.plugins.uprobes import UretprobeInstance as UretprobeInstance
    from kpsdk.plugins.uprobes import parse_uprobe as parse_uprobe
    from kpsdk.plugins.uprobes import register_uprobe as register_uprobe
    from kpsdk.plugins.uprobes import register_uprobes as register_uprobes
    from kpsdk.plugins.uprobes import register_uretprobe as register_uretprobe
    from kpsdk.plugins.uprobes import unregister_uprobe as unregister_uprobe
    from kpsdk.plugins.uprobes import unregister_uprobes as unregister_uprobes
    from kpsdk.plugins.uprobes import unregister_uretprobe as unregister_uretprobe
    from kpsdk.plugins.watchpoints import Access as WatchAccess
    from kpsdk.plugins.watchpoints import Watchpoint as Watchpoint

__version__ = "0.1.0"

#: the core's names and the modules they live in: imported when first looked up, so that
#: ``kpsdk --help``, served from its cache, imports neither pluggy nor the session
#: (``kpsdk/cli/helpcache.py``); ``from kpsdk import Session`` works as before
_LAZY = {
    "OpenOptions": "kpsdk.options",
    **dict.fromkeys(("KPROBE_FLAG_DISABLED", "KPROBE_FLAG_GONE", "TRAP_HANDLER_EXCEPTION", "Probe", "ProbeType"),
                    "kpsdk.probe"),
    "get_registry": "kpsdk.registry", "hookimpl": "kpsdk.registry",
    "PtRegs": "kpsdk.regs",
    "Session": "kpsdk.session",
    "matrix": "kpsdk.matrixrun.api",
}
#: the submodules ``import kpsdk`` used to import: ``kpsdk.registry.configure`` after a bare
#: ``import kpsdk`` still finds its module
_SUBMODULES = frozenset(("arch", "events", "hookspecs", "options", "probe", "registry", "regs", "session",
                         "target", "verbs"))


def _registry_archs() -> ArchRegistry:
    """The loaded backends' architectures, for the ELF readers (:mod:`kpsdk.binfmt.archs`): they sit
    below the registry, so the package gives them these; the registry loads when a file is first read."""
    from kpsdk.registry import get_registry

    return get_registry().archs


_file_archs.provide(_registry_archs)

__all__ = [
    "KPROBE_FLAG_DISABLED", "KPROBE_FLAG_GONE", "TRAP_HANDLER_EXCEPTION",
    "ArgumentError", "CapabilityError", "FieldTypeError", "ImageFormatError", "KpsdkError", "KprobeError",
    "LocationError", "NeverMappedWarning", "ExecNotFollowedWarning", "ProbeHandlerError", "SymbolError",
    "TargetError", "TargetFault",
    "TargetExited", "TargetStalled", "ToolMissingError", "UnknownNameError", "UnsupportedTargetError",
    "NotEmulatedError", "PluginLoadError",
    "GdbError", "MatrixError", "TraceDefinitionError", "TriggerError", "FunctionsError", "FilterError", "FixtureError",
    "DebugInfoError", "NoDebugInfoError", "DwarfFormatError", "SplitDwarfError", "NoSuchFunctionError",
    "NoSuchLineError", "SourceNotFoundError", "NotInScopeError", "OptimizedOutError", "MemberPathError",
    "NotStaticError", "PerfSyntaxError",
    "Probe", "ProbeType", "Session",
    "PtRegs", "OpenOptions", "hookimpl", "open", "get_registry", "matrix",
    "Kprobe", "Kretprobe", "KretprobeInstance", "KRETPROBE_MAXACTIVE_MAX", "KRETPROBE_MAX_DATA_SIZE",
    "Uprobe", "Uretprobe", "UretprobeInstance", "parse_uprobe", "register_uprobe", "register_uprobes",
    "register_uretprobe", "unregister_uprobe", "unregister_uprobes", "unregister_uretprobe",
    "Watchpoint", "WatchAccess",
]


def open(spec: str, **options: Unpack[OpenOptions]) -> Session:  # noqa: A001 - the public API name
    """Open a target: ``"elf:PATH"``, ``"unicorn:ARCH"``, ``"qemu-user:PROG"``,
    ``"qemu-system:ARCH"``, ``"gdb://HOST:PORT"`` (and the kinds plugins add).

    Options go to the target kind (``abi="kernel"``, ``noprobe=[...]``...);
    :class:`~kpsdk.options.OpenOptions` lists the built-in kinds' options and
    which kind takes each.  A kind refuses options it does not know.
    A spec that is not a str, or holds a NUL byte (no file or host has one), is an
    :class:`ArgumentError`.
    """
    if not isinstance(spec, str) or "\0" in spec:
        raise ArgumentError(f"target spec {shown(spec)}: want text such as 'elf:PATH', without NUL bytes")
    from kpsdk.registry import get_registry
    from kpsdk.session import Session

    registry = get_registry()
    scheme, sep, rest = spec.partition(":")
    if not sep:
        raise UnknownNameError("target spec", spec, [f"{k}:..." for k in registry.targets])
    kind = registry.target_kind(scheme)
    given: dict[str, Any] = dict(options)
    noprobe = given.pop("noprobe", ())
    debug_dir = given.pop("debug_dir", None)
    target = kind.open(rest, registry, **given)
    session = Session(target, registry, spec, debug_dir)
    session.blacklist.update(noprobe)
    registry.pm.hook.kpsdk_session_start(session=session)
    for library in target.mapped_files():
        target.emit("library_loaded", library=library)
    return session


if not TYPE_CHECKING:  # type checkers see the declarations above, not any name at all

    def __getattr__(name: str) -> Any:
        """The core's names (``_LAZY``), its submodules, then the names exported by
        probe-type plugins (``kpsdk.Kprobe``)."""
        module = _LAZY.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            globals()[name] = value
            return value
        if name in _SUBMODULES:
            return importlib.import_module(f"kpsdk.{name}")
        from kpsdk.registry import get_registry

        registry = get_registry()
        if _EXPORTS[0] is not registry:  # the plugins' exports, per registry (``configure`` makes a new one)
            _EXPORTS[:] = [registry, registry.exports()]
        exports = _EXPORTS[1]
        if name in exports:
            return exports[name]
        raise AttributeError(f"module 'kpsdk' has no attribute {name!r}")

    #: the registry whose exports ``__getattr__`` holds, and those exports: ``kpsdk.Kprobe`` is
    #: looked up at every probe a script makes (collecting them each time was 2 us of ~18)
    _EXPORTS: list[Any] = [None, {}]


def __dir__() -> list[str]:
    """The module's names and every loaded plugin's exports (IPython completes them)."""
    from kpsdk.registry import get_registry

    return sorted({*globals(), *_LAZY, *get_registry().exports()})
