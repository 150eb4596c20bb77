"""DWARF debug information: functions, lines, variables, types, and call frames.

Open a program with :meth:`DebugInfo.open` (its DWARF may be in the program or in a separate
debug file, found by build ID or ``.gnu_debuglink``), then ask:

- functions by name, each out-of-line and inlined copy (:meth:`DebugInfo.functions`), the
  address a probe on one goes to (:func:`probe_address`), their lines (:func:`function_lines`,
  :func:`probeable_lines`), ``FILE:LINE`` (:func:`line_addresses`), ``FUNC:RELLINE``
  (:func:`relative_line`) and ``FUNC;PATTERN`` (:func:`lazy_lines`);
- the variables in scope at a pc (:meth:`DebugInfo.scope`) with their types (:class:`CType`)
  and locations; a path's typed location (:meth:`DebugInfo.locate`, static without a CPU)
  and its value on a CPU (:meth:`DebugInfo.value`, a :class:`Value`);
- the call frame information (:attr:`DebugInfo.frame_table`) and the stack
  (:func:`unwind`), through libraries too.

A CPU is anything with ``read_register(name)`` and ``read_memory(address, size)``
(:class:`Cpu`).  The module layout is in docs/dwarf.md.
"""

from __future__ import annotations

from kpsdk.binfmt.dwarf.access import Step, parse
from kpsdk.binfmt.dwarf.cfi import Frame, FrameCpu, FrameTable, unwind
from kpsdk.binfmt.dwarf.cpu import Cpu, DictCpu
from kpsdk.binfmt.dwarf.debugfile import DebugFile, build_id, debuglink, find_debug_file
from kpsdk.binfmt.dwarf.expr import (
    Computed,
    Implicit,
    InMemory,
    InRegister,
    Location,
    NotStatic,
    OptimizedOut,
    Piece,
    Pieces,
    Sym,
    SymbolicCpu,
)
from kpsdk.binfmt.dwarf.index import IndexStore, MemoryStore
from kpsdk.binfmt.dwarf.lines import (
    after_prologue,
    function_lines,
    lazy_lines,
    line_addresses,
    line_at,
    probe_address,
    probeable_lines,
    relative_line,
)
from kpsdk.binfmt.dwarf.reader import DebugInfo, Function
from kpsdk.binfmt.dwarf.scope import Scope, Variable
from kpsdk.binfmt.dwarf.types import CType, Member
from kpsdk.binfmt.dwarf.values import Object, Value

__all__ = [
    "CType", "Computed", "Cpu", "DebugFile", "DebugInfo", "DictCpu", "Frame", "FrameCpu", "FrameTable", "Function",
    "Implicit", "InMemory", "InRegister", "IndexStore", "Location", "Member", "MemoryStore", "NotStatic", "Object",
    "OptimizedOut", "Piece", "Pieces", "Scope", "Step", "Sym", "SymbolicCpu", "Value", "Variable", "after_prologue",
    "build_id", "debuglink", "find_debug_file", "function_lines", "lazy_lines", "line_addresses", "line_at",
    "parse", "probe_address", "probeable_lines", "relative_line", "unwind",
]
