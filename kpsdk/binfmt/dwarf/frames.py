"""Variables evaluated in a frame: the context a location expression runs in at a pc.

A variable's location may use the function's frame base (``DW_OP_fbreg``: GCC's frame base
is ``DW_OP_call_frame_cfa``, the CFA from the call frame information), its registers, and
the values its parameters had at entry (``DW_OP_entry_value``).  :func:`context` builds that
:class:`~kpsdk.binfmt.dwarf.expr.Context` for a scope and a CPU; :func:`locate` runs a
variable's expression in it; :func:`resolve` follows a path from a variable
(:mod:`.access`) to a typed location, and :func:`value` reads it.

Entry values are answered two ways: at the function's entry a register still holds what it
held at the call; elsewhere, the caller's call site may say what it passed
(``DW_TAG_call_site_parameter``'s ``DW_AT_call_value``, evaluated in the caller's frame, which
the unwinder recovers).  Where neither works the variable is reported optimized out, with why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kpsdk.binfmt.dwarf.access import follow, parse
from kpsdk.binfmt.dwarf.cfi import FrameCpu, _UnwindStop
from kpsdk.binfmt.dwarf.expr import (
    Computed,
    Context,
    InMemory,
    InRegister,
    Location,
    Number,
    OptimizedOut,
    SymbolicCpu,
    _Unavailable,
    evaluate,
)
from kpsdk.binfmt.dwarf.scope import Scope, Variable, expression_at, global_variables, location_list, scope_at
from kpsdk.binfmt.dwarf.values import Object, Value, read_value
from kpsdk.errors import NotInScopeError, OptimizedOutError

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

    from kpsdk.binfmt.dwarf.cpu import Cpu
    from kpsdk.binfmt.dwarf.reader import DebugInfo


def _where(dbg: DebugInfo, scope: Scope) -> str:
    fn = scope.function
    return f"{fn.name}+{scope.pc - fn.low:#x} ({scope.pc:#x})"


def context(dbg: DebugInfo, scope: Scope, cpu: Cpu, bias: int = 0) -> Context:
    """The context the expressions of ``scope``'s variables run in on ``cpu``."""
    if dbg.arch is None or dbg.arch.dwarf is None:
        raise _Unavailable("the architecture of this file has no DWARF register table")
    regs = dbg.arch.dwarf
    unit = dbg.unit(scope.function.unit)
    pc = scope.pc
    ctx = Context(cpu, dbg.address_size, dbg.sections.num, regs.name, bias=bias, offset_size=unit.offset_size)

    def cfa() -> Number:
        try:
            return dbg.frame_table.cfa(pc, cpu)
        except (LookupError, _UnwindStop) as e:
            raise _Unavailable(str(e)) from None

    def frame_base() -> Number:
        if scope.frame_base is None:
            raise _Unavailable("no frame base")
        expr = expression_at(location_list(scope.frame_base, "DW_AT_frame_base", unit, dbg), pc)
        if expr is None:
            raise _Unavailable("the function has no frame base at this pc")
        loc = evaluate(expr, ctx)
        if isinstance(loc, InRegister):
            try:
                return cpu.read_register(loc.register)
            except LookupError:
                raise _Unavailable(f"register {loc.register} is not available") from None
        if isinstance(loc, InMemory | Computed):
            return loc.address if isinstance(loc, InMemory) else loc.value
        raise _Unavailable(f"the frame base is {loc}")

    def base_type(offset: int) -> tuple[int, str]:
        t = dbg.types.of(dbg.die(unit.offset + offset))
        encoding = "float" if t.encoding == "float" else "signed" if t.signed else "unsigned"
        return t.size or dbg.address_size, encoding

    def entry_value(inner: bytes) -> Number:
        loc = evaluate(inner, ctx)
        if not isinstance(loc, InRegister):
            raise _Unavailable("an entry value of something other than a register")
        if pc == scope.function.entry:
            try:
                return cpu.read_register(loc.register)
            except LookupError:
                raise _Unavailable(f"register {loc.register} is not available") from None
        return _from_call_site(dbg, scope, cpu, loc.register, bias)

    ctx.cfa = cfa
    ctx.frame_base = frame_base
    ctx.base_type = base_type
    ctx.entry_value = entry_value
    ctx.address_index = lambda i: dbg.sections.address_index(i, unit.bases, unit.address_size)
    return ctx


