"""What the DWARF reader needs of a live CPU: registers by name and memory.

A probe hit (a :class:`~kpsdk.regs.PtRegs` and its target), a gdb stop, a core file: each
can answer these two questions, so evaluating a variable or unwinding a stack asks nothing
else.  Names are kpsdk's register names (``rdi``, ``a0``, ``r3``: the arch backend's
``Arch.dwarf`` maps DWARF's numbers to them).  Either read raises :class:`LookupError` (a
register this view does not have) or :class:`~kpsdk.errors.TargetFault` (memory it cannot
read); the evaluator turns a missing register into "not available", never a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Cpu(Protocol):
    """A CPU stopped at some pc: its registers and its memory."""

    def read_register(self, name: str) -> int:
        """The value of register ``name`` (kpsdk's name); :class:`LookupError` when unknown."""
        ...

    def read_memory(self, address: int, size: int) -> bytes:
        """``size`` bytes at ``address``; :class:`~kpsdk.errors.TargetFault` when unreadable."""
        ...


class DictCpu:
    """A :class:`Cpu` over a dict of registers and a memory reader: what tests and a gdb
    stop's snapshot make, and what the unwinder hands back for a caller's frame."""

    def __init__(self, registers: dict[str, int], read_memory: Callable[[int, int], bytes]) -> None:
        self.registers = dict(registers)
        self._read = read_memory

    def read_register(self, name: str) -> int:
        try:
            return self.registers[name]
        except KeyError:
            raise LookupError(f"register {name} not available") from None

    def read_memory(self, address: int, size: int) -> bytes:
        return bytes(self._read(address, size))
