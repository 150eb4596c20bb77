"""Typed values: a variable's bytes, read from where its location says, shown as C shows them.

An :class:`Object` is a typed location (what a variable or a path like ``buf->size`` is at
a pc); :func:`object_bytes` reads its bytes through a :class:`~kpsdk.binfmt.dwarf.expr.Context`
(registers and memory of a CPU), and a :class:`Value` interprets them by type: an integer
with its C type and signedness, a pointer, a char (and a string on request), an enum by name,
a struct or union as a view of its members, an array of elements, a float.  ``str(value)``
is gdb's ``print`` format, which the tests compare against gdb itself.

A value the debug information does not have here raises
:class:`~kpsdk.errors.OptimizedOutError` when its bytes are asked for.
"""

from __future__ import annotations

import builtins
import struct
from dataclasses import dataclass
from typing import ClassVar

from kpsdk.binfmt.dwarf.expr import (
    Computed,
    Context,
    Implicit,
    InMemory,
    InRegister,
    Location,
    NotStatic,
    OptimizedOut,
    Piece,
    Pieces,
    Sym,
)
from kpsdk.binfmt.dwarf.types import CType, Member
from kpsdk.errors import OptimizedOutError

#: the most bytes :meth:`Value.string` reads
STRING_MAX = 4096


@dataclass(frozen=True)
class Object:
    """A typed location: ``type`` at ``location``; a bitfield is ``bit_size`` bits from
    ``bit_offset`` (memory order) of the bytes there.  ``name`` is what it is called (a
    variable's name, a path), for messages."""

    location: Location
    type: CType
    name: str = ""
    bit_size: int = 0
    bit_offset: int = 0
    where: str = ""


def _int_bytes(value: int, size: int, little: bool) -> bytes:
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little" if little else "big")


def location_bytes(location: Location, size: int, ctx: Context, name: str = "", where: str = "") -> bytes:
    """``size`` bytes of the value at ``location``."""
    little = ctx.num.little
    if isinstance(location, OptimizedOut):
        raise OptimizedOutError(name, where, location.why)
    if isinstance(location, InMemory):
        if isinstance(location.address, Sym):
            raise NotStatic("the bytes of a value at a register-relative address")
        return ctx.cpu.read_memory(location.address, size)
    if isinstance(location, InRegister):
        try:
            value = ctx.cpu.read_register(location.register)
        except LookupError:
            raise OptimizedOutError(name, where, f"register {location.register} is not available") from None
        if isinstance(value, Sym):
            raise NotStatic("the bytes of a register")
        return _int_bytes(value, size, little)
    if isinstance(location, Computed):
        if isinstance(location.value, Sym):
            raise NotStatic("the bytes of a computed value")
        if isinstance(location.value, float):
            if size not in (4, 8):
                raise OptimizedOutError(name, where, f"a floating-point value in {size} bytes")
            return struct.pack(("<" if little else ">") + ("f" if size == 4 else "d"), location.value)
        return _int_bytes(location.value, size, little)
    if isinstance(location, Implicit):
        return (location.data + bytes(size))[:size]
    out = b""
    for piece in location.parts:
        if len(out) >= size:
            break
        nbytes = (piece.bits + 7) // 8
        if piece.location is None:
            raise OptimizedOutError(name, where, f"part of it (bytes {len(out)}..{len(out) + nbytes - 1}) is "
                                                 "optimized out")
        skip = piece.bit_offset // 8
        out += location_bytes(piece.location, skip + nbytes, ctx, name, where)[skip:]
    return (out + bytes(size))[:size]