def _from_call_site(dbg: DebugInfo, scope: Scope, cpu: Cpu, register: str, bias: int) -> Number:
    """What the caller passed in ``register``: its call site's ``DW_AT_call_value``."""
    if isinstance(cpu, SymbolicCpu):
        raise _Unavailable("an entry value (known only at a hit)")
    regs = dbg.arch.dwarf if dbg.arch is not None else None
    if regs is None:
        raise _Unavailable("no DWARF register table")
    try:
        _, recovered, unknown, ra = dbg.frame_table.caller(scope.pc, cpu)
    except (_UnwindStop, _Unavailable, LookupError) as e:
        raise _Unavailable(f"the caller's frame cannot be recovered for an entry value ({e})") from None
    caller_pc = (ra & (~1 if dbg.arch is not None and dbg.arch.has_thumb else ~0)) - bias
    caller_scope = scope_at(dbg, caller_pc - 1)
    if caller_scope is None:
        raise _Unavailable("no debug information for the caller, for an entry value")
    caller_cpu = FrameCpu(cpu, recovered, unknown)
    site = _call_site(dbg, caller_scope.function.die, caller_pc)
    if site is None:
        raise _Unavailable(f"the caller's call site at {caller_pc:#x} says nothing of {register}")
    number = regs.number(register)
    for param in site.iter_children():
        if param.tag not in ("DW_TAG_call_site_parameter", "DW_TAG_GNU_call_site_parameter"):
            continue
        loc_attr = param.attributes.get("DW_AT_location")
        value_attr = param.attributes.get("DW_AT_call_value") or param.attributes.get("DW_AT_GNU_call_site_value")
        if loc_attr is None or value_attr is None:
            continue
        expr = bytes(loc_attr.value)
        if not expr or expr[0] != 0x50 + (number or 0) and not (expr[0] == 0x90 and number is not None):
            continue
        caller_ctx = context(dbg, caller_scope, caller_cpu, bias)
        loc = evaluate(bytes(value_attr.value), caller_ctx)
        if isinstance(loc, InMemory):
            return loc.address  # a DW_AT_call_value is a DWARF expression: its value is the stack top
        if isinstance(loc, Computed):
            return loc.value
        if isinstance(loc, InRegister):
            return caller_cpu.read_register(loc.register)
        if isinstance(loc, OptimizedOut):
            raise _Unavailable(f"the call site's value: {loc.why}")
        raise _Unavailable("the call site's value is not available")
    raise _Unavailable(f"the caller's call site does not give {register}")


def _call_site(dbg: DebugInfo, function_die: int, return_pc: int) -> DIE | None:
    """The ``DW_TAG_call_site`` of the out-of-line function ``function_die`` returning to ``return_pc``."""
    todo = [dbg.die(function_die)]
    while todo:
        die = todo.pop()
        for child in die.iter_children():
            tag = child.tag
            if tag in ("DW_TAG_call_site", "DW_TAG_GNU_call_site"):
                attr = child.attributes.get("DW_AT_call_return_pc") or child.attributes.get("DW_AT_low_pc")
                if attr is not None and attr.value == return_pc:
                    return child
            elif tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine"):
                todo.append(child)
    return None


def locate(dbg: DebugInfo, var: Variable, ctx: Context) -> Location:
    """Where ``var`` is at its scope's pc, in ``ctx``."""
    if var.expression is not None:
        return evaluate(var.expression, ctx)
    if var.const_value is not None:
        from kpsdk.binfmt.dwarf.expr import Implicit

        if isinstance(var.const_value, bytes):
            return Implicit(var.const_value)
        size = var.type.size or dbg.address_size
        return Implicit((var.const_value & ((1 << 8 * size) - 1)).to_bytes(size, "little" if ctx.num.little else
                                                                           "big"))
    return OptimizedOut("no location at this pc (optimized out)")


def scope_or_error(dbg: DebugInfo, pc: int) -> Scope:
    scope = scope_at(dbg, pc)
    if scope is None:
        raise NotInScopeError("", f"{pc:#x}", [])
    return scope


def resolve(dbg: DebugInfo, scope: Scope, path: str, ctx: Context) -> Object:
    """The typed location of ``path`` (``buf->size``...) in ``scope``.

    :raises NotInScopeError: the variable is not in scope (the error lists those that are).
    :raises MemberPathError: the path does not parse or does not fit the types.
    """
    name, steps = parse(path)
    var = scope.lookup(name)
    where = _where(dbg, scope)
    if var is None:
        found = global_variables(dbg, name, scope.function.unit)
        if not found:
            raise NotInScopeError(name, where, scope.names())
        var = found[0]
    loc = locate(dbg, var, ctx)
    obj = Object(loc, var.type, name, where=where)
    if isinstance(loc, OptimizedOut):
        raise OptimizedOutError(path.strip(), where, loc.why)
    try:
        return follow(obj, steps, ctx, path)
    except _Unavailable as e:
        raise OptimizedOutError(path.strip(), where, str(e)) from None


def value(dbg: DebugInfo, scope: Scope, path: str, cpu: Cpu, bias: int = 0) -> Value:
    """The value of ``path`` in ``scope``, read from ``cpu``."""
    ctx = context(dbg, scope, cpu, bias)
    obj = resolve(dbg, scope, path, ctx)
    if isinstance(obj.location, OptimizedOut):
        raise OptimizedOutError(obj.name, obj.where, obj.location.why)
    return read_value(obj, ctx)


def global_value(dbg: DebugInfo, path: str, cpu: Cpu, bias: int = 0) -> Value:
    """The value of ``path`` starting at a global variable, anywhere (no frame needed)."""
    name, steps = parse(path)
    found = global_variables(dbg, name)
    if not found:
        raise NotInScopeError(name, "file scope", sorted({v.name for v in global_variables(dbg)}))
    var = found[0]
    unit = dbg.unit(var.unit)
    regs = dbg.arch.dwarf.name if dbg.arch is not None and dbg.arch.dwarf is not None else (lambda n: None)
    ctx = Context(cpu, dbg.address_size, dbg.sections.num, regs, bias=bias, offset_size=unit.offset_size)
    ctx.address_index = lambda i: dbg.sections.address_index(i, unit.bases, unit.address_size)
    loc = locate(dbg, var, ctx)
    if isinstance(loc, OptimizedOut):
        raise OptimizedOutError(path.strip(), "file scope", loc.why)
    obj = follow(Object(loc, var.type, name, where="file scope"), steps, ctx, path)
    return read_value(obj, ctx)
