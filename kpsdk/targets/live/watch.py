"""Watchpoints on live targets (QEMU through gdb/MI).

Each watchpoint is a gdb watchpoint owned by kpsdk's agent inside gdb
(``KpsdkWatchpoint`` in :mod:`kpsdk.targets.live.gdb_agent`), whose ``stop()``
reports ``W ID THREAD KIND OLD NEW`` and is then served like a probe hit.

* **qemu-system**: gdb hardware watchpoints, which QEMU's gdbstub implements
  (Z2 write, Z3 read, Z4 access) with its own watchpoint machinery; ``x`` is a
  hardware breakpoint (Z1).  The report comes after the access: QEMU stops x86
  after the instruction, and gdb steps ARM over it before reporting.
* **qemu-user**: its gdbstub rejects Z2-Z4, so a data watchpoint is refused with
  ``EOPNOTSUPP`` unless the watchpoint asks for ``software=True``: gdb's software
  watchpoint, which single-steps the whole program and compares the bytes after
  every instruction (``w`` only; see docs/api/probes.md, "How each target watches, and
  what it costs").  ``x`` is a hardware breakpoint there too (QEMU implements Z1 in user mode).

What gdb does not tell, kpsdk cannot report: the access's own address and size
(``access.addr``/``size`` are the watched range), the accessing instruction
(``access.pc`` is None; ``regs.ip`` is where the CPU stopped, after it), and
gdb reports a write watchpoint only when the bytes changed: a store of the
value already there is not seen (Unicorn sees it).  ``old`` is what the
watchpoint last saw (at registration, then at each report).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from kpsdk.errors import KprobeError, TargetError
from kpsdk.targets.live.mi import GdbError

if TYPE_CHECKING:
    from kpsdk.regs import PtRegs
    from kpsdk.targets.live.target import GdbTarget


class LiveWatch:
    """The watchpoint engine of one :class:`~kpsdk.targets.live.target.GdbTarget`."""

    #: the stub's debug hardware decides: strict=False has nothing to lift
    emulator = False

    def __init__(self, target: GdbTarget) -> None:
        self.t = target
        self._ids: dict[int, Any] = {}  # agent watch id -> watchpoint
        self._id_of: dict[Any, int] = {}
        self._next = 1

    def check(self, wp: Any) -> None:
        if self.t.in_hit:
            raise KprobeError(errno.EBUSY, "live targets change watchpoints only while stopped, not from a handler")
        if wp.type == "x":
            if wp.software:
                raise KprobeError(errno.EINVAL, "software=True is for data watchpoints (x is a breakpoint)")
            return
        if self.t.hw_watchpoints:
            if wp.software:
                raise KprobeError(errno.EINVAL, "software=True is for gdbstubs without hardware watchpoints "
                                  "(qemu-user); this one has them")
            return
        if not wp.software:
            raise KprobeError(errno.EOPNOTSUPP, "qemu-user's gdbstub has no hardware watchpoints (it rejects "
                              "Z2/Z3/Z4); Watchpoint(..., software=True) uses gdb's software watchpoints, "
                              "which single-step the whole program (type w only)")
        if wp.type != "w":
            raise KprobeError(errno.EOPNOTSUPP, f"gdb's software watchpoints see writes only, not type {wp.type!r}")

    def arm(self, wp: Any) -> None:
        wid = self._next
        self._next += 1
        software = int(wp.software)
        self._call(f"watch({wid}, {wp.address:#x}, {wp.length}, {wp.type!r}, {software})", wp)
        self._ids[wid] = wp
        self._id_of[wp] = wid

    def disarm(self, wp: Any) -> None:
        wid = self._id_of.get(wp)
        if wid is None:
            return
        if not self.t.closed and self.t.exit_status is None:
            self._call(f"unwatch({wid})", wp)
        del self._id_of[wp], self._ids[wid]

    def _call(self, python_call: str, wp: Any) -> None:
        if self.t.in_hit:
            raise KprobeError(errno.EBUSY, "live targets change watchpoints only while stopped, not from a handler")
        try:
            self.t._mi().console_command(f"python kpsdk_watch.{python_call}")
        except GdbError as exc:
            raise TargetError(f"gdb could not set the watchpoint {wp!r}: {exc}") from exc

    def hit(self, wid: int, fields: list[str], regs: PtRegs) -> None:
        """A ``W`` report from the agent (the CPU is stopped after the access)."""
        wp = self._ids.get(wid)
        if wp is None:
            return  # unregistered meanwhile
        kind, old_hex, new_hex = fields
        regs._reset(None)
        if kind == "x":
            wp.fire(regs, "x", wp.address, wp.length, None, None, wp.address)
            return
        endian = self.t.arch.endian
        new = int.from_bytes(bytes.fromhex(new_hex), endian) if new_hex != "-" else None
        old = int.from_bytes(bytes.fromhex(old_hex), endian) if old_hex != "-" else None
        wp.fire(regs, kind, wp.address, wp.length, new, old, None)
