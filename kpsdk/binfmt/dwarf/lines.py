"""Source lines: which lines of a function have code, and where a line's code is.

The answers come from the unit's line table (:mod:`.linetable`), from its rows marked
``is_stmt`` (the compiler's "a statement begins here", the rows debuggers stop at):

- :func:`function_lines`: the lines of a function's own file that have a statement row in
  its code, each with its addresses (the first of each run of rows: where execution enters
  the line); the entry counts as the declaration's line (the row there, often the ``{``
  line, is not listed apart): ``perf probe -L``'s numbered lines, as offsets from the
  declaration line;
- :func:`line_addresses`: ``FILE:LINE`` anywhere in the program, the file matched by its
  full path or by a trailing part of it (``dwfix.c``, ``src/dwfix.c``);
- :func:`relative_line`: ``FUNC:RELLINE``, the line ``RELLINE`` lines after the function's
  declaration, inside that function;
- :func:`lazy_lines`: perf's ``FUNC;PATTERN``, the lines of the function whose source text
  matches a glob (perf's rule: the pattern must match the whole line, so perf users write
  ``*foo*``; leading and trailing white space of the line is ignored), read from the
  source file where the unit says it was compiled (``DW_AT_comp_dir`` + ``DW_AT_name``) or
  from the ``source_dir`` given to :meth:`DebugInfo.open`.

The entry a probe by function name lands on is :func:`probe_address`.
"""

from __future__ import annotations

import bisect
import fnmatch
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.binfmt.dwarf.linetable import END_SEQUENCE, IS_STMT, PROLOGUE_END, LineTable
from kpsdk.binfmt.files import read_regular
from kpsdk.errors import ImageFormatError, NoSuchLineError, SourceNotFoundError

if TYPE_CHECKING:
    from kpsdk.binfmt.dwarf.reader import DebugInfo, Function


def _rows_in(table: LineTable, ranges: tuple[tuple[int, int], ...]) -> list[int]:
    """Indexes of the rows whose address is inside ``ranges`` (end-of-sequence rows excluded)."""
    out = []
    for i, address in enumerate(table.addresses):
        if table.flags[i] & END_SEQUENCE:
            continue
        if any(low <= address < high for low, high in ranges):
            out.append(i)
    return out


def function_lines(dbg: DebugInfo, fn: Function) -> dict[int, list[int]]:
    """The lines of ``fn``'s file with statement rows in its code: line -> addresses, sorted."""
    table = dbg.line_table(dbg.unit(fn.unit))
    out: dict[int, list[int]] = {}
    previous = (-1, "")
    inlined = _inlined_spans(dbg, fn)
    for i in _rows_in(table, fn.ranges):
        if not table.flags[i] & IS_STMT:
            continue
        line, file = table.lines[i], table.file(table.file_of[i])
        call = _call_line(inlined, table.addresses[i])
        if call is not None and call != (line, file):
            previous = (-1, "")  # code inlined here from another function: its lines are not this one's
            continue
        if table.addresses[i] == fn.entry and fn.line and not fn.inlined:
            line, file = fn.line, fn.file  # the entry is the declaration's line, as perf counts it
        if file != fn.file or not line:
            previous = (-1, "")
            continue
        if (line, file) != previous:
            addresses = out.setdefault(line, [])
            if table.addresses[i] not in addresses:
                addresses.append(table.addresses[i])
        previous = (line, file)
    if fn.line and not fn.inlined:
        entry = out.setdefault(fn.line, [])
        if fn.entry not in entry:
            entry.append(fn.entry)
    for addresses in out.values():
        addresses.sort()
    return dict(sorted(out.items()))


def _inlined_spans(dbg: DebugInfo, fn: Function) -> list[tuple[int, int, int, str]]:
    """(low, high, call line, call file) of the inlined copies directly inside ``fn`` (the
    outermost ones: a copy inside a copy is inside its parent's ranges)."""
    table = dbg.line_table(dbg.unit(fn.unit))
    spans = []
    if fn.inlined:
        parent = fn.die
        records = [r for r in dbg.index.inlined_in(dbg.index.by_die[fn.die].caller) if r.die > parent]
        records = [r for r in records if any(fn.contains(lo) for lo, _ in r.ranges) and r.die != parent]
    else:
        records = list(dbg.index.inlined_in(fn.die))
    for r in records:
        for low, high in r.ranges:
            spans.append((low, high, r.call_line, table.file(r.call_file)))
    # outermost first: the widest span containing an address wins
    spans.sort(key=lambda s: (s[0], -s[1]))
    return spans


