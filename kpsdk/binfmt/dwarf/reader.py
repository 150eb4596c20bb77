"""A program's debug information, opened: :class:`DebugInfo`.

Opening reads the program (and its separate debug file, :mod:`.debugfile`), hands the DWARF
sections to pyelftools, and makes the index (:mod:`.index`) on first need, from the store
when it holds one for this build ID.  Everything else is read when asked: one function's
DIEs for its variables (:mod:`.scope`), one unit's line table for its lines (:mod:`.lines`),
the call frame information for the CFA (:mod:`.cfi`).

Addresses are the file's own (link-time virtual addresses); a caller that loaded a PIE or a
library at a bias adds it to what comes out and subtracts it from what goes in.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct import ConstructError
from elftools.dwarf.dwarfinfo import DWARFInfo

from kpsdk.binfmt.archs import arch_for
from kpsdk.binfmt.dwarf.debugfile import DebugFile, find_debug_file, read_elf
from kpsdk.binfmt.dwarf.index import Index, IndexStore, MemoryStore, load_index, save_index, store_key
from kpsdk.binfmt.dwarf.linetable import LineTable, decode, files
from kpsdk.binfmt.dwarf.scan import FunctionRecord, Scanner, UnitRecord
from kpsdk.binfmt.dwarf.sections import Sections
from kpsdk.binfmt.dwarf.types import TypeTable
from kpsdk.binfmt.symbols import SymbolTable, SymbolTables
from kpsdk.errors import DebugInfoError, DwarfFormatError, NoSuchFunctionError

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

    from kpsdk.arch import Arch, ArchRegistry
    from kpsdk.binfmt.dwarf.cfi import FrameTable
    from kpsdk.binfmt.dwarf.cpu import Cpu
    from kpsdk.binfmt.dwarf.scope import Scope, Variable
    from kpsdk.binfmt.dwarf.values import Object, Value
    from kpsdk.binfmt.elfimage import ElfFile

#: what pyelftools and kpsdk's own decoders raise on malformed DWARF
DWARF_ERRORS = (ELFError, DWARFError, ConstructError, ValueError, IndexError, KeyError, struct.error, EOFError,
                AssertionError, RecursionError)


@dataclass(frozen=True)
class Function:
    """A function's code: the out-of-line copy, or one inlined copy (``inlined``).

    :param entry: where its code starts executing (``DW_AT_entry_pc``, else its lowest address).
    :param ranges: its code, as ``(low, high)`` address ranges.
    :param file: the source file it is declared in, and ``line`` the line.
    :param call_file: an inlined copy's call site (``call_line``), else ``""`` and 0.
    :param caller: the out-of-line function an inlined copy is in, else ``""``.
    :param die: the DIE of this copy (``.debug_info`` offset), ``unit`` its unit's offset.
    :param caller_die: an inlined copy's out-of-line function's DIE (the one its DIE is in), else -1.
    """

    name: str
    entry: int
    ranges: tuple[tuple[int, int], ...]
    inlined: bool
    file: str
    line: int
    call_file: str
    call_line: int
    caller: str
    external: bool
    die: int
    unit: int
    caller_die: int = -1

    @property
    def low(self) -> int:
        """Its lowest address (its entry for an inlined copy left with no code)."""
        return min((low for low, _ in self.ranges), default=self.entry)

    @property
    def high(self) -> int:
        return max((high for _, high in self.ranges), default=self.entry)

    def contains(self, pc: int) -> bool:
        return any(low <= pc < high for low, high in self.ranges)


class DebugInfo:
    """The DWARF of one program (see the module's docstring); made by :meth:`open`."""

    def __init__(self, path: Path, program: ElfFile, debug: DebugFile, store: IndexStore,
                 arch: Arch | None, source_dirs: Sequence[Path]) -> None:
        self.path = path
        self.program = program
        self.debug = debug
        self.store = store
        self.arch = arch
        self.source_dirs = tuple(source_dirs)
        self._lines: dict[int, LineTable] = {}
        self._files: dict[int, LineTable] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, debug_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
             | None = None, store: IndexStore | None = None, archs: ArchRegistry | None = None,
             source_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None) -> DebugInfo:
        """The debug information of the program at ``path``.

        :param debug_dir: directories searched for a separate debug file before
            ``/usr/lib/debug`` (by build ID, by ``.gnu_debuglink``, or as the file's folder).
        :param store: where the index is kept between opens (``kpsdk.cache.PrivateStore("dwarf")``);
            None: in memory, for this object only.
        :param archs: the architectures to match the file against (None: kpsdk's registry).
        :param source_dir: directories holding the sources, tried before the paths the DWARF
            records (only lazy ``FUNC;PATTERN`` lines read sources).
        :raises NoDebugInfoError: no DWARF in the program nor any debug file found; the error
            lists every place looked at.
        """
        program_path = Path(path)
        program = read_elf(program_path)
        dirs = _paths(debug_dir)
        debug = find_debug_file(program_path, program, dirs)
        arch = arch_for(program.machine, program.elf_class, program.endian, archs)
        return cls(program_path, program, debug, store or MemoryStore(), arch, _paths(source_dir))

    def __repr__(self) -> str:
        where = f" (debug file {self.debug.path})" if self.debug.separate else ""
        return f"<DebugInfo {self.path}{where}>"

    # -- the parts, made on first use ---------------------------------------------------------------

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Around a read of the DWARF: malformed data becomes a :class:`DwarfFormatError`."""
        try:
            yield
        except DWARF_ERRORS as e:
            raise DwarfFormatError(self.debug.path, f"{what}: {type(e).__name__}: {e}") from e

    @cached_property
    def dwarf(self) -> DWARFInfo:
        """pyelftools' view of the debug file's DWARF."""
        with self.reading("the DWARF sections"):
            # relocations are for relocatable objects: a vmlinux keeps its .rela.debug_* (applied already) too
            relocate = self.debug.elf.elf.header["e_type"] == "ET_REL"
            return self.debug.elf.elf.get_dwarf_info(relocate_dwarf_sections=relocate, follow_links=False)

    @cached_property
    def sections(self) -> Sections:
        with self.reading("the DWARF sections"):
            return Sections(self.dwarf)

    @cached_property
    def index(self) -> Index:
        """Functions, inlined copies and globals (from the store when it has this file's)."""
        key = store_key(self.debug.build_id, b"" if self.debug.build_id else self.debug.elf._data)
        index = load_index(self.store, key)
        if index is None:
            with self.reading(".debug_info"):
                index = Index(Scanner(self.sections).run())
            save_index(self.store, key, index)
        return index

    @cached_property
    def symbols(self) -> SymbolTable:
        """The program's ELF symbols (``.symtab``, else ``.dynsym``; a stripped program's from its
        debug file's ``.symtab``), as :func:`kpsdk.binfmt.elfimage.load_elf` reads them."""
        from kpsdk.binfmt.elfimage import load_elf

        with self.reading("the symbol table"):
            table = load_elf(self.path).symbols
            if self.debug.separate:
                table = SymbolTables([table, load_elf(self.debug.path).symbols])
        return table

    @cached_property
    def types(self) -> TypeTable:
        return TypeTable(self.debug.elf.elf_class // 8, self.debug.elf.endian == "little")

    @property
    def address_size(self) -> int:
        return self.debug.elf.elf_class // 8

    def die(self, offset: int) -> DIE:
        """The DIE at ``offset`` of ``.debug_info``, read by pyelftools."""
        with self.reading(f"the DIE at .debug_info+{offset:#x}"):
            return self.dwarf.get_DIE_from_refaddr(offset)

    def unit(self, offset: int) -> UnitRecord:
        """The indexed unit at ``offset``."""
        return self.index.unit_by_offset[offset]

    def line_files(self, unit: UnitRecord) -> LineTable:
        """``unit``'s line table's files only (no rows: the program is not run), for naming
        the files of declarations; the whole table when it was decoded already."""
        table = self._lines.get(unit.offset) or self._files.get(unit.offset)
        if table is None:
            if unit.stmt_list < 0:
                table = LineTable([])
            else:
                with self.reading(f"the line program header at .debug_line+{unit.stmt_list:#x}"):
                    table = files(self.sections, unit.stmt_list, unit.comp_dir, unit.name, unit.address_size)
            self._files[unit.offset] = table
        return table

    def line_table(self, unit: UnitRecord) -> LineTable:
        """``unit``'s line table, decoded on first use."""
        table = self._lines.get(unit.offset)
        if table is None:
            if unit.stmt_list < 0:
                table = LineTable([])
            else:
                with self.reading(f"the line program at .debug_line+{unit.stmt_list:#x}"):
                    table = decode(self.sections, unit.stmt_list, unit.comp_dir, unit.name, unit.address_size)
            self._lines[unit.offset] = table
        return table

    # -- functions ------------------------------------------------------------------------------------

    def _function(self, rec: FunctionRecord) -> Function:
        unit = self.unit(rec.unit)
        table = self.line_files(unit)
        caller = ""
        if rec.inlined and rec.caller >= 0:
            outer = self.index.by_die.get(rec.caller)
            caller = outer.name if outer is not None else ""
        return Function(rec.name, rec.entry, tuple(rec.ranges), rec.inlined, table.file(rec.decl_file),
                        rec.decl_line, table.file(rec.call_file) if rec.inlined else "", rec.call_line, caller,
                        rec.external, rec.die, rec.unit, rec.caller)

    def functions(self, name: str, *, inlined: bool = True) -> list[Function]:
        """Every copy of the function ``name``: its out-of-line code and, with ``inlined``,
        each inlined copy (as ``perf probe`` puts a probe on each), by entry address.

        :raises NoSuchFunctionError: no function of that name has code; the error names close ones.
        """
        every = self.index.by_name.get(name, [])
        records = [r for r in every if inlined or not r.inlined]
        if not records:
            if every:
                raise NoSuchFunctionError(name, problem=f"{name!r} has no out-of-line copy: it is only inlined "
                                                        f"({len(every)} copies)")
            raise NoSuchFunctionError(name, self._similar(name))
        return sorted((self._function(r) for r in records), key=lambda f: (f.entry, f.inlined, f.die))

    def function_names(self) -> list[str]:
        """The names of every function with code, sorted."""
        return sorted(n for n in self.index.by_name if n)

    def function_at(self, pc: int) -> Function | None:
        """The out-of-line function whose code holds ``pc``."""
        rec = self.index.function_at(pc)
        return self._function(rec) if rec is not None else None

    def inlined_at(self, pc: int) -> list[Function]:
        """The inlined copies whose code holds ``pc``, outermost first (the function
        :meth:`function_at` returns is around them all)."""
        outer = self.index.function_at(pc)
        if outer is None:
            return []
        found = [r for r in self.index.inlined_in(outer.die) if any(lo <= pc < hi for lo, hi in r.ranges)]
        found.sort(key=lambda r: r.die)
        return [self._function(r) for r in found]

    def _similar(self, name: str) -> list[str]:
        import difflib

        return difflib.get_close_matches(name, [n for n in self.index.by_name if n], n=5)

    # -- the questions, answered by the modules that know how -------------------------------------

    def scope(self, pc: int) -> Scope:
        """The variables in scope at ``pc`` (:mod:`.scope`).

        :raises NotInScopeError: ``pc`` is in no function with debug information.
        """
        from kpsdk.binfmt.dwarf.frames import scope_or_error

        return scope_or_error(self, pc)

    def value(self, pc: int, path: str, cpu: Cpu, *, bias: int = 0) -> Value:
        """The value of ``path`` (``len``, ``buf->size``, ``argv[1]``, ``*p``) at ``pc`` on
        ``cpu``: a CPU stopped at ``pc + bias``, the program loaded ``bias`` above its file
        addresses.

        :raises NotInScopeError: no such variable there (the error lists those in scope).
        :raises OptimizedOutError: the variable has no value there.
        :raises MemberPathError: the path does not parse or fit the types.
        """
        from kpsdk.binfmt.dwarf.frames import value

        return value(self, self.scope(pc), path, cpu, bias)

    def locate(self, pc: int, path: str, cpu: Cpu | None = None, *, bias: int = 0) -> Object:
        """The typed location of ``path`` at ``pc``.  Without ``cpu`` it is static: registers
        and memory stay symbolic (:class:`~kpsdk.binfmt.dwarf.expr.Sym`), which a probe
        definition can use (``buf->size`` is ``InMemory(Sym(Sym('rdi'), 0))``: the word at
        ``rdi``); an expression that needs the CPU raises
        :class:`~kpsdk.binfmt.dwarf.expr.NotStatic`."""
        from kpsdk.binfmt.dwarf.expr import SymbolicCpu
        from kpsdk.binfmt.dwarf.frames import context, resolve

        scope = self.scope(pc)
        ctx = context(self, scope, cpu if cpu is not None else SymbolicCpu(), bias)
        return resolve(self, scope, path, ctx)

    def globals(self, name: str | None = None) -> list[Variable]:
        """The variables of file scope with a static address (``perf probe --externs``), all
        or those called ``name``; their :attr:`~Variable.expression` is their ``DW_OP_addr``."""
        from kpsdk.binfmt.dwarf.scope import global_variables

        return global_variables(self, name)

    def global_value(self, path: str, cpu: Cpu, *, bias: int = 0) -> Value:
        """The value of ``path`` from a global variable (``global_buf.fl.mode``), at any pc."""
        from kpsdk.binfmt.dwarf.frames import global_value

        return global_value(self, path, cpu, bias)

    @cached_property
    def frame_table(self) -> FrameTable:
        """The call frame information of the program (``.eh_frame``) and of its debug file
        (``.debug_frame``).

        :raises DebugInfoError: the file's architecture is unknown or has no DWARF registers.
        """
        from kpsdk.binfmt.dwarf.cfi import FrameTable

        if self.arch is None or self.arch.dwarf is None:
            raise DebugInfoError(f"{self.path}: its architecture ({self.program.machine}) has no DWARF register "
                                 "table (Arch.dwarf), so its call frame information cannot be read")
        files = [self.program, self.debug.elf] if self.debug.separate else [self.program]
        with self.reading("the call frame information"):
            return FrameTable.from_files(self.arch.dwarf, self.arch.pc, self.arch.sp, *files)

    def producer(self, unit: int) -> str:
        """The compiler and options that built a unit (``DW_AT_producer``)."""
        return self.unit(unit).producer

    def optimized(self, unit: int) -> bool:
        """Whether a unit was compiled with optimization, judged as perf does from its
        ``DW_AT_producer``: an ``-O`` option other than ``-O0``."""
        for word in self.producer(unit).split():
            if word.startswith("-O") and word != "-O0":
                return True
        return False


def _paths(value: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, str | os.PathLike):
        return [Path(value)]
    return [Path(v) for v in value]
