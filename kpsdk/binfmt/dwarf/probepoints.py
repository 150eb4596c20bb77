"""``perf probe``'s probe points, resolved with the debug information, and its listings.

A perf probe point (``perf probe --help``, "PROBE SYNTAX") is one of::

    FUNC[@SRC][:RLN|+OFFS|%return|;PTN]
    SRC:ALN | SRC;PTN

:func:`parse_point` reads one into a :class:`PointSpec` and :func:`resolve_points` turns it
into the addresses a probe goes to, each a :class:`ProbePoint`: every copy of the function
(perf probes each inlined copy of ``FUNC`` too), the function's probe address
(:func:`~kpsdk.binfmt.dwarf.lines.probe_address`), a line relative to its declaration, an
absolute line, or the lines matching a lazy pattern.

:func:`perf_variables` is ``perf probe -V``'s answer at a point: the variables in scope that
have a location there which perf can turn into a fetch argument: one that starts with a
register (``DW_OP_reg*``, ``DW_OP_breg*``), the frame base (``DW_OP_fbreg``) or a static
address (``DW_OP_addr``), or a constant value (``DW_AT_const_value``).  perf leaves out the
others (a value the expression computes: ``DW_OP_lit3; DW_OP_stack_value``), even where gdb
can print them, and lists a name twice when two DIEs declare it (a parameter and the same
parameter of an inlined copy inside).  :func:`format_variables`
and :func:`format_lines` print as ``perf probe -V``/``-L`` do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpsdk.binfmt.dwarf.lines import (
    function_lines,
    lazy_lines,
    probe_address,
    source_lines,
    statement_addresses,
)
from kpsdk.binfmt.dwarf.scope import copy_variables
from kpsdk.errors import LocationError, NoSuchFunctionError, NoSuchLineError, SourceNotFoundError

if TYPE_CHECKING:
    from kpsdk.binfmt.dwarf.reader import DebugInfo, Function
    from kpsdk.binfmt.dwarf.scope import Variable

_POINT = re.compile(r"^(?P<func>[A-Za-z_][\w.]*)(?:@(?P<src>[^:;+%]+))?"
                    r"(?::(?P<rln>\d+)|\+(?P<off>0[xX][0-9a-fA-F]+|\d+)|(?P<ret>%return)|;(?P<ptn>.+))?$")
_SRCLINE = re.compile(r"^(?P<src>[^:;@]+\.[A-Za-z0-9]+)(?::(?P<aln>\d+)|;(?P<ptn>.+))$")


@dataclass(frozen=True)
class PointSpec:
    """A parsed perf probe point: a function (with its source file, a relative line, an offset,
    ``%return`` or a lazy pattern) or a source file with an absolute line or a lazy pattern."""

    function: str = ""
    file: str = ""
    relline: int | None = None
    offset: int | None = None
    is_return: bool = False
    pattern: str = ""
    line: int | None = None


@dataclass(frozen=True)
class ProbePoint:
    """One address a probe point resolves to: ``function`` the copy it is in (an inlined copy
    for a point in inlined code), ``symbol`` and ``offset`` where perf says it is
    (``@<symbol+offset>``: the out-of-line function the address is in)."""

    address: int
    function: Function
    symbol: str
    offset: int

    @property
    def where(self) -> str:
        return f"{self.symbol}+{self.offset}"


def parse_point(text: str) -> PointSpec:
    """A perf probe point; :class:`~kpsdk.errors.LocationError` when it does not parse."""
    text = text.strip()
    m = _SRCLINE.match(text)
    if m is not None:
        return PointSpec(file=m["src"], line=int(m["aln"]) if m["aln"] else None, pattern=m["ptn"] or "")
    m = _POINT.match(text)
    if m is None:
        raise LocationError(22, f"not a perf probe point: {text!r} (FUNC[@SRC][:RLN|+OFFS|%return|;PTN], "
                                "SRC:ALN or SRC;PTN)")
    return PointSpec(function=m["func"], file=m["src"] or "", relline=int(m["rln"]) if m["rln"] else None,
                     offset=int(m["off"], 0) if m["off"] else None, is_return=bool(m["ret"]),
                     pattern=m["ptn"] or "")


def _point(dbg: DebugInfo, fn: Function, address: int) -> ProbePoint:
    """The point at ``address`` in the copy ``fn``, named as perf names it: after the out-of-line
    function whose DIE holds the copy (its DWARF name, through ``DW_AT_abstract_origin`` for a
    clone), the offset from that function's entry."""
    outer = dbg.index.by_die.get(fn.caller_die) if fn.inlined else None
    if outer is None:
        outer = dbg.index.function_at(address)
    if outer is None:
        return ProbePoint(address, fn, fn.name, address - fn.entry)
    return ProbePoint(address, fn, outer.name, address - outer.entry)


