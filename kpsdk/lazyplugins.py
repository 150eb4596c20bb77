"""kpsdk's own plugins, registered without importing them until one of their hooks runs.

Loading the registry used to import every built-in plugin: the arch backends
(capstone, keystone, unicorn), the Unicorn target and its Linux layer, the
live targets (pygdbmi, pyelftools), the trace machinery; 180-250 ms before
``kpsdk --help`` could print a line, which needs only the ``kpsdk_cli`` hook.
pluggy has to see a plugin's hook implementations to register it, and finds
them by looking at the object, so each built-in plugin is registered as a
:class:`DeferredPlugin` that declares the hooks :data:`BUILTIN_HOOKS` says its
module implements; the first call of one of them imports the module and calls
the real implementation.  Registration order, plugin names, blocking with
``-p no:NAME`` and ``kpsdk plugins``' table stay what they were.
tests/test_registry.py checks the table against the modules' own hooks.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kpsdk import hookspecs

#: the hooks each of kpsdk's own entry points implements (by entry-point name)
BUILTIN_HOOKS: dict[str, tuple[str, ...]] = {
    "kprobes": ("kpsdk_probe_types",),
    "kretprobes": ("kpsdk_probe_types",),
    "uprobes": ("kpsdk_library_loaded", "kpsdk_library_unloaded", "kpsdk_probe_types", "kpsdk_run_end",
                "kpsdk_session_finish", "kpsdk_session_start"),
    "watchpoints": ("kpsdk_probe_types", "kpsdk_session_finish"),
    "trace": ("kpsdk_cli",),
    "trace-formats": ("kpsdk_trace_formats",),
    "arch-x86": ("kpsdk_archs",),
    "arch-arm": ("kpsdk_archs",),
    "arch-riscv": ("kpsdk_archs",),
    "arch-ppc64": ("kpsdk_archs",),
    "arch-aarch64": ("kpsdk_archs",),
    "unicorn": ("kpsdk_targets",),
    "live": ("kpsdk_targets",),
}


class DeferredPlugin:
    """Stands for the plugin module ``module`` (named like it) until one of ``hooks`` runs."""

    def __init__(self, module: str, hooks: tuple[str, ...], marker: Callable[[Any], Any]) -> None:
        self.__name__ = module
        self._module: ModuleType | None = None
        for hook in hooks:
            setattr(self, hook, marker(self._delegate(hook)))

    def load(self) -> ModuleType:
        """The real plugin module, imported on first use."""
        if self._module is None:
            self._module = importlib.import_module(self.__name__)
        return self._module

    def _delegate(self, hook: str) -> Callable[..., Any]:
        """A function with the hook's signature (pluggy passes arguments by the names it
        declares) that calls the module's implementation with the arguments it takes."""
        spec = getattr(hookspecs, hook)
        names = tuple(inspect.signature(spec).parameters)

        def call(*args: Any) -> Any:
            real = getattr(self.load(), hook)
            wanted = inspect.signature(real).parameters
            return real(**{n: a for n, a in zip(names, args, strict=True) if n in wanted})

        call.__wrapped__ = spec  # type: ignore[attr-defined]  # pluggy reads the argument names there
        call.__name__ = hook
        return call
