"""Compilation-unit headers, abbreviation tables and attribute forms, decoded for speed.

pyelftools parses a DIE at about 20,000 a second (measured here: 2 s for the 37,640 DIEs of
SQLite built at ``-O0``), which makes a first look at a large debug file take minutes.  The
index (:mod:`kpsdk.binfmt.dwarf.scan`) needs a handful of attributes of a few kinds of DIE,
so it reads ``.debug_info`` itself with what this module decodes: unit headers (DWARF 2 to 5,
32- and 64-bit), abbreviation tables, and each form's size and value (DWARF 5, section 7.5.6).
Everything else (a function's variables, types and locations) is read through pyelftools'
DIEs, one function at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_FORM, ENUM_DW_TAG

from kpsdk.binfmt.dwarf.primitives import Numbers, cstring, sleb, uleb

TAG = ENUM_DW_TAG
AT = ENUM_DW_AT
FORM = ENUM_DW_FORM

#: forms of a fixed size whatever the unit (the others depend on it or are variable)
_FIXED = {
    FORM["DW_FORM_data1"]: 1, FORM["DW_FORM_ref1"]: 1, FORM["DW_FORM_flag"]: 1, FORM["DW_FORM_strx1"]: 1,
    FORM["DW_FORM_addrx1"]: 1,
    FORM["DW_FORM_data2"]: 2, FORM["DW_FORM_ref2"]: 2, FORM["DW_FORM_strx2"]: 2, FORM["DW_FORM_addrx2"]: 2,
    FORM["DW_FORM_strx3"]: 3, FORM["DW_FORM_addrx3"]: 3,
    FORM["DW_FORM_data4"]: 4, FORM["DW_FORM_ref4"]: 4, FORM["DW_FORM_strx4"]: 4, FORM["DW_FORM_addrx4"]: 4,
    FORM["DW_FORM_ref_sup4"]: 4,
    FORM["DW_FORM_data8"]: 8, FORM["DW_FORM_ref8"]: 8, FORM["DW_FORM_ref_sig8"]: 8, FORM["DW_FORM_ref_sup8"]: 8,
    FORM["DW_FORM_data16"]: 16,
    FORM["DW_FORM_flag_present"]: 0, FORM["DW_FORM_implicit_const"]: 0,
}
#: forms as long as an offset into another section (4 or 8 bytes: 32- or 64-bit DWARF)
_OFFSET = {FORM["DW_FORM_strp"], FORM["DW_FORM_line_strp"], FORM["DW_FORM_sec_offset"], FORM["DW_FORM_strp_sup"],
           FORM["DW_FORM_GNU_strp_alt"], FORM["DW_FORM_GNU_ref_alt"]}
#: forms that are a LEB128 number
_LEB = {FORM["DW_FORM_udata"], FORM["DW_FORM_sdata"], FORM["DW_FORM_ref_udata"], FORM["DW_FORM_strx"],
        FORM["DW_FORM_addrx"], FORM["DW_FORM_loclistx"], FORM["DW_FORM_rnglistx"],
        FORM["DW_FORM_GNU_addr_index"], FORM["DW_FORM_GNU_str_index"]}
#: forms whose value is a reference inside the unit
REF_IN_UNIT = {FORM["DW_FORM_ref1"], FORM["DW_FORM_ref2"], FORM["DW_FORM_ref4"], FORM["DW_FORM_ref8"],
               FORM["DW_FORM_ref_udata"]}
STRX = {FORM["DW_FORM_strx"], FORM["DW_FORM_strx1"], FORM["DW_FORM_strx2"], FORM["DW_FORM_strx3"],
        FORM["DW_FORM_strx4"], FORM["DW_FORM_GNU_str_index"]}
ADDRX = {FORM["DW_FORM_addrx"], FORM["DW_FORM_addrx1"], FORM["DW_FORM_addrx2"], FORM["DW_FORM_addrx3"],
         FORM["DW_FORM_addrx4"], FORM["DW_FORM_GNU_addr_index"]}
#: the constant class: DW_AT_high_pc in one of these is a length, not an address
CONSTANT = {FORM["DW_FORM_data1"], FORM["DW_FORM_data2"], FORM["DW_FORM_data4"], FORM["DW_FORM_data8"],
            FORM["DW_FORM_udata"], FORM["DW_FORM_sdata"], FORM["DW_FORM_implicit_const"]}
BLOCKS = {FORM["DW_FORM_block1"]: 1, FORM["DW_FORM_block2"]: 2, FORM["DW_FORM_block4"]: 4}
EXPRLOC = {FORM["DW_FORM_exprloc"], FORM["DW_FORM_block"]}

# skip operations of a compiled plan (negative: variable length; positive: that many bytes)
_OP_LEB, _OP_STRING, _OP_BLOCK1, _OP_BLOCK2, _OP_BLOCK4, _OP_BLOCK, _OP_INDIRECT = -1, -2, -3, -4, -5, -6, -7


@dataclass
class Abbrev:
    """One abbreviation: a tag, whether children follow, and its attributes as
    ``(attribute, form, implicit constant)``; ``skip`` is the same list compiled for skipping
    (runs of fixed-size forms added up)."""

    tag: int
    children: bool
    attrs: list[tuple[int, int, int]]
    skip: list[int] = field(default_factory=list)
    sibling: bool = False


@dataclass
class Unit:
    """One unit's header (DWARF 5 section 7.5.1) and where its DIEs are in ``.debug_info``."""

    offset: int
    version: int
    unit_type: int
    address_size: int
    offset_size: int
    abbrev_offset: int
    die_offset: int
    end: int

    @property
    def is_compile(self) -> bool:
        """A compile or partial unit (type, skeleton and split units are not read)."""
        return self.unit_type in (1, 3)


