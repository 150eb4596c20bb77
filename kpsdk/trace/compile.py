"""Fetch arguments compiled to closures, once, when an event is defined.

:meth:`BoundArg.interpret <kpsdk.trace.fetch.BoundArg.interpret>` walks the
fetch tree at every hit, asking each node its kind, the type its size and
flags, and the session for memory.  Everything it asks is known when the
event is defined, so :func:`compile_arg` asks it then: each node becomes one
closure that calls the one below it, with the register, the word reader, the
byte order and the type's masks bound in.  The kernel does the same when it
turns ``FETCHARGS`` into a ``fetch_insn`` array at registration.

The compiled value is the interpreted one, field by field (``None`` where memory
could not be read); ``tests/test_trace_compiled.py`` checks both on every
Unicorn arch.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING

from kpsdk.errors import TargetFault

if TYPE_CHECKING:
    from kpsdk.trace.fetch import BoundArg, HitContext, Value
    from kpsdk.trace.grammar import ArgType, Fetch

Scalar = Callable[["HitContext"], int]
Compiled = Callable[["HitContext"], "Value"]


def compile_arg(bound: BoundArg) -> Compiled:
    """``bound``'s value at a hit as one closure (faults give None, as interpreted)."""
    from kpsdk.trace.fetch import MAX_STRING

    fetch, argtype = bound.arg.fetch, bound.type
    session = bound.session
    if fetch.kind == "comm" and bound.comm_live:  # a kernel: current->comm, read at each hit
        task_info = session.target.task_info

        def live_comm(hit: HitContext) -> Value:
            try:
                info = task_info()
            except TargetFault:
                return None
            return info.comm if info is not None else None

        return live_comm
    if fetch.kind in ("comm", "immstr"):
        constant = bound.comm if fetch.kind == "comm" else fetch.text
        return lambda hit: constant
    if fetch.is_memory:
        if fetch.kind in ("mem", "sym", "foffs") and argtype.is_string and argtype.name != "symstr" \
                and not argtype.count:
            # a string at a fixed address (@SYM:string): the read alone, no address or loader call
            at = fetch.value if fetch.kind == "mem" else bound.symbol_address(fetch)
            read_fixed = session.target.read_cstring

            def fixed_string(hit: HitContext) -> Value:
                try:
                    return read_fixed(at, MAX_STRING).decode("utf-8", "replace")
                except TargetFault:
                    return None

            return fixed_string
        address = _address(bound, fetch)
        load = _loader(bound, argtype)

        def memory(hit: HitContext) -> Value:
            try:
                return load(address(hit))
            except TargetFault:
                return None

        return memory
    scalar = _scalar(bound, fetch)
    if argtype.name == "string":  # \IMM:string: the immediate is an address
        read_cstring = session.target.read_cstring

        def string(hit: HitContext) -> Value:
            try:
                return read_cstring(scalar(hit), MAX_STRING).decode("utf-8", "replace")
            except TargetFault:
                return None

        return string
    convert = _converter(bound, argtype)
    if fetch.kind == "reg":  # the commonest field: one closure, and a register read cannot fault
        get = attrgetter(session.arch.register(fetch.name).name)
        return lambda hit: convert(int(get(hit.regs)))
    arch = session.arch
    if fetch.kind == "stack" and _whole_word(argtype, arch.word_size):
        # $stackN as a word (x64, u64 on a 64-bit arch): read_word's value is the field's
        read_word, sp = session.target.read_word, attrgetter(arch.register(arch.sp).name)
        offset = arch.word_size * fetch.index

        def stack_word(hit: HitContext) -> Value:
            try:
                return read_word(int(sp(hit.regs)) + offset)
            except TargetFault:
                return None

        return stack_word

    def value(hit: HitContext) -> Value:
        try:
            return convert(scalar(hit))
        except TargetFault:
            return None

    return value


