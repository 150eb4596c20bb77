"""The plugin system: built-ins load through the entry-point group, the
autoload switch, and blocking by name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kpsdk
from kpsdk.registry import PluginLoadError, Registry


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
