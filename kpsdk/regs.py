"""``PtRegs``: the saved registers a handler sees, by name and by role.

Reads go straight to the target through its fast path (no snapshot is taken:
most handlers read two or three registers of the dozens there are).  Writes to
general registers take effect at once in the stopped CPU, which is the same as
"when the target resumes" since the CPU is not running while a handler runs.
The instruction pointer is different, as in the kernel: a new ``ip`` is only
honoured when the pre_handler returns non-zero (K2), so it is held aside.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

from kpsdk.arch import Abi, Arch, Register


class RegisterIO(Protocol):
    """What a target provides for register access (its fast path)."""

    def read(self, reg: Register) -> int: ...

    def write(self, reg: Register, value: int) -> None: ...


_ROLES = ("ip", "pc", "sp", "return_value")


class PtRegs:
    """Registers of the CPU at a probe hit.

    ``regs.rdi``, ``regs["a0"]`` (exact names and aliases), and the roles
    ``regs.ip``, ``regs.sp``, ``regs.return_value`` and ``regs.arg(n)`` (n from
    0, by the session's calling convention) on every architecture.
    """

    __slots__ = ("_arch", "_io", "_abi", "_table", "_read_mem", "new_ip", "_ip_value")
    _arch: Arch
    _io: RegisterIO
    _abi: Abi
    _table: dict[str, Register]
    _read_mem: Callable[[int, int], bytes]
    new_ip: int | None
    _ip_value: int | None

    def __init__(self, arch: Arch, io: RegisterIO, abi: Abi, read_mem: Callable[[int, int], bytes]) -> None:
        object.__setattr__(self, "_arch", arch)
        object.__setattr__(self, "_io", io)
        object.__setattr__(self, "_abi", abi)
        object.__setattr__(self, "_read_mem", read_mem)
        object.__setattr__(self, "new_ip", None)
        object.__setattr__(self, "_ip_value", None)
        table: dict[str, Register] = {}
        for reg in arch.registers:
            for n in (reg.name, *reg.aliases):
                table[n] = reg
        table["ip"] = table["pc"] = arch.register(arch.pc)
        table["sp"] = arch.register(arch.sp)
        table["return_value"] = arch.register(arch.return_value)
        object.__setattr__(self, "_table", table)

    # The probe manager sets the probe address before handlers run so that
    # ``regs.ip`` reads the probed address on every arch (x86 traps after int3).
    def _reset(self, ip: int) -> None:
        object.__setattr__(self, "new_ip", None)
        object.__setattr__(self, "_ip_value", ip)

    def __getattr__(self, name: str) -> int:
        if name in ("ip", "pc") or (name == self._arch.pc):
            if self.new_ip is not None:
                return self.new_ip
            if self._ip_value is not None:
                return self._ip_value
        try:
            reg = self._table[name]
        except KeyError:
            raise AttributeError(
                f"{self._arch.name} has no register {name!r}; "
                f"registers: {', '.join(self._arch.register_names)}; roles: {', '.join(_ROLES)}, arg(n)"
            ) from None
        return self._io.read(reg)

    def __setattr__(self, name: str, value: int) -> None:
        if name in ("ip", "pc") or name == self._arch.pc:
            object.__setattr__(self, "new_ip", value & self._arch.word_mask)
            return
        if name == "new_ip":
            object.__setattr__(self, name, value)
            return
        try:
            reg = self._table[name]
        except KeyError:
            raise AttributeError(f"{self._arch.name} has no register {name!r}") from None
        self._io.write(reg, value & reg.mask)

    __getitem__ = __getattr__
    __setitem__ = __setattr__

    def arg(self, n: int) -> int:
        """Argument ``n`` (from 0) at function entry, per the session's ABI.

        Register arguments come from registers; the rest from the stack, where
        the calling convention puts them at entry.
        """
        regs = self._abi.args
        if n < len(regs):
            return self._io.read(self._table[regs[n]])
        word = self._arch.word_size
        addr = self.sp + self._abi.stack_args_offset + word * (n - len(regs))
        fmt = ("<" if self._arch.endian == "little" else ">") + ("Q" if word == 8 else "I")
        return int(struct.unpack(fmt, self._read_mem(addr, word))[0])

    def signed(self, name: str) -> int:
        """A register read as a signed word (``regs.signed("rax")``)."""
        reg = self._table[name]
        value = self._io.read(reg)
        return value - (1 << (8 * reg.size)) if value >> (8 * reg.size - 1) else value

    def dump(self, names: tuple[str, ...] | None = None) -> dict[str, int]:
        """The named registers (default: all declared) as a dict."""
        return {n: getattr(self, n) for n in (names or self._arch.register_names)}

    def __repr__(self) -> str:
        return f"<PtRegs {self._arch.name} ip={self.ip:#x} sp={self.sp:#x}>"
