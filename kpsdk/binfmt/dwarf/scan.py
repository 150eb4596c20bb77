"""One pass over ``.debug_info`` that finds every function, inlined copy and global variable.

The index (:mod:`kpsdk.binfmt.dwarf.index`) is what this pass returns: for each compile unit
its name, directory, producer and address ranges; for each function with code (a
``DW_TAG_subprogram`` with ``DW_AT_low_pc`` or ``DW_AT_ranges``) and each
``DW_TAG_inlined_subroutine`` its name, DIE offset, ranges, entry pc and declaration or call
site; for each variable of a unit's top level (or a namespace's) its name and DIE.  Names
of inlined copies and of out-of-line instances come from their ``DW_AT_abstract_origin``
(or a definition's ``DW_AT_specification``), which may be anywhere, so they are joined at
the end.

Speed is the point: only the abbreviations of the DIEs the index wants have their attributes
decoded, type subtrees are jumped over through ``DW_AT_sibling`` where the producer wrote
one (GCC does), and everything else is skipped by precomputed sizes (:mod:`.units`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kpsdk.binfmt.dwarf.lists import Range, ranges_v4, ranges_v5
from kpsdk.binfmt.dwarf.primitives import uleb
from kpsdk.binfmt.dwarf.sections import Bases, Sections
from kpsdk.binfmt.dwarf.units import (
    ADDRX,
    AT,
    CONSTANT,
    REF_IN_UNIT,
    STRX,
    TAG,
    Abbrev,
    Unit,
    parse_abbrevs,
    parse_unit,
    read_form,
    skip_attrs,
)
from kpsdk.errors import SplitDwarfError

_CU, _PU = TAG["DW_TAG_compile_unit"], TAG["DW_TAG_partial_unit"]
_SUBPROGRAM, _INLINED = TAG["DW_TAG_subprogram"], TAG["DW_TAG_inlined_subroutine"]
_VARIABLE, _LEXICAL = TAG["DW_TAG_variable"], TAG["DW_TAG_lexical_block"]
_NAMESPACE = TAG["DW_TAG_namespace"]
_CONTAINERS = {TAG["DW_TAG_structure_type"], TAG["DW_TAG_class_type"], TAG["DW_TAG_union_type"]}
_FORM_STRP = {0x0E: "str", 0x1F: "line_str"}
_FORM_STRING = 0x08
_FORM_REF_ADDR = 0x10
_DW_OP_ADDR, _DW_OP_ADDRX = 0x03, 0xA1

# the contexts a DIE's children are read in
_TOP, _BODY, _SKIP = 0, 1, 2


@dataclass
class UnitRecord:
    """A compile unit as the index keeps it."""

    offset: int
    version: int
    address_size: int
    offset_size: int
    name: str = ""
    comp_dir: str = ""
    producer: str = ""
    language: int = 0
    stmt_list: int = -1
    base: int = 0
    ranges: list[Range] = field(default_factory=list)
    bases: Bases = field(default_factory=Bases)


@dataclass
class FunctionRecord:
    """A function's code: an out-of-line copy (``inlined`` False) or an inlined one.

    ``die`` is the concrete DIE, ``origin`` the DIE its name comes from (itself when it names
    itself), ``caller`` the out-of-line function an inlined copy sits in (its DIE), ``entry``
    ``DW_AT_entry_pc`` or the lowest address; files are indexes into the unit's line table.
    """

    name: str
    die: int
    unit: int
    ranges: list[Range]
    entry: int
    inlined: bool
    origin: int
    caller: int = -1
    decl_file: int = 0
    decl_line: int = 0
    call_file: int = 0
    call_line: int = 0
    external: bool = False


@dataclass
class GlobalRecord:
    """A variable of a unit's top level: its name, DIE, unit and static address (None: no
    ``DW_OP_addr`` location, such as an ``extern`` declaration)."""

    name: str
    die: int
    unit: int
    address: int | None
    external: bool


@dataclass
class ScanResult:
    """Everything one pass found."""

    units: list[UnitRecord] = field(default_factory=list)
    functions: list[FunctionRecord] = field(default_factory=list)
    globals: list[GlobalRecord] = field(default_factory=list)


@dataclass
class _Named:
    name: str
    decl_file: int
    decl_line: int
    external: bool
    refer: int  # abstract_origin or specification, -1


class Scanner:
    """Scans every compile unit of a file's ``.debug_info`` (:meth:`run`)."""

    def __init__(self, sections: Sections) -> None:
        self.sec = sections
        self.num = sections.num
        self.result = ScanResult()
        self.named: dict[int, _Named] = {}
        self._abbrevs: dict[tuple[int, int, int, int], dict[int, Abbrev]] = {}

    def run(self) -> ScanResult:
        """Scan every unit.  :class:`SplitDwarfError` when the file has only the skeletons of
        split DWARF (``-gsplit-dwarf``: the DIEs are in ``.dwo`` files, which are not read)."""
        data = self.sec.info
        pos = 0
        skeletons = 0
        while pos < len(data):
            unit = parse_unit(data, pos, self.num)
            if unit.is_compile:
                self._unit(unit)
            elif unit.unit_type == 4:
                skeletons += 1
            pos = unit.end
        if skeletons and not self.result.units:
            raise SplitDwarfError(f"split DWARF: {skeletons} skeleton unit(s) whose DIEs are in .dwo files, which "
                                  "kpsdk does not read (build without -gsplit-dwarf)")
        self._join_names()
        return self.result

    # -- one unit ---------------------------------------------------------------------------------

    def _abbrev_table(self, unit: Unit) -> dict[int, Abbrev]:
        key = (unit.abbrev_offset, unit.version, unit.address_size, unit.offset_size)
        table = self._abbrevs.get(key)
        if table is None:
            table = self._abbrevs[key] = parse_abbrevs(self.sec.abbrev, unit.abbrev_offset, unit)
        return table

    def _unit(self, unit: Unit) -> None:
        data, num = self.sec.info, self.num
        abbrevs = self._abbrev_table(unit)
        code, pos = uleb(data, unit.die_offset)
        top = abbrevs[code]
        attrs, pos = self._attrs(pos, top, unit)
        record = self._unit_record(unit, attrs)
        self.result.units.append(record)
        if top.tag not in (_CU, _PU) or not top.children:
            return
        # (context, the out-of-line function the DIEs are in) for each open parent
        stack: list[tuple[int, int]] = [(_TOP, -1)]
        end = unit.end
        while pos < end and stack:
            die = pos
            code, pos = uleb(data, pos)
            if code == 0:
                stack.pop()
                continue
            abbrev = abbrevs[code]
            tag = abbrev.tag
            context, function = stack[-1]
            if context == _SKIP:
                pos = skip_attrs(data, pos, abbrev, unit, num)
                if abbrev.children:
                    stack.append((_SKIP, function))
                continue
            if tag == _SUBPROGRAM or tag == _INLINED:
                attrs, pos = self._attrs(pos, abbrev, unit)
                concrete = self._function(die, tag, attrs, unit, record, function)
                if abbrev.children:
                    stack.append((_BODY, concrete if concrete >= 0 and tag == _SUBPROGRAM else function))
                continue
            if tag == _LEXICAL:
                pos = skip_attrs(data, pos, abbrev, unit, num)
                if abbrev.children:
                    stack.append((_BODY, function))
                continue
            if tag == _VARIABLE and context == _TOP:
                attrs, pos = self._attrs(pos, abbrev, unit)
                self._global(die, attrs, unit)
                if abbrev.children:
                    stack.append((_SKIP, function))
                continue
            if tag == _NAMESPACE or (tag in _CONTAINERS and context == _TOP):
                # C++ declarations of methods, named for the definitions' DW_AT_specification
                pos = skip_attrs(data, pos, abbrev, unit, num)
                if abbrev.children:
                    stack.append((_TOP, function))
                continue
            if abbrev.children and abbrev.sibling:
                attrs, _ = self._attrs(pos, abbrev, unit)
                sibling = attrs.get(AT["DW_AT_sibling"])
                if sibling is not None:
                    form, value = sibling
                    pos = value if form == _FORM_REF_ADDR else unit.offset + value
                    continue
            pos = skip_attrs(data, pos, abbrev, unit, num)
            if abbrev.children:
                stack.append((_SKIP, function))

    def _attrs(self, pos: int, abbrev: Abbrev, unit: Unit) -> tuple[dict[int, tuple[int, Any]], int]:
        data, num = self.sec.info, self.num
        out: dict[int, tuple[int, Any]] = {}
        for attr, form, implicit in abbrev.attrs:
            value, pos = read_form(data, pos, form, implicit, unit, num)
            out[attr] = (form, value)
        return out, pos

    def _string(self, attr: tuple[int, Any] | None, unit: Unit, bases: Bases) -> str:
        if attr is None:
            return ""
        form, value = attr
        if form == _FORM_STRING:
            return bytes(value).decode("utf-8", "replace")
        kind = _FORM_STRP.get(form)
        if kind == "str":
            return self.sec.string(value)
        if kind == "line_str":
            return self.sec.line_string(value)
        if form in STRX:
            return self.sec.string_index(value, bases, unit.offset_size)
        return ""

    def _address(self, attr: tuple[int, Any], unit: Unit, bases: Bases) -> int:
        form, value = attr
        if form in ADDRX:
            return self.sec.address_index(value, bases, unit.address_size)
        return int(value)

    def _unit_record(self, unit: Unit, attrs: dict[int, tuple[int, Any]]) -> UnitRecord:
        def number(name: str) -> int:
            got = attrs.get(AT[name])
            return int(got[1]) if got is not None else 0

        bases = Bases(number("DW_AT_str_offsets_base"), number("DW_AT_addr_base") or number("DW_AT_GNU_addr_base"),
                      number("DW_AT_rnglists_base"), number("DW_AT_loclists_base"))
        record = UnitRecord(unit.offset, unit.version, unit.address_size, unit.offset_size, bases=bases)
        record.name = self._string(attrs.get(AT["DW_AT_name"]), unit, bases)
        record.comp_dir = self._string(attrs.get(AT["DW_AT_comp_dir"]), unit, bases)
        record.producer = self._string(attrs.get(AT["DW_AT_producer"]), unit, bases)
        record.language = number("DW_AT_language")
        stmt = attrs.get(AT["DW_AT_stmt_list"])
        record.stmt_list = int(stmt[1]) if stmt is not None else -1
        low = attrs.get(AT["DW_AT_low_pc"])
        record.base = self._address(low, unit, bases) if low is not None else 0
        record.ranges = [r for r in self._ranges(attrs, unit, record) if r[0] < r[1]]
        return record

    def _ranges(self, attrs: dict[int, tuple[int, Any]], unit: Unit, record: UnitRecord) -> list[Range]:
        low = attrs.get(AT["DW_AT_low_pc"])
        high = attrs.get(AT["DW_AT_high_pc"])
        if low is not None and high is not None:
            start = self._address(low, unit, record.bases)
            end = start + high[1] if high[0] in CONSTANT else self._address(high, unit, record.bases)
            return [(start, end)] if end > start else []
        got = attrs.get(AT["DW_AT_ranges"])
        if got is None:
            return []
        form, value = got
        if unit.version >= 5:
            if form == 0x23:  # DW_FORM_rnglistx
                value = self.sec.list_index(self.sec.rnglists, record.bases.rnglists, value, unit.offset_size)
            return ranges_v5(self.sec, value, record.base, record.bases, unit.address_size)
        return ranges_v4(self.sec, value, record.base, unit.address_size)

    def _ref(self, attr: tuple[int, Any] | None, unit: Unit) -> int:
        if attr is None:
            return -1
        form, value = attr
        if form in REF_IN_UNIT:
            return unit.offset + int(value)
        if form == _FORM_REF_ADDR:
            return int(value)
        return -1

    def _function(self, die: int, tag: int, attrs: dict[int, tuple[int, Any]], unit: Unit,
                  record: UnitRecord, caller: int) -> int:
        """Records a function DIE; returns its offset when it has code, else -1."""
        refer = self._ref(attrs.get(AT["DW_AT_abstract_origin"]), unit)
        if refer < 0:
            refer = self._ref(attrs.get(AT["DW_AT_specification"]), unit)
        name = self._string(attrs.get(AT["DW_AT_name"]), unit, record.bases)
        decl_file = int(attrs.get(AT["DW_AT_decl_file"], (0, 0))[1])
        decl_line = int(attrs.get(AT["DW_AT_decl_line"], (0, 0))[1])
        external = AT["DW_AT_external"] in attrs
        if tag == _SUBPROGRAM:
            self.named[die] = _Named(name, decl_file, decl_line, external, refer)
        listed = self._ranges(attrs, unit, record)
        ranges = [r for r in listed if r[0] < r[1]]
        entry_attr = attrs.get(AT["DW_AT_entry_pc"])
        if not ranges:
            # an inlined copy whose code was all moved or merged away (DW_AT_high_pc 0) still
            # has an entry pc, where perf probes it: it is kept, with no range
            low = attrs.get(AT["DW_AT_low_pc"])
            if tag != _INLINED or (entry_attr is None and low is None):
                return -1
            if entry_attr is None or entry_attr[0] in CONSTANT:
                entry_attr = low
        if entry_attr is None:
            # no DW_AT_entry_pc: DW_AT_low_pc, or the start of the first range listed (perf's choice)
            entry = listed[0][0] if listed else min(low for low, _ in ranges)
        elif entry_attr[0] in CONSTANT:  # DWARF 5: an offset from the base address
            entry = ranges[0][0] + int(entry_attr[1]) if tag == _INLINED and ranges else min(r[0] for r in ranges)
        else:
            entry = self._address(entry_attr, unit, record.bases)
        self.result.functions.append(FunctionRecord(
            name=name, die=die, unit=unit.offset, ranges=ranges, entry=entry, inlined=tag == _INLINED,
            origin=refer if refer >= 0 else die, caller=caller if tag == _INLINED else -1,
            decl_file=decl_file, decl_line=decl_line,
            call_file=int(attrs.get(AT["DW_AT_call_file"], (0, 0))[1]),
            call_line=int(attrs.get(AT["DW_AT_call_line"], (0, 0))[1]),
            external=external))
        return die

    def _global(self, die: int, attrs: dict[int, tuple[int, Any]], unit: Unit) -> None:
        record = self.result.units[-1]
        name = self._string(attrs.get(AT["DW_AT_name"]), unit, record.bases)
        refer = self._ref(attrs.get(AT["DW_AT_specification"]), unit)
        if not name and refer >= 0 and refer in self.named:
            name = self.named[refer].name
        location = attrs.get(AT["DW_AT_location"])
        address = None
        if location is not None and isinstance(location[1], bytes) and location[1]:
            expr = location[1]
            if expr[0] == _DW_OP_ADDR and len(expr) == 1 + unit.address_size:
                address = self.num.read(expr, 1, unit.address_size)
            elif expr[0] == _DW_OP_ADDRX:
                index, _ = uleb(expr, 1)
                address = self.sec.address_index(index, record.bases, unit.address_size)
        if not name or AT["DW_AT_declaration"] in attrs and address is None:
            return
        self.result.globals.append(GlobalRecord(name, die, unit.offset, address, AT["DW_AT_external"] in attrs))

    def _join_names(self) -> None:
        """Names, declarations and linkage of functions that take them from their origin."""
        for fn in self.result.functions:
            seen = 0
            ref = fn.origin
            while ref in self.named and seen < 8:
                named = self.named[ref]
                if named.name and not fn.name:
                    fn.name = named.name
                if named.decl_line and not fn.decl_line:
                    fn.decl_file, fn.decl_line = named.decl_file, named.decl_line
                fn.external = fn.external or named.external
                if named.refer < 0:
                    break
                ref = named.refer
                seen += 1
