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
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from kpsdk.arch import Abi, Arch, Register
from kpsdk.errors import ArgumentError, DebugInfoError, NoDebugInfoError

if TYPE_CHECKING:
    from kpsdk.binfmt.dwarf import Value
    from kpsdk.debuginfo import SessionDebug


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

    __slots__ = ("_arch", "_io", "_read", "_table", "_hit", "arg", "_owner", "_plans")
    _arch: Arch
    _io: RegisterIO
    _read: Callable[[Register], int]  # _io.read, held directly: one lookup less per read
    _table: dict[str, Register]
    #: per-hit state, a list so the hot path sets it in place: [new ip set by a handler
    #: or None, the probed address or None, the target's snapshot of the register
    #: arguments or None].  The target's own list where it has one (``io.hit``: its
    #: register writes clear the snapshot); every per-hit reset clears it.
    _hit: list[int | None]
    #: ``regs.arg(n)``: argument ``n`` (from 0) at function entry, per the session's ABI.
    #: Register arguments come from registers; the rest from the stack, where the
    #: calling convention puts them at entry (:func:`_stack_reader`).  A closure made per
    #: instance (``io.args_reader`` where the target has one: the register read inlined),
    #: not a method: reading two arguments is most of a typical handler's time, and a
    #: method calling a reader was two Python frames per argument.
    arg: Callable[[int], int]
    #: the target these registers are of (its session's debug information answers :meth:`var`)
    _owner: Any
    #: the session's plans of variable reads by (pc, path) (:attr:`kpsdk.debuginfo.SessionDebug.plans`)
    _plans: dict[tuple[int, str], Callable[[PtRegs], Value]]

    _classes: ClassVar[dict[str, type[PtRegs]]] = {}

    if TYPE_CHECKING:  # the per-arch subclass defines these as properties
        ip: int
        pc: int
        sp: int
        return_value: int

        def __setattr__(self, name: str, value: int) -> None: ...

    @classmethod
    def create(cls, arch: Arch, io: RegisterIO, abi: Abi, read_mem: Callable[[int, int], bytes],
               read_word: Callable[[int], int] | None = None, owner: Any = None) -> PtRegs:
        """``read_word``: the target's word read (its fast path), for the arguments on the
        stack; else ``read_mem`` and a conversion.  ``owner``: the target (its session reads
        variables by name for :meth:`var`)."""
        getter = getattr(io, "getter", None)
        sub = cls._classes.get(arch.name)
        if sub is None:
            sub = cls._classes[arch.name] = _derive(arch)
        regs = sub.__new__(sub)
        table = dict(arch.by_name)  # names and aliases, plus the roles
        table["ip"] = table["pc"] = arch.register(arch.pc)
        table["sp"] = arch.register(arch.sp)
        table["return_value"] = arch.register(arch.return_value)
        regs._arch, regs._io, regs._table, regs._owner = arch, io, table, owner
        regs._read = io.read
        regs._hit = getattr(io, "hit", None) or [None, None, None]
        arg_regs = tuple(arch.register(r) for r in abi.args)
        args_reader = getattr(io, "args_reader", None)
        if read_word is None:
            word, endian = arch.word_size, arch.endian
            read_word = lambda addr: int.from_bytes(read_mem(addr, word), endian)  # noqa: E731
        stack = _stack_reader(io.read, table["sp"], abi.stack_args_offset - arch.word_size * len(arg_regs),
                              arch.word_size, read_word)
        if args_reader is not None:
            regs.arg = args_reader(arg_regs, stack)
        else:
            regs.arg = _args_reader(tuple(functools.partial(io.read, reg) for reg in arg_regs), stack)
        if getter is not None:  # this target's own getters (after args_reader: they share its snapshot)
            regs.__class__ = _derive(arch, getter, sub)
        return regs

    # The probe manager sets the probe address before handlers run so that
    # ``regs.ip`` reads the probed address on every arch (x86 traps after int3).
    def _reset(self, ip: int | None) -> None:
        hit = self._hit
        hit[0] = None
        hit[1] = ip
        hit[2] = None

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

    def signed(self, name: str) -> int:
        """A register read as a signed word (``regs.signed("rax")``)."""
        reg = self._table[name]
        value = self._read(reg)
        return value - (1 << (8 * reg.size)) if value >> (8 * reg.size - 1) else value

    def var(self, path: str) -> Value:
        """The C variable ``path`` at this hit, by its source name: ``regs.var("len")``,
        ``regs.var("buf->size")``, ``regs.var("argv[1]")``, ``regs.var("s.a.b")``, ``*p``.

        Read from the program's (or kernel's) DWARF where the pc is, the way a debugger reads
        it: a :class:`~kpsdk.binfmt.dwarf.Value` with its C type (``int(v)``, ``v.type.c_name``,
        ``v.string()`` for a ``char *``, ``v.members()`` for a struct, ``v.deref()``; ``str(v)``
        is gdb's ``print``).  See docs/dwarf.md.

        :raises NotInScopeError: no such variable at this pc (the error lists those in scope).
        :raises OptimizedOutError: the compiler kept no value for it here, with why.
        :raises MemberPathError: the path does not parse or fit the types.
        :raises NoDebugInfoError: the code at the pc has no debug information.
        """
        try:  # at a hit, a read made before at this pc: its plan, run (one dict lookup, one call)
            return self._plans[(self._hit[1], path)](self)  # type: ignore[index]
        except (KeyError, AttributeError):
            debug = self._debug()
            self._plans = debug.plans
            return debug.var(self, path)

    def vars(self, which: str = "$vars") -> dict[str, Value | DebugInfoError]:
        """Every variable in scope at this hit by name (``$vars``; ``$params``: the parameters,
        ``$locals``: the rest), each its :class:`~kpsdk.binfmt.dwarf.Value`, or the error saying
        why it has none here (an :class:`~kpsdk.errors.OptimizedOutError`)."""
        return self._debug().vars(self, which)

    def _debug(self) -> SessionDebug:
        session = getattr(self._owner, "session", None) if getattr(self, "_owner", None) is not None else None
        if session is None:
            raise NoDebugInfoError("these registers", ["they belong to no session's target: variables are read "
                                                       "from a hit's regs"])
        return session.debug  # type: ignore[no-any-return]

    def dump(self, names: tuple[str, ...] | None = None) -> dict[str, int]:
        """The named registers (default: all declared) as a dict."""
        return {n: self[n] for n in (names or self._arch.register_names)}

    def __repr__(self) -> str:
        return f"<PtRegs {self._arch.name} ip={self['ip']:#x} sp={self['sp']:#x}>"


