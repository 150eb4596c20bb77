"""kpsdk's layers, checked on the source: which part of the package may import which.

Every import of every module counts: at module level, under ``if TYPE_CHECKING`` and
inside functions (a lazy import is still a dependency).  The layers, lowest first; a
module may import its own layer and the layers below it, never one above:

1. **base**: ``kpsdk.errors`` and ``kpsdk.argcheck`` (errors, argument checks and numbers:
   everything may raise or check);
2. **arch**: ``kpsdk.arch``, what a CPU is, as data;
3. **binfmt**: ``kpsdk.binfmt``, ELF files, symbols, relocations, PLT stubs, IFUNCs, link maps;
   what it needs of a running program or a session is a protocol it declares itself, and the
   architectures it matches a file against are given to it (:mod:`kpsdk.binfmt.archs`);
4. **kernel**: ``kpsdk.kernel``, kernel knowledge, with ``kpsdk.cache``, the private cache
   its decoders keep (which reads through :func:`kpsdk.binfmt.files.read_regular`);
5. **core**: every other top-level module (session, manager, probe, target, registry,
   hookspecs, outputformat, fetchargs...): the probe machinery and the interfaces that
   plugins implement;
6. **api**: the package itself (``kpsdk/__init__.py``): ``kpsdk.open`` and the public names;
   it wires the layers below together (the registry's architectures for :mod:`kpsdk.binfmt`);
7. **extensions**: ``kpsdk.plugins``, ``kpsdk.arch_backends``, ``kpsdk.targets``, ``kpsdk.trace``,
   each a peer of the others: none imports another (they meet through the core's interfaces);
8. **top**: ``kpsdk.cli``, ``kpsdk.demo``, ``kpsdk.fixtures``, ``kpsdk.__main__`` and the
   ``kpsdk trace`` command, which still lives beside the trace package (``kpsdk.trace.run``,
   its run ``kpsdk.trace.runner``, ``kpsdk.trace.command``, ``kpsdk.trace.precheck``).

No runtime module imports ``kpsdk.fixtures`` (the test programs and their builders): only the
top's ``kpsdk.demo`` and ``kpsdk.cli`` (which takes a bundled fixture's name for an ELF,
``kpsdk probe x86_64``), and the tests.

The few imports that cross a layer upward on purpose are listed in :data:`ALLOWED`, each
with where it is, how (only inside a function, or only for type checkers) and why.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kpsdk"

#: (layer, module prefixes), lowest first; top-level modules no prefix names are the core
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("kpsdk.errors", "kpsdk.argcheck")),
    ("arch", ("kpsdk.arch",)),
    ("binfmt", ("kpsdk.binfmt",)),
    ("kernel", ("kpsdk.kernel", "kpsdk.cache")),
    ("core", ()),
    ("api", ()),
    ("extensions", ("kpsdk.plugins", "kpsdk.arch_backends", "kpsdk.targets", "kpsdk.trace")),
    ("top", ("kpsdk.cli", "kpsdk.demo", "kpsdk.fixtures", "kpsdk.matrixrun", "kpsdk.__main__",
             "kpsdk.trace.run", "kpsdk.trace.runner", "kpsdk.trace.command", "kpsdk.trace.precheck")),
)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}

#: the modules that may import kpsdk.fixtures
FIXTURE_USERS = ("kpsdk.fixtures", "kpsdk.demo", "kpsdk.cli", "kpsdk.matrixrun")  # a matrix of the fixtures' kernels

#: imports that go up on purpose: (importer, imported prefix, how) -> why.  ``how`` is
#: "function" (inside a function only: loaded on first use) or "typing" (``if TYPE_CHECKING``)
ALLOWED: dict[tuple[str, str, str], str] = {
    ("kpsdk.session", "kpsdk.trace.events", "function"):
        "Session.trace() is the public face of the trace package, loaded when first called",
    ("kpsdk.targets.live.tcg.fetch", "kpsdk.trace.grammar", "function"):
        "PluginTarget.declare_memory takes kprobe_events fetch arguments ('+0(%si):string'); "
        "the trace grammar is their one parser",
    ("kpsdk.verbs", "kpsdk.plugins", "typing"):
        "the built-in probe types' verbs declared for type checkers; at run time they are derived",
    ("kpsdk", "kpsdk.plugins", "typing"):
        "the built-in probe types' exports declared for type checkers; at run time from the registry",
    ("kpsdk", "kpsdk.matrixrun.api", "typing"):
        "kpsdk.matrix() declared for type checkers; at run time imported on first use, as the core's names",
}


@dataclass(frozen=True)
class Import:
    """One import of a kpsdk module by another."""

    importer: str
    imported: str
    how: str  # "module", "typing" or "function"
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.imported} ({self.how})"


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (plugins/ and arch_backends/ are links)."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(PACKAGE, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "src"))
        for file in files:
            if not file.endswith(".py"):
                continue
            parts = list((Path(folder) / file).relative_to(PACKAGE).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["kpsdk", *parts])] = Path(folder) / file
    return found


MODULES = module_files()


def _target(name: str) -> str:
    """The module an imported name belongs to: itself if it is a module, else its parent's."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path) -> list[Import]:
    """The kpsdk modules ``name`` imports, each with how."""
    tree = ast.parse(path.read_text(), str(path))
    how: dict[int, str] = {}
    for node in ast.walk(tree):  # inside a function wins over TYPE_CHECKING: the order below
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                how.update({id(n): "typing" for n in ast.walk(inner)})
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            how.update({id(n): "function" for n in ast.walk(node) if n is not node})
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(name, path.name == "__init__.py", node)
            targets = [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            if target == "kpsdk" or target.startswith("kpsdk."):
                out.append(Import(name, _target(target), how.get(id(node), "module"), node.lineno))
    return out


ALL_IMPORTS = [imp for name, path in sorted(MODULES.items()) for imp in imports_of(name, path)]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> str:
    """The layer of a module: the longest prefix that names it, the package itself, or the
    core for any other top-level module."""
    if name == "kpsdk":
        return "api"
    best = max(((len(p), layer) for layer, prefixes in LAYERS for p in prefixes if _under(name, p)), default=None)
    if best is not None:
        return best[1]
    if name.count(".") == 1:
        return "core"
    raise AssertionError(f"{name} is in no layer: add its package to LAYERS")


def extension_of(name: str) -> str | None:
    """The extension package a module belongs to (``kpsdk.targets``...), None outside them."""
    if layer_of(name) != "extensions":
        return None
    return next(p for p in dict(LAYERS)["extensions"] if _under(name, p))


def _allowed(imp: Import) -> bool:
    return any(imp.importer == who and _under(imp.imported, what) and imp.how == how
               for who, what, how in ALLOWED)


def test_every_module_has_a_layer() -> None:
    assert len(MODULES) > 100  # the walk found the package (and the linked folders)
    assert {"kpsdk.plugins.kprobes", "kpsdk.arch_backends.x86", "kpsdk.arch.model"} <= set(MODULES)
    for name in MODULES:
        layer_of(name)


def test_the_layers_are_found_as_the_docstring_says() -> None:
    assert [layer_of(n) for n in ("kpsdk.errors", "kpsdk.arch.decode", "kpsdk.binfmt.elfimage",
                                  "kpsdk.cache", "kpsdk.kernel.tasks", "kpsdk.session", "kpsdk",
                                  "kpsdk.trace.grammar", "kpsdk.targets.unicorn.target", "kpsdk.trace.run",
                                  "kpsdk.cli.root")] == \
        ["base", "arch", "binfmt", "kernel", "kernel", "core", "api", "extensions", "extensions", "top", "top"]


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [f"{imp} [{layer_of(imp.importer)} -> {layer_of(imp.imported)}]" for imp in ALL_IMPORTS
              if RANK[layer_of(imp.imported)] > RANK[layer_of(imp.importer)] and not _allowed(imp)]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_the_core_imports_no_extension_and_nothing_of_the_top() -> None:
    """The brief form of the rule above, for the part of the package the others build on."""
    above = ("kpsdk.trace", "kpsdk.targets", "kpsdk.cli", "kpsdk.demo", "kpsdk.fixtures", "kpsdk.plugins")
    core = ("base", "arch", "binfmt", "kernel", "core")
    found = [str(imp) for imp in ALL_IMPORTS if layer_of(imp.importer) in core and not _allowed(imp)
             and any(_under(imp.imported, p) for p in above)]
    assert not found, "\n".join(found)


def test_extensions_do_not_import_each_other() -> None:
    crossing = []
    for imp in ALL_IMPORTS:
        mine, theirs = extension_of(imp.importer), extension_of(imp.imported)
        if mine is not None and theirs is not None and mine != theirs and not _allowed(imp):
            crossing.append(str(imp))
    assert not crossing, "\n".join(crossing)


def test_only_the_demo_and_the_cli_import_the_fixtures() -> None:
    found = [str(imp) for imp in ALL_IMPORTS if _under(imp.imported, "kpsdk.fixtures")
             and not any(_under(imp.importer, user) for user in FIXTURE_USERS)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("allowed", sorted(ALLOWED), ids=lambda key: f"{key[0]}->{key[1]}")
def test_each_allowed_exception_is_still_used(allowed: tuple[str, str, str]) -> None:
    """An exception nothing needs any more goes: the list stays the honest list of them."""
    who, what, how = allowed
    assert RANK[layer_of(what)] > RANK[layer_of(who)] or extension_of(who) != extension_of(what)
    assert any(imp.importer == who and _under(imp.imported, what) and imp.how == how for imp in ALL_IMPORTS)


def test_every_package_is_in_the_wheel() -> None:
    """pyproject.toml lists the packages the wheel holds (kpsdk/plugins and kpsdk/arch_backends are
    links, which automatic discovery would not follow): each package of the tree is listed, or an
    installed kpsdk fails at its first import of it."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {str(Path(d).relative_to(root)).replace("/", ".")
             for d, _, files in os.walk(root / "kpsdk", followlinks=True)
             if "__init__.py" in files and "fixtures/src" not in d}
    assert found <= listed, f"not in pyproject.toml's packages: {sorted(found - listed)}"


#: the size past which a module says at its top why it is one module (issue 37)
LONG_MODULE = 600


def test_a_long_module_says_why_it_is_one() -> None:
    """A module over LONG_MODULE lines gives its reason in its docstring ("One module, because
    ..."), or it is split: a reader should not meet a long file without knowing why."""
    root = Path(__file__).resolve().parent.parent / "kpsdk"
    unexplained = []
    for path in sorted(root.rglob("*.py")):
        if "fixtures/src" in path.as_posix():
            continue
        text = path.read_text()
        if text.count("\n") > LONG_MODULE and "One module, because" not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(root.parent)}: {text.count(chr(10))} lines")
    assert not unexplained, "\n".join(unexplained)
