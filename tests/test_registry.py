"""The plugin system: built-ins load through the entry-point group, the
autoload switch, and blocking by name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kpsdk
from kpsdk.errors import KpsdkError, UnknownNameError
from kpsdk.registry import PluginLoadError, Registry
from kpsdk.trace.output import OutputFormat, TextWriter


def test_builtins_are_entry_point_plugins() -> None:
    names = Registry().plugin_names()
    assert {"kprobes", "unicorn", "arch-x86", "arch-arm", "arch-riscv", "arch-ppc64"} <= set(names)


def test_blocking_a_builtin_removes_what_it_provides() -> None:
    reg = Registry(block=("kprobes",))
    assert "kprobe" not in reg.probe_types and "Kprobe" not in reg.exports()
    assert Registry(block=("arch-riscv",)).archs.names().count("riscv64") == 0


def test_unknown_plugin_name_is_a_clear_error() -> None:
    with pytest.raises(PluginLoadError, match="no_such_plugin"):
        Registry(load=("no_such_plugin",))


def test_autoload_switch_keeps_builtins() -> None:
    code = "import kpsdk; print(sorted(kpsdk.get_registry().plugin_names())); print(kpsdk.Kprobe.__name__)"
    env = dict(os.environ, KPSDK_DISABLE_PLUGIN_AUTOLOAD="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "'kprobes'" in out and "Kprobe" in out


def test_session_verbs_come_from_probe_type_names() -> None:
    s = kpsdk.open("unicorn:riscv64")
    assert callable(s.register_kprobes) and callable(s.kprobe)
    with pytest.raises(AttributeError, match="probe types: .*kprobe"):
        s.register_nosuchprobe  # noqa: B018 - not provided by any loaded plugin


# -- trace output formats (the kpsdk_trace_formats hook) ------------------------------------

class _FormatPlugin:
    """A plugin object giving one output format called ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name

    @kpsdk.hookimpl
    def kpsdk_trace_formats(self) -> list[OutputFormat]:
        return [OutputFormat(self.name, lambda stream, ctx: TextWriter(stream))]


def test_builtin_formats_come_from_a_plugin_that_can_be_blocked() -> None:
    assert {"text", "jsonl", "perfetto"} <= set(Registry().trace_formats)
    assert Registry(block=("trace-formats",)).trace_formats == {}


def test_a_format_provided_twice_is_an_error() -> None:
    reg = Registry()
    reg.pm.register(_FormatPlugin("text"))
    with pytest.raises(KpsdkError, match="'text' provided twice"):
        _ = reg.trace_formats


@pytest.mark.parametrize("name", ["", "CSV", "a b", "-x", "x" * 33, "csv\n"])
def test_a_format_name_is_one_word_for_the_command_line(name: str) -> None:
    reg = Registry(block=("trace-formats",))
    reg.pm.register(_FormatPlugin(name))
    with pytest.raises(KpsdkError, match="output format name"):
        _ = reg.trace_formats


def test_a_plugin_format_is_what_make_writer_and_the_cli_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """A format registered at run time (not an installed entry point: test_example_csvtrace.py is)."""
    from typer.testing import CliRunner

    from kpsdk import registry
    from kpsdk.cli import app
    from kpsdk.trace.output import make_writer

    reg = Registry()
    reg.pm.register(_FormatPlugin("plain"))
    monkeypatch.setattr(registry, "_default", reg)
    assert isinstance(make_writer("plain", sys.stdout), TextWriter)
    with pytest.raises(UnknownNameError, match="'nosuch'.*valid: jsonl, perfetto, plain, text"):
        make_writer("nosuch", sys.stdout)
    plain = CliRunner().invoke(app, ["trace", "x86_64", "-e", "p:add add a=%di:s32", "--output", "plain"])
    text = CliRunner().invoke(app, ["trace", "x86_64", "-e", "p:add add a=%di:s32", "--no-prefix"])
    assert plain.exit_code == 0 and text.exit_code == 0
    assert plain.stdout == text.stdout and text.stdout.startswith("add: (add+0x0/")


# -- built-in plugins load lazily (kpsdk/lazyplugins.py) ----------------------------------------


def test_the_deferred_builtins_declare_exactly_their_modules_hooks() -> None:
    """BUILTIN_HOOKS is a copy of what each module implements: it must not drift."""
    import importlib
    import importlib.metadata

    from kpsdk.lazyplugins import BUILTIN_HOOKS

    builtin = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="kpsdk")
               if ep.dist is not None and ep.dist.name == "kpsdk"}
    assert set(BUILTIN_HOOKS) == set(builtin)
    for name, module_name in builtin.items():
        module = importlib.import_module(module_name)
        hooks = {attr for attr in dir(module) if attr.startswith("kpsdk_")
                 and hasattr(getattr(module, attr), "kpsdk_impl")}
        assert set(BUILTIN_HOOKS[name]) == hooks, name


HEAVY = ("capstone", "unicorn", "keystone", "pygdbmi", "elftools", "kpsdk.targets.unicorn.target", "kpsdk.trace.run")


def _heavy_modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return eval(out.splitlines()[-1])  # noqa: S307 - our own print of a list of names


def test_import_and_the_registry_load_no_heavy_module() -> None:
    assert _heavy_modules_after("import kpsdk; kpsdk.get_registry().plugin_names()") == []


def test_help_loads_only_the_trace_command_s_plugin() -> None:
    # the page made by typer (a recorded page imports none of them: tests/test_helpcache.py)
    code = ("import os, sys, contextlib, io\nos.environ['KPSDK_HELP_CACHE'] = '0'\nsys.argv = ['kpsdk', '--help']\n"
            "from kpsdk.cli import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n    main()")
    assert _heavy_modules_after(code) == ["kpsdk.trace.run"]


def test_a_deferred_plugin_loads_when_its_hook_runs() -> None:
    code = "import kpsdk; reg = kpsdk.get_registry(); assert reg.arch('x86_64').name == 'x86_64'"
    loaded = _heavy_modules_after(code)
    assert "capstone" in loaded and "kpsdk.targets.unicorn.target" not in loaded