def resolve_points(dbg: DebugInfo, spec: PointSpec | str, with_variables: bool = True) -> list[ProbePoint]:
    """The addresses ``spec`` names; ``with_variables`` says the probe reads variables (``perf
    probe -D 'FUNC var'``: past the prologue of unoptimized code), which ``perf probe -V`` does
    not (it lists at the entry).

    :raises NoSuchFunctionError: no such function; :class:`~kpsdk.errors.NoSuchLineError`: no
        code at that line (with the probeable ones); :class:`~kpsdk.errors.SourceNotFoundError`:
        a lazy pattern whose source file is missing.
    """
    if isinstance(spec, str):
        spec = parse_point(spec)
    if not spec.function:
        assert spec.file
        if spec.line is not None:
            return [_point(dbg, _innermost(dbg, a), a) for a in statement_addresses(dbg, spec.file, spec.line)
                    if dbg.function_at(a) is not None]
        in_file = []
        for fn in _functions_in_file(dbg, spec.file):
            in_file += [_point(dbg, fn, a) for a in _lazy_addresses(dbg, fn, spec.pattern)]
        return in_file
    copies = [fn for fn in dbg.functions(spec.function)
              if not spec.file or fn.file.endswith("/" + spec.file.lstrip("/")) or fn.file == spec.file]
    if spec.is_return:  # an inlined copy never returns: the out-of-line function's entry only
        copies = [fn for fn in copies if not fn.inlined] or copies
    if not copies:
        raise NoSuchFunctionError(f"{spec.function}@{spec.file}")
    out: list[ProbePoint] = []
    for fn in copies:
        if spec.relline:
            try:
                addresses = statement_addresses(dbg, fn.file, fn.line + spec.relline, fn.unit)
            except NoSuchLineError as e:  # said again in the function's own numbering
                raise NoSuchLineError(f"{fn.name}:{spec.relline}", f"line {fn.line + spec.relline} of {fn.file}: "
                                      f"{e.problem}", [n - fn.line for n in e.lines]) from None
            out += [_point(dbg, fn, a) for a in addresses if fn.contains(a)]
        elif spec.pattern:
            out += [_point(dbg, fn, a) for a in _lazy_addresses(dbg, fn, spec.pattern)]
        elif spec.offset is not None:
            out.append(_point(dbg, fn, fn.entry + spec.offset))
        else:
            out.append(_point(dbg, fn, fn.entry if spec.is_return else probe_address(dbg, fn, with_variables)))
    points = _first_per_address(out)
    if spec.relline or spec.pattern:
        return points
    # a function's copies in DIE order, as perf finds them (the inlined copies and the out-of-line
    # one in the order the unit lists them)
    return sorted(points, key=lambda p: p.function.die)


def _innermost(dbg: DebugInfo, address: int) -> Function:
    """The function copy whose code holds ``address``: the innermost inlined copy, else the
    out-of-line function."""
    inlined = dbg.inlined_at(address)
    if inlined:
        return inlined[-1]
    fn = dbg.function_at(address)
    assert fn is not None
    return fn


