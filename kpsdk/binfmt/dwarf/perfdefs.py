"""``perf probe`` definitions translated into the ``kprobe_events``/``uprobe_events`` lines they mean.

A perf probe definition (``perf probe --help``, "PROBE SYNTAX" and "PROBE ARGUMENT") is::

    [[GROUP:]EVENT=]POINT [[NAME=]ARG[:TYPE] ...]

where POINT is a source-level probe point (:mod:`.probepoints`) and each ARG a variable path
(``len``, ``buf->size``, ``argv[1]``), ``$vars``/``$params`` (every variable or parameter
that can be read there), ``$retval`` on a return probe, or a raw fetch argument (``%di``,
``+8(%si)``, ``@sym``) passed through.  :func:`translate` resolves the point with the debug
information and each variable to its static location (registers and the words read through
them, :class:`~kpsdk.binfmt.dwarf.expr.Sym`), and writes the lines as ``perf probe -D``
prints them, perf's names and types included:

- the group is ``probe`` for a kernel, ``probe_PROG`` for a program (its file name up to the
  first ``-``, ``.`` or ``_``); the event is the function's name (cut at ``.``), ``FUNC_LN`` for
  ``FUNC:N``, ``FUNC__return`` for a return probe;
- an argument is named as written (``NAME=``), else by its last member (``buf->size`` is
  ``size``, ``argv[1]`` is ``argv``), else the variable with its type (``line:string`` is
  ``line_string``);
- a variable's type is perf's: ``sN`` for signed integers, ``xN`` for the rest (pointers,
  unsigned, enums, floats), structs cut to 64 bits, arrays untyped, bitfields
  ``b<width>@<offset>/<container>``; ``:string`` reads what a ``char *`` points to, or a
  ``char`` array; ``:u``/``:s``/``:x`` keep the width and change the format.

Two places where kpsdk writes another line than perf 6.1, on purpose: a bitfield's offset is
counted from the container's least significant bit, as the kernel's ``b<w>@<o>/<s>`` reads it
(perf 6.1 prints DWARF 4's ``DW_AT_bit_offset``, counted from the most significant bit, and
fails on DWARF 5's ``DW_AT_data_bit_offset``); and an index into an array of arrays
(``grid[1]``) moves by a row (perf moves by one element).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kpsdk.binfmt.dwarf.access import parse
from kpsdk.binfmt.dwarf.expr import Computed, Implicit, InMemory, InRegister, Location, NotStatic, Sym
from kpsdk.binfmt.dwarf.probepoints import ProbePoint, parse_point, perf_listable, resolve_points
from kpsdk.binfmt.dwarf.scope import copy_variables
from kpsdk.errors import DebugInfoError, LocationError, NotStaticError, OptimizedOutError

if TYPE_CHECKING:
    from kpsdk.binfmt.dwarf.reader import DebugInfo
    from kpsdk.binfmt.dwarf.scope import Variable
    from kpsdk.binfmt.dwarf.values import Object

#: perf's spelling of registers where it is not ``%`` + kpsdk's name (tools/perf/arch/*/util/dwarf-regs.c)
PERF_REGISTERS: dict[str, dict[str, str]] = {
    "x86_64": {"rax": "%ax", "rdx": "%dx", "rcx": "%cx", "rbx": "%bx", "rsi": "%si", "rdi": "%di", "rbp": "%bp",
               "rsp": "%sp"},
    "i386": {"eax": "%ax", "ecx": "%cx", "edx": "%dx", "ebx": "%bx", "esp": "$stack", "ebp": "%bp", "esi": "%si",
             "edi": "%di"},
    "arm": {"r11": "%fp", "r12": "%ip"},
    "aarch64": {"x30": "%lr"},
    **{name: {f"r{i}": f"%gpr{i}" for i in range(32)} for name in ("ppc64", "ppc64le")},
}
#: the group of a kernel's events (perf's PERFPROBE_GROUP)
KERNEL_GROUP = "probe"
#: the widest value a fetch type holds (perf's MAX_BASIC_TYPE_BITS)
MAX_BASIC_TYPE_BITS = 64
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class PerfArg:
    """One argument of a perf definition: ``NAME=VAR:TYPE`` (``name`` and ``cast`` None when not
    written); ``raw`` is a fetch argument perf passes through (``%di``, ``$retval``, ``+8(%si)``)."""

    var: str
    name: str | None = None
    cast: str | None = None

    @property
    def raw(self) -> bool:
        return not (self.var[:1].isalpha() or self.var[:1] == "_")

    def __str__(self) -> str:
        return (f"{self.name}=" if self.name else "") + self.var + (f":{self.cast}" if self.cast else "")


@dataclass(frozen=True)
class PerfDefinition:
    """A parsed perf probe definition (see the module's docstring)."""

    point: str
    args: tuple[PerfArg, ...] = ()
    event: str | None = None
    group: str | None = None
    text: str = ""


@dataclass(frozen=True)
class TraceLine:
    """One ``kprobe_events``/``uprobe_events`` line: ``op`` ``p`` or ``r``, where the probe goes
    (``SYM+OFF`` or ``PATH:0xOFFSET``) and its fetch arguments as text; ``address`` is the
    point's address in the file, ``point`` what it resolved from."""

    op: str
    group: str
    event: str
    where: str
    args: tuple[str, ...]
    address: int
    point: ProbePoint

    def __str__(self) -> str:
        return " ".join([f"{self.op}:{self.group}/{self.event}", self.where, *self.args])

    def renamed(self, event: str) -> TraceLine:
        return TraceLine(self.op, self.group, event, self.where, self.args, self.address, self.point)


#: the first word of a kprobe_events line: p, r, rMAXACTIVE, -, f, t, e, optionally :[GRP/]EVENT
_FTRACE_HEAD = re.compile(r"^(?:[prfte]\d*|-)(?::\S*)?$")


def is_perf_definition(text: str) -> bool:
    """Whether ``text`` is a perf probe definition rather than a ``kprobe_events`` line (whose
    first word is ``p``, ``r``, ``rN``, ``-``, optionally with ``:[GRP/]EVENT``)."""
    words = text.split()
    return bool(words) and _FTRACE_HEAD.match(words[0]) is None


def parse_definition(text: str) -> PerfDefinition:
    """``[[GROUP:]EVENT=]POINT [[NAME=]ARG[:TYPE] ...]``; :class:`~kpsdk.errors.LocationError`
    when it does not parse (the point itself is checked by :func:`~.probepoints.parse_point`)."""
    words = text.split()
    if not words:
        raise LocationError(22, "an empty perf probe definition: give [EVENT=]POINT [ARG...]")
    head = words[0]
    event = group = None
    eq = head.find("=")
    if eq > 0 and _NAME.match(head[:eq].replace(":", "_", 1)):
        event, head = head[:eq], head[eq + 1:]
        if ":" in event:
            group, event = event.split(":", 1)
        for what, name in (("group", group), ("event", event)):
            if name is not None and not _NAME.match(name):
                raise LocationError(22, f"{text!r}: the {what} name {name!r} is not a C identifier")
    parse_point(head)
    args = []
    for word in words[1:]:
        name = None
        eq = word.find("=")
        if eq > 0 and _NAME.match(word[:eq]):
            name, word = word[:eq], word[eq + 1:]
        var, colon, cast = word.partition(":") if not word.startswith(("+", "-")) else _split_raw_type(word)
        if not var:
            raise LocationError(22, f"{text!r}: argument {word!r} names nothing")
        args.append(PerfArg(var, name, cast if colon else None))
    return PerfDefinition(head, tuple(args), event, group, text)


def _split_raw_type(word: str) -> tuple[str, str, str]:
    """A raw dereference ``+8(%di):u64``: the type follows the last ``)``."""
    close = word.rfind(")")
    var, colon, cast = word[close + 1:].partition(":")
    return word[:close + 1] + var, colon, cast


def register_text(arch: str, register: str) -> str:
    """How perf (and the kernel's fetch arguments) spell ``register`` on ``arch``."""
    return PERF_REGISTERS.get(arch, {}).get(register, f"%{register}")


def _value_text(base: str | Sym, arch: str) -> str:
    """The fetch argument of a :class:`Sym`'s base as a value: a register, or the word at an address."""
    return register_text(arch, base) if isinstance(base, str) else _memory_text(base, arch)


def _memory_text(address: Sym, arch: str) -> str:
    """The fetch argument reading memory at ``address``: ``OFF(BASE)``."""
    return f"{address.offset:+d}({_value_text(address.base, arch)})"


def fetch_text(location: Location, arch: str, little: bool = True, static_name: str = "") -> str:
    """The fetch argument that reads the value at ``location`` (a static one: registers and
    words read through them); ``static_name`` is ``SYM+OFF`` for a fixed address.

    :raises NotStaticError: the location is not something a fetch argument expresses (pieces,
        a value computed from two registers, an address only known at a hit).
    """
    if isinstance(location, InRegister):
        return register_text(arch, location.register)
    if isinstance(location, InMemory):
        if isinstance(location.address, Sym):
            return _memory_text(location.address, arch)
        if static_name:
            return f"@{static_name}"
        return f"@{location.address:#x}"
    if isinstance(location, Computed) and isinstance(location.value, Sym) and not location.value.offset:
        return _value_text(location.value.base, arch)
    if isinstance(location, Computed) and isinstance(location.value, int):
        return f"\\{location.value}"
    if isinstance(location, Implicit) and 0 < len(location.data) <= 8:
        return f"\\{int.from_bytes(location.data, 'little' if little else 'big', signed=True)}"
    raise NotStaticError(f"a location a fetch argument cannot express ({type(location).__name__})")


def perf_type(obj: Object, little: bool = True) -> str | None:
    """perf's fetch type for ``obj`` read as it is (None: no type, the kernel's default)."""
    if obj.bit_size:
        container = 8 * (obj.type.size or 4)
        offset = obj.bit_offset if little else container - obj.bit_offset - obj.bit_size
        return f"b{obj.bit_size}@{offset}/{container}"
    real = obj.type.strip()
    if real.kind == "array":
        return None
    size = real.size
    if not size:
        return None
    prefix = "s" if real.kind == "base" and real.encoding in ("signed", "signed_char") else "x"
    return f"{prefix}{min(8 * size, MAX_BASIC_TYPE_BITS)}"


def _cast(obj: Object, cast: str, fetch: str, little: bool) -> tuple[str, str]:
    """``(fetch, type)`` of ``obj`` read as ``cast`` (``string``, ``u``/``s``/``x``, or a type perf
    passes through), as perf's convert_variable_type does."""
    if cast in ("string", "ustring"):
        real = obj.type.strip()
        if real.kind not in ("pointer", "array"):
            raise DebugInfoError(f"Failed to cast into string: {obj.name}({real.c_name}) is not a pointer nor array")
        target = real.target.strip() if real.target is not None else None
        if target is None or target.kind != "base" or target.name not in ("char", "unsigned char"):
            raise DebugInfoError(f"Failed to cast into string: {obj.name} is not (unsigned) char *")
        return (f"+0({fetch})" if real.kind == "pointer" else fetch), cast
    if cast in ("u", "s", "x"):
        width = perf_type(obj, little)
        if width is None or width.startswith("b"):
            return fetch, width or cast
        return fetch, cast + width[1:]
    return fetch, cast


def arg_name(arg: PerfArg) -> str:
    """The name perf gives an argument written without ``NAME=`` (see the module's docstring)."""
    if arg.name:
        return arg.name
    _, steps = parse(arg.var)
    members = [s.name for s in steps if s.kind in ("member", "arrow")]
    if steps:
        return members[-1] if members else parse(arg.var)[0]
    return f"{arg.var}_{arg.cast}" if arg.cast else arg.var


def _static_name(dbg: DebugInfo, obj: Object, var: Variable | None = None) -> str:
    """``SYM+OFF`` for an object at a fixed address (a global, a function's ``static`` local, or a
    member of one), by the variable's DWARF name as perf writes it (a static local's ELF symbol
    is ``src.2``, its name ``src``)."""
    if not isinstance(obj.location, InMemory) or not isinstance(obj.location.address, int):
        return ""
    from kpsdk.binfmt.dwarf.scope import global_variables

    name = parse(obj.name)[0]
    for candidate in ([var] if var is not None else []) + global_variables(dbg, name):
        expr = candidate.expression
        if expr and expr[0] == 0x03:  # DW_OP_addr: the variable's own address
            base = int.from_bytes(expr[1:1 + dbg.address_size], "little" if dbg.sections.num.little else "big")
            return f"{candidate.name}{obj.location.address - base:+d}"
    sym = dbg.symbols.containing(obj.location.address)
    return f"{sym.name}{obj.location.address - sym.address:+d}" if sym is not None else ""


def perf_locate(dbg: DebugInfo, point: ProbePoint, path: str) -> Object:
    """The static location of ``path`` at ``point`` (see :func:`perf_variable`)."""
    return perf_variable(dbg, point, path)[0]


def perf_variable(dbg: DebugInfo, point: ProbePoint, path: str) -> tuple[Object, Variable | None]:
    """The static location of ``path`` at ``point`` as perf finds its variable: the first one
    of that name, in declaration order, among the variables of the point's function copy (and
    the blocks and inlined copies inside it that hold the pc) that have a location, else a
    global (perf's die_find_variable_at: the outer of two declarations, where C would take
    the inner one).

    :raises NotInScopeError, MemberPathError, OptimizedOutError: as :meth:`DebugInfo.locate`.
    """
    from kpsdk.binfmt.dwarf.access import follow
    from kpsdk.binfmt.dwarf.expr import OptimizedOut, SymbolicCpu
    from kpsdk.binfmt.dwarf.frames import context, locate
    from kpsdk.binfmt.dwarf.values import Object

    name, steps = parse(path)
    variables = copy_variables(dbg, point.function, point.address)
    var = next((v for v in variables if v.name == name and (v.expression is not None or v.const_value is not None
                                                            or v.has_location)), None)
    if var is None:
        return dbg.locate(point.address, path), None  # a global, or the error naming what is in scope
    scope = dbg.scope(point.address)
    ctx = context(dbg, scope, SymbolicCpu())
    where = f"{point.where} ({point.address:#x})"
    loc = locate(dbg, var, ctx)
    if isinstance(loc, OptimizedOut):
        raise OptimizedOutError(path, where, loc.why)
    return follow(Object(loc, var.type, name, where=where), steps, ctx, path), var


def _file_offset_of_data(dbg: DebugInfo, address: int) -> int | None:
    """The file offset a uprobe's ``@+OFFSET`` names for the static ``address`` (any loadable
    segment, ``.bss`` past its file bytes included)."""
    from kpsdk.binfmt.elfimage import load_elf

    for seg in load_elf(dbg.path).segments:
        if seg.vaddr <= address < seg.vaddr + seg.memsz:
            return address - seg.vaddr + seg.offset
    return None


def variable_arg(dbg: DebugInfo, point: ProbePoint, arg: PerfArg, runnable: bool = False) -> str:
    """``NAME=FETCH[:TYPE]`` of one variable path at ``point`` (found as :func:`perf_locate` finds it).
    ``runnable``: a uprobe's static address as the kernel takes it (``@+FILEOFFSET``), not perf's
    ``@SYM+OFF``, which uprobe_events refuses.

    :raises NotInScopeError, MemberPathError, OptimizedOutError: as :meth:`DebugInfo.locate`;
        :class:`NotStaticError` where no fetch argument can express where it is.
    """
    arch = dbg.arch.name if dbg.arch is not None else ""
    little = dbg.sections.num.little
    try:
        found, var = perf_variable(dbg, point, arg.var)
    except NotStatic as e:
        raise NotStaticError(f"{arg.var!r} at {point.where}: {e}") from None
    obj = replace(found, name=arg.var)
    static = _static_name(dbg, obj, var)
    if runnable and isinstance(obj.location, InMemory) and isinstance(obj.location.address, int):
        offset = _file_offset_of_data(dbg, obj.location.address)
        static = f"+{offset:#x}" if offset is not None else static
    try:
        fetch = fetch_text(obj.location, arch, little, static)
    except NotStatic as e:
        raise NotStaticError(f"{arg.var!r} at {point.where}: {e}") from None
    ftype = perf_type(obj, little)
    if arg.cast is not None:
        fetch, ftype = _cast(obj, arg.cast, fetch, little)
    return f"{arg_name(arg)}={fetch}" + (f":{ftype}" if ftype else "")


def _expand(dbg: DebugInfo, point: ProbePoint, args: tuple[PerfArg, ...]) -> list[PerfArg]:
    """``$vars`` and ``$params`` replaced by the variables perf can read at ``point``, in
    declaration order (perf's copy_variables_cb)."""
    out: list[PerfArg] = []
    for arg in args:
        if arg.var not in ("$vars", "$params"):
            out.append(arg)
            continue
        for var in copy_variables(dbg, point.function, point.address):
            if (arg.var == "$vars" or var.kind == "parameter") and perf_listable(var):
                try:
                    variable_arg(dbg, point, PerfArg(var.name))
                except (NotStaticError, OptimizedOutError, DebugInfoError):
                    continue
                out.append(PerfArg(var.name))
    return out


def best_scope(dbg: DebugInfo, point: ProbePoint, line: int) -> ProbePoint:
    """``SRC:LINE``'s point in the function copy perf takes for it (find_best_scope): of the
    copies holding the address, the one declared nearest above the line (strictly), the
    out-of-line function when none is.  Its variables and its name are the event's."""
    best, diff = point.function, None
    outer = dbg.function_at(point.address)
    for fn in ([outer] if outer is not None else []) + dbg.inlined_at(point.address):
        if fn.line < line and (diff is None or line - fn.line < diff):
            best, diff = fn, line - fn.line
    return ProbePoint(point.address, best, point.symbol, point.offset)


def event_name(definition: PerfDefinition, point: ProbePoint) -> str:
    """perf's event name for ``definition`` at ``point`` (see the module's docstring)."""
    spec = parse_point(definition.point)
    if definition.event:
        return definition.event + ("__return" if spec.is_return else "")
    base = spec.function or (point.function.name if spec.file and spec.line is not None else point.symbol)
    base = re.split(r"[.@]", base, maxsplit=1)[0] or base
    if spec.function and spec.relline:
        base = f"{base}_L{spec.relline}"
    return base + ("__return" if spec.is_return else "")


def group_name(definition: PerfDefinition, program: str | None) -> str:
    """``probe`` for a kernel, ``probe_PROG`` for a program (perf cuts its name at ``-``, ``.``, ``_``)."""
    if definition.group:
        return definition.group
    if program is None:
        return KERNEL_GROUP
    base = re.split(r"[-._]", os.path.basename(program), maxsplit=1)[0]
    return f"{KERNEL_GROUP}_{base}"


def _file_offset(dbg: DebugInfo, address: int) -> int:
    """The file offset of the code at ``address`` (a uprobe's ``PATH:0xOFFSET``)."""
    from kpsdk.binfmt.elfimage import load_elf

    offset = load_elf(dbg.path).vaddr_to_offset(address)
    if offset is None:
        raise DebugInfoError(f"{dbg.path}: no executable segment holds {address:#x}")
    return offset


def translate(dbg: DebugInfo, definition: PerfDefinition | str, program: str | None = None,
              runnable: bool = False) -> list[TraceLine]:
    """The lines ``definition`` means, one per address its point resolves to (an inlined
    function's copies, a line with code in two places), as ``perf probe -D`` prints them.

    :param program: the file a uprobe goes on (``perf probe -x PROG``), as written in the lines;
        None for a kernel (``SYM+OFF``).
    :param runnable: the lines as kpsdk (and the kernel) run them, where perf prints what they
        refuse: a uprobe's global variable is ``@+FILEOFFSET``, not ``@SYM+OFF``.
    :raises DebugInfoError: the point or a variable cannot be resolved (each subclass names
        what is wrong: :class:`~kpsdk.errors.NoSuchFunctionError`, :class:`~kpsdk.errors.NotInScopeError`...).
    """
    if isinstance(definition, str):
        definition = parse_definition(definition)
    spec = parse_point(definition.point)
    reads = any(not a.raw or a.var in ("$vars", "$params") for a in definition.args)
    if spec.is_return and reads:
        raise DebugInfoError(f"{definition.text or definition.point!r}: a return probe reads no local variable "
                             "(perf: You can't specify local variable for kretprobe); $retval is the value returned")
    points = resolve_points(dbg, spec, with_variables=reads)
    if spec.file and spec.line is not None:
        points = [best_scope(dbg, p, spec.line) for p in points]
    group = group_name(definition, program)
    out = []
    for point in points:
        args = []
        for arg in _expand(dbg, point, definition.args):
            if arg.raw:
                args.append((f"{arg.name}=" if arg.name else "") + arg.var + (f":{arg.cast}" if arg.cast else ""))
            else:
                args.append(variable_arg(dbg, point, arg, runnable and program is not None))
        if program is None:
            where = f"{point.symbol}+{point.offset}"
        else:
            where = f"{program}:{_file_offset(dbg, point.address):#x}"
        out.append(TraceLine("r" if spec.is_return else "p", group, event_name(definition, point), where,
                             tuple(args), point.address, point))
    return out


def with_suffixes(lines: list[TraceLine]) -> list[TraceLine]:
    """The lines with unique event names, as perf adds them: the first keeps its name, the
    others get ``_1``, ``_2``... (``perf probe -D`` prints them all under one name)."""
    seen: dict[str, int] = {}
    out = []
    for line in lines:
        n = seen.get(line.event, 0)
        seen[line.event] = n + 1
        out.append(line if n == 0 else line.renamed(f"{line.event}_{n}"))
    return out