def bad_argument_number(n: object) -> ArgumentError:
    """The error for ``regs.arg(n)`` with ``n`` not an argument number: a negative index
    would otherwise read another argument's register silently."""
    return ArgumentError(f"regs.arg(n) takes an argument number from 0, not {n!r}")


def _stack_reader(read: Callable[[Register], int], sp: Register, base: int, word: int,
                  read_word: Callable[[int], int]) -> Callable[[int], int]:
    """``arg(n)``'s other half: argument ``n`` beyond the register arguments, from the
    stack, where the calling convention puts it at function entry (``base`` is the
    offset from sp of argument 0 as if every argument were on the stack)."""

    def stack(n: int) -> int:
        if type(n) is not int or n < 0:  # noqa: E721 - bool and int subclasses are not argument numbers
            raise bad_argument_number(n)
        return read_word(read(sp) + base + word * n)

    return stack


def _args_reader(readers: tuple[Callable[[], int], ...], stack: Callable[[int], int]) -> Callable[[int], int]:
    """``arg(n)`` for a target without ``args_reader``: register readers, then the stack."""
    count = len(readers)

    def arg(n: int) -> int:
        try:
            if 0 <= n < count:
                return readers[n]()
        except TypeError:
            raise bad_argument_number(n) from None
        return stack(n)

    return arg


def _register_property(reg: Register, fget: Callable[[PtRegs], int] | None = None) -> property:
    """``regs.<name>``: ``fget`` where the target made one (:meth:`FastRegs.getter
    <kpsdk.targets.unicorn.fast.FastRegs.getter>`: one frame), else a read through ``_read``."""

    def get(self: PtRegs) -> int:
        return self._read(reg)

    def put(self: PtRegs, value: int) -> None:
        self._io.write(reg, value & reg.mask)

    return property(fget or get, put, doc=f"{reg.name} ({8 * reg.size}-bit)")


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


def _derive(arch: Arch, getter: Callable[[Register], Callable[[PtRegs], int]] | None = None,
            base: type[PtRegs] = PtRegs) -> type[PtRegs]:
    """A PtRegs subclass with one property per register name, alias and role.

    With a target's ``getter`` the class is that target's alone (its getters close
    over its engine): one per Unicorn session, derived from the arch's shared class."""
    pc = arch.register(arch.pc)
    make = getter or (lambda reg: None)  # type: ignore[arg-type, return-value]
    props: dict[str, object] = {"__slots__": ()}
    for n, reg in arch.by_name.items():
        props[n] = _register_property(reg, make(reg))
    for role in ("sp", "return_value"):
        reg = arch.register(getattr(arch, role))
        props[role] = _register_property(reg, make(reg))
    for n in {"ip", "pc", arch.pc, *pc.aliases}:
        props[n] = _ip_property(pc, arch.word_mask)
    return type(f"PtRegs_{arch.name}", (base,), props)