def _call_line(spans: list[tuple[int, int, int, str]], address: int) -> tuple[int, str] | None:
    best = None
    for low, high, line, file in spans:
        if low <= address < high and (best is None or high - low > best[0]):
            best = (high - low, line, file)
    return (best[1], best[2]) if best is not None else None


def probeable_lines(dbg: DebugInfo, fn: Function) -> list[int]:
    """``perf probe -L FUNC``'s numbered lines: offsets from the declaration line."""
    return [line - fn.line for line in function_lines(dbg, fn)]


def after_prologue(dbg: DebugInfo, fn: Function) -> int:
    """Where the function's body starts, from the line table: the address of a
    ``prologue_end`` row if the compiler marked one (Clang does), else of the first statement
    row after the entry, the end of the entry's "line" (gdb's "skip prologue using the line
    table", and where ``perf probe -D`` puts a probe that reads variables: the same even when
    the function is one line, whose body is then a second row of that line; GCC marks no
    prologue end).  The entry itself when the table says nothing more."""
    table = dbg.line_table(dbg.unit(fn.unit))
    rows = sorted((table.addresses[i], i) for i in _rows_in(table, fn.ranges))
    for address, i in rows:
        if table.flags[i] & PROLOGUE_END and address >= fn.entry:
            return address
    for address, i in rows:
        if address > fn.entry and table.flags[i] & IS_STMT:
            return address
    return fn.entry


def probe_address(dbg: DebugInfo, fn: Function, with_variables: bool = True) -> int:
    """Where ``perf probe`` puts a probe on ``FUNC``: the function's entry in optimized code
    (a unit whose ``DW_AT_producer`` has an ``-O`` other than ``-O0``); in code built without
    optimization, when the probe reads variables, past the prologue (:func:`after_prologue`),
    where the parameters have been stored to the stack slots the debug information names."""
    if with_variables and not dbg.optimized(fn.unit):
        return after_prologue(dbg, fn)
    return fn.entry


def _file_matches(path: str, wanted: str) -> bool:
    wanted = posixpath.normpath(wanted)
    return path == wanted or path.endswith("/" + wanted.lstrip("/"))


def line_addresses(dbg: DebugInfo, file: str, line: int) -> list[int]:
    """The addresses of ``FILE:LINE``: in each function with code from that line, the first
    address of it.  :class:`NoSuchLineError` when no code comes from it (with the nearest
    lines that have some)."""
    found: list[int] = []
    near: set[int] = set()
    matched = False
    for unit in dbg.index.units:
        table = dbg.line_table(unit)
        files = {i for i, f in enumerate(table.files) if _file_matches(f, file)}
        if not files:
            continue
        matched = True
        for i, row_line in enumerate(table.lines):
            if table.file_of[i] not in files or table.flags[i] & END_SEQUENCE or not table.flags[i] & IS_STMT:
                continue
            if row_line == line:
                found.append(table.addresses[i])
            elif abs(row_line - line) <= 5:
                near.add(row_line)
    if not matched:
        raise NoSuchLineError(f"{file}:{line}", "no such source file in the debug information")
    by_function: dict[int, int] = {}
    for address in sorted(found):
        fn = dbg.index.function_at(address)
        key = fn.die if fn is not None else -1
        by_function.setdefault(key, address)
    if not by_function:
        raise NoSuchLineError(f"{file}:{line}", "no code comes from this line", sorted(near))
    return sorted(by_function.values())