def _lazy_addresses(dbg: DebugInfo, fn: Function, pattern: str) -> list[int]:
    """``FUNC;PATTERN``: every statement row of ``fn``'s code on a line matching ``pattern``
    (perf's lazy walker probes each row, not each line)."""
    out: list[int] = []
    for line in lazy_lines(dbg, fn, pattern):
        out += [a for a in statement_addresses(dbg, fn.file, line, fn.unit) if fn.contains(a) and a not in out]
    return sorted(out)


def _first_per_address(points: list[ProbePoint]) -> list[ProbePoint]:
    """One point per address, the first copy in DIE order: two inlined copies that start at one
    pc (a copy inlined in a copy of itself, an empty copy beside a real one) are one probe,
    as perf makes them."""
    seen: dict[int, ProbePoint] = {}
    for point in sorted(points, key=lambda p: p.function.die):
        seen.setdefault(point.address, point)
    return sorted(seen.values(), key=lambda p: (p.address, p.function.die))


def _functions_in_file(dbg: DebugInfo, file: str) -> list[Function]:
    found = []
    for name in dbg.function_names():
        for fn in dbg.functions(name, inlined=False):
            if fn.file == file or fn.file.endswith("/" + file.lstrip("/")):
                found.append(fn)
    return found


#: the first operations of a location that perf turns into a fetch argument
_PERF_FIRST_OPS = {0x03, 0x91, 0x90, 0x92, *range(0x50, 0x90)}


def perf_listable(var: Variable) -> bool:
    """Whether ``perf probe -V`` lists ``var`` (see the module's docstring)."""
    if var.expression is None:
        return var.const_value is not None
    return bool(var.expression) and var.expression[0] in _PERF_FIRST_OPS


def perf_variables(dbg: DebugInfo, point: ProbePoint) -> list[tuple[str, str]]:
    """``perf probe -V``'s list at ``point``: (type as perf prints it, name), sorted as perf
    prints them.  Only the variables of the copy ``point`` is in count (and of the
    blocks and inlined copies inside it): at an inlined copy's entry, perf lists the copy's
    own, not its caller's."""
    variables = copy_variables(dbg, point.function, point.address)
    found = [(var.type.perf_name, var.name) for var in variables if perf_listable(var)]
    return sorted(found, key=lambda tv: f"{tv[0]}\t{tv[1]}")


def format_variables(dbg: DebugInfo, text: str) -> str:
    """``perf probe -V TEXT``'s output."""
    points = resolve_points(dbg, text, with_variables=False)
    out = [f"Available variables at {text}"]
    for point in points:
        out.append(f"\t@<{point.where}>")
        listed = perf_variables(dbg, point)
        out += [f"\t\t{kind}\t{name}" for kind, name in listed] or ["\t\t(No matched variables)"]
    return "\n".join(out) + "\n"


def format_lines(dbg: DebugInfo, function: str) -> str:
    """``perf probe -L FUNCTION``'s output: the out-of-line copy's source from its declaration to
    three lines past its last probeable line, each probeable line numbered from the declaration."""
    fn = next((f for f in dbg.functions(function) if not f.inlined), dbg.functions(function)[0])
    lines = function_lines(dbg, fn)
    try:
        text = source_lines(dbg, fn.file)
    except SourceNotFoundError:
        raise
    last = (max(lines) if lines else fn.line) + 3  # perf shows three lines after the last numbered one
    out = [f"<{fn.name}@{fn.file}:0>"]
    for n in range(fn.line, min(last, len(text) - 1) + 1):
        number = f"{n - fn.line:>7}" if n in lines else " " * 7
        out.append(f"{number}  {text[n]}")  # perf's "%7d  %s", blank and trailing spaces kept
    return "\n".join(out) + "\n"
