"""kpsdk's QEMU TCG plugin, built and loaded without a kernel: the build's errors, and the
plugin's answer to a table it cannot use, as QEMU 10 prints it.

The plugin's probes themselves are tested on Debian's kernel (tests/test_kernel_plugin.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import kpsdk
from kpsdk.targets.live.tcg import plugin as tcgplugin
from tests.conftest import require_tool


def test_a_missing_gcc_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path))
    monkeypatch.setattr(tcgplugin.shutil, "which", lambda name: None)
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