def parse_unit(data: bytes, offset: int, num: Numbers) -> Unit:
    """The unit header at ``offset`` of ``.debug_info``."""
    length = num.u32(data, offset)[0]
    pos = offset + 4
    offset_size = 4
    if length == 0xFFFFFFFF:
        length, pos, offset_size = num.u64(data, pos)[0], pos + 8, 8
    end = pos + length
    version = num.u16(data, pos)[0]
    pos += 2
    if version >= 5:
        unit_type, address_size = data[pos], data[pos + 1]
        abbrev = num.read(data, pos + 2, offset_size)
        pos += 2 + offset_size
        if unit_type in (2, 6):        # type units: signature and type offset
            pos += 8 + offset_size
        elif unit_type in (4, 5):      # skeleton and split compile units: dwo_id
            pos += 8
    else:
        unit_type = 1
        abbrev = num.read(data, pos, offset_size)
        address_size = data[pos + offset_size]
        pos += offset_size + 1
    if not 2 <= version <= 5:
        raise ValueError(f"unit at {offset:#x}: DWARF version {version}, not 2 to 5")
    if end > len(data):
        raise ValueError(f"unit at {offset:#x}: {length} bytes run past the end of .debug_info ({len(data)})")
    return Unit(offset, version, unit_type, address_size, offset_size, abbrev, pos, end)


def parse_abbrevs(data: bytes, offset: int, unit: Unit) -> dict[int, Abbrev]:
    """The abbreviation table at ``offset`` of ``.debug_abbrev``, compiled for ``unit``'s sizes."""
    table: dict[int, Abbrev] = {}
    pos = offset
    while True:
        code, pos = uleb(data, pos)
        if code == 0:
            return table
        tag, pos = uleb(data, pos)
        children = data[pos] == 1
        pos += 1
        attrs = []
        while True:
            name, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            if name == 0 and form == 0:
                break
            implicit = 0
            if form == FORM["DW_FORM_implicit_const"]:
                implicit, pos = sleb(data, pos)
            attrs.append((name, form, implicit))
        abbrev = Abbrev(tag, children, attrs)
        abbrev.skip = _compile_skip(attrs, unit)
        abbrev.sibling = any(a == AT["DW_AT_sibling"] for a, _, _ in attrs)
        table[code] = abbrev


