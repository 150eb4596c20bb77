"""Fetch arguments and filters compiled to a fetch program, run in C at the hit (``fetchprog.h``).

The kernel turns ``FETCHARGS`` into an array of ``fetch_insn`` when an event is registered
and runs it at each hit; kpsdk's Python path (:mod:`kpsdk.trace.compile`) makes closures
instead, which cost most of a trace event (10-12 us).  This module makes the kernel's kind of
program from the same bound arguments, for the hosts that run it in C: a Unicorn code hook
(:mod:`kpsdk.targets.unicorn.nativetrace`) and kpsdk's QEMU plugin.  One C file,
``fetchprog.h`` beside this module, is the interpreter both include.

A field is a run of instructions that computes a value (a register, an immediate, a word
loaded from memory, a dereference chain) ended by one *store* that writes it out as its
type says: an integer cut to its size, sign and bitfield, a string up to :data:`MAX_STRING`
bytes, an array.  A load that cannot be read marks the field as a fault.  What a field the
program cannot compute is (``$comm``, ``\\"text"``: constants; a ``$argN`` of a return)
raises :class:`_NotNative`, and the event keeps the Python path.

The core module: the trace package compiles with it, the targets only run what it made
(tests/test_layers.py: targets and trace meet through the core).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kpsdk.arch import Abi, Arch
    from kpsdk.fetchargs import FetchNode, FetchType

#: the C interpreter every host includes
HEADER = Path(__file__).with_name("fetchprog.h")
MAGIC = 0x3150464B  # "KFP1"
#: the longest string a fetch reads (kpsdk.trace.fetch.MAX_STRING, the kernel's MAX_STRING_SIZE)
MAX_STRING = 4096
#: the most fields one native program has (one bit each in a record's fault mask)
MAX_FIELDS = 64
#: the most bytes an integer array reads (fetchprog.h's buffer)
MAX_ARRAY_BYTES = 512
#: the most bytes one program's output may take
MAX_OUTPUT = 1 << 20
#: the deepest stack of booleans a filter may need (fetchprog.h's stack)
MAX_FILTER_STACK = 2 * MAX_FIELDS

# instructions (fetchprog.h's enum kfp_op / kfp_fop)
REG, IMM, ADD, LOADW, ST_VAL, ST_MEM, ST_STR, ST_ARR, ST_STRARR = range(1, 10)
F_INT, F_STR, F_GLOB, F_CONST, F_NOT, F_AND, F_OR = range(1, 8)
SIGNED, BITFIELD, F_BIG = 1, 2, 4
CMP = {"==": 1, "!=": 2, "<": 3, "<=": 4, ">": 5, ">=": 6, "&": 7}

_HEAD = struct.Struct("<IHHHHBBBxIIII")
_INSN = struct.Struct("<BBBBIq")


class _NotNative(Exception):
    """This argument or filter has no native form: the event keeps the Python path."""


#: how the decoder reads one field of an output: ("int", scalar index, signed), ("str", var
#: index), ("arr", var index, signed), ("strarr", var index), ("const", None: the caller's)
FieldPlan = tuple[Any, ...]


@dataclass
class FetchProgram:
    """One event's compiled fetch arguments (and filter): the bytes a host runs, and how an
    output is read back (:attr:`fields`, one plan per argument in order)."""

    code: bytes
    fields: list[FieldPlan]
    nscalar: int
    nvar: int
    max_len: int
    #: each argument's name, in order
    names: list[str] = field(default_factory=list)


class _Builder:
    def __init__(self, arch: Arch, abi: Abi, register: Callable[[str], tuple[int, int]]) -> None:
        self.arch = arch
        self.abi = abi
        self.register = register
        self.insns: list[tuple[int, int, int, int, int, int]] = []
        self.slot = 0

    def emit(self, op: int, size: int = 0, flags: int = 0, arg: int = 0, imm: int = 0) -> None:
        imm &= (1 << 64) - 1
        if imm >= 1 << 63:
            imm -= 1 << 64
        self.insns.append((op, size, flags, self.slot, arg, imm))

    def reg(self, name: str) -> None:
        ident, mask = self.register(name)
        self.emit(REG, arg=ident, imm=mask)

    def value(self, node: FetchNode, symbol: Callable[[FetchNode], int]) -> None:
        """Instructions leaving a scalar node's value in v (kpsdk.trace.compile's _scalar)."""
        kind, arch = node.kind, self.arch
        word = arch.word_size
        if kind == "reg":
            self.reg(arch.register(node.name).name)
        elif kind == "stackp":
            self.reg(arch.sp)
        elif kind == "stack":
            self.reg(arch.sp)
            self.emit(ADD, imm=word * node.index)
            self.emit(LOADW)
        elif kind == "retval":
            self.reg(arch.return_value)
        elif kind == "arg":
            n, regs = node.index - 1, self.abi.args
            if n < len(regs):
                self.reg(regs[n])
            else:
                self.reg(arch.sp)
                self.emit(ADD, imm=self.abi.stack_args_offset + word * (n - len(regs)))
                self.emit(LOADW)
        elif kind == "imm":
            self.emit(IMM, imm=node.value)
        elif node.is_memory:
            self.address(node, symbol)
            self.emit(LOADW)
        else:
            raise _NotNative(f"a {kind!r} fetch")

    def address(self, node: FetchNode, symbol: Callable[[FetchNode], int]) -> None:
        """Instructions leaving a memory node's address in v."""
        if node.kind == "mem":
            self.emit(IMM, imm=node.value)
        elif node.kind in ("sym", "foffs"):
            self.emit(IMM, imm=symbol(node))
        else:
            assert node.inner is not None
            self.value(node.inner, symbol)
            self.emit(ADD, imm=node.value)


