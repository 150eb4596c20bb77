"""A session's debug information: what its program, libraries or kernel say in DWARF.

:class:`SessionDebug` (``s.debug``) finds, for any address the target runs, the ELF file
mapping it and that file's load bias, and opens the file's DWARF (in the file, or a separate
debug file found by build ID or ``.gnu_debuglink``, in the ``debug_dir`` given to
:func:`kpsdk.open` first) once per session, the index kept in kpsdk's cache
(``PrivateStore("dwarf")``).  A kernel's file is the ``symbols`` ELF it was opened with (a
``vmlinux``); a program's and its libraries' are the target's mapped files.  On top:

- **source probe points** (:meth:`SessionDebug.points`): ``parse_line:12``, ``demo.c:40``,
  ``parse_line@demo.c``, ``parse_line;total +=*``, ``clamp`` (every inlined copy), as run-time
  addresses;
- **variables at a hit** (:meth:`SessionDebug.var`, behind ``regs.var("buf->size")``): each
  ``(pc, path)`` is resolved once to a plan (where the value is, as registers and memory
  reads) and the plan is run at every hit, so a hit pays for its reads, not for the DWARF;
  where no plan can be made (an entry value, a value in pieces) the DWARF is evaluated at
  each hit instead;
- **call frame information for backtraces** (:meth:`SessionDebug.frame_table`): the
  ``.eh_frame``/``.debug_frame`` of whichever file maps a pc, its debug file's too.

Errors are the DWARF reader's, each naming what is wrong and what there is instead
(:class:`~kpsdk.errors.NotInScopeError` with the names in scope,
:class:`~kpsdk.errors.OptimizedOutError` with why, :class:`~kpsdk.errors.NoDebugInfoError`
with every place looked at).
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kpsdk.errors import (
    DebugInfoError,
    NoDebugInfoError,
    NotInScopeError,
    NotStaticError,
    OptimizedOutError,
    TargetFault,
)

if TYPE_CHECKING:
    from kpsdk.binfmt.dwarf import DebugInfo, FrameTable, Value
    from kpsdk.binfmt.dwarf.expr import Context, Location
    from kpsdk.binfmt.dwarf.probepoints import ProbePoint
    from kpsdk.binfmt.dwarf.values import Object
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: a source probe point: ``FUNC:N``, ``FILE.c:N``, ``FUNC@FILE``, ``FUNC;PATTERN``, ``FUNC%return``
_SOURCE = re.compile(r"^[A-Za-z_][\w.]*(?::\d+|@[^:;%+]*\.\w+(?::\d+)?|;.+|%return)$|^[^:;@\s]+\.\w+(?::\d+|;.+)$")


def is_source_point(text: object) -> bool:
    """Whether ``text`` is a probe point only debug information can resolve (a line, a file,
    a lazy pattern, ``%return``), not a symbol or an address (``add+0x4``, ``malloc@plt``)."""
    return isinstance(text, str) and _SOURCE.match(text.strip()) is not None and not text.strip().endswith("@plt")


@dataclass(frozen=True)
class CodeFile:
    """An ELF file the target runs: its path and what was added to its link-time addresses."""

    path: Path
    bias: int
    low: int = 0
    high: int = 0

    def holds(self, pc: int) -> bool:
        return self.low <= pc < self.high


@dataclass(frozen=True)
class SourcePoint:
    """One run-time address a source probe point resolves to: ``address`` (with the file's
    bias), the point in the file's DWARF (``point.where`` is ``SYM+OFF`` as perf names it) and
    the file it is in."""

    address: int
    point: ProbePoint
    file: CodeFile

    @property
    def symbol(self) -> str:
        return self.point.symbol

    @property
    def offset(self) -> int:
        return self.point.offset


class _HitMemory:
    """The memory half of a DWARF :class:`~kpsdk.binfmt.dwarf.Cpu`: the session's reads."""

    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self.read_memory = read

    def read_register(self, name: str) -> int:
        raise LookupError(f"register {name} is read through the hit's regs")


class HitCpu:
    """A DWARF :class:`~kpsdk.binfmt.dwarf.Cpu` over a hit's registers and the target's memory."""

    def __init__(self, regs: PtRegs, read: Callable[[int, int], bytes]) -> None:
        self.regs = regs
        self.read_memory = read

    def read_register(self, name: str) -> int:
        try:
            return int(self.regs[name])
        except AttributeError:
            raise LookupError(f"register {name} is not one kpsdk reads on this target") from None


