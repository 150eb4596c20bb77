"""A minimal reader of BTF, the kernel's own type information (the ``.BTF`` section of vmlinux).

Debian's kernels are built with ``CONFIG_DEBUG_INFO_BTF``: the vmlinux inside ``vmlinuz``
carries a ``.BTF`` section (what the running kernel exports as ``/sys/kernel/btf/vmlinux``),
so a structure's layout is known without debug packages or the network.  kpsdk needs only
member offsets (``task_struct.pid``, ``task_struct.comm`` for the trace line's prefix), so
this reads only what that takes: the header, the string table, and the type records, each
skipped by the size its kind gives.

The format is the kernel's ``Documentation/bpf/btf.rst`` (``struct btf_header``,
``struct btf_type`` and the per-kind trailers of ``include/uapi/linux/btf.h``).  Every
offset is checked against the data before it is read: a damaged section is a
:class:`~kpsdk.errors.ImageFormatError`, never an ``IndexError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kpsdk.errors import ImageFormatError

MAGIC = 0xEB9F
#: BTF_KIND_* numbers (include/uapi/linux/btf.h)
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(1, 12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)
#: bytes after the 12-byte ``struct btf_type``: fixed, or per ``vlen`` entry
_FIXED = {INT: 4, ARRAY: 12, VAR: 4, DECL_TAG: 4}
_PER_ENTRY = {STRUCT: 12, UNION: 12, ENUM: 8, FUNC_PROTO: 8, DATASEC: 12, ENUM64: 12}
#: kinds that only qualify or name another type: followed to reach what they stand for
_QUALIFIERS = {TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG}


@dataclass(frozen=True)
class BtfType:
    """One type record: its kind, name (structs and unions only), ``size_or_type`` and where
    its trailer starts."""

    id: int
    kind: int
    name: str
    vlen: int
    kind_flag: bool
    size_or_type: int
    trailer: int


@dataclass(frozen=True)
class Member:
    """A struct member as a byte offset and its type (bitfields are refused: nothing kpsdk reads is one)."""

    name: str
    offset: int
    type: BtfType
    size: int


class Btf:
    """The types of one BTF blob, looked up by name."""

    def __init__(self, data: bytes, source: str = "<BTF>") -> None:
        self.source = source
        if len(data) < 24:
            raise ImageFormatError(source, f"BTF: {len(data)} bytes, shorter than its header")
        for endian in ("<", ">"):
            if struct.unpack_from(endian + "H", data)[0] == MAGIC:
                break
        else:
            raise ImageFormatError(source, f"BTF: bad magic {data[:2].hex()} (want eb9f)")
        self.e = endian
        hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(endian + "5I", data, 4)
        if hdr_len < 24 or hdr_len > len(data):
            raise ImageFormatError(source, f"BTF: header length {hdr_len} outside the data")
        base = hdr_len
        for what, off, length in (("types", type_off, type_len), ("strings", str_off, str_len)):
            if base + off + length > len(data):
                raise ImageFormatError(source, f"BTF: {what} ({off:#x}+{length:#x}) run past the data")
        self.data = data
        self.types_start, self.types_end = base + type_off, base + type_off + type_len
        self.strings = data[base + str_off: base + str_off + str_len]
        self._types: list[BtfType] | None = None
        self._by_name: dict[tuple[int, str], BtfType] = {}

    def string(self, off: int) -> str:
        if off >= len(self.strings):
            raise ImageFormatError(self.source, f"BTF: string offset {off:#x} outside the string table")
        end = self.strings.find(b"\0", off)
        return self.strings[off: end if end >= 0 else len(self.strings)].decode("ascii", "replace")

    @property
    def types(self) -> list[BtfType]:
        """Every type record, by id (index 0 is id 1: id 0 is ``void``)."""
        if self._types is None:
            out: list[BtfType] = []
            pos, e, data = self.types_start, self.e, self.data
            while pos < self.types_end:
                if pos + 12 > self.types_end:
                    raise ImageFormatError(self.source, f"BTF: type {len(out) + 1} cut short at {pos:#x}")
                name_off, info, size_or_type = struct.unpack_from(e + "3I", data, pos)
                kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
                if kind == 0 or kind > ENUM64:
                    raise ImageFormatError(self.source, f"BTF: type {len(out) + 1} has unknown kind {kind}")
                name = self.string(name_off) if name_off and kind in (STRUCT, UNION, FUNC) else ""
                out.append(BtfType(len(out) + 1, kind, name, vlen, bool(info >> 31), size_or_type, pos + 12))
                if name:
                    self._by_name.setdefault((kind, name), out[-1])
                pos += 12 + _FIXED.get(kind, 0) + _PER_ENTRY.get(kind, 0) * vlen
            if pos != self.types_end:
                raise ImageFormatError(self.source, "BTF: the last type runs past the type section")
            self._types = out
        return self._types

    def type(self, type_id: int) -> BtfType:
        types = self.types
        if not 1 <= type_id <= len(types):
            raise ImageFormatError(self.source, f"BTF: type id {type_id} outside 1..{len(types)}")
        return types[type_id - 1]

    def struct(self, name: str) -> BtfType | None:
        """The struct called ``name`` (with members: a forward declaration is not one)."""
        _ = self.types
        return self._by_name.get((STRUCT, name))

    def function(self, name: str) -> BtfType | None:
        """The ``FUNC_PROTO`` of the function called ``name`` (its first ``FUNC`` record, as the
        kernel's ``btf_find_func_proto`` finds it), or None when BTF has no such function."""
        _ = self.types
        func = self._by_name.get((FUNC, name))
        if func is None:
            return None
        proto = self.type(func.size_or_type)
        return proto if proto.kind == FUNC_PROTO else None

    def params(self, proto: BtfType) -> list[tuple[str, BtfType | None]]:
        """``(name, type)`` of a ``FUNC_PROTO``'s parameters (type None: the ``...`` of a
        variadic function, id 0)."""
        if proto.kind != FUNC_PROTO:
            raise ImageFormatError(self.source, f"BTF: type {proto.id} is not a function prototype")
        self._check_trailer(proto, 8 * proto.vlen)
        out: list[tuple[str, BtfType | None]] = []
        for i in range(proto.vlen):
            name_off, type_id = struct.unpack_from(self.e + "2I", self.data, proto.trailer + 8 * i)
            out.append((self.string(name_off) if name_off else "", self.type(type_id) if type_id else None))
        return out

    def raw_members(self, t: BtfType) -> list[tuple[str, int, int]]:
        """``(name, type id, offset field as stored)`` of a struct's or union's members: with
        ``kind_flag`` the offset field holds the bitfield size in its top byte."""
        if t.kind not in (STRUCT, UNION):
            raise ImageFormatError(self.source, f"BTF: type {t.id} is not a struct or union")
        self._check_trailer(t, 12 * t.vlen)
        out = []
        for i in range(t.vlen):
            name_off, type_id, offset = struct.unpack_from(self.e + "3I", self.data, t.trailer + 12 * i)
            out.append((self.string(name_off) if name_off else "", type_id, offset))
        return out

    def int_info(self, t: BtfType) -> tuple[int, int, int]:
        """An ``INT``'s ``(encoding, bit offset, bits)`` (``BTF_INT_ENCODING``, ``_OFFSET``, ``_BITS``)."""
        if t.kind != INT:
            raise ImageFormatError(self.source, f"BTF: type {t.id} is not an integer")
        self._check_trailer(t, 4)
        (data,) = struct.unpack_from(self.e + "I", self.data, t.trailer)
        return (data >> 24) & 0x0F, (data >> 16) & 0xFF, data & 0xFF

    def array_element(self, t: BtfType) -> BtfType:
        """An ``ARRAY``'s element type."""
        if t.kind != ARRAY:
            raise ImageFormatError(self.source, f"BTF: type {t.id} is not an array")
        self._check_trailer(t, 12)
        (elem,) = struct.unpack_from(self.e + "I", self.data, t.trailer)
        return self.type(elem)

    def _check_trailer(self, t: BtfType, size: int) -> None:
        if t.trailer + size > self.types_end:
            raise ImageFormatError(self.source, f"BTF: type {t.id}'s members run past the type section")

    def resolve(self, t: BtfType) -> BtfType:
        """``t`` without typedefs and qualifiers."""
        for _ in range(64):
            if t.kind not in _QUALIFIERS:
                return t
            t = self.type(t.size_or_type)
        raise ImageFormatError(self.source, f"BTF: type {t.id} is a chain of qualifiers 64 deep")

    def size(self, t: BtfType) -> int:
        t = self.resolve(t)
        if t.kind in (INT, STRUCT, UNION, ENUM, ENUM64, FLOAT, DATASEC):
            return t.size_or_type
        if t.kind == PTR:
            return self.pointer_size
        if t.kind == ARRAY:
            elem, _index, count = struct.unpack_from(self.e + "3I", self.data, t.trailer)
            return self.size(self.type(elem)) * count
        raise ImageFormatError(self.source, f"BTF: type {t.id} (kind {t.kind}) has no size")

    #: BTF does not record it: the arch's word size, set by whoever knows it
    pointer_size: int = 8

    def members(self, t: BtfType) -> list[tuple[str, int, BtfType]]:
        """``(name, bit offset, type)`` of a struct's or union's members ('' for anonymous ones)."""
        t = self.resolve(t)
        if t.kind not in (STRUCT, UNION):
            raise ImageFormatError(self.source, f"BTF: type {t.id} is not a struct or union")
        out = []
        for i in range(t.vlen):
            name_off, type_id, offset = struct.unpack_from(self.e + "3I", self.data, t.trailer + 12 * i)
            if t.kind_flag:
                if offset >> 24:
                    offset = -1  # a bitfield: no byte offset
                else:
                    offset &= 0xFFFFFF
            out.append((self.string(name_off) if name_off else "", offset, self.type(type_id)))
        return out

    def member(self, struct_name: str, path: str) -> Member:
        """``struct_name``'s member ``path`` (``comm``, ``a.b`` through nested and anonymous
        structs and unions) as a byte offset from the start of the struct."""
        t = self.struct(struct_name)
        if t is None:
            raise LookupError(f"BTF has no struct {struct_name}")
        offset = 0
        for part in path.split("."):
            found = _find_member(self, t, part)
            if found is None:
                raise LookupError(f"BTF: struct {struct_name} has no member {path}")
            bits, t = found
            if bits < 0 or bits % 8:
                raise LookupError(f"BTF: {struct_name}.{path} is a bitfield")
            offset += bits // 8
        return Member(path, offset, t, self.size(t))


def _find_member(btf: Btf, t: BtfType, name: str, depth: int = 0) -> tuple[int, BtfType] | None:
    """``(bit offset, type)`` of member ``name``, looking into anonymous members as C does."""
    if depth > 16:
        return None
    for member_name, bits, mtype in btf.members(t):
        if member_name == name:
            return bits, mtype
        if not member_name and btf.resolve(mtype).kind in (STRUCT, UNION) and bits >= 0:
            inner = _find_member(btf, mtype, name, depth + 1)
            if inner is not None:
                return bits + inner[0], inner[1]
    return None
