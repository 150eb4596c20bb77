"""A live CPU's registers as the probe core reads them: cached per stop, writes batched during a hit.

During a hit, a register the agent did not send is one request (``r NAME``) and is
*learned*: its name goes back on the hit's final line (``+NAME``), and the agent sends
it with the point's later hits, so a steady-state hit is one round trip.  Memory near
the stack pointer is learned the same way (:meth:`LiveRegs.learn_memory`).  Writes wait
in :attr:`LiveRegs.writes` for that final line.  Outside a hit, reads and writes go
through MI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.arch import Register
    from kpsdk.targets.live.state import LiveState

#: memory reads during a hit this close above the stack pointer, and this small, are learned
#: (sent by the agent with the point's later hits): return addresses, stack arguments
MEMORY_PREFETCH_REACH = 0x100
MEMORY_PREFETCH_SIZE = 0x40


class LiveRegs:
    """Register access for a live CPU: cached per stop, batched writes during a hit."""

    def __init__(self, target: LiveState) -> None:
        self.t = target
        self.cache: dict[str, int] = {}
        self.writes: dict[str, int] = {}
        self.learned: list[str] = []
        #: memory the agent sent with the hit, by address (``@ADDR=HEX`` words)
        self.memory: dict[int, bytes] = {}
        self._sp = target.arch.register(target.arch.sp).gdb

    def learn_memory(self, addr: int, size: int) -> None:
        """A read during a hit near the stack pointer (a return address, a stack argument):
        ask the agent to send those bytes with the point's later hits (``+@SP:OFF:SIZE``),
        as registers are learned, so that a kretprobe's entry on x86 or a stack argument
        costs no round trip."""
        sp = self.cache.get(self._sp)
        if sp is not None and 0 <= addr - sp < MEMORY_PREFETCH_REACH and size <= MEMORY_PREFETCH_SIZE:
            self.learned.append(f"@{self._sp}:{addr - sp:x}:{size:x}")

    def read(self, reg: Register) -> int:
        value = self.cache.get(reg.gdb)
        if value is None:
            t = self.t
            if t.in_hit:
                value = int(t.link.request("r " + reg.gdb), 16)
                self.learned.append(reg.gdb)
            else:
                value = t.mi_read_register(reg.gdb)
            self.cache[reg.gdb] = value
        return value & reg.mask

    def write(self, reg: Register, value: int) -> None:
        t = self.t
        if t.in_hit:
            self.writes[reg.gdb] = value
        else:
            t._mi().command(f"-gdb-set var ${reg.gdb}={value:#x}")
        self.cache[reg.gdb] = value