def sub_location(location: Location, offset: int, size: int) -> Location | None:
    """The part of a :class:`Pieces` location ``offset`` bytes in, ``size`` long, as a location
    of its own (the pieces it spans), without reading anything; None for other kinds."""
    if not isinstance(location, Pieces):
        return None
    parts: list[Piece] = []
    start_bits, end_bits = 8 * offset, 8 * (offset + size)
    pos = 0
    for piece in location.parts:
        lo, hi = max(pos, start_bits), min(pos + piece.bits, end_bits)
        if lo < hi:
            if piece.location is None:
                parts.append(Piece(None, hi - lo))
            elif isinstance(piece.location, InMemory) and isinstance(piece.location.address, int):
                parts.append(Piece(InMemory(piece.location.address + (lo - pos) // 8), hi - lo))
            else:
                parts.append(Piece(piece.location, hi - lo, piece.bit_offset + lo - pos))
        pos += piece.bits
    if len(parts) == 1 and parts[0].location is not None and not parts[0].bit_offset:
        return parts[0].location
    return Pieces(tuple(parts))


def object_bytes(obj: Object, ctx: Context) -> bytes:
    """The bytes of ``obj`` (its type's size; a bitfield's containing bytes)."""
    size = obj.type.size
    if obj.bit_size:
        end = obj.bit_offset + obj.bit_size
        size = (end + 7) // 8
    if size is None:
        raise OptimizedOutError(obj.name, obj.where, f"its type {obj.type.c_name!r} has no size")
    return location_bytes(obj.location, size, ctx, obj.name, obj.where)


def read_value(obj: Object, ctx: Context) -> Value:
    """The value of ``obj`` read through ``ctx``."""
    raw = object_bytes(obj, ctx)
    little = ctx.num.little
    if obj.bit_size:
        bits = int.from_bytes(raw, "little" if little else "big")
        if little:
            field = (bits >> obj.bit_offset) & ((1 << obj.bit_size) - 1)
        else:
            field = (bits >> (8 * len(raw) - obj.bit_offset - obj.bit_size)) & ((1 << obj.bit_size) - 1)
        if obj.type.strip().signed and field >> (obj.bit_size - 1):
            field -= 1 << obj.bit_size
        size = obj.type.size or 4
        return Value(obj.type, _int_bytes(field, size, little), little, ctx)
    return Value(obj.type, raw, little, ctx)


class Value:
    """A value of a C type: ``type``, its ``raw`` bytes, and the context to follow pointers."""

    __slots__ = ("type", "raw", "little", "ctx", "kind")

    def __init__(self, ctype: CType, raw: bytes, little: bool, ctx: Context | None = None,
                 kind: str | None = None) -> None:
        """``kind``: the type's stripped kind when the caller knows it (a hit's reads make one
        value per read: working it out each time was most of a read's cost)."""
        self.type = ctype
        self.raw = raw
        self.little = little
        self.ctx = ctx
        self.kind = kind if kind is not None else ctype.strip().kind

    def __repr__(self) -> str:
        return f"<Value {self.type.c_name}: {self}>"

    def __int__(self) -> int:
        """The integer (signed per the type), a pointer's address, an enum's value."""
        value = int.from_bytes(self.raw, "little" if self.little else "big")
        if self.type.strip().signed and self.raw and value >> (8 * len(self.raw) - 1):
            value -= 1 << (8 * len(self.raw))
        return value

    def __index__(self) -> int:
        return int(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            return int(self) == other
        if isinstance(other, Value):
            return self.raw == other.raw and self.type.c_name == other.type.c_name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.raw)

    @property
    def signed(self) -> bool:
        return self.type.strip().signed

    def float(self) -> float:
        """A ``float``/``double``'s value."""
        if len(self.raw) == 4:
            return float(struct.unpack("<f" if self.little else ">f", self.raw)[0])
        if len(self.raw) == 8:
            return float(struct.unpack("<d" if self.little else ">d", self.raw)[0])
        raise TypeError(f"{self.type.c_name} is not a float kpsdk decodes ({len(self.raw)} bytes)")

    def enum_name(self) -> str | None:
        """An enum's enumerator name for its value, None when no enumerator has it."""
        value = int(self)
        for name, v in self.type.strip().enumerators:
            if v == value or v == value & ((1 << (8 * len(self.raw))) - 1):
                return name
        return None

    def members(self) -> dict[str, Value]:
        """A struct's or union's members by name, as values (bitfields extracted)."""
        out = {}
        for m in self.type.strip().members:
            out[m.name or f"<anonymous@{m.offset}>"] = self.member_value(m.name, m)
        return out

    def member_value(self, name: str, member: Member | None = None) -> Value:
        """The member called ``name`` (``member``: already looked up)."""
        m = member if member is not None else self.type.strip().member(name)
        if m is None:
            raise KeyError(name)
        if m.bit_size:
            obj = Object(Implicit(self.raw), m.type, name, m.bit_size, m.bit_offset)
        else:
            obj = Object(Implicit(self.raw[m.offset:]), m.type, name)
        return read_value(obj, self.ctx or _bytes_only(self.little))

    def elements(self) -> list[Value]:
        """An array's elements (its first dimension)."""
        elem = self.type.strip().element
        if elem is None or not elem.size:
            return []
        n = len(self.raw) // elem.size
        return [Value(elem, self.raw[i * elem.size:(i + 1) * elem.size], self.little, self.ctx) for i in range(n)]

    def deref(self) -> Value:
        """What a pointer points to (read through the CPU it came from)."""
        target = self.type.strip().target
        if self.ctx is None or target is None or target.size is None:
            raise TypeError(f"cannot dereference {self.type.c_name}")
        data = self.ctx.cpu.read_memory(int(self), target.size)
        return Value(target, data, self.little, self.ctx)

    def string(self, limit: int = STRING_MAX) -> bytes:
        """The NUL-terminated string a ``char *`` points to, or a char array holds."""
        if self.kind == "array":
            return self.raw.split(b"\0", 1)[0]
        if self.ctx is None:
            raise TypeError("no memory to read the string from")
        out = b""
        address = int(self)
        while len(out) < limit:
            chunk = self.ctx.cpu.read_memory(address + len(out), min(64, limit - len(out)))
            if b"\0" in chunk:
                return out + chunk.split(b"\0", 1)[0]
            out += chunk
        return out

    def __str__(self) -> str:
        return format_value(self)


class ScalarValue(int):
    """A scalar C value (an integer, a char, a bool, an enum, a pointer) that is the int it holds:
    ``v + 1``, ``v == 5``, ``f"{v:#x}"`` work as on any int, and :class:`Value`'s reading is
    there too (``v.type``, ``v.string()`` for a ``char *``, ``v.deref()``, ``v.enum_name()``;
    ``str(v)`` is gdb's ``print``).  What ``regs.var()`` gives for a scalar: made by one C call
    at a hit (an int subclass per C type, :meth:`of`), where a :class:`Value` costs a Python
    ``__init__`` (bench/dwarfvars.py).  Signed types hold negative numbers."""

    __slots__ = ()
    type: ClassVar[CType]
    little: ClassVar[bool]
    ctx: ClassVar[Context | None]
    kind: ClassVar[str]
    size: ClassVar[int]

    @classmethod
    def of(cls, ctype: CType, little: bool, ctx: Context | None) -> builtins.type[ScalarValue]:
        """The class of the values of ``ctype`` (one per type and context, made once)."""
        return builtins.type(f"ScalarValue[{ctype.c_name}]", (cls,), {"__slots__": (), "type": ctype, "little": little,
                                                               "ctx": ctx, "kind": ctype.strip().kind,
                                                               "size": ctype.size or 0})

    @property
    def raw(self) -> bytes:
        return _int_bytes(int(self), self.size, self.little)

    @property
    def signed(self) -> bool:
        return self.type.strip().signed

    def value(self) -> Value:
        """This value as a :class:`Value` (the same bytes and type)."""
        return Value(self.type, self.raw, self.little, self.ctx, self.kind)

    def float(self) -> float:
        return self.value().float()

    def enum_name(self) -> str | None:
        return self.value().enum_name()

    def deref(self) -> Value:
        return self.value().deref()

    def string(self, limit: int = STRING_MAX) -> bytes:
        return self.value().string(limit)

    def __str__(self) -> str:
        return format_value(self.value())

    def __repr__(self) -> str:
        return f"<Value {self.type.c_name}: {self}>"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int.__format__(int(self), spec)


#: the kinds :class:`ScalarValue` holds (a float is a :class:`Value`: its bits are no int)
SCALAR_KINDS = frozenset(("base", "enum", "pointer"))


def _bytes_only(little: bool) -> Context:
    from kpsdk.binfmt.dwarf.expr import Context
    from kpsdk.binfmt.dwarf.primitives import Numbers

    class _NoCpu:
        def read_register(self, name: str) -> int:
            raise LookupError(name)

        def read_memory(self, address: int, size: int) -> bytes:
            raise LookupError("no memory")

    return Context(_NoCpu(), 8, Numbers(little), lambda n: None)


def _char(c: int) -> str:
    escapes = {0: "\\000", 7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 27: "\\033",
               39: "\\'", 92: "\\\\"}
    if c in escapes:
        return escapes[c]
    if 32 <= c < 127:
        return chr(c)
    return f"\\{c:03o}"


def format_value(v: Value) -> str:
    """gdb's ``print`` rendering of a value (scalars exactly; aggregates as ``{a = 1, b = 2}``)."""
    t = v.type.strip()
    kind = t.kind
    if kind == "base":
        enc = t.encoding
        if enc == "float":
            return repr(v.float()) if len(v.raw) in (4, 8) else "<float>"
        if enc == "bool":
            return "true" if int(v) else "false"
        if enc in ("signed_char", "unsigned_char") and len(v.raw) == 1:
            n = int(v)
            return f"{n} '{_char(n & 0xFF)}'"
        return str(int(v))
    if kind == "enum":
        return v.enum_name() or str(int(v))
    if kind in ("pointer", "reference", "rvalue_reference"):
        return hex(int.from_bytes(v.raw, "little" if v.little else "big"))
    if kind in ("struct", "union", "class"):
        return "{" + ", ".join(f"{k} = {format_value(x)}" for k, x in v.members().items()) + "}"
    if kind == "array":
        return "{" + ", ".join(format_value(e) for e in v.elements()) + "}"
    return v.raw.hex()
