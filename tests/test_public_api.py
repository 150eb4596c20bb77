"""The public API as tools see it: names, types and docs that do not depend on running code.

kpsdk derives probe-type verbs and exports at run time (so third-party plugins
need no code in kpsdk); the built-in ones are also declared statically
(``kpsdk/verbs.py``, the ``TYPE_CHECKING`` block of ``kpsdk/__init__.py``,
``kpsdk/options.py``).  A built-in probe type is declared once, by its plugin
(its ``ProbeType``: name, class, ``register``, exports); these tests keep the
static declarations equal to it (names, types, the very objects), and run
mypy --strict over a user's script to show it finds real mistakes.
(``kpsdk/lazyplugins.py``'s table of hooks is checked in tests/test_registry.py.)
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kpsdk
from kpsdk.options import OpenOptions
from kpsdk.registry import Registry
from kpsdk.session import Session

PACKAGE = Path(kpsdk.__file__).parent


def builtin_registry() -> Registry:
    """The registry of kpsdk's own plugins only (no third-party package installed here counts)."""
    return Registry(autoload=False)


def declared_in(path: Path, inside: str) -> set[str]:
    """Names declared under ``if TYPE_CHECKING`` in ``path``: the methods of class ``inside``,
    or (``inside`` empty) the names the module imports there from the built-in probe-type
    plugins (the core's own lazy names are declared in another such block)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if inside and isinstance(node, ast.ClassDef) and node.name == inside:
            found |= {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef)}
        if not inside and isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            found |= {a.asname or a.name for n in node.body
                      if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("kpsdk.plugins.")
                      for a in n.names}
    return found


def test_declared_verbs_are_the_builtin_types_derived_verbs() -> None:
    s = Session(builtin_registry().target_kind("unicorn").open("x86_64", builtin_registry()), builtin_registry(),
                "unicorn:x86_64")
    assert declared_in(PACKAGE / "verbs.py", "BuiltinVerbs") == set(s.derived_verbs())
    for name in s.derived_verbs():
        verb = getattr(s, name)
        assert verb.__name__ == name and verb.__doc__, name  # help(s.register_kprobe) says something


def test_declared_exports_are_the_builtin_types_exports() -> None:
    exports = set(builtin_registry().exports())
    static = declared_in(PACKAGE / "__init__.py", "")
    assert static == exports - {"KPROBE_FLAG_DISABLED"}  # that one is a plain import of kpsdk.probe
    assert static <= set(kpsdk.__all__) and static <= set(dir(kpsdk))


def declared_verbs(path: Path) -> dict[str, ast.FunctionDef]:
    """verbs.py's declarations by name."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "BuiltinVerbs")
    return {n.name: n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)}


def test_declared_verbs_take_and_return_each_type_s_probe_class() -> None:
    """Each verb's types are its probe type's (the plugin's ProbeType is the one source): the class
    ``register_<name>`` and friends take, what ``register_<name>`` returns (the probe, or what the
    type's ``register`` returns: a watchpoint's slot) and what the decorator makes."""
    verbs = declared_verbs(PACKAGE / "verbs.py")
    wrong: list[str] = []
    for name, pt in builtin_registry().probe_types.items():
        cls = pt.probe_class.__name__
        returned = inspect.signature(pt.register).return_annotation
        want = {f"register_{name}": ([cls], cls if returned in ("None", None) else str(returned)),
                f"register_{name}s": ([f"Iterable[{cls}]"], "None"),
                f"unregister_{name}s": ([f"Iterable[{cls}]"], "None"),
                **{f"{verb}_{name}": ([cls], "None") for verb in ("unregister", "enable", "disable")}}
        for verb, (params, result) in want.items():
            node = verbs[verb]
            got = [ast.unparse(a.annotation) for a in node.args.posonlyargs + node.args.args if a.annotation]
            if got != params or node.returns is None or ast.unparse(node.returns) != result:
                wrong.append(f"{verb}: {ast.unparse(node.args)} -> {ast.unparse(node.returns or ast.Constant(None))}")
        decorator = verbs[name].returns
        if decorator is None or not ast.unparse(decorator).endswith(f", {cls}]"):
            wrong.append(f"{name}: the decorator does not make a {cls}")
    assert not wrong


