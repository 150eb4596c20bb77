"""A live target's breakpoints: probe points, kpsdk's own stop hooks, and return addresses.

Three users may want a gdb breakpoint at one address: an armed probe point, a stop
hook (the loader's ``r_brk``, :mod:`.solibs`) and the return of hooked calls (a
kretprobe's, matched by sp: return probes on live targets trap the real return address,
refcounted per address).  The agent's breakpoint stays while any of them wants it.
Breakpoints are QEMU's (``Z0``/``Z1``), never written into memory (K10).

During a hit a change rides on the hit's final line (``b:ADDR:HW``, ``d:ADDR``), no round
trip; a breakpoint removed during a hit is only parked by the agent (deleting the one gdb
is processing crashes gdb 13) and purged before the next run.  Outside a hit the agent
is called through MI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.errors import TargetError
from kpsdk.targets.live.mi import GdbError
from kpsdk.targets.live.state import LiveState

if TYPE_CHECKING:
    from kpsdk.manager import ProbePoint
    from kpsdk.regs import PtRegs
    from kpsdk.rethook import RethookNode, ShadowStacks


class LiveBreakpoints(LiveState):
    """Who holds a gdb breakpoint at each address (a part of GdbTarget: see :mod:`.state`)."""

    # -- probe points ------------------------------------------------------------------

    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        want = bool(point.active)
        if want == (point.mechanism is not None) and not force:
            return
        if point.mechanism is not None:
            point.mechanism = None
            if point.addr not in self._return_bps and point.addr not in self._stop_hooks:
                self._remove_breakpoint(point.addr)
        if want:
            self._insert_breakpoint(point.addr)
            self._unfilter(point.addr)
            point.mechanism = "hbreak" if self.hardware else "break"

    def _insert_breakpoint(self, addr: int) -> None:
        hw = int(self.hardware)
        self._agent(f"b {addr:x} {hw}", f"insert({addr:#x}, {hw})", addr)

    def _remove_breakpoint(self, addr: int) -> None:
        self._agent(f"d {addr:x}", f"delete({addr:#x})", addr)
        self._dormant |= self.in_hit  # the agent only parks it during a hit; purged before the next run

    def _agent(self, request: str, python_call: str, addr: int) -> None:
        """Insert or delete an agent breakpoint: on the hit's final line during a hit (no
        round trip: ``b ADDR HW`` becomes ``b:ADDR:HW``), else through MI."""
        if self.in_hit:
            self._changes.append(request.replace(" ", ":"))
            return
        try:
            self._mi().console_command(f"python kpsdk_agent.{python_call}")
        except GdbError as exc:
            raise TargetError(f"gdb could not change the breakpoint at {self.symbols.format(addr)}: {exc}") from exc

    # -- kpsdk's own stop hooks --------------------------------------------------------

    def add_stop_hook(self, addr: int, hook: Callable[[], None],
                      only_when: tuple[int, int, int] | None = None) -> None:
        """Run ``hook()`` whenever the program reaches ``addr`` (the CPU stopped there, memory
        readable, probes may be added): kpsdk's own breakpoint, not a probe.

        ``only_when=(where, size, value)``: only at the hits where the ``size``-byte integer
        at ``where`` is ``value``; gdb's agent continues the others itself, without a round
        trip to kpsdk.  Ignored (every hit seen) while a probe or a return shares ``addr``.
        """
        point = self.manager.points.get(addr)
        shared = addr in self._return_bps or (point is not None and point.mechanism is not None)
        if not shared:
            self._insert_breakpoint(addr)
        self._stop_hooks[addr] = hook
        if only_when is not None and not shared and not self.in_hit:
            where, size, value = only_when
            self._mi().console_command(f"python kpsdk_agent.only_when({addr:#x}, {where:#x}, {size}, {value}, "
                                       f"{int(self.arch.endian == 'big')})")
            self._filtered.add(addr)

    def _unfilter(self, addr: int) -> None:
        """A probe or a return shares a stop hook's address: the agent reports its every hit."""
        if addr in self._filtered:
            self._filtered.discard(addr)
            self._agent(f"a {addr:x}", f"always({addr:#x})", addr)

    # -- return probes: a breakpoint at the return address, matched by sp ----------------

    def attach_rethook(self, core: ShadowStacks) -> None:
        self.rethook = core

    def hijack_return(self, regs: PtRegs, node: RethookNode) -> int:
        """Leave the return address alone; trap it with a breakpoint (one per address)."""
        addr = node.ret_addr & ~1 if self.arch.has_thumb else node.ret_addr
        count = self._return_bps.get(addr, 0)
        if count == 0:
            point = self.manager.points.get(addr)
            if (point is None or point.mechanism is None) and addr not in self._stop_hooks:
                self._insert_breakpoint(addr)
            self._unfilter(addr)
        self._return_bps[addr] = count + 1
        return node.ret_addr

    def release_return(self, node: RethookNode) -> None:
        addr = node.ret_addr & ~1 if self.arch.has_thumb else node.ret_addr
        count = self._return_bps.get(addr, 0) - 1
        if count > 0:
            self._return_bps[addr] = count
            return
        self._return_bps.pop(addr, None)
        point = self.manager.points.get(addr)
        if (point is None or point.mechanism is None) and addr not in self._stop_hooks \
                and not self.closed and self._exit_status is None:
            self._remove_breakpoint(addr)