#: a compiled read: the hit's registers -> the value's bytes
Reader = Callable[["PtRegs"], bytes]


class SessionDebug:
    """The debug information of one session's files (see the module's docstring)."""

    def __init__(self, session: Session, debug_dirs: Sequence[str | os.PathLike[str]] = ()) -> None:
        self.session = session
        self.debug_dirs = [Path(d) for d in debug_dirs]
        self._opened: dict[Path, DebugInfo | NoDebugInfoError] = {}
        #: how to read each (pc, path) at a hit, made on the first read there (PtRegs.var looks
        #: them up itself: a read costs a dict lookup and the plan's own work)
        self.plans: dict[tuple[int, str], Callable[[PtRegs], Value]] = {}
        self._tables: dict[Path, FrameTable | None] = {}
        self._contexts: dict[int, Context] = {}

    # -- files ----------------------------------------------------------------------------------

    def files(self) -> list[CodeFile]:
        """The ELF files the target runs now, the program (or kernel) first."""
        target = self.session.target
        out = []
        for mf in target.mapped_files():
            low, high = mf.span()
            out.append(CodeFile(Path(mf.path), mf.bias, low, high))
        symbols = getattr(target, "symbols_file", None)
        if not out and symbols:
            out.append(CodeFile(Path(symbols), 0, 0, 1 << (8 * target.arch.word_size)))
        return out

    def file_at(self, pc: int) -> CodeFile | None:
        """The file mapping ``pc`` (the innermost span: a library inside the program's is not
        possible, but a kernel's file spans everything)."""
        found = [f for f in self.files() if f.holds(pc)]
        return min(found, key=lambda f: f.high - f.low) if found else None

    def program(self) -> CodeFile:
        """The program (or the kernel's symbols file) of the session."""
        files = self.files()
        if not files:
            raise NoDebugInfoError(self.session.spec, ["the target runs no file kpsdk knows (for a kernel: "
                                                       "--symbols vmlinux with its DWARF)"])
        return files[0]

    def open(self, path: str | os.PathLike[str]) -> DebugInfo:
        """The DWARF of the file at ``path``, opened once per session.

        :raises NoDebugInfoError: neither the file nor a debug file found for it has DWARF.
        """
        from kpsdk.binfmt.dwarf import DebugInfo
        from kpsdk.cache import PrivateStore

        key = Path(path)
        found = self._opened.get(key)
        if found is None:
            try:
                found = DebugInfo.open(key, debug_dir=self.debug_dirs, store=PrivateStore("dwarf"),
                                       archs=self.session.registry.archs)
            except NoDebugInfoError as e:
                found = e
            self._opened[key] = found
        if isinstance(found, NoDebugInfoError):
            raise found
        return found

    def has_debug_info(self, path: str | os.PathLike[str]) -> bool:
        try:
            self.open(path)
        except NoDebugInfoError:
            return False
        return True

    def find_file(self, name: str | os.PathLike[str] | None) -> CodeFile:
        """The file a point names: the program when ``name`` is None, else the mapped file with
        that path or name (``libc.so.6``), else a file not mapped (yet) at bias 0."""
        if name is None:
            return self.program()
        path = Path(name)
        for f in self.files():
            if f.path == path or f.path.name == path.name or os.path.realpath(f.path) == os.path.realpath(path):
                return f
        return CodeFile(path, 0)

    # -- source probe points --------------------------------------------------------------------

    def points(self, spec: str, file: str | os.PathLike[str] | None = None,
               with_variables: bool = False) -> list[SourcePoint]:
        """The run-time addresses of the perf probe point ``spec`` in ``file`` (the program, or
        the kernel, when None): every inlined copy of a function, every place a line has code.
        ``with_variables``: a function's point where perf puts a probe that reads variables
        (past the prologue of unoptimized code, where its parameters are in their stack slots).

        :raises NoDebugInfoError, NoSuchFunctionError, NoSuchLineError, LocationError: as the
            DWARF reader's :func:`~kpsdk.binfmt.dwarf.probepoints.resolve_points`.
        """
        from kpsdk.binfmt.dwarf.probepoints import resolve_points

        where = self.find_file(file)
        dbg = self.open(where.path)
        return [SourcePoint(p.address + where.bias, p, where)
                for p in resolve_points(dbg, spec, with_variables=with_variables)]

    def inlined_copies(self, name: str, file: str | os.PathLike[str] | None = None) -> bool:
        """Whether the function ``name`` has inlined copies in ``file``'s DWARF (a bare name
        then means every copy, as perf probes it); False without debug information."""
        try:
            where = self.find_file(file)
            dbg = self.open(where.path)
        except DebugInfoError:
            return False
        return any(r.inlined for r in dbg.index.by_name.get(name, []))

    # -- variables at a hit ---------------------------------------------------------------------

    def var(self, regs: PtRegs, path: str) -> Value:
        """The value of ``path`` (``len``, ``buf->size``, ``argv[1]``, ``*p``) at the hit ``regs``
        are stopped at (see the module's docstring).

        :raises NotInScopeError: no such variable there (the error lists those in scope).
        :raises OptimizedOutError: the variable has no value there, with why.
        :raises MemberPathError: the path does not parse or fit the types.
        :raises NoDebugInfoError: the file the pc is in has no DWARF.
        """
        key = (regs.ip, path)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self._plan(*key, type(regs))
        return plan(regs)

    def vars(self, regs: PtRegs, which: str = "$vars") -> dict[str, Value | DebugInfoError]:
        """Every variable (``$vars``), parameter (``$params``) or local (``$locals``) in scope at
        the hit, innermost declaration of each name, by name: its value, or the error that
        says why it has none (an :class:`~kpsdk.errors.OptimizedOutError`)."""
        if which not in ("$vars", "$params", "$locals"):
            raise DebugInfoError(f"vars({which!r}): want '$vars', '$params' or '$locals'")
        where, dbg = self._debug_at(regs.ip)
        scope = dbg.scope(regs.ip - where.bias)
        out: dict[str, Value | DebugInfoError] = {}
        for name in dict.fromkeys(v.name for v in scope.variables):  # declaration order, each name once
            var = scope.lookup(name)  # the innermost declaration: the one C sees here
            assert var is not None
            if which == "$params" and var.kind != "parameter" or which == "$locals" and var.kind != "local":
                continue
            try:
                out[name] = self.var(regs, name)
            except DebugInfoError as e:
                out[name] = e
        return out

    def _debug_at(self, pc: int) -> tuple[CodeFile, DebugInfo]:
        where = self.file_at(pc)
        if where is None:
            raise NotInScopeError("", f"{pc:#x} (in no file kpsdk knows the target runs)", [])
        return where, self.open(where.path)

    def _context(self, dbg: DebugInfo) -> Context:
        """A context to follow pointers and read members of values read at hits (memory only)."""
        ctx = self._contexts.get(id(dbg))
        if ctx is None:
            from kpsdk.binfmt.dwarf.expr import Context

            ctx = Context(_HitMemory(self.session.read_memory), dbg.address_size, dbg.sections.num,  # type: ignore[arg-type]
                          lambda n: None)
            self._contexts[id(dbg)] = ctx
        return ctx

    def _plan(self, pc: int, path: str, regs_class: type | None = None) -> Callable[[PtRegs], Value]:
        """How to read ``path`` at ``pc``: a compiled read of its static location, else a
        DWARF evaluation at each hit; a lookup that fails fails the same way at every hit."""
        from kpsdk.binfmt.dwarf.values import Value

        try:
            where, dbg = self._debug_at(pc)
            file_pc = pc - where.bias
            obj = dbg.locate(file_pc, path)
        except (NotStaticError, OptimizedOutError):
            # an entry value, pieces, a register the static form lacks: the DWARF is asked at each
            # hit (where a value truly optimized out is reported, with why)
            return self._dynamic(pc, path)
        except DebugInfoError as e:
            error = e

            def fail(regs: PtRegs) -> Value:
                raise error

            return fail
        reader = self._reader(obj.location, obj, where.bias, dbg)
        if reader is None:
            return self._dynamic(pc, path)
        ctx = self._context(dbg)
        little = dbg.sections.num.little
        ctype = obj.type
        kind = ctype.strip().kind
        direct = self._direct(obj, dbg, ctx, kind, regs_class)
        if direct is not None:
            return direct
        if obj.bit_size:
            from kpsdk.binfmt.dwarf.expr import Implicit
            from kpsdk.binfmt.dwarf.values import read_value

            def bitfield(regs: PtRegs) -> Value:
                return read_value(type(obj)(Implicit(reader(regs)), ctype, obj.name, obj.bit_size, obj.bit_offset,
                                            obj.where), ctx)

            return bitfield
        return lambda regs: Value(ctype, reader(regs), little, ctx, kind)

    def _direct(self, obj: Object, dbg: DebugInfo, ctx: Context, kind: str,
                regs_class: type | None = None) -> Callable[[PtRegs], Value] | None:
        """The commonest plans as one closure each (a value in a register, or in memory at a
        register plus an offset): a hit pays one call a read (bench/dwarfvars.py)."""
        from kpsdk.binfmt.dwarf.expr import InMemory, InRegister, Sym
        from kpsdk.binfmt.dwarf.values import SCALAR_KINDS, ScalarValue, Value

        size = obj.type.size
        location = obj.location
        if obj.bit_size or not size:
            return None
        ctype, little = obj.type, dbg.sections.num.little
        order: Literal["little", "big"] = "little" if little else "big"
        registers = self.session.arch.by_name
        mask = (1 << (8 * size)) - 1
        scalar: Callable[[int], Value] | None = None
        signed = ctype.strip().signed
        sign, full = 1 << (8 * size - 1), 1 << (8 * size)
        if kind in SCALAR_KINDS and ctype.strip().encoding != "float" and size <= 8:
            scalar = ScalarValue.of(ctype, little, ctx)  # type: ignore[assignment]
        if isinstance(location, InRegister) and location.register in registers:
            get = _getter(regs_class, location.register)
            if scalar is not None:
                make = scalar
                if signed:
                    def signed_register(regs: PtRegs) -> Value:
                        raw = get(regs) & mask
                        return make(raw - full if raw & sign else raw)

                    return signed_register
                return lambda regs: make(get(regs) & mask)
            return lambda regs: Value(ctype, (get(regs) & mask).to_bytes(size, order), little, ctx, kind)
        if isinstance(location, InMemory) and isinstance(location.address, Sym) and \
                isinstance(location.address.base, str) and location.address.base in registers:
            base, offset = _getter(regs_class, location.address.base), location.address.offset
            word = self.session.arch.word_size
            wmask = (1 << (8 * word)) - 1
            target = self.session.target
            if scalar is not None and (size == word or (little and size < word)):
                # one word read (the target's fast path: the stack, or a cached page), cut to size
                read_word, make = target.read_word, scalar
                read = target.read_memory

                def word_scalar(regs: PtRegs) -> Value:
                    address = (base(regs) + offset) & wmask
                    try:
                        raw = read_word(address) & mask
                    except TargetFault:  # the word runs past the mapping: the value's own bytes
                        raw = int.from_bytes(read(address, size), order)
                    return make(raw - full if signed and raw & sign else raw)

                return word_scalar
            if size == word or (little and size < word):
                read_word = target.read_word
                read = target.read_memory

                def small(regs: PtRegs) -> Value:
                    address = (base(regs) + offset) & wmask
                    try:
                        raw = (read_word(address) & mask).to_bytes(size, order)
                    except TargetFault:  # the word runs past the mapping: the value's own bytes
                        raw = read(address, size)
                    return Value(ctype, raw, little, ctx, kind)

                return small
            read = target.read_memory
            return lambda regs: Value(ctype, read((base(regs) + offset) & wmask, size), little, ctx, kind)
        return None

    def _dynamic(self, pc: int, path: str) -> Callable[[PtRegs], Value]:
        read = self.session.read_memory

        def evaluate(regs: PtRegs) -> Value:
            where, dbg = self._debug_at(pc)
            return dbg.value(pc - where.bias, path, HitCpu(regs, read), bias=where.bias)

        return evaluate

    def _reader(self, location: Location, obj: Object, bias: int, dbg: DebugInfo) -> Reader | None:
        """The bytes of ``obj`` read from a static ``location`` (None: not static)."""
        from kpsdk.binfmt.dwarf.expr import InMemory, InRegister

        size = obj.type.size
        if obj.bit_size:
            size = (obj.bit_offset + obj.bit_size + 7) // 8
        if not size:
            return None
        target = self.session.target
        read = target.read_memory  # unchecked: the addresses are the program's own, computed
        little = dbg.sections.num.little
        order = "little" if little else "big"
        word = dbg.address_size
        if isinstance(location, InRegister):
            name = location.register
            if name not in self.session.arch.by_name:
                return None
            mask = (1 << (8 * size)) - 1
            get = operator.attrgetter(name)

            def register(regs: PtRegs) -> bytes:
                return (get(regs) & mask).to_bytes(size, order)

            return register
        if isinstance(location, InMemory):
            address = location.address
            if isinstance(address, int):
                fixed = address + bias
                return lambda regs: read(fixed, size)
            value = _compile_address(address, self.session.arch.by_name, target.read_word, word)
            if value is None:
                return None
            return lambda regs: read(value(regs), size)
        return None

    # -- call frame information -----------------------------------------------------------------

    def frame_table(self, pc: int) -> tuple[FrameTable, int] | None:
        """The call frame information of the file mapping ``pc`` and its bias (the file's own
        ``.eh_frame``, and its debug file's ``.debug_frame`` where one is found); None where no
        file kpsdk knows maps it, or it has no CFI."""
        where = self.file_at(pc)
        if where is None:
            return None
        if where.path not in self._tables:
            self._tables[where.path] = self._load_table(where.path)
        table = self._tables[where.path]
        return (table, where.bias) if table is not None else None

    def _load_table(self, path: Path) -> FrameTable | None:
        from kpsdk.binfmt.dwarf import FrameTable
        from kpsdk.binfmt.dwarf.debugfile import read_elf

        arch = self.session.arch
        if arch.dwarf is None:
            return None
        try:
            dbg = self.open(path)
        except DebugInfoError:
            dbg = None
        try:
            if dbg is not None:
                table = dbg.frame_table
            else:
                table = FrameTable.from_files(arch.dwarf, arch.pc, arch.sp, read_elf(path))
        except (DebugInfoError, OSError, ValueError):
            return None
        return table