def _convert_flags(argtype: FetchType, word: int) -> tuple[int, int, int]:
    """(size, flags, arg) of an integer store: kpsdk.trace.compile's _converter."""
    if argtype.name == "symstr":
        return word, 0, 0
    size = argtype.size or word
    bitfield = getattr(argtype, "bitfield", None)
    if bitfield is not None:
        width, offset = bitfield
        return size, BITFIELD, (width << 8) | offset
    return size, SIGNED if getattr(argtype, "signed", False) else 0, 0


def compile_fetches(arch: Arch, abi: Abi, register: Callable[[str], tuple[int, int]],
                    fetches: Sequence[tuple[str, Any, Any, Callable[[Any], int]]],
                    string_cap: int = MAX_STRING) -> FetchProgram:
    """The program of one event's arguments, ``(name, tree, type, symbol)`` each, for ``arch``
    with ``abi``'s ``$argN``; ``register(name)`` is the host's id of an arch register and its
    mask.  Raises :class:`_NotNative` where a field has no native form."""
    if len(fetches) > MAX_FIELDS:
        raise _NotNative(f"more than {MAX_FIELDS} fields")
    b = _Builder(arch, abi, register)
    word = arch.word_size
    plans: list[FieldPlan] = []
    nscalar = nvar = 0
    max_len = 0
    for slot, (_, fetch, argtype, symbol) in enumerate(fetches):
        b.slot = slot
        if fetch.kind in ("comm", "immstr"):
            plans.append(("const", None))
            continue
        is_string = argtype.is_string and argtype.name != "symstr"
        size, flags, arg = _convert_flags(argtype, word)
        if size > 8 or size <= 0:
            raise _NotNative(f"an integer of {size} bytes")
        if fetch.is_memory:
            b.address(fetch, symbol)
            if is_string and argtype.count:
                b.emit(ST_STRARR, arg=argtype.count, imm=string_cap)
                plans.append(("strarr", nvar))
                nvar += 1
                max_len += 8 + argtype.count * (8 + string_cap + 8)
            elif is_string:
                b.emit(ST_STR, imm=string_cap)
                plans.append(("str", nvar))
                nvar += 1
                max_len += 8 + string_cap + 8
            elif argtype.count:
                if size * argtype.count > MAX_ARRAY_BYTES or flags & BITFIELD:
                    raise _NotNative(f"an array of {argtype.count} {argtype.name}")
                b.emit(ST_ARR, size=size, flags=flags, arg=argtype.count)
                plans.append(("arr", nvar, bool(flags & SIGNED)))
                nvar += 1
                max_len += 8 + 8 * argtype.count
            else:
                b.emit(ST_MEM, size=size, flags=flags, arg=arg)
                plans.append(("int", nscalar, bool(flags & SIGNED)))
                nscalar += 1
                max_len += 8
            continue
        b.value(fetch, symbol)
        if argtype.name == "string":  # \IMM:string, %reg:string: the value is an address
            b.emit(ST_STR, imm=string_cap)
            plans.append(("str", nvar))
            nvar += 1
            max_len += 8 + string_cap + 8
        else:
            b.emit(ST_VAL, size=size, flags=flags, arg=arg)
            plans.append(("int", nscalar, bool(flags & SIGNED)))
            nscalar += 1
            max_len += 8
    if max_len > MAX_OUTPUT:
        raise _NotNative(f"an output of up to {max_len} bytes")
    program = FetchProgram(b"", plans, nscalar, nvar, max_len, [name for name, *_ in fetches])
    program.code = _encode(arch, b.insns, [], b"", nscalar, nvar, len(fetches), max_len)
    return program


