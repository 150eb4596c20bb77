"""What a qemu-system session on the plugin mechanism adds to QEMU's launch (``mechanism="plugin"``).

The launcher (:func:`kpsdk.targets.live.qemu.open_qemu_system`) asks :class:`PluginLaunch` for
QEMU >= 10.0, the built plugin and the extra arguments, then for the target
(:class:`~kpsdk.targets.live.tcg.target.PluginTarget`, which serves the hits).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.errors import TargetError
from kpsdk.targets.live.tcg.plugin import ProbeTable

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.targets.live.tcg.target import PluginTarget

#: the mechanisms a qemu-system session takes (``mechanism=``)
MECHANISMS = ("gdb", "plugin")


class PluginLaunch:
    """What a qemu-system session on the plugin mechanism adds to QEMU: QEMU >= 10.0
    (:mod:`kpsdk.targets.live.qemu10`), the built plugin, the shared table in the session's
    private directory."""

    def __init__(self, arch: Arch) -> None:
        from kpsdk.targets.live.qemu10 import find_qemu
        from kpsdk.targets.live.tcg.plugin import build_plugin

        board = arch.qemu_system
        if board is None:
            raise TargetError(f"no qemu-system machine is known for {arch.name}")
        if not arch.plugin_registers:
            raise TargetError(f"the plugin mechanism does not serve {arch.name} yet (use mechanism='gdb')")
        self.qemu = find_qemu(board.binary)
        self.plugin = build_plugin()
        self.table: ProbeTable | None = None
        self.regs_file: Path | None = None

    def arguments(self, directory: Path) -> list[str]:
        """QEMU's extra arguments; the table and the register list live in ``directory``
        (kpsdk's private socket directory: its path holds no comma, which QEMU would split at)."""
        self.table = ProbeTable(directory / "table")
        self.regs_file = directory / "regs"
        for path in (self.plugin, self.table.path, self.regs_file):
            if "," in str(path):
                raise TargetError(f"QEMU cannot be given {path}: its -plugin option splits at commas")
        out = ["-plugin", f"{self.plugin},table={self.table.path},regs={self.regs_file}",
               "-audio", "none"]  # no audio back-end probing (Debian 12's QEMU 7.2 modules would not load)
        if self.qemu.datadir is not None:
            out += ["-L", str(self.qemu.datadir)]
        return out

    def target(self, arch: Arch, remote: str, **kwargs: Any) -> PluginTarget:
        from kpsdk.targets.live.tcg.target import PluginTarget  # loaded by a session, not by --mechanism's check

        assert self.table is not None and self.regs_file is not None, "arguments() first"
        return PluginTarget(arch, remote, table=self.table, regs_file=self.regs_file, **kwargs)