def statement_addresses(dbg: DebugInfo, file: str, line: int, unit: int | None = None) -> list[int]:
    """Every address ``perf probe`` puts a probe on for ``FILE:LINE`` (or ``FUNC:RELLINE``,
    ``unit`` being the function's): each statement row of that line, then the entry of each
    function declared on it and of each copy inlined from it (perf's die_walk_lines), in the
    unit given or in every unit with the file, once per address.

    An address that stands for another line is refused, as perf refuses it ("This line is
    sharing the address with other lines"): a function's entry stands for its declaration
    line, any other address for the line of its first row; one such address refuses the
    line (a probe there would stand for that other line).

    :raises NoSuchLineError: no code from that line (with the nearest lines that have some),
        or only shared addresses (naming the line that owns them).
    """
    found: list[int] = []
    shared: list[tuple[int, int]] = []
    near: set[int] = set()
    matched = False
    records = [dbg.unit(unit)] if unit is not None else dbg.index.units
    offsets = {r.offset for r in records}
    functions = [f for f in dbg.index.functions if f.unit in offsets]
    for record in records:
        table = dbg.line_table(record)
        files = {i for i, f in enumerate(table.files) if _file_matches(f, file)}
        if not files:
            continue
        matched = True
        owner: dict[int, tuple[int, int]] = {}
        for i, address in enumerate(table.addresses):
            if not table.flags[i] & END_SEQUENCE:
                owner.setdefault(address, (table.file_of[i], table.lines[i]))
        mine = [f for f in functions if f.unit == record.offset]
        for fn in mine:
            if not fn.inlined:
                owner[fn.entry] = (fn.decl_file, fn.decl_line)
        candidates = [table.addresses[i] for i, row_line in enumerate(table.lines)
                      if row_line == line and table.file_of[i] in files and table.flags[i] & IS_STMT
                      and not table.flags[i] & END_SEQUENCE]
        near.update(n for i, n in enumerate(table.lines) if table.file_of[i] in files and 0 < abs(n - line) <= 5
                    and table.flags[i] & IS_STMT)
        for fn in mine:
            if fn.decl_line == line and fn.decl_file in files:
                candidates.append(fn.entry)
            if fn.inlined and fn.call_line == line and fn.call_file in files:
                candidates.append(fn.entry)
        for address in candidates:
            owner_file, owner_line = owner.get(address, (-1, line))
            if owner_line != line and owner_file in files:
                shared.append((address, owner_line))
            elif address not in found:
                found.append(address)
    if not matched:
        raise NoSuchLineError(f"{file}:{line}", "no such source file in the debug information")
    if shared:
        raise NoSuchLineError(f"{file}:{line}", f"this line is sharing the address {shared[0][0]:#x} with line "
                              f"{shared[0][1]}: probe that line instead", [shared[0][1]])
    if not found:
        raise NoSuchLineError(f"{file}:{line}", "no code comes from this line", sorted(near))
    return found


def relative_line(dbg: DebugInfo, fn: Function, relline: int) -> list[int]:
    """The addresses of ``FUNC:RELLINE`` in the copy ``fn``: the line ``relline`` lines after
    its declaration line, the first address of each run of it."""
    lines = function_lines(dbg, fn)
    line = fn.line + relline
    if line not in lines:
        raise NoSuchLineError(f"{fn.name}:{relline}", f"no code comes from line {line} of {fn.file}",
                              [n - fn.line for n in lines])
    return lines[line][:1]


def source_path(dbg: DebugInfo, path: str) -> Path:
    """Where the source file ``path`` (as the line table names it) is: under a ``source_dir``
    given to :meth:`DebugInfo.open` (by its trailing parts), else at ``path``."""
    looked = []
    parts = Path(path).parts
    for directory in dbg.source_dirs:
        for k in range(len(parts)):
            candidate = directory.joinpath(*parts[k:]) if parts[k:] and parts[k] != "/" else None
            if candidate is None:
                continue
            looked.append(str(candidate))
            if candidate.is_file():
                return candidate
    looked.append(path)
    if Path(path).is_file():
        return Path(path)
    raise SourceNotFoundError(path, looked)


def source_lines(dbg: DebugInfo, path: str) -> list[str]:
    """The lines of the source file ``path`` (1-based: index 0 is an empty line)."""
    found = source_path(dbg, path)
    try:
        data, _ = read_regular(found)
    except (OSError, ImageFormatError) as e:
        raise SourceNotFoundError(path, [f"{found}: {e}"]) from e
    return ["", *data.decode("utf-8", "replace").splitlines()]


def lazy_lines(dbg: DebugInfo, fn: Function, pattern: str) -> list[int]:
    """``FUNC;PATTERN``: the probeable lines of ``fn`` whose source text matches the glob
    ``pattern`` (absolute line numbers).  :class:`NoSuchLineError` when none does."""
    lines = function_lines(dbg, fn)
    text = source_lines(dbg, fn.file)
    hits = [n for n in lines if 0 < n < len(text) and fnmatch.fnmatchcase(text[n].strip(), pattern)]
    if not hits:
        raise NoSuchLineError(f"{fn.name};{pattern}", "no probeable line of the function matches the pattern",
                              [n - fn.line for n in lines])
    return hits


def line_at(dbg: DebugInfo, pc: int) -> tuple[str, int] | None:
    """The source file and line of the code at ``pc`` (the last row at or before it)."""
    unit = dbg.index.unit_at(pc)
    if unit is None:
        return None
    table = dbg.line_table(unit)
    best = None
    pairs = sorted((a, i) for i, a in enumerate(table.addresses) if not table.flags[i] & END_SEQUENCE)
    k = bisect.bisect_right(pairs, (pc, len(table.addresses)))
    if k:
        best = pairs[k - 1][1]
    if best is None:
        return None
    return table.file(table.file_of[best]), table.lines[best]