def _encode(arch: Arch, insns: list[tuple[int, int, int, int, int, int]],
            filters: list[tuple[int, int, int, int, int, int]], pool: bytes, nscalar: int, nvar: int,
            nfields: int, max_len: int) -> bytes:
    head = _HEAD.pack(MAGIC, len(insns), len(filters), nscalar, nvar, arch.word_size,
                      1 if arch.endian == "big" else 0, nfields, len(pool), max_len, 0, 0)
    return head + b"".join(_INSN.pack(*i) for i in insns) + b"".join(_INSN.pack(*i) for i in filters) + pool


# -- filters ---------------------------------------------------------------------------------

#: a filter's tree (kpsdk.trace.filter.Filter.tree): ("or", [nodes]), ("and", [nodes]),
#: ("not", node), ("cmp", field, op, int | str), ("glob", field, pattern)
FilterNode = tuple[Any, ...]


def with_filter(arch: Arch, program: FetchProgram, tree: FilterNode, kinds: dict[str, str]) -> FetchProgram:
    """``program`` with ``tree`` evaluated at the hit; ``kinds`` says what each filterable field
    of the event holds (``int`` or ``str``: a plain integer or a string; others have no native
    comparison).  Raises :class:`_NotNative` for anything else (a common field, a symbol...)."""
    out: list[tuple[int, int, int, int, int, int]] = []
    pool = bytearray()
    depth = [0, 0]

    def push(op: int, size: int = 0, flags: int = 0, slot: int = 0, arg: int = 0, imm: int = 0) -> None:
        imm &= (1 << 64) - 1
        if imm >= 1 << 63:
            imm -= 1 << 64
        out.append((op, size, flags, slot, arg, imm))

    def grow(n: int) -> None:
        depth[0] += n
        depth[1] = max(depth[1], depth[0])

    def field_of(name: str) -> tuple[int, FieldPlan]:
        if name not in program.names:
            raise _NotNative(f"the filter reads {name!r}, not one of the event's own fields")
        slot = program.names.index(name)
        return slot, program.fields[slot]

    def constant(value: bool) -> None:
        push(F_CONST, imm=int(value))
        grow(1)

    def walk(node: FilterNode) -> None:
        kind = node[0]
        if kind in ("and", "or"):
            for term in node[1]:
                walk(term)
            push(F_AND if kind == "and" else F_OR, arg=len(node[1]))
            grow(1 - len(node[1]))
        elif kind == "not":
            walk(node[1])
            push(F_NOT)
        elif kind == "glob":
            slot, plan = field_of(node[1])
            pattern = node[2]
            if kinds.get(node[1]) != "str" or plan[0] != "str":
                if kinds.get(node[1]) not in ("int", "str") or plan[0] != kinds.get(node[1]):
                    raise _NotNative(f"{node[1]!r} has no native comparison")
                constant(False)  # a glob on an integer never matches
                return
            if any(c in pattern for c in "?[") or not pattern.isascii():
                raise _NotNative("a glob with ? or [ (matched by characters, not bytes)")
            data = pattern.encode()
            push(F_GLOB, slot=slot, arg=plan[1], imm=len(pool) | (len(data) << 32))
            pool.extend(data)
            grow(1)
        else:
            _, name, op, want = node
            slot, plan = field_of(name)
            kind_of = kinds.get(name)
            if kind_of not in ("int", "str") or plan[0] != kind_of:
                raise _NotNative(f"{name!r} has no native comparison")
            if (kind_of == "int") != isinstance(want, int):  # an integer against a string: never equal
                constant(op == "!=")
                return
            if kind_of == "int":
                assert isinstance(want, int)
                if not -(1 << 63) <= want < (1 << 64):
                    raise _NotNative("an integer beyond 64 bits")
                flags = (SIGNED if plan[2] else 0) | (F_BIG if want >= 1 << 63 else 0)
                push(F_INT, size=CMP[op], flags=flags, slot=slot, arg=plan[1], imm=want)
            else:
                if op not in ("==", "!="):
                    raise _NotNative(f"strings compared with {op}")
                data = str(want).encode("utf-8", "surrogatepass")
                if "\ufffd" in str(want):
                    raise _NotNative("a string with U+FFFD (kpsdk compares decoded strings)")
                push(F_STR, size=CMP[op], slot=slot, arg=plan[1], imm=len(pool) | (len(data) << 32))
                pool.extend(data)
            grow(1)

    walk(tree)
    if depth[1] > MAX_FILTER_STACK or len(out) > 0xFFFF:
        raise _NotNative("a filter too deep for the native stack")
    head = _HEAD.unpack_from(program.code, 0)
    insns = program.code[_HEAD.size:_HEAD.size + head[1] * _INSN.size]
    code = _HEAD.pack(MAGIC, head[1], len(out), head[3], head[4], head[5], head[6], head[7], len(pool),
                      head[9], 0, 0) + insns + b"".join(_INSN.pack(*i) for i in out) + bytes(pool)
    return FetchProgram(code, program.fields, program.nscalar, program.nvar, program.max_len, program.names)
