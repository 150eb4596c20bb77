"""``PtRegs``: the saved registers a handler sees, by name and by role.

Reads go straight to the target through its fast path (no snapshot is taken:
most handlers read two or three registers of the dozens there are).  Writes to
general registers take effect at once in the stopped CPU, which is the same as
"when the target resumes" since the CPU is not running while a handler runs.
The instruction pointer is different, as in the kernel: a new ``ip`` is only
honoured when the pre_handler returns non-zero (K2), so it is held aside.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

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

    Build one with :meth:`PtRegs.create`: every register name, alias and role
    becomes a property of a subclass derived once per architecture, because a
    plain attribute costs a fraction of ``__getattr__``, which Python only
    reaches after a failed lookup (handlers read registers on every hit).
    """

    __slots__ = ("_arch", "_io", "_read", "_abi", "_table", "_read_mem", "_hit", "_arg_regs", "arg")
    _arch: Arch
    _io: RegisterIO
    _read: Callable[[Register], int]  # _io.read, held directly: one lookup less per read
    _abi: Abi
    _table: dict[str, Register]
    _read_mem: Callable[[int, int], bytes]
    #: per-hit state, a list so the hot path sets it in place:
    #: [new ip set by a handler or None, the probed address or None]
    _hit: list[int | None]
    _arg_regs: tuple[Register, ...]
    #: ``regs.arg(n)``: argument ``n`` (from 0) at function entry, per the session's ABI.
    #: Register arguments come from registers; the rest from the stack, where the
    #: calling convention puts them at entry (:meth:`_stack_arg`).  A closure made per
    #: instance (``io.args_reader`` where the target has one: the register read inlined),
    #: not a method: reading two arguments is most of a typical handler's time, and a
    #: method calling a reader was two Python frames per argument.
    arg: Callable[[int], int]

    _classes: ClassVar[dict[str, type[PtRegs]]] = {}

    if TYPE_CHECKING:  # the per-arch subclass defines these as properties
        ip: int
        pc: int
        sp: int
        return_value: int

        def __setattr__(self, name: str, value: int) -> None: ...

    @classmethod
    def create(cls, arch: Arch, io: RegisterIO, abi: Abi, read_mem: Callable[[int, int], bytes]) -> PtRegs:
        sub = cls._classes.get(arch.name)
        if sub is None:
            sub = cls._classes[arch.name] = _derive(arch)
        regs = sub.__new__(sub)
        table = dict(arch.by_name)  # names and aliases, plus the roles
        table["ip"] = table["pc"] = arch.register(arch.pc)
        table["sp"] = arch.register(arch.sp)
        table["return_value"] = arch.register(arch.return_value)
        regs._arch, regs._io, regs._abi, regs._table, regs._read_mem = arch, io, abi, table, read_mem
        regs._read = io.read
        regs._hit = [None, None]
        regs._arg_regs = arg_regs = tuple(arch.register(r) for r in abi.args)
        args_reader = getattr(io, "args_reader", None)
        if args_reader is not None:
            regs.arg = args_reader(arg_regs, regs._stack_arg)
        else:
            regs.arg = _args_reader(tuple(functools.partial(io.read, reg) for reg in arg_regs), regs._stack_arg)
        return regs

    # The probe manager sets the probe address before handlers run so that
    # ``regs.ip`` reads the probed address on every arch (x86 traps after int3).
    def _reset(self, ip: int | None) -> None:
        hit = self._hit
        hit[0] = None
        hit[1] = ip

    @property
    def new_ip(self) -> int | None:
        """The ip a handler set (K2), else None."""
        return self._hit[0]

    def __getattr__(self, name: str) -> int:
        raise AttributeError(
            f"{self._arch.name} has no register {name!r}; "
            f"registers: {', '.join(self._arch.register_names)}; roles: {', '.join(_ROLES)}, arg(n)"
        )

    def __getitem__(self, name: str) -> int:
        if name not in self._table:
            return self.__getattr__(name)
        return int(getattr(self, name))

    def __setitem__(self, name: str, value: int) -> None:
        if name not in self._table:
            self.__getattr__(name)
        setattr(self, name, value)

    def _stack_arg(self, n: int) -> int:
        """Argument ``n`` beyond the register arguments: from the stack, where the
        calling convention puts it at function entry (``arg(n)``'s other half)."""
        regs = self._arg_regs
        arch = self._arch
        word = arch.word_size
        addr = self._read(self._table["sp"]) + self._abi.stack_args_offset + word * (n - len(regs))
        return int.from_bytes(self._read_mem(addr, word), arch.endian)

    def signed(self, name: str) -> int:
        """A register read as a signed word (``regs.signed("rax")``)."""
        reg = self._table[name]
        value = self._read(reg)
        return value - (1 << (8 * reg.size)) if value >> (8 * reg.size - 1) else value

    def dump(self, names: tuple[str, ...] | None = None) -> dict[str, int]:
        """The named registers (default: all declared) as a dict."""
        return {n: self[n] for n in (names or self._arch.register_names)}

    def __repr__(self) -> str:
        return f"<PtRegs {self._arch.name} ip={self['ip']:#x} sp={self['sp']:#x}>"


def _args_reader(readers: tuple[Callable[[], int], ...], stack: Callable[[int], int]) -> Callable[[int], int]:
    """``arg(n)`` for a target without ``args_reader``: register readers, then the stack."""
    count = len(readers)

    def arg(n: int) -> int:
        return readers[n]() if n < count else stack(n)

    return arg


def _register_property(reg: Register) -> property:
    def get(self: PtRegs) -> int:
        return self._read(reg)

    def put(self: PtRegs, value: int) -> None:
        self._io.write(reg, value & reg.mask)

    return property(get, put, doc=f"{reg.name} ({8 * reg.size}-bit)")


def _ip_property(reg: Register, mask: int) -> property:
    """The instruction pointer: the probed address during a hit; a write is a K2 request."""

    def get(self: PtRegs) -> int:
        hit = self._hit
        if hit[0] is not None:
            return hit[0]
        if hit[1] is not None:
            return hit[1]
        return self._read(reg)

    def put(self: PtRegs, value: int) -> None:
        self._hit[0] = value & mask

    return property(get, put, doc="the instruction pointer (a write takes effect only per K2)")


def _derive(arch: Arch) -> type[PtRegs]:
    """A PtRegs subclass with one property per register name, alias and role."""
    pc = arch.register(arch.pc)
    props: dict[str, object] = {"__slots__": ()}
    for n, reg in arch.by_name.items():
        props[n] = _register_property(reg)
    props["sp"] = _register_property(arch.register(arch.sp))
    props["return_value"] = _register_property(arch.register(arch.return_value))
    for n in {"ip", "pc", arch.pc, *pc.aliases}:
        props[n] = _ip_property(pc, arch.word_mask)
    return type(f"PtRegs_{arch.name}", (PtRegs,), props)
