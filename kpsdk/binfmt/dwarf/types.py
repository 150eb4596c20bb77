"""C types from DWARF: base types, pointers, structs, unions and classes with their members
and bitfields, arrays, enums, typedefs and qualifiers.

A :class:`CType` wraps one type DIE (read through pyelftools) and builds what is asked of it
on first use: a struct that points to itself is no problem, its members are read when a path
goes through them.  Types are shared per DIE by a :class:`TypeTable`, so two variables of one
type get the same object.

Bitfields come in two forms: DWARF 4's ``DW_AT_data_bit_offset`` (bits from the start of the
containing struct) and DWARF 2's ``DW_AT_bit_offset`` with ``DW_AT_byte_size`` (bits from the
most significant bit of a storage unit at ``DW_AT_data_member_location``).  Both become
:attr:`Member.bit_offset` in the first form, so reading a field is one rule
(:func:`kpsdk.binfmt.dwarf.values`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

_KINDS = {
    "DW_TAG_base_type": "base", "DW_TAG_pointer_type": "pointer", "DW_TAG_structure_type": "struct",
    "DW_TAG_union_type": "union", "DW_TAG_class_type": "class", "DW_TAG_array_type": "array",
    "DW_TAG_enumeration_type": "enum", "DW_TAG_typedef": "typedef", "DW_TAG_const_type": "const",
    "DW_TAG_volatile_type": "volatile", "DW_TAG_restrict_type": "restrict", "DW_TAG_atomic_type": "atomic",
    "DW_TAG_subroutine_type": "function", "DW_TAG_reference_type": "reference",
    "DW_TAG_rvalue_reference_type": "rvalue_reference", "DW_TAG_unspecified_type": "unspecified",
    "DW_TAG_ptr_to_member_type": "ptr_to_member", "DW_TAG_subrange_type": "subrange",
}
_QUALIFIERS = ("const", "volatile", "restrict", "atomic")
_ENCODINGS = {1: "address", 2: "bool", 3: "complex", 4: "float", 5: "signed", 6: "signed_char", 7: "unsigned",
              8: "unsigned_char", 0x10: "UTF"}


@dataclass(frozen=True)
class Member:
    """A member of a struct, union or class: ``offset`` in bytes from the start of the object;
    for a bitfield ``bit_size`` and ``bit_offset`` (bits from the object's start, in memory
    order: DWARF 4's ``DW_AT_data_bit_offset``), else both 0."""

    name: str
    type: CType
    offset: int
    bit_size: int = 0
    bit_offset: int = 0


class CType:
    """One C type, read from its DIE when first asked (``void`` is ``CType(None, table)``)."""

    def __init__(self, die: DIE | None, table: TypeTable) -> None:
        self.die = die
        self.table = table

    def __repr__(self) -> str:
        return f"<CType {self.c_name!r}>"

    def _attr(self, name: str, default: int | str | None = None) -> int | str | None:
        if self.die is None:
            return default
        attr = self.die.attributes.get(name)
        if attr is None:
            return default
        value = attr.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    @cached_property
    def kind(self) -> str:
        """``base``, ``pointer``, ``struct``, ``union``, ``class``, ``array``, ``enum``,
        ``typedef``, ``const``, ``volatile``, ``restrict``, ``atomic``, ``function``,
        ``reference``, ``void``..."""
        if self.die is None:
            return "void"
        tag = str(self.die.tag)
        return _KINDS.get(tag, tag.removeprefix("DW_TAG_"))

    @cached_property
    def name(self) -> str:
        """The type's own name (``int``, ``buffer`` for ``struct buffer``, a typedef's), ``""``."""
        return str(self._attr("DW_AT_name", "") or "")

    @cached_property
    def target(self) -> CType | None:
        """What a pointer points to, a typedef or qualifier names, an array holds, an enum is
        stored as; None where the type has none (``void *``'s target is the void type)."""
        if self.die is None or "DW_AT_type" not in self.die.attributes:
            return self.table.void if self.kind in ("pointer", *_QUALIFIERS, "typedef", "reference") else None
        return self.table.of(self.die.get_DIE_from_attribute("DW_AT_type"))

    def strip(self) -> CType:
        """This type through its typedefs and qualifiers: what the bytes are."""
        t: CType = self
        for _ in range(64):
            if t.kind not in ("typedef", *_QUALIFIERS) or t.target is None:
                return t
            t = t.target
        return t

    @cached_property
    def size(self) -> int | None:
        """Its size in bytes (None: unknown, as for ``void`` or an incomplete struct)."""
        own = self._attr("DW_AT_byte_size")
        if isinstance(own, int):
            return own
        kind = self.kind
        if kind in ("pointer", "reference", "rvalue_reference"):
            return self.table.address_size
        if kind in ("typedef", *_QUALIFIERS, "enum") and self.target is not None:
            return self.target.size
        if kind == "array" and self.target is not None and self.target.size is not None:
            count = 1
            for n in self.dims:
                if n is None:
                    return None
                count *= n
            return count * self.target.size
        return None

    @cached_property
    def encoding(self) -> str:
        """A base type's ``DW_ATE_*`` encoding: ``signed``, ``unsigned``, ``float``, ``bool``,
        ``signed_char``, ``unsigned_char``...; an enum's is its underlying type's (else
        ``unsigned``); ``""`` for other kinds."""
        if self.kind == "base":
            return _ENCODINGS.get(int(self._attr("DW_AT_encoding", 0) or 0), "")
        if self.kind == "enum":
            under = self.target
            return under.strip().encoding if under is not None else "unsigned"
        return ""

    @property
    def signed(self) -> bool:
        return self.encoding in ("signed", "signed_char")

    @cached_property
    def dims(self) -> tuple[int | None, ...]:
        """An array's element counts, outermost first (None: unknown, ``int a[]``)."""
        if self.kind != "array" or self.die is None:
            return ()
        out: list[int | None] = []
        for child in self.die.iter_children():
            if child.tag != "DW_TAG_subrange_type":
                continue
            count = child.attributes.get("DW_AT_count")
            upper = child.attributes.get("DW_AT_upper_bound")
            lower = child.attributes.get("DW_AT_lower_bound")
            if count is not None and isinstance(count.value, int):
                out.append(count.value)
            elif upper is not None and isinstance(upper.value, int) and upper.form != "DW_FORM_exprloc":
                base = lower.value if lower is not None and isinstance(lower.value, int) else 0
                out.append(upper.value - base + 1)
            else:
                out.append(None)
        return tuple(out)

    @cached_property
    def element(self) -> CType | None:
        """An array's element after its first dimension (``int[2][3]`` -> ``int[3]``), or a
        pointer's target."""
        if self.kind == "pointer":
            return self.target
        if self.kind != "array":
            return None
        if len(self.dims) <= 1:
            return self.target
        return _SubArray(self, 1)

    @cached_property
    def members(self) -> tuple[Member, ...]:
        """A struct's, union's or class's data members, in order (anonymous ones included, with
        the name ``""``)."""
        if self.kind not in ("struct", "union", "class") or self.die is None:
            return ()
        out = []
        little = self.table.little_endian
        for child in self.die.iter_children():
            if child.tag != "DW_TAG_member" or "DW_AT_external" in child.attributes:
                continue
            mtype = self.table.of(child.get_DIE_from_attribute("DW_AT_type")) if "DW_AT_type" in child.attributes \
                else self.table.void
            name = child.attributes["DW_AT_name"].value.decode("utf-8", "replace") \
                if "DW_AT_name" in child.attributes else ""
            loc = child.attributes.get("DW_AT_data_member_location")
            offset = loc.value if loc is not None and isinstance(loc.value, int) else _constant_expr(loc)
            bit_size = child.attributes["DW_AT_bit_size"].value if "DW_AT_bit_size" in child.attributes else 0
            bit_offset = 0
            if bit_size:
                if "DW_AT_data_bit_offset" in child.attributes:
                    bit_offset = child.attributes["DW_AT_data_bit_offset"].value
                    offset = bit_offset // 8 if loc is None else offset
                elif "DW_AT_bit_offset" in child.attributes:
                    unit = child.attributes["DW_AT_byte_size"].value if "DW_AT_byte_size" in child.attributes \
                        else (mtype.size or 0)
                    from_msb = child.attributes["DW_AT_bit_offset"].value
                    if from_msb < 0:
                        from_msb += 1 << 64
                    bit_offset = 8 * offset + (8 * unit - from_msb - bit_size if little else from_msb)
                else:
                    bit_offset = 8 * offset
            out.append(Member(name, mtype, offset, bit_size, bit_offset))
        return tuple(out)

    def member(self, name: str) -> Member | None:
        """The member called ``name``, looking into anonymous structs and unions (their
        members' offsets made relative to this type)."""
        for m in self.members:
            if m.name == name:
                return m
            if not m.name:
                inner = m.type.strip().member(name)
                if inner is not None:
                    return Member(inner.name, inner.type, m.offset + inner.offset, inner.bit_size,
                                  inner.bit_offset + 8 * m.offset if inner.bit_size else 0)
        return None

    def member_names(self) -> list[str]:
        """The names a path may use after ``.``/``->`` (anonymous members' own included)."""
        out: list[str] = []
        for m in self.members:
            out.extend([m.name] if m.name else m.type.strip().member_names())
        return out

    @cached_property
    def enumerators(self) -> tuple[tuple[str, int], ...]:
        """An enum's (name, value) pairs, in order."""
        if self.kind != "enum" or self.die is None:
            return ()
        out = []
        for child in self.die.iter_children():
            if child.tag == "DW_TAG_enumerator":
                out.append((child.attributes["DW_AT_name"].value.decode("utf-8", "replace"),
                            int(child.attributes["DW_AT_const_value"].value)))
        return tuple(out)

    # -- names ------------------------------------------------------------------------------------

    @cached_property
    def c_name(self) -> str:
        """The type as C writes it (gdb's spelling): ``const char *``, ``struct buffer *``,
        ``int [2][3]``, ``unsigned int``."""
        return _declare(self, "").strip()

    @cached_property
    def perf_name(self) -> str:
        """The type as ``perf probe -V`` prints it: qualifiers dropped, ``*`` glued to the
        name (``char*``, ``struct buffer*``), an array as a pointer to its element (``char*``),
        and ``(unknown_type)`` for anything reaching ``void`` (``void *`` included), whose DIE
        names no type."""
        name = self._perf_name()
        return name if name is not None else "(unknown_type)"

    def _perf_name(self) -> str | None:
        kind = self.kind
        if kind in _QUALIFIERS or kind == "pointer" or kind == "array":
            if self.die is None or "DW_AT_type" not in self.die.attributes or self.target is None:
                return None
            inner = self.target._perf_name()
            if inner is None:
                return None
            return inner if kind in _QUALIFIERS else f"{inner}*"
        if kind in ("struct", "union", "enum", "class"):
            return f"{kind} {self.name}" if self.name else None
        if kind == "function":
            return "(function_type)"
        return self.name or None


class _SubArray(CType):
    """``int[2][3]`` indexed once: an ``int[3]`` made from the same DIE's later dimensions."""

    def __init__(self, array: CType, skip: int) -> None:
        super().__init__(array.die, array.table)
        self._dims = array.dims[skip:]

    @cached_property
    def dims(self) -> tuple[int | None, ...]:
        return self._dims

    @cached_property
    def element(self) -> CType | None:
        if len(self._dims) <= 1:
            return self.target
        return _SubArray(self, 1)


def _constant_expr(attr: object) -> int:
    """A ``DW_AT_data_member_location`` given as ``DW_OP_plus_uconst N`` (DWARF 2)."""
    value = getattr(attr, "value", None)
    if isinstance(value, list) and len(value) >= 2 and value[0] == 0x23:
        out, shift = 0, 0
        for byte in value[1:]:
            out |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        return out
    return 0


def _declare(t: CType, inner: str) -> str:
    """C's declarator syntax: the type ``t`` around ``inner`` (a name or an abstract declarator)."""
    kind = t.kind
    if kind == "pointer" or kind in ("reference", "rvalue_reference"):
        mark = {"pointer": "*", "reference": "&", "rvalue_reference": "&&"}[kind]
        target = t.target
        if target is not None and target.kind in ("array", "function"):
            return _declare(target, f"({mark}{inner})")
        return _declare(target if target is not None else t.table.void, f" {mark}{inner.lstrip()}"
                        if not inner.startswith(" ") else f" {mark}{inner.strip()}")
    if kind in _QUALIFIERS:
        target = t.target if t.target is not None else t.table.void
        if target.kind in ("pointer",):
            return _declare(target, f" {kind}{inner}")
        return f"{kind} {_declare(target, inner).strip()}"
    if kind == "array":
        dims = "".join(f"[{n if n is not None else ''}]" for n in t.dims)
        body = inner.strip()
        target = t.target if t.target is not None else t.table.void
        return _declare(target, f"{' ' + body if body else ' '}{dims}")
    if kind == "function":
        ret = t.target if t.target is not None else t.table.void
        return _declare(ret, f"{inner}(void)" if inner else " (void)")
    if kind in ("struct", "union", "enum", "class"):
        base = f"{kind} {t.name}" if t.name else f"{kind} {{...}}"
    else:
        base = t.name or ("void" if kind == "void" else "?")
    return f"{base}{inner}"


class TypeTable:
    """The :class:`CType` of each type DIE, made once."""

    def __init__(self, address_size: int, little_endian: bool) -> None:
        self.address_size = address_size
        self.little_endian = little_endian
        self._types: dict[int, CType] = {}
        self.void = CType(None, self)

    def of(self, die: DIE) -> CType:
        """The type ``die`` describes."""
        t = self._types.get(die.offset)
        if t is None:
            t = self._types[die.offset] = CType(die, self)
        return t