def _scalar(bound: BoundArg, node: Fetch) -> Scalar:
    """A value that is not loaded by the final store: registers, stack, args, derefs."""
    kind = node.kind
    arch = bound.session.arch
    read_word = bound.session.target.read_word
    if kind == "reg":
        get = attrgetter(arch.register(node.name).name)
        return lambda hit: int(get(hit.regs))
    sp = attrgetter(arch.register(arch.sp).name)
    if kind == "stackp":
        return lambda hit: int(sp(hit.regs))
    if kind == "stack":
        offset = arch.word_size * node.index
        return lambda hit: read_word(int(sp(hit.regs)) + offset)
    if kind == "retval":
        return lambda hit: int(hit.regs.return_value)
    if kind == "arg":
        index = node.index

        def arg(hit: HitContext) -> int:
            entry = hit.entry_args
            if entry is None:
                return int(hit.regs.arg(index - 1))
            value = entry.get(index)
            if value is None:
                raise TargetFault(f"$arg{index} could not be read at the function's entry")
            return value

        return arg
    if kind == "imm":
        constant = node.value
        return lambda hit: constant
    if kind in ("deref", "mem", "sym", "foffs"):
        address = _address(bound, node)
        return lambda hit: read_word(address(hit))
    raise AssertionError(f"unhandled fetch {kind}")


def _address(bound: BoundArg, node: Fetch) -> Scalar:
    """Where a memory fetch loads from."""
    if node.kind == "mem":
        constant = node.value
        return lambda hit: constant
    if node.kind in ("sym", "foffs"):
        resolved = bound.symbol_address(node)
        return lambda hit: resolved
    assert node.inner is not None
    inner, offset, mask = _scalar(bound, node.inner), node.value, bound.session.arch.word_mask
    return lambda hit: (inner(hit) + offset) & mask


def _loader(bound: BoundArg, argtype: ArgType) -> Callable[[int], Value]:
    """The final store: the typed value at an address."""
    from kpsdk.trace.fetch import MAX_STRING

    target = bound.session.target
    read_memory, read_word, read_cstring = target.read_memory, target.read_word, target.read_cstring
    word, endian = bound.session.arch.word_size, bound.session.arch.endian
    if argtype.is_string and argtype.name != "symstr":

        def string_at(addr: int) -> str | None:
            try:
                return read_cstring(addr, MAX_STRING).decode("utf-8", "replace")
            except TargetFault:
                return None

        count = argtype.count
        if count:  # an array of string pointers
            return lambda addr: [string_at(read_word(addr + i * word)) for i in range(count)]
        return string_at
    size = word if argtype.name == "symstr" else argtype.size or word
    convert = _converter(bound, argtype)
    from_bytes = int.from_bytes
    if argtype.count:
        count = argtype.count
        spans = [(i * size, (i + 1) * size) for i in range(count)]

        def array(addr: int) -> Value:
            data = read_memory(addr, size * count)
            return [convert(from_bytes(data[a:b], endian)) for a, b in spans]

        return array
    if size == word:
        return lambda addr: convert(read_word(addr))
    return lambda addr: convert(from_bytes(read_memory(addr, size), endian))


def _whole_word(argtype: ArgType, word: int) -> bool:
    """The type keeps an unsigned word as it is: :func:`_converter` would be the identity."""
    return (argtype.size or word) == word and not argtype.signed and argtype.bitfield is None and \
        argtype.display in ("x", "u") and argtype.name != "symstr" and not argtype.count


def _converter(bound: BoundArg, argtype: ArgType) -> Callable[[int], Value]:
    """The store and modify stages: cut to the type's size, bitfield, sign, symbol."""
    from kpsdk.trace.fetch import format_symbol

    session = bound.session
    word_mask = session.arch.word_mask
    if argtype.name == "symstr":
        return lambda raw: format_symbol(session, raw & word_mask)
    bits = 8 * (argtype.size or session.arch.word_size)
    mask = (1 << bits) - 1
    if argtype.bitfield is not None:
        width, offset = argtype.bitfield
        field_mask = (1 << width) - 1
        cut: Callable[[int], int] = lambda raw: ((raw & mask) >> offset) & field_mask  # noqa: E731
    elif argtype.signed:
        sign, wrap = 1 << (bits - 1), 1 << bits
        cut = lambda raw: (raw & mask) - wrap if raw & sign else raw & mask  # noqa: E731
    else:
        cut = lambda raw: raw & mask  # noqa: E731
    if argtype.display == "symbol":
        return lambda raw: format_symbol(session, cut(raw))
    return cut
