"""The variables in scope at a pc: parameters and locals of the function, of the lexical blocks
and inlined copies around the pc, each with where its location list puts it there.

The walk starts at the out-of-line function holding the pc (the index finds it) and goes down
through the ``DW_TAG_lexical_block`` and ``DW_TAG_inlined_subroutine`` children whose ranges
hold the pc.  A variable or parameter of an inlined copy (or of an out-of-line instance of an
``inline`` function) names itself through ``DW_AT_abstract_origin``: its name, type and
declaration come from there, its location from itself.

A variable's location at the pc is one of: an expression valid wherever it is in scope
(``DW_AT_location`` as an ``exprloc``), the entry of its location list covering the pc (none
covering it: not available there, what ``perf probe -V`` leaves out), a constant
(``DW_AT_const_value``), or nothing at all (optimized out everywhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kpsdk.binfmt.dwarf.lists import LocEntry, Range, locations_v4, locations_v5, ranges_v4, ranges_v5
from kpsdk.binfmt.dwarf.types import CType

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

    from kpsdk.binfmt.dwarf.reader import DebugInfo, Function
    from kpsdk.binfmt.dwarf.scan import UnitRecord

_CONSTANT_FORMS = {"DW_FORM_data1", "DW_FORM_data2", "DW_FORM_data4", "DW_FORM_data8", "DW_FORM_udata",
                   "DW_FORM_sdata", "DW_FORM_implicit_const"}
_LIST_FORMS = {"DW_FORM_sec_offset", "DW_FORM_loclistx", "DW_FORM_rnglistx"}


@dataclass(frozen=True)
class Variable:
    """A variable or parameter in scope at :attr:`pc`.

    :param kind: ``parameter``, ``local`` or ``global``.
    :param function: the function whose scope declares it (an inlined copy's name for the
        variables of an inlined copy), ``""`` for a global.
    :param depth: 0 for the function's own, one more for each block or inlined copy inside.
    :param expression: its location expression at :attr:`pc`, None when it has none there.
    :param const_value: its value when the debug information gives it as a constant.
    """

    name: str
    type: CType
    kind: Literal["parameter", "local", "global"]
    function: str
    inlined: bool
    depth: int
    die: int
    unit: int
    pc: int
    expression: bytes | None = None
    const_value: bytes | int | None = None
    file: str = ""
    line: int = 0
    #: the DIEs of the function copies around its declaration, outermost first: the out-of-line
    #: function, then each inlined copy it sits in
    copies: tuple[int, ...] = ()
    #: whether its DIE has a ``DW_AT_location`` at all (covering this pc or not): where perf
    #: looks a name up, the first declaration with one is the variable
    has_location: bool = False

    @property
    def available(self) -> bool:
        """Whether it has a location or value at :attr:`pc` (what ``perf probe -V`` lists)."""
        return self.expression is not None or self.const_value is not None


@dataclass
class Scope:
    """The variables in scope at ``pc``: ``function`` is the out-of-line function holding it,
    ``inlined`` the inlined copies around it (outermost first), ``variables`` every variable
    in declaration order, outer scopes first (a name declared twice appears twice)."""

    pc: int
    function: Function
    inlined: list[Function] = field(default_factory=list)
    variables: list[Variable] = field(default_factory=list)
    frame_base: DIE | None = None

    def names(self) -> list[str]:
        """The names in scope, each once, innermost declaration first."""
        seen: dict[str, None] = {}
        for var in reversed(self.variables):
            seen.setdefault(var.name, None)
        return list(seen)

    def lookup(self, name: str) -> Variable | None:
        """The innermost variable called ``name`` (an inner one hides an outer one, as in C)."""
        for var in reversed(self.variables):
            if var.name == name:
                return var
        return None


def _attr(die: DIE, name: str) -> Any:
    attr = die.attributes.get(name)
    return attr.value if attr is not None else None


def _named(die: DIE, dbg: DebugInfo) -> DIE:
    """The DIE a concrete one takes its name and type from (itself when it has them)."""
    seen = 0
    while "DW_AT_name" not in die.attributes and seen < 8:
        ref = "DW_AT_abstract_origin" if "DW_AT_abstract_origin" in die.attributes else "DW_AT_specification"
        if ref not in die.attributes:
            break
        with dbg.reading(f"the origin of the DIE at {die.offset:#x}"):
            die = die.get_DIE_from_attribute(ref)
        seen += 1
    return die


def die_ranges(die: DIE, unit: UnitRecord, dbg: DebugInfo) -> list[Range]:
    """The code of a function, inlined copy or lexical block DIE, as address ranges."""
    attrs = die.attributes
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        low = _address(attrs["DW_AT_low_pc"], unit, dbg)
        high = attrs["DW_AT_high_pc"]
        end = low + high.value if high.form in _CONSTANT_FORMS else _address(high, unit, dbg)
        return [(low, end)]
    if "DW_AT_ranges" not in attrs:
        return []
    attr = attrs["DW_AT_ranges"]
    sec = dbg.sections
    with dbg.reading(f"the ranges of the DIE at {die.offset:#x}"):
        if unit.version >= 5:
            offset = attr.value
            if attr.form == "DW_FORM_rnglistx":
                offset = sec.list_index(sec.rnglists, unit.bases.rnglists, attr.value, unit.offset_size)
            listed = ranges_v5(sec, offset, unit.base, unit.bases, unit.address_size)
        else:
            listed = ranges_v4(sec, attr.value, unit.base, unit.address_size)
    return [r for r in listed if r[0] < r[1]]


def _address(attr: Any, unit: UnitRecord, dbg: DebugInfo) -> int:
    if attr.form.startswith("DW_FORM_addrx") or attr.form == "DW_FORM_GNU_addr_index":
        return dbg.sections.address_index(attr.raw_value, unit.bases, unit.address_size)
    return int(attr.value)


def location_list(die: DIE, name: str, unit: UnitRecord, dbg: DebugInfo) -> list[LocEntry] | bytes | None:
    """A DIE's location attribute ``name``: an expression (bytes) valid throughout, a list of
    (low, high, expression), or None without the attribute."""
    attr = die.attributes.get(name)
    if attr is None:
        return None
    if attr.form in ("DW_FORM_exprloc", "DW_FORM_block", "DW_FORM_block1", "DW_FORM_block2", "DW_FORM_block4"):
        return bytes(attr.value)
    if attr.form not in _LIST_FORMS and not (unit.version < 4 and attr.form in ("DW_FORM_data4", "DW_FORM_data8")):
        return None
    sec = dbg.sections
    with dbg.reading(f"the location list of the DIE at {die.offset:#x}"):
        if unit.version >= 5:
            offset = attr.value
            if attr.form == "DW_FORM_loclistx":
                offset = sec.list_index(sec.loclists, unit.bases.loclists, attr.value, unit.offset_size)
            return locations_v5(sec, offset, unit.base, unit.bases, unit.address_size)
        return locations_v4(sec, attr.value, unit.base, unit.address_size)


def expression_at(loc: list[LocEntry] | bytes | None, pc: int) -> bytes | None:
    """The expression a location (as :func:`location_list` returns it) gives at ``pc``."""
    if loc is None or isinstance(loc, bytes):
        return loc
    for low, high, expr in loc:
        if low <= pc < high:
            return expr
    return None


def _const(die: DIE) -> bytes | int | None:
    attr = die.attributes.get("DW_AT_const_value")
    if attr is None:
        return None
    if isinstance(attr.value, list):
        return bytes(attr.value)
    if isinstance(attr.value, bytes):  # a string constant
        return attr.value + b"\0"
    return int(attr.value)


def scope_at(dbg: DebugInfo, pc: int) -> Scope | None:
    """The variables in scope at ``pc``; None outside every function with debug information."""
    function = dbg.function_at(pc)
    if function is None:
        return None
    unit = dbg.unit(function.unit)
    top = dbg.die(function.die)
    scope = Scope(pc, function, frame_base=top)
    _walk(dbg, top, unit, scope, function.name, False, 0, (top.offset,))
    scope.inlined = dbg.inlined_at(pc)
    return scope


def copy_variables(dbg: DebugInfo, fn: Function, pc: int) -> list[Variable]:
    """The variables of the function copy ``fn`` itself (its DIE's subtree) as they are at
    ``pc``, even where ``pc`` is outside the copy's ranges: an inlined copy's entry pc may lie
    before its first range (GCC's ``DW_AT_entry_pc`` of a copy whose first instruction was
    scheduled away)."""
    top = dbg.die(fn.die)
    scope = Scope(pc, fn)
    _walk(dbg, top, dbg.unit(fn.unit), scope, fn.name, fn.inlined, 0, (top.offset,))
    return scope.variables


def _walk(dbg: DebugInfo, die: DIE, unit: UnitRecord, scope: Scope, function: str, inlined: bool, depth: int,
          copies: tuple[int, ...]) -> None:
    pc = scope.pc
    table = dbg.line_files(unit)
    inner: list[tuple[DIE, str, bool]] = []
    with dbg.reading(f"the children of the DIE at {die.offset:#x}"):
        children = list(die.iter_children())
    for child in children:
        tag = child.tag
        if tag in ("DW_TAG_formal_parameter", "DW_TAG_variable"):
            named = _named(child, dbg)
            raw = _attr(named, "DW_AT_name")
            if raw is None:
                continue
            with dbg.reading(f"the type of the DIE at {child.offset:#x}"):
                vtype = dbg.types.of(named.get_DIE_from_attribute("DW_AT_type")) \
                    if "DW_AT_type" in named.attributes else dbg.types.void
            if "DW_AT_declaration" in child.attributes and "DW_AT_location" not in child.attributes:
                continue  # an extern declared inside the function: a global, not a local
            scope.variables.append(Variable(
                name=raw.decode("utf-8", "replace"), type=vtype,
                kind="parameter" if tag == "DW_TAG_formal_parameter" else "local",
                function=function, inlined=inlined, depth=depth, die=child.offset, unit=unit.offset, pc=pc,
                expression=expression_at(location_list(child, "DW_AT_location", unit, dbg), pc),
                const_value=_const(child) if "DW_AT_const_value" in child.attributes else _const(named),
                file=table.file(int(_attr(named, "DW_AT_decl_file") or 0)),
                line=int(_attr(named, "DW_AT_decl_line") or 0), copies=copies,
                has_location="DW_AT_location" in child.attributes))
        elif tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine"):
            if any(low <= pc < high for low, high in die_ranges(child, unit, dbg)):
                if tag == "DW_TAG_inlined_subroutine":
                    name = _attr(_named(child, dbg), "DW_AT_name")
                    inner.append((child, name.decode("utf-8", "replace") if name else "", True))
                else:
                    inner.append((child, function, inlined))
            elif tag == "DW_TAG_lexical_block" and not die_ranges(child, unit, dbg):
                inner.append((child, function, inlined))  # a block without code of its own: its
                # variables are the enclosing scope's (GCC emits these for some -O0 blocks)
    for child, name, is_inlined in inner:
        inner_copies = copies + (child.offset,) if child.tag == "DW_TAG_inlined_subroutine" else copies
        _walk(dbg, child, unit, scope, name, is_inlined, depth + 1, inner_copies)


def global_variables(dbg: DebugInfo, name: str | None = None, unit: int | None = None) -> list[Variable]:
    """The variables of the units' top level (``perf probe -V --externs``'s extra ones, static
    ones included) that have a static address, by name when ``name`` is given; a variable of
    ``unit`` comes first (a ``static`` in that file hides another file's)."""
    records = dbg.index.globals_by_name.get(name, []) if name is not None else dbg.index.globals
    records = sorted((r for r in records if r.address is not None), key=lambda r: (r.unit != unit, not r.external))
    out = []
    for rec in records:
        die = dbg.die(rec.die)
        named = die
        if "DW_AT_type" not in die.attributes and "DW_AT_specification" in die.attributes:
            with dbg.reading(f"the declaration of the DIE at {die.offset:#x}"):
                named = die.get_DIE_from_attribute("DW_AT_specification")
        with dbg.reading(f"the type of the DIE at {die.offset:#x}"):
            vtype = dbg.types.of(named.get_DIE_from_attribute("DW_AT_type")) \
                if "DW_AT_type" in named.attributes else dbg.types.void
        unit_record = dbg.unit(rec.unit)
        table = dbg.line_files(unit_record)
        out.append(Variable(rec.name, vtype, "global", "", False, 0, rec.die, rec.unit, 0,
                            expression=expression_at(location_list(die, "DW_AT_location", unit_record, dbg), 0),
                            file=table.file(int(_attr(named, "DW_AT_decl_file") or 0)),
                            line=int(_attr(named, "DW_AT_decl_line") or 0)))
    return out
