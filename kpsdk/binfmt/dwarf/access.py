"""Variable paths: ``buf->size``, ``argv[1]``, ``s.a.b``, ``*p``, parsed and followed.

The grammar is C's postfix expressions on one variable, as ``perf probe`` and bpftrace take
them: a name, then any of ``.member``, ``->member`` and ``[index]``, the whole optionally
under one or more ``*``.  :func:`parse` makes the steps (a :class:`MemberPathError` with the
column of anything else), :func:`follow` applies them to a typed location (an
:class:`~kpsdk.binfmt.dwarf.values.Object`) against a context, checking each against the
type as it goes (``.`` on a struct, ``->`` on a pointer to one, ``[]`` on an array or a
pointer, ``*`` on a pointer), and returns the typed location of the result.

Following a pointer reads it; against a :class:`~kpsdk.binfmt.dwarf.expr.SymbolicCpu` the
read stays symbolic (:class:`~kpsdk.binfmt.dwarf.expr.Sym`), so the same steps give a
fetch-argument form for a probe definition (``+8(%di)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from kpsdk.binfmt.dwarf.expr import Computed, Context, Implicit, InMemory, InRegister, Location, Pieces, Sym, as_address
from kpsdk.binfmt.dwarf.values import Object, location_bytes, sub_location
from kpsdk.errors import MemberPathError, OptimizedOutError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INDEX = re.compile(r"\[\s*(-?(?:0[xX][0-9a-fA-F]+|\d+))\s*\]")


@dataclass(frozen=True)
class Step:
    """One step of a path: ``kind`` is ``member`` (``.name``), ``arrow`` (``->name``),
    ``index`` (``[n]``) or ``deref`` (``*``); ``column`` where it starts in the path."""

    kind: str
    name: str = ""
    index: int = 0
    column: int = 0


def parse(path: str) -> tuple[str, list[Step]]:
    """``(variable name, steps)`` of ``path``; :class:`MemberPathError` where it does not parse."""
    pos = 0
    derefs = []
    text = path.strip()
    while pos < len(text) and text[pos] in "* ":
        if text[pos] == "*":
            derefs.append(Step("deref", column=pos))
        pos += 1
    m = _NAME.match(text, pos)
    if m is None:
        raise MemberPathError(path, pos, "a variable name must come here")
    name = m.group()
    pos = m.end()
    steps: list[Step] = []
    while pos < len(text):
        if text.startswith("->", pos) or text[pos] == ".":
            kind = "arrow" if text[pos] == "-" else "member"
            start = pos
            pos += 2 if kind == "arrow" else 1
            m = _NAME.match(text, pos)
            if m is None:
                raise MemberPathError(path, pos, "a member name must follow " + ("'->'" if kind == "arrow" else "'.'"))
            steps.append(Step(kind, m.group(), column=start))
            pos = m.end()
        elif text[pos] == "[":
            m = _INDEX.match(text, pos)
            if m is None:
                raise MemberPathError(path, pos, "an index is a number in brackets: [1], [0x10]")
            steps.append(Step("index", index=int(m.group(1), 0), column=pos))
            pos = m.end()
        else:
            raise MemberPathError(path, pos, f"unexpected {text[pos]!r}: a path continues with '.', '->' or '['")
    return name, steps + list(reversed(derefs))


def _at_offset(loc: Location, offset: int, size: int, ctx: Context, obj: Object) -> Location:
    """The part of a location ``offset`` bytes in (a register's or a computed value's bytes
    are taken out and cut)."""
    if isinstance(loc, InMemory):
        address = loc.address
        return InMemory(Sym(address.base, address.offset + offset) if isinstance(address, Sym) else address + offset)
    if isinstance(loc, Pieces):
        part = sub_location(loc, offset, size)
        if part is not None:
            return part
    if isinstance(loc, InRegister | Computed | Implicit | Pieces):
        whole = obj.type.size or (offset + size)
        data = location_bytes(loc, whole, ctx, obj.name, obj.where)
        return Implicit(data[offset:offset + size])
    return loc


def _pointer(obj: Object, ctx: Context) -> int | Sym:
    """The address a pointer object holds (symbolic where the context is)."""
    loc = obj.location
    size = ctx.address_size
    if isinstance(loc, InRegister):
        try:
            value = ctx.cpu.read_register(loc.register)
        except LookupError:
            raise OptimizedOutError(obj.name, obj.where, f"register {loc.register} is not available") from None
        return value if isinstance(value, Sym) else value & ((1 << 8 * size) - 1)
    if isinstance(loc, Computed):
        return as_address(loc.value)
    if isinstance(loc, InMemory):
        return as_address(ctx.read(loc.address, size))
    data = location_bytes(loc, size, ctx, obj.name, obj.where)
    return int.from_bytes(data, "little" if ctx.num.little else "big")


def follow(obj: Object, steps: list[Step], ctx: Context, path: str) -> Object:
    """The typed location ``steps`` lead to from ``obj``."""
    for step in steps:
        t = obj.type.strip()
        if step.kind in ("member", "arrow"):
            if step.kind == "arrow":
                if t.kind != "pointer" or t.target is None:
                    raise MemberPathError(path, step.column, f"'->' needs a pointer, and {obj.name or 'this'} is "
                                                             f"{obj.type.c_name!r}; use '.'")
                obj = Object(InMemory(_pointer(obj, ctx)), t.target, obj.name, where=obj.where)
                t = t.target.strip()
            elif t.kind == "pointer":
                raise MemberPathError(path, step.column, f"{obj.name or 'this'} is a pointer "
                                                         f"({obj.type.c_name!r}); use '->'")
            if t.kind not in ("struct", "union", "class"):
                raise MemberPathError(path, step.column, f"{obj.type.c_name!r} has no members")
            member = t.member(step.name)
            if member is None:
                raise MemberPathError(path, step.column + (2 if step.kind == "arrow" else 1),
                                      f"{t.c_name!r} has no member {step.name!r}", t.member_names())
            name = f"{obj.name}{'->' if step.kind == 'arrow' else '.'}{step.name}"
            if member.bit_size:
                start = member.bit_offset // 8
                span = (member.bit_offset % 8 + member.bit_size + 7) // 8
                loc = _at_offset(obj.location, start, span, ctx, obj)
                obj = Object(loc, member.type, name, member.bit_size, member.bit_offset - 8 * start, obj.where)
            else:
                size = member.type.size or 0
                obj = Object(_at_offset(obj.location, member.offset, size, ctx, obj), member.type, name,
                             where=obj.where)
        elif step.kind == "index":
            elem = t.element
            if t.kind not in ("array", "pointer") or elem is None:
                raise MemberPathError(path, step.column, f"{obj.type.c_name!r} is neither an array nor a pointer")
            elem_size = elem.size
            if elem_size is None:
                raise MemberPathError(path, step.column, f"{elem.c_name!r} has no size to index by")
            size = elem_size
            name = f"{obj.name}[{step.index}]"
            if t.kind == "pointer":
                base = _pointer(obj, ctx)
                offset = step.index * size
                address = Sym(base.base, base.offset + offset) if isinstance(base, Sym) else \
                    (base + offset) & ((1 << 8 * ctx.address_size) - 1)
                obj = Object(InMemory(address), elem, name, where=obj.where)
            else:
                count = t.dims[0] if t.dims else None
                if count is not None and not 0 <= step.index < count:
                    raise MemberPathError(path, step.column, f"index {step.index} is outside {t.c_name!r}")
                obj = Object(_at_offset(obj.location, step.index * size, size, ctx, obj), elem, name,
                             where=obj.where)
        else:  # deref
            if t.kind != "pointer" or t.target is None or t.target.kind == "void":
                raise MemberPathError(path, step.column, f"'*' needs a pointer to a type, and {obj.name or 'this'} "
                                                         f"is {obj.type.c_name!r}")
            obj = Object(InMemory(_pointer(obj, ctx)), t.target, f"*{obj.name}", where=obj.where)
    return replace(obj, name=path.strip() or obj.name)