#: files opened outside any session (a uprobe made before its session), by (path, mtime, size, dirs)
_FILES: dict[tuple[str, int, int, tuple[str, ...]], DebugInfo] = {}


def file_points(path: str | os.PathLike[str], spec: str, debug_dirs: Sequence[str | os.PathLike[str]] = (),
                with_variables: bool = False) -> list[tuple[int, ProbePoint]]:
    """The file offsets of the perf probe point ``spec`` in the ELF file at ``path`` (a uprobe's
    ``PATH:OFFSET`` for each address it resolves to), with the points themselves.

    :raises DebugInfoError: no debug information, or no such function or line (the error says
        which and what there is).
    """
    from kpsdk.binfmt.dwarf import DebugInfo
    from kpsdk.binfmt.dwarf.probepoints import resolve_points
    from kpsdk.binfmt.elfimage import load_elf
    from kpsdk.cache import PrivateStore

    st = os.stat(path)
    key = (os.path.realpath(path), st.st_mtime_ns, st.st_size, tuple(str(d) for d in debug_dirs))
    dbg = _FILES.get(key)
    if dbg is None:
        dbg = _FILES[key] = DebugInfo.open(path, debug_dir=list(debug_dirs), store=PrivateStore("dwarf"))
    image = load_elf(Path(path))
    out = []
    for point in resolve_points(dbg, spec, with_variables=with_variables):
        offset = image.vaddr_to_offset(point.address)
        if offset is None:
            raise DebugInfoError(f"{path}: {spec!r} resolves to {point.address:#x}, in no executable segment")
        out.append((offset, point))
    return out


def _getter(regs_class: type | None, name: str) -> Callable[[Any], int]:
    """How a plan reads register ``name`` from a hit's regs: the getter of ``regs_class``'s
    property itself where it has one (the target's fast path, no attribute lookup), else by name."""
    prop = getattr(regs_class, name, None) if regs_class is not None else None
    if isinstance(prop, property) and prop.fget is not None:
        return prop.fget
    return operator.attrgetter(name)


def _compile_address(address: Any, registers: dict[str, Any], read_word: Callable[[int], int],
                     word: int) -> Callable[[PtRegs], int] | None:
    """A function of the hit's registers computing a symbolic address (:class:`Sym`: a register
    plus an offset, or the word at another such address plus an offset); None when a register
    is not one the target reads."""
    from kpsdk.binfmt.dwarf.expr import Sym

    if not isinstance(address, Sym):
        return None
    offset = address.offset
    mask = (1 << (8 * word)) - 1
    if isinstance(address.base, str):
        if address.base not in registers:
            return None
        get = operator.attrgetter(address.base)
        return lambda regs: (get(regs) + offset) & mask
    inner = _compile_address(address.base, registers, read_word, word)
    if inner is None:
        return None
    return lambda regs: (read_word(inner(regs)) + offset) & mask
