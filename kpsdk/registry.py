"""The plugin manager and what the plugins provided.

Plugins load from the ``kpsdk`` entry-point group: kpsdk's own (its arch
backends, the Unicorn target, the kprobes probe type) and any installed
package's.  ``KPSDK_DISABLE_PLUGIN_AUTOLOAD=1`` keeps third-party entry points
from loading (kpsdk's own still do, as pytest keeps its builtins); a plugin can
then be loaded by name with ``-p NAME`` (or :func:`configure`), and any plugin,
built-in or not, blocked with ``-p no:NAME``.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pluggy

from kpsdk import hookspecs
from kpsdk.arch import Arch, ArchRegistry
from kpsdk.errors import KpsdkError, PluginLoadError, UnknownNameError
from kpsdk.probe import ProbeType
from kpsdk.target import TargetKind

if TYPE_CHECKING:
    from kpsdk.outputformat import OutputFormat

GROUP = "kpsdk"
#: set (to anything) in the environment: third-party entry points do not load by themselves
AUTOLOAD_ENV = "KPSDK_DISABLE_PLUGIN_AUTOLOAD"
#: marks a plugin's hook implementations: ``@kpsdk.hookimpl`` above ``def kpsdk_archs(): ...``
#: (the names and signatures are those of :mod:`kpsdk.hookspecs`)
hookimpl = pluggy.HookimplMarker("kpsdk")


class Registry:
    """A plugin manager plus the archs, target kinds, probe types and trace output formats it yielded.

    :func:`get_registry` gives the one a process uses.  The built-in plugins (kpsdk's own
    entry points) always load; third-party entry points in the ``kpsdk`` group load too,
    unless ``KPSDK_DISABLE_PLUGIN_AUTOLOAD`` is set.

    :param load: entry-point names or importable module names to load even when autoloading
        is off (the CLI's ``-p NAME``).
    :param block: plugin names never to load (``-p no:NAME``).
    :param autoload: load every installed entry point; ``None`` reads the environment.
    :raises PluginLoadError: a name in ``load`` is neither an entry point nor a module.
    """

    def __init__(self, load: tuple[str, ...] = (), block: tuple[str, ...] = (),
                 autoload: bool | None = None) -> None:
        self.pm = pluggy.PluginManager(GROUP)
        #: :meth:`probe_type_for`'s answers by class, with the ``probe_types`` they came from
        self._type_of_class: dict[type, tuple[dict[str, ProbeType], ProbeType]] = {}
        self.pm.add_hookspecs(hookspecs)
        for name in block:
            self.pm.set_blocked(name)
        if autoload is None:
            autoload = not os.environ.get(AUTOLOAD_ENV)
        import importlib.metadata  # ~30 ms: loaded with the first registry, not by ``import kpsdk``

        from kpsdk.lazyplugins import BUILTIN_HOOKS, DeferredPlugin

        for ep in importlib.metadata.entry_points(group=GROUP):
            builtin = ep.dist is not None and ep.dist.name == "kpsdk"
            if (autoload or builtin or ep.name in load) and not self.pm.is_blocked(ep.name):
                if self.pm.get_plugin(ep.name) is None:
                    hooks = BUILTIN_HOOKS.get(ep.name) if builtin and ep.attr is None else None
                    plugin = DeferredPlugin(ep.module, hooks, hookimpl) if hooks else ep.load()
                    self.pm.register(plugin, name=ep.name)
        for name in load:
            if self.pm.get_plugin(name) is None and not self.pm.is_blocked(name):
                try:
                    module = importlib.import_module(name)
                    if not self.pm.is_registered(module):
                        self.pm.register(module, name=name)
                except ImportError as e:
                    raise PluginLoadError(
                        f"plugin {name!r} is neither an installed '{GROUP}' entry point nor an importable module: {e}"
                    ) from e

    def plugin_names(self) -> list[str]:
        """The names of the loaded plugins (entry-point names, or module names for ``load``)."""
        return [name for name, plugin in self.pm.list_name_plugin() if plugin is not None]

    @cached_property
    def archs(self) -> ArchRegistry:
        """Every plugin's architectures, collected on first use (a name given twice raises)."""
        return ArchRegistry([a for group in self.pm.hook.kpsdk_archs() for a in group])

    @cached_property
    def targets(self) -> dict[str, TargetKind]:
        """Target kinds by name, collected on first use.

        :raises KpsdkError: two plugins provide the same name.
        """
        out: dict[str, TargetKind] = {}
        for group in self.pm.hook.kpsdk_targets():
            for kind in group:
                if kind.name in out:
                    raise KpsdkError(f"target kind {kind.name!r} provided twice")
                out[kind.name] = kind
        return out

    @cached_property
    def probe_types(self) -> dict[str, ProbeType]:
        """Probe types by name, collected on first use.

        :raises KpsdkError: two plugins provide the same name.
        """
        out: dict[str, ProbeType] = {}
        for group in self.pm.hook.kpsdk_probe_types():
            for pt in group:
                if pt.name in out:
                    raise KpsdkError(f"probe type {pt.name!r} provided twice")
                out[pt.name] = pt
        return out

    @property
    def trace_formats(self) -> dict[str, OutputFormat[Any]]:
        """``kpsdk trace --output`` formats by name (the ``kpsdk_trace_formats`` hook).

        Collected at each use (a writer is made once a run), so a plugin registered
        with ``pm.register`` at run time is seen."""
        from kpsdk.outputformat import check_formats

        return check_formats(list(self.pm.hook.kpsdk_trace_formats()))

    def arch(self, name: str) -> Arch:
        """The architecture called ``name``; an unknown name raises :class:`UnknownNameError`."""
        return self.archs.get(name)

    def target_kind(self, name: str) -> TargetKind:
        """The target kind a spec's scheme names; an unknown one raises :class:`UnknownNameError`."""
        if name not in self.targets:
            raise UnknownNameError("target kind", name, list(self.targets))
        return self.targets[name]

    def probe_type_for(self, probe: Any) -> ProbeType:
        """The probe type whose class ``probe`` is an instance of, the most derived one first.

        :raises UnknownNameError: no loaded probe type has that class.
        """
        types = self.probe_types
        known = self._type_of_class.get(type(probe))
        if known is not None and known[0] is types:  # one lookup per class (every registration asks)
            return known[1]
        # most specific class first, so a Jprobe (a Kprobe subclass) finds its own type
        for pt in sorted(types.values(), key=lambda t: -len(t.probe_class.__mro__)):
            if isinstance(probe, pt.probe_class):
                self._type_of_class[type(probe)] = (types, pt)
                return pt
        raise UnknownNameError("probe class", type(probe).__name__,
                               [t.probe_class.__name__ for t in self.probe_types.values()])

    def exports(self) -> dict[str, Any]:
        """What the probe types add to the ``kpsdk`` namespace (``Kprobe``...), by name."""
        out: dict[str, Any] = {}
        for pt in self.probe_types.values():
            out.update(pt.exports)
        return out


_default: Registry | None = None
_config: dict[str, tuple[str, ...]] = {"load": (), "block": ()}


def configure(load: tuple[str, ...] | list[str] = (), block: tuple[str, ...] | list[str] = ()) -> None:
    """Choose plugins to load or block before the registry is first used (the CLI's ``-p``)."""
    global _default
    _config["load"], _config["block"] = tuple(load), tuple(block)
    _default = None


def get_registry() -> Registry:
    """The process-wide registry, created on first use."""
    global _default
    if _default is None:
        _default = Registry(load=_config["load"], block=_config["block"])
    return _default
