"""The probe script a matrix runs on every target: trace definitions, or a Python function.

- :class:`TraceScript`: what ``kpsdk trace`` takes (``-e`` definitions, ``--filter``,
  ``--trigger``, ``--stack``): :meth:`Session.trace` on the target, then
  ``session.run(timeout=...)``; the records are the trace's.
- :class:`FunctionScript`: a function ``fn(session)`` (or ``fn(session, target)``) defined at
  a module's top level, named ``"package.module:function"`` or ``"path/to/file.py:function"``.
  It drives the session itself and returns its records: a
  :class:`~kpsdk.trace.events.Trace` (its records and hist triggers), a list of
  :class:`~kpsdk.trace.events.TraceRecord`, a list of JSON-ready dicts (``jsonl`` output
  only), or None.

A script is sent to each target's process by name, not as code: the process imports the
function, so a script must be importable there (a shared file system, or an installed
module).  Its :meth:`digest` is what the cache keys results by, with the target's: for
a function, its name and the text of the file that defines it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.errors import ArgumentError, KpsdkError, shown

if TYPE_CHECKING:
    from kpsdk.matrixrun.targets import MatrixTarget
    from kpsdk.session import Session
    from kpsdk.trace.events import Trace


@dataclass
class RunState:
    """What a script's run leaves for the target's result, filled as it goes, so that a run
    stopped at its limit still hands over the records it made."""

    records: list[Any] = field(default_factory=list)
    trace: Trace | None = None
    exit_status: int | None = None
    #: the run ended because its time limit came (not because the target ended)
    timed_out: bool = False


@dataclass(frozen=True)
class TraceScript:
    """ftrace definitions on every target, as ``kpsdk trace -e DEF --filter EXPR --trigger T``."""

    definitions: tuple[str, ...]
    filter: str | None = None
    triggers: tuple[str, ...] = ()
    stack: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.definitions, str):
            object.__setattr__(self, "definitions", tuple(self.definitions.splitlines()))
        definitions = tuple(self.definitions)
        if not definitions or not all(isinstance(d, str) for d in definitions):
            raise ArgumentError(f"definitions={shown(self.definitions)}: want one or more 'p:EVENT SYM ...' str")
        object.__setattr__(self, "definitions", definitions)
        object.__setattr__(self, "triggers", tuple(self.triggers))

    def digest(self) -> str:
        body = {"kind": "trace", "definitions": list(self.definitions), "filter": self.filter,
                "triggers": list(self.triggers), "stack": self.stack}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def describe(self) -> str:
        return "; ".join(self.definitions)

    def execute(self, session: Session, target: MatrixTarget, state: RunState) -> None:
        """Register the events, run the target until it ends or its time limit."""
        state.trace = session.trace(list(self.definitions), sink=state.records, filter=self.filter,
                                    triggers=list(self.triggers), stack=self.stack)
        state.exit_status = session.run(timeout=target.run_timeout)
        state.timed_out = state.exit_status is None


@dataclass(frozen=True)
class FunctionScript:
    """A function ``fn(session)`` (or ``fn(session, target)``) by name: ``module:function`` or
    ``path/to/file.py:function``; ``root`` is a directory the module is imported from
    (put first on ``sys.path`` in the target's process)."""

    ref: str
    root: str | None = None

    def __post_init__(self) -> None:
        module, sep, name = self.ref.rpartition(":")
        if not sep or not module or not name.replace(".", "").replace("_", "").isalnum():
            raise ArgumentError(f"script {self.ref!r}: want MODULE:FUNCTION or FILE.py:FUNCTION")

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> FunctionScript:
        """The script for a function object: it must be defined at a module's top level
        (a lambda or a nested function has no name another process can import)."""
        qualname = getattr(fn, "__qualname__", "")
        module_name = getattr(fn, "__module__", None)
        if not callable(fn) or not qualname or "<" in qualname or module_name is None:
            raise ArgumentError(f"script {shown(fn)}: want a function defined at a module's top level "
                                "(each target's process imports it by name)")
        module = sys.modules.get(module_name)
        file = getattr(module, "__file__", None)
        if module_name == "__main__" or module_name.startswith("kpsdk_matrix_script_"):
            if file is None:
                raise ArgumentError(f"script {qualname}: defined in an interactive session; put it in a file")
            return cls(f"{os.path.abspath(file)}:{qualname}")
        root = None
        if file is not None:
            root = str(Path(file).resolve().parents[module_name.count(".")])
            if Path(file).name == "__init__.py":
                root = str(Path(file).resolve().parents[module_name.count(".") + 1])
        return cls(f"{module_name}:{qualname}", root)

    def _source(self) -> str:
        module, _, _ = self.ref.rpartition(":")
        if module.endswith(".py"):
            return Path(module).read_text()
        spec = importlib.util.find_spec(module) if self.root is None else None
        origin = spec.origin if spec is not None else None
        if origin is None and self.root is not None:
            candidates = [Path(self.root, *module.split(".")).with_suffix(".py"),
                          Path(self.root, *module.split("."), "__init__.py")]
            origin = next((str(c) for c in candidates if c.is_file()), None)
        return Path(origin).read_text() if origin else ""

    def digest(self) -> str:
        try:
            source = self._source()
        except (OSError, ImportError, ValueError) as exc:
            raise ArgumentError(f"script {self.ref!r}: cannot read its source: {exc}") from None
        return hashlib.sha256(json.dumps({"kind": "function", "ref": self.ref, "source": source}).encode()).hexdigest()

    def describe(self) -> str:
        return self.ref

    def load(self) -> Callable[..., Any]:
        """The function (imported in the target's process)."""
        module_name, _, qualname = self.ref.rpartition(":")
        if module_name.endswith(".py"):
            path = Path(module_name)
            unique = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
            name = f"kpsdk_matrix_script_{unique}"
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, path)
                if spec is None or spec.loader is None:
                    raise ArgumentError(f"script {self.ref!r}: {path} is not a Python file")
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
        else:
            if self.root is not None and self.root not in sys.path:
                sys.path.insert(0, self.root)
            module = importlib.import_module(module_name)
        value: Any = module
        for part in qualname.split("."):
            value = getattr(value, part, None)
            if value is None:
                raise ArgumentError(f"script {self.ref!r}: {module_name} has no {qualname}")
        if not callable(value):
            raise ArgumentError(f"script {self.ref!r}: {qualname} is not a function")
        return value  # type: ignore[no-any-return]

    def execute(self, session: Session, target: MatrixTarget, state: RunState) -> None:
        """Call the function; what it returns becomes the target's records."""
        from kpsdk.trace.events import Trace

        fn = self.load()
        try:
            takes_target = len(inspect.signature(fn).parameters) >= 2
        except (TypeError, ValueError):
            takes_target = False
        value = fn(session, target) if takes_target else fn(session)
        if isinstance(value, Trace):
            state.trace = value
            state.records[:] = value.records
        elif value is not None:
            if not isinstance(value, Iterable) or isinstance(value, str | bytes | dict):
                raise KpsdkError(f"script {self.ref} returned {shown(value)}: want a Trace, a list of records or None")
            state.records[:] = list(value)


Script = TraceScript | FunctionScript


def as_script(script: Any) -> Script:
    """A script from what :func:`kpsdk.matrix` takes: a script object, a function, or trace
    definitions (a str, one a line, or a list of str)."""
    if isinstance(script, TraceScript | FunctionScript):
        return script
    if isinstance(script, str):
        return TraceScript(tuple(script.splitlines()))
    if callable(script):
        return FunctionScript.of(script)
    if isinstance(script, list | tuple):
        return TraceScript(tuple(script))
    raise ArgumentError(f"script {shown(script)}: want trace definitions, a function or a TraceScript")