def test_the_type_checkers_names_are_the_very_objects_the_plugins_export() -> None:
    """kpsdk/__init__.py's ``TYPE_CHECKING`` imports name each export's own module and object
    (``KRETPROBE_MAXACTIVE_MAX`` is kretprobes' ``MAXACTIVE_MAX``), verbs.py's the probe classes';
    and ``__all__`` lists nothing that is neither kpsdk's own nor a plugin's."""
    import importlib

    exports = builtin_registry().exports()
    wrong: list[str] = []
    for path in (PACKAGE / "__init__.py", PACKAGE / "verbs.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kpsdk.plugins."):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    name = alias.asname or alias.name
                    expected = exports.get(name) if path.name == "__init__.py" else getattr(module, alias.name)
                    if getattr(module, alias.name, None) is not expected or expected is None:
                        wrong.append(f"{path.name}: {node.module}.{alias.name} as {name}")
    own = set(vars(kpsdk)) | set(kpsdk._LAZY)  # type: ignore[attr-defined]  # the core's lazily imported names
    wrong += [f"__all__: {name}" for name in kpsdk.__all__ if name not in own and name not in exports]
    assert not wrong


def test_open_options_are_the_builtin_openers_parameters() -> None:
    params = {"noprobe", "debug_dir"}  # kpsdk.open's own
    for kind in builtin_registry().targets.values():
        sig = inspect.signature(kind.open)
        params |= {p for p, v in sig.parameters.items() if v.kind is v.KEYWORD_ONLY or v.default is not v.empty}
    assert set(OpenOptions.__annotations__) == params


def test_every_public_session_member_has_a_docstring() -> None:
    missing = [name for name, member in inspect.getmembers(Session)
               if not name.startswith("_") and not (getattr(member, "__doc__", None) or "").strip()]
    assert not missing


GOOD = textwrap.dedent("""
    import kpsdk
    from kpsdk.fixtures import path

    s = kpsdk.open("elf:" + str(path("riscv64")), abi="user")
    kp: kpsdk.Kprobe = s.register_kprobe(kpsdk.Kprobe(symbol_name="add"))

    @s.kretprobe("fact")
    def on_return(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> None:
        print(regs.return_value)

    slot: int = s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4))
    s.run(timeout=5)
""")
MISTAKES = {
    "a misspelled verb": ('s.register_kprobee(kpsdk.Kprobe(symbol_name="add"))', 'has no attribute "register_kprobee"'),
    "a misspelled option": ('kpsdk.open("qemu-system:x86_64", kernal="vmlinuz")', '"kernal"'),
    "a field of the wrong type": ('kpsdk.Kprobe(symbol_name=3)', '"symbol_name"'),
    "the wrong probe class": ('s.register_kretprobe(kpsdk.Kprobe(symbol_name="add"))', '"register_kretprobe"'),
    "a misspelled export": ("kpsdk.Kprob", 'has no attribute "Kprob"'),
}


def mypy_strict(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``code``, with a user's defaults (not kpsdk's settings).  An
    installed wheel is found in site-packages (py.typed); an editable install's
    import hook is invisible to mypy, so then the source tree is given as MYPYPATH."""
    script = tmp_path / "user_script.py"
    script.write_text(code)
    # kpsdk's own modules are read for their types, their errors are not the user's (as for an installed package)
    (tmp_path / "mypy.ini").write_text("[mypy]\n[mypy-kpsdk.*]\nfollow_imports = silent\n")
    root = PACKAGE.parent
    env = dict(os.environ)
    if "site-packages" not in root.parts:
        env["MYPYPATH"] = str(root)
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file",
                           str(tmp_path / "mypy.ini"), str(script)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)


def test_mypy_strict_accepts_a_correct_script(tmp_path: Path) -> None:
    proc = mypy_strict(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_mypy_strict_finds_a_users_mistake(tmp_path: Path, mistake: str) -> None:
    line, message = MISTAKES[mistake]
    proc = mypy_strict(tmp_path, GOOD + "\n" + line + "\n")
    assert proc.returncode == 1 and message in proc.stdout, proc.stdout


def test_every_error_class_is_in_kpsdk_errors_and_exported() -> None:
    """kpsdk/errors.py holds every error class (no module defines its own; a private one used for
    control flow is not an error), ``kpsdk`` exports each, and the modules that raise one still give
    it under their own name."""
    import kpsdk.errors as errors

    defined_elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" or "fixtures/src" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    ast.unparse(b).endswith(("Error", "Exception")) for b in node.bases):
                defined_elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert not defined_elsewhere
    classes = {name for name, obj in vars(errors).items()
               if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__}
    assert classes <= set(kpsdk.__all__)
    assert all(issubclass(getattr(errors, name), errors.KpsdkError) for name in classes)
    from kpsdk.fixtures.build import FixtureError
    from kpsdk.registry import PluginLoadError
    from kpsdk.targets.live.mi import GdbError
    from kpsdk.trace.filter import FilterError
    from kpsdk.trace.grammar import TraceDefinitionError

    for cls in (FixtureError, PluginLoadError, GdbError, FilterError, TraceDefinitionError):
        assert getattr(kpsdk, cls.__name__) is cls is getattr(errors, cls.__name__)
    assert kpsdk.trace.TraceDefinitionError is TraceDefinitionError
