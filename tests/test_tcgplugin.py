"""kpsdk's QEMU TCG plugin, built and loaded without a kernel: the build's errors, and the
plugin's answer to a table it cannot use, as QEMU 10 prints it.

The plugin's probes themselves are tested on Debian's kernel (tests/test_kernel_plugin.py).
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import kpsdk
from kpsdk import nativebuild
from kpsdk.targets.live.tcg import plugin as tcgplugin
from tests.conftest import require_tool


def test_a_missing_gcc_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path))
    monkeypatch.setattr(nativebuild.shutil, "which", lambda name: None)
    with pytest.raises(kpsdk.ToolMissingError, match="gcc") as info:
        tcgplugin.build_plugin()
    assert info.value.package == "gcc"


def test_a_source_gcc_refuses_is_reported_with_its_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require_tool("gcc", "gcc")
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path))
    bad = tmp_path / "bad.c"
    bad.write_text("int qemu_plugin_version = ;\n")
    with pytest.raises(kpsdk.TargetError, match="gcc could not build .*error"):
        tcgplugin.build_plugin(bad)


def _cached_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    require_tool("gcc", "gcc")
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    built = tcgplugin.build_plugin()
    assert built.parent == tmp_path / "cache" / "tcgplugin"
    return built


def test_a_loosened_cached_plugin_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached plugin anyone may write is code anyone may change: it is built again, never returned."""
    built = _cached_plugin(tmp_path, monkeypatch)
    good = built.read_bytes()
    built.chmod(0o777)
    again = tcgplugin.build_plugin()
    assert not os.stat(again).st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    assert again.read_bytes() == good


def test_a_replaced_cached_plugin_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached plugin whose bytes changed (the owner and mode kept) no longer has the SHA256
    recorded when it was built: built again."""
    built = _cached_plugin(tmp_path, monkeypatch)
    good = built.read_bytes()
    built.write_bytes(Path("/bin/true").read_bytes())
    built.chmod(0o700)
    again = tcgplugin.build_plugin()
    assert again.read_bytes() == good


def test_an_unsafe_cache_builds_in_one_temporary_directory_removed_at_exit(tmp_path: Path) -> None:
    """Without a safe cache directory the plugin is built in a private temporary directory: one
    per process however many builds, and gone when the interpreter exits."""
    require_tool("gcc", "gcc")
    cache, scratch = tmp_path / "cache", tmp_path / "tmp"
    (cache / "tcgplugin").mkdir(parents=True)
    (cache / "tcgplugin").chmod(0o777)
    scratch.mkdir()
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from kpsdk.targets.live.tcg.plugin import build_plugin\n"
            "import os, sys\n"
            "paths = {build_plugin().parent for _ in range(3)}\n"
            "print(len(paths), len(os.listdir(sys.argv[1])))\n")
    env = {**os.environ, "KPSDK_CACHE": str(cache), "TMPDIR": str(scratch)}
    proc = subprocess.run([sys.executable, "-c", code, str(scratch)], env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    assert proc.stdout.split() == ["1", "1"], proc.stdout + proc.stderr
    assert os.listdir(scratch) == []
    assert os.listdir(cache / "tcgplugin") == []


def _value_of(library: Path) -> int:
    return int(ctypes.CDLL(str(library)).kp_value())


def test_what_is_built_is_the_source_that_was_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source changed while it builds is not cached under the old source's name: gcc compiles
    the bytes that were hashed."""
    require_tool("gcc", "gcc")
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "kp.c"
    source.write_text("__attribute__((visibility(\"default\"))) int kp_value(void) { return 1; }\n")
    real_run = subprocess.run

    def swap_then_run(*args: object, **kwargs: object) -> object:
        source.write_text("__attribute__((visibility(\"default\"))) int kp_value(void) { return 2; }\n")
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(nativebuild.subprocess, "run", swap_then_run)
    first = nativebuild.build_shared_object("kptest", source, "a test object")
    monkeypatch.setattr(nativebuild.subprocess, "run", real_run)
    assert _value_of(first) == 1


def test_a_source_and_its_flags_name_one_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags are no suffix of the source's bytes: a source ending in a flag's text, built without
    flags, is not the first source built with that flag."""
    require_tool("gcc", "gcc")
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    text = ("#ifndef V\n#define V 2\n#endif\n"
            "__attribute__((visibility(\"default\"))) int kp_value(void) { return V; }\n//")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "kp.c").write_text(text)
    (tmp_path / "b" / "kp.c").write_text(text + "-DV=1")
    one = nativebuild.build_shared_object("kptest", tmp_path / "a" / "kp.c", "a test object", ["-DV=1"])
    two = nativebuild.build_shared_object("kptest", tmp_path / "b" / "kp.c", "a test object")
    assert (_value_of(one), _value_of(two)) == (1, 2)


def _qemu_with(plugin: Path, args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    from kpsdk.targets.live.qemu10 import find_qemu

    qemu = find_qemu("qemu-system-x86_64")
    cmd = [str(qemu.binary), "-accel", "tcg", "-display", "none", "-monitor", "none", "-serial", "none",
           "-audio", "none", "-S", "-plugin", f"{plugin},{args}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def test_qemu_10_loads_the_plugin_and_it_refuses_a_foreign_table(tmp_path: Path) -> None:
    """The built plugin declares the API version QEMU 10 takes (else QEMU says so and exits), and
    checks the table's magic before mapping anything of it: QEMU exits with the plugin's error."""
    require_tool("gcc", "gcc")
    require_tool("dpkg-deb", "dpkg")
    plugin = tcgplugin.build_plugin()
    table = tmp_path / "table"
    table.write_bytes(bytes(4096))
    proc = _qemu_with(plugin, f"table={table},regs={tmp_path / 'regs'}")
    assert proc.returncode != 0
    assert "is not a kpsdk table of this version" in proc.stderr, proc.stderr
    assert "API version" not in proc.stderr
