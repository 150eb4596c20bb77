"""DWARF expressions and location descriptions (DWARF 5 sections 2.5 and 2.6), evaluated.

A variable's ``DW_AT_location`` is a small stack program: ``DW_OP_fbreg -20`` says "20
bytes below the frame base", ``DW_OP_reg5`` "in register 5", ``DW_OP_breg7 8; DW_OP_deref;
DW_OP_stack_value`` "the word at rsp+8 is the value".  :func:`evaluate` runs one against a
:class:`Context` (a CPU's registers and memory, the frame base, the CFA) and says where the
value is: a :class:`InRegister`, :class:`InMemory`, a value the expression computed
(:class:`Computed`) or carries (:class:`Implicit`), :class:`Pieces` of these, or
:class:`OptimizedOut` with why.

The same evaluator answers statically: with :class:`SymbolicCpu` a register reads as a
:class:`Sym` ("rdi + 8", "the word at rbp - 16, + 4"), which is what a kprobe_events fetch
argument can express (``+4(-16(%bp))``); an expression that needs more (a comparison, a
multiplication of registers) raises :class:`NotStatic`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from kpsdk.binfmt.dwarf.cpu import Cpu
from kpsdk.binfmt.dwarf.primitives import Numbers, sleb, uleb
from kpsdk.errors import NotStaticError


class _Unavailable(Exception):
    """The value cannot be had here (a register the CPU view lacks, an entry value that is
    gone): the location is reported :class:`OptimizedOut` with this message."""


#: a symbolic evaluation met an operation a fixed register-and-offset form cannot express
NotStatic = NotStaticError


@dataclass(frozen=True)
class Sym:
    """A value known by its form: ``base`` (a register's name, or another :class:`Sym` whose
    value is an address to read a word at) plus ``offset``."""

    base: str | Sym
    offset: int = 0

    def __str__(self) -> str:
        inner = self.base if isinstance(self.base, str) else f"*({self.base})"
        return inner if not self.offset else f"{inner}{self.offset:+d}"


#: a stack entry: an integer, a symbolic register value, or a floating-point value that a typed
#: operation (``DW_OP_convert`` to a float type, ``DW_OP_const_type``) put there
Number = int | Sym | float
#: an address: a number, or a symbolic one
Address = int | Sym


@dataclass(frozen=True)
class InRegister:
    """The value is in register ``register`` (kpsdk's name)."""

    register: str


@dataclass(frozen=True)
class InMemory:
    """The value is in memory at ``address``."""

    address: Address


def as_address(value: Number) -> Address:
    if isinstance(value, float):
        raise _Unavailable("a floating-point value used as an address")
    return value


@dataclass(frozen=True)
class Computed:
    """The value is ``value``, computed by the expression (``DW_OP_stack_value``)."""

    value: Number


@dataclass(frozen=True)
class Implicit:
    """The value's bytes are ``data``, carried by the debug information (``DW_OP_implicit_value``,
    ``DW_AT_const_value``)."""

    data: bytes


@dataclass(frozen=True)
class OptimizedOut:
    """No value here; ``why`` says what the debug information said instead."""

    why: str = "optimized out"


@dataclass(frozen=True)
class Piece:
    """``bits`` bits of a value, from ``location`` (None: that part is not available)."""

    location: Location | None
    bits: int
    bit_offset: int = 0


@dataclass(frozen=True)
class Pieces:
    """A value assembled from parts, least significant first in memory order (``DW_OP_piece``)."""

    parts: tuple[Piece, ...]


Location = InRegister | InMemory | Computed | Implicit | OptimizedOut | Pieces


@dataclass
class Context:
    """What an expression may ask about: ``cpu``, the number decoding of the file, the DWARF
    register names, and lazily the frame base, the CFA and entry values (None: cannot be had).

    :param register_name: DWARF register number -> kpsdk name (None: not readable).
    :param frame_base: the value of the function's ``DW_AT_frame_base`` (``DW_OP_fbreg``).
    :param cfa: the canonical frame address at this pc, from the call frame information.
    :param entry_value: the value the register (the inner expression) had at function entry.
    :param base_type: a typed operation's base type, by unit-relative DIE offset: (size, encoding),
        the encoding ``signed``, ``unsigned`` or ``float``.
    :param address_index: ``.debug_addr`` entry by index (``DW_OP_addrx``, ``DW_OP_constx``).
    :param bias: the load bias, added to the addresses the expression names.
    """

    cpu: Cpu
    address_size: int
    num: Numbers
    register_name: Callable[[int], str | None]
    frame_base: Callable[[], Number] | None = None
    cfa: Callable[[], Number] | None = None
    entry_value: Callable[[bytes], Number] | None = None
    base_type: Callable[[int], tuple[int, str]] | None = None
    address_index: Callable[[int], int] | None = None
    #: added to the addresses the expression names (``DW_OP_addr``): the load bias of a PIE or library
    bias: int = 0
    #: the size of a DIE reference in ``DW_OP_implicit_pointer`` (the unit's offset size)
    offset_size: int = 4

    def register(self, number: int) -> Number:
        name = self.register_name(number)
        if name is None:
            raise _Unavailable(f"DWARF register {number} is not one kpsdk reads")
        try:
            return self.cpu.read_register(name)
        except LookupError:
            raise _Unavailable(f"register {name} is not available") from None

    def reg_name(self, number: int) -> str:
        name = self.register_name(number)
        if name is None:
            raise _Unavailable(f"DWARF register {number} is not one kpsdk reads")
        return name

    def read(self, address: Number, size: int) -> Number:
        if isinstance(address, float):
            raise _Unavailable("a memory read at a floating-point address")
        if isinstance(address, Sym):
            if size != self.address_size:
                raise NotStatic(f"a {size}-byte read through a register-relative address")
            return Sym(address)
        data = self.cpu.read_memory(address, size)
        return int.from_bytes(data, "little" if self.num.little else "big")


class SymbolicCpu:
    """A :class:`~kpsdk.binfmt.dwarf.cpu.Cpu` whose registers read as :class:`Sym` of
    themselves and whose memory cannot be read: for :func:`evaluate` statically."""

    def read_register(self, name: str) -> int:
        return Sym(name)  # type: ignore[return-value]

    def read_memory(self, address: int, size: int) -> bytes:
        raise NotStatic("memory read at a fixed address")


def _add(a: Number, b: Number, mask: int) -> Number:
    if isinstance(a, float) or isinstance(b, float):
        return _float_binary("plus", a, b)
    if isinstance(a, Sym) and isinstance(b, int):
        return Sym(a.base, a.offset + b)
    if isinstance(b, Sym) and isinstance(a, int):
        return Sym(b.base, b.offset + a)
    if isinstance(a, Sym) or isinstance(b, Sym):
        raise NotStatic("the sum of two registers")
    return (a + b) & mask


def _int(value: Number, what: str) -> int:
    if isinstance(value, Sym):
        raise NotStatic(what)
    if isinstance(value, float):
        raise _Unavailable(f"{what}: an integer operation on a floating-point value")
    return value


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


_CONST_SIZES = {0x08: (1, False), 0x09: (1, True), 0x0A: (2, False), 0x0B: (2, True), 0x0C: (4, False),
                0x0D: (4, True), 0x0E: (8, False), 0x0F: (8, True)}
_BINARY = {0x1A: "and", 0x1B: "div", 0x1C: "minus", 0x1D: "mod", 0x1E: "mul", 0x21: "or", 0x22: "plus",
           0x24: "shl", 0x25: "shr", 0x26: "shra", 0x27: "xor", 0x29: "eq", 0x2A: "ge", 0x2B: "gt", 0x2C: "le",
           0x2D: "lt", 0x2E: "ne"}


def evaluate(expr: bytes, ctx: Context, stack: list[Number] | None = None) -> Location:
    """Where ``expr`` (a location description) says the value is, for ``ctx``'s CPU.

    :raises NotStatic: only for a :class:`SymbolicCpu`, where the form is not static.
    """
    try:
        return _run(expr, ctx, list(stack or ()))
    except _Unavailable as e:
        return OptimizedOut(str(e))


def _run(expr: bytes, ctx: Context, stack: list[Number]) -> Location:
    bits = 8 * ctx.address_size
    mask = (1 << bits) - 1
    num = ctx.num
    current: Location | None = None
    pieces: list[Piece] = []
    pos, end = 0, len(expr)

    def pop() -> Number:
        if not stack:
            raise _Unavailable("DWARF expression pops an empty stack")
        return stack.pop()

    while pos < end:
        op = expr[pos]
        pos += 1
        if 0x30 <= op <= 0x4F:                          # DW_OP_lit0..31
            stack.append(op - 0x30)
        elif 0x50 <= op <= 0x6F:                        # DW_OP_reg0..31
            current = InRegister(ctx.reg_name(op - 0x50))
        elif 0x70 <= op <= 0x8F:                        # DW_OP_breg0..31
            offset, pos = sleb(expr, pos)
            stack.append(_add(ctx.register(op - 0x70), offset, mask))
        elif op == 0x90:                                # regx
            reg, pos = uleb(expr, pos)
            current = InRegister(ctx.reg_name(reg))
        elif op == 0x92:                                # bregx
            reg, pos = uleb(expr, pos)
            offset, pos = sleb(expr, pos)
            stack.append(_add(ctx.register(reg), offset, mask))
        elif op == 0x91:                                # fbreg
            offset, pos = sleb(expr, pos)
            if ctx.frame_base is None:
                raise _Unavailable("DW_OP_fbreg without a frame base")
            stack.append(_add(ctx.frame_base(), offset, mask))
        elif op == 0x9C:                                # call_frame_cfa
            if ctx.cfa is None:
                raise _Unavailable("no call frame information for the CFA here")
            stack.append(ctx.cfa())
        elif op == 0x03:                                # addr
            stack.append((num.read(expr, pos, ctx.address_size) + ctx.bias) & mask)
            pos += ctx.address_size
        elif op in (0xA1, 0xA2, 0xFB, 0xFC):            # addrx, constx (and their GNU forms)
            index, pos = uleb(expr, pos)
            if ctx.address_index is None:
                raise _Unavailable("DW_OP_addrx without .debug_addr")
            stack.append((ctx.address_index(index) + (ctx.bias if op in (0xA1, 0xFB) else 0)) & mask)
        elif op in _CONST_SIZES:
            size, signed = _CONST_SIZES[op]
            value = num.read(expr, pos, size)
            pos += size
            stack.append((_signed(value, 8 * size) if signed else value) & mask)
        elif op == 0x10:                                # constu
            value, pos = uleb(expr, pos)
            stack.append(value & mask)
        elif op == 0x11:                                # consts
            value, pos = sleb(expr, pos)
            stack.append(value & mask)
        elif op == 0x12:                                # dup
            stack.append(stack[-1] if stack else pop())
        elif op == 0x13:                                # drop
            pop()
        elif op == 0x14:                                # over
            stack.append(stack[-2])
        elif op == 0x15:                                # pick
            stack.append(stack[-1 - expr[pos]])
            pos += 1
        elif op == 0x16:                                # swap
            stack[-1], stack[-2] = stack[-2], stack[-1]
        elif op == 0x17:                                # rot
            stack[-1], stack[-2], stack[-3] = stack[-2], stack[-3], stack[-1]
        elif op == 0x06:                                # deref
            stack.append(ctx.read(pop(), ctx.address_size))
        elif op == 0x94:                                # deref_size
            size = expr[pos]
            pos += 1
            stack.append(ctx.read(pop(), size))
        elif op == 0x23:                                # plus_uconst
            value, pos = uleb(expr, pos)
            stack.append(_add(pop(), value, mask))
        elif op in (0x19, 0x1F, 0x20):                  # abs, neg, not
            a = _int(pop(), "arithmetic on a register")
            if op == 0x19:
                stack.append(abs(_signed(a, bits)) & mask)
            elif op == 0x1F:
                stack.append(-a & mask)
            else:
                stack.append(~a & mask)
        elif op in _BINARY:
            rhs, lhs = pop(), pop()
            if isinstance(lhs, float) or isinstance(rhs, float):
                stack.append(_float_binary(_BINARY[op], lhs, rhs))
            elif op == 0x22:
                stack.append(_add(lhs, rhs, mask))
            elif op == 0x1C and isinstance(lhs, Sym) and isinstance(rhs, int):
                stack.append(Sym(lhs.base, lhs.offset - rhs))
            else:
                a, b = _int(lhs, "arithmetic on a register"), _int(rhs, "arithmetic on a register")
                # a typed operation (deref_type, convert) can push a value wider than an address
                # (an 8-byte integer on a 32-bit CPU): the arithmetic keeps that width
                width = 64 if (a > mask or b > mask) and bits < 64 else bits
                stack.append(_binary(_BINARY[op], a, b, width, (1 << width) - 1))
        elif op == 0x2F:                                # skip
            delta = _signed(num.read(expr, pos, 2), 16)
            pos += 2 + delta
        elif op == 0x28:                                # bra
            delta = _signed(num.read(expr, pos, 2), 16)
            pos += 2
            if _int(pop(), "a branch on a register"):
                pos += delta
        elif op == 0x96:                                # nop
            pass
        elif op == 0x9F:                                # stack_value
            current = Computed(pop())
        elif op == 0x9E:                                # implicit_value
            size, pos = uleb(expr, pos)
            current = Implicit(expr[pos:pos + size])
            pos += size
        elif op in (0xA0, 0xF2):                        # implicit_pointer: a DIE reference and an offset
            pos += ctx.offset_size
            _, pos = sleb(expr, pos)
            current = OptimizedOut("a pointer to an object the compiler did not keep in memory (implicit pointer)")
        elif op in (0x93, 0x9D):                        # piece, bit_piece
            if op == 0x93:
                size, pos = uleb(expr, pos)
                nbits, boff = 8 * size, 0
            else:
                nbits, pos = uleb(expr, pos)
                boff, pos = uleb(expr, pos)
            loc = current if current is not None else (InMemory(as_address(pop())) if stack else None)
            pieces.append(Piece(None if isinstance(loc, OptimizedOut) else loc, nbits, boff))
            current = None
        elif op in (0xA3, 0xF3):                        # entry_value
            size, pos = uleb(expr, pos)
            inner = expr[pos:pos + size]
            pos += size
            if ctx.entry_value is None:
                raise _Unavailable("the value at function entry is not known here")
            stack.append(ctx.entry_value(inner))
        elif op in (0xA5, 0xF5):                        # regval_type
            reg, pos = uleb(expr, pos)
            _, pos = uleb(expr, pos)
            stack.append(ctx.register(reg))
        elif op in (0xA4, 0xF4):                        # const_type
            die, pos = uleb(expr, pos)
            size = expr[pos]
            raw = int.from_bytes(expr[pos + 1:pos + 1 + size], "little" if num.little else "big")
            pos += 1 + size
            if ctx.base_type is not None and ctx.base_type(die)[1] == "float":
                stack.append(_convert(raw, size, "float", reinterpret=True, ctx=ctx))
            else:
                stack.append(raw)
        elif op in (0xA6, 0xF6):                        # deref_type
            size = expr[pos]
            _, pos = uleb(expr, pos + 1)
            stack.append(ctx.read(pop(), size))
        elif op in (0xA8, 0xF7, 0xA9, 0xF9):            # convert, reinterpret
            die, pos = uleb(expr, pos)
            if die and ctx.base_type is not None:
                stack.append(_convert(pop(), *ctx.base_type(die), reinterpret=op in (0xA9, 0xF9), ctx=ctx))
        elif op in (0xE0, 0x9B):                        # GNU_push_tls_address, form_tls_address
            raise _Unavailable("a thread-local variable (TLS addresses are not resolved)")
        elif op == 0xF0:                                # GNU_uninit
            pass
        elif op == 0xFA:                                # GNU_parameter_ref
            raise _Unavailable("a parameter passed by the caller's call site (DW_OP_GNU_parameter_ref)")
        else:
            raise _Unavailable(f"DWARF operation {op:#x} is not supported")
        if current is not None and pos < end and expr[pos] not in (0x93, 0x9D):
            if isinstance(current, InRegister) or isinstance(current, Implicit | Computed):
                raise _Unavailable("a DWARF location description continues after its register or value")
    if pieces:
        return Pieces(tuple(pieces))
    if current is not None:
        return current
    if stack:
        return InMemory(as_address(stack[-1]))
    return OptimizedOut()


def _convert(value: Number, size: int, encoding: str, *, reinterpret: bool, ctx: Context) -> Number:
    """``DW_OP_convert``/``reinterpret`` (and ``const_type``'s bytes) to a base type of ``size``
    bytes and ``encoding``."""
    if isinstance(value, Sym):
        raise NotStatic("a conversion of a register")
    if encoding == "float":
        if isinstance(value, float):
            return value
        if reinterpret:
            raw = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")
            if size in (4, 8):
                return float(struct.unpack("<f" if size == 4 else "<d", raw)[0])
            raise _Unavailable(f"a {size}-byte floating-point value")
        return float(value)
    if isinstance(value, float):
        value = int(value)
    value &= (1 << 8 * size) - 1
    if encoding == "signed":
        value = _signed(value, 8 * size)
    width = 8 * max(size, ctx.address_size)  # the type's width, when wider than an address
    return value & ((1 << width) - 1)


def _float_binary(name: str, a: Number, b: Number) -> Number:
    if isinstance(a, Sym) or isinstance(b, Sym):
        raise NotStatic("floating-point arithmetic on a register")
    x, y = float(a), float(b)
    ops = {"plus": x + y, "minus": x - y, "mul": x * y}
    if name in ops:
        return ops[name]
    if name == "div":
        if y == 0:
            raise _Unavailable("DWARF expression divides by zero")
        return x / y
    compare = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}
    if name in compare:
        return int(compare[name])
    raise _Unavailable(f"DW_OP_{name} on a floating-point value")


def _binary(name: str, a: int, b: int, bits: int, mask: int) -> int:
    sa, sb = _signed(a, bits), _signed(b, bits)
    if name == "and":
        return a & b
    if name == "or":
        return a | b
    if name == "xor":
        return a ^ b
    if name == "minus":
        return (a - b) & mask
    if name == "mul":
        return (a * b) & mask
    if name in ("div", "mod"):
        if b == 0:
            raise _Unavailable("DWARF expression divides by zero")
        if name == "div":
            q = abs(sa) // abs(sb)
            return (q if (sa < 0) == (sb < 0) else -q) & mask
        return a % b
    if name == "shl":
        return (a << b) & mask if b < bits else 0
    if name == "shr":
        return a >> b if b < bits else 0
    if name == "shra":
        return (sa >> min(b, bits - 1)) & mask
    compare = {"eq": sa == sb, "ne": sa != sb, "lt": sa < sb, "le": sa <= sb, "gt": sa > sb, "ge": sa >= sb}
    return int(compare[name])