def form_size(form: int, unit: Unit) -> int | None:
    """The size of a fixed-size form in ``unit``, None for a variable-size one."""
    if form in _FIXED:
        return _FIXED[form]
    if form == FORM["DW_FORM_addr"]:
        return unit.address_size
    if form in _OFFSET:
        return unit.offset_size
    if form == FORM["DW_FORM_ref_addr"]:
        return unit.address_size if unit.version == 2 else unit.offset_size
    return None


def _compile_skip(attrs: list[tuple[int, int, int]], unit: Unit) -> list[int]:
    ops: list[int] = []
    for _, form, _ in attrs:
        size = form_size(form, unit)
        if size is not None:
            if ops and ops[-1] >= 0:
                ops[-1] += size
            elif size:
                ops.append(size)
            continue
        ops.append(_variable_op(form))
    return ops


def _variable_op(form: int) -> int:
    if form in _LEB:
        return _OP_LEB
    if form == FORM["DW_FORM_string"]:
        return _OP_STRING
    if form in BLOCKS:
        return {1: _OP_BLOCK1, 2: _OP_BLOCK2, 4: _OP_BLOCK4}[BLOCKS[form]]
    if form in EXPRLOC:
        return _OP_BLOCK
    if form == FORM["DW_FORM_indirect"]:
        return _OP_INDIRECT
    raise ValueError(f"unknown attribute form {form:#x}")


def skip_attrs(data: bytes, pos: int, abbrev: Abbrev, unit: Unit, num: Numbers) -> int:
    """The position after the attributes of a DIE at ``pos`` (past its abbreviation code)."""
    for op in abbrev.skip:
        if op >= 0:
            pos += op
        elif op == _OP_LEB:
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif op == _OP_BLOCK:
            size, pos = uleb(data, pos)
            pos += size
        elif op == _OP_STRING:
            pos = data.index(b"\0", pos) + 1
        elif op == _OP_BLOCK1:
            pos += 1 + data[pos]
        elif op == _OP_BLOCK2:
            pos += 2 + num.u16(data, pos)[0]
        elif op == _OP_BLOCK4:
            pos += 4 + num.u32(data, pos)[0]
        else:
            form, pos = uleb(data, pos)
            _, pos = read_form(data, pos, form, 0, unit, num)
    return pos


def read_form(data: bytes, pos: int, form: int, implicit: int, unit: Unit, num: Numbers) -> tuple[object, int]:
    """One attribute value of ``form`` at ``pos``: ``(value, next position)``.  Numbers,
    offsets, references and indexes are ints (references still relative to their base),
    strings and blocks bytes; the caller knows from the form what the int means."""
    size = form_size(form, unit)
    if size is not None:
        if form == FORM["DW_FORM_implicit_const"]:
            return implicit, pos
        if size == 0:
            return 1, pos
        if size == 16:
            return data[pos:pos + 16], pos + 16
        return num.read(data, pos, size), pos + size
    if form == FORM["DW_FORM_sdata"]:
        return sleb(data, pos)
    if form in _LEB:
        return uleb(data, pos)
    if form == FORM["DW_FORM_string"]:
        return cstring(data, pos)
    if form in BLOCKS:
        n = BLOCKS[form]
        length = num.read(data, pos, n)
        return data[pos + n:pos + n + length], pos + n + length
    if form in EXPRLOC:
        length, pos = uleb(data, pos)
        return data[pos:pos + length], pos + length
    if form == FORM["DW_FORM_indirect"]:
        real, pos = uleb(data, pos)
        return read_form(data, pos, real, implicit, unit, num)
    raise ValueError(f"unknown attribute form {form:#x}")
