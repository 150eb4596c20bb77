"""Evaluating fetch arguments at a probe hit: registers, stack, memory, symbols, ``$argN``.

A parsed :class:`~kpsdk.trace.grammar.FetchArg` is bound to a session once
(:func:`bind_arg`): symbols are resolved then, as the kernel does when it
registers an event (an unknown one is an error with its column), and ``$comm``
is checked against what the target can give.  Then the argument is compiled
(:mod:`kpsdk.trace.compile`) into :attr:`BoundArg.value`, one closure per node
of the fetch tree, run at each hit the way the kernel's fetch instructions run:
a load (register, stack slot, argument...), then dereferences, then the store
by type (an integer of the type's size, a string, an array), then a bitfield.
:meth:`BoundArg.interpret` walks the tree instead, node by node: the reference
the compiled closures are tested against.

Memory a fetch cannot read gives ``None`` for that field (printed ``(fault)``,
as the kernel prints a string it could not fetch); the hit goes on.  The same
holds for a return probe's ``$argN``, read at the function's entry
(:func:`entry_args`): one that could not be read there is ``(fault)`` at the return.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.binfmt.symbols import shown_name
from kpsdk.errors import SymbolError, TargetFault
from kpsdk.target import Target
from kpsdk.trace.compile import compile_arg
from kpsdk.trace.grammar import ArgType, Fetch, FetchArg, TraceDefinitionError

if TYPE_CHECKING:
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: longest string a fetch reads (the kernel's MAX_STRING_SIZE is PATH_MAX)
MAX_STRING = 4096
#: the kernel's TASK_COMM_LEN - 1
COMM_LEN = 15

Value = int | str | None | list[Any]


@dataclass(slots=True)
class HitContext:
    """What one hit gives the fetches: the registers, and at a return the entry's ``$argN`` values."""

    regs: PtRegs
    #: ``$argN`` values read at the entry (None: that one could not be read)
    entry_args: dict[int, int | None] | None = None


def entry_args(regs: PtRegs, numbers: list[int]) -> dict[int, int | None]:
    """The ``$argN`` (``numbers``, from 1) a return probe fetches, read at the function's entry;
    one on a stack slot that cannot be read is None, and prints ``(fault)`` at the return."""
    values: dict[int, int | None] = {}
    for n in numbers:
        try:
            values[n] = int(regs.arg(n - 1))
        except TargetFault:
            values[n] = None
    return values


def comm_of(session: Session) -> str | None:
    """The task name the kernel would show for the probed code, where kpsdk can know it.

    A program (``elf:``, ``qemu-user:``) is its own only task: the basename of
    its file, cut to 15 characters like ``task->comm``.  A kernel or a bare CPU
    has many tasks or none: None (a kernel's ``$comm`` is then read at each hit,
    where the target :meth:`~kpsdk.target.Target.reads_comm`).
    """
    if getattr(session.target, "abi_kind", "user") == "kernel":
        return None
    scheme, _, rest = session.spec.partition(":")
    if scheme not in ("elf", "qemu-user") or not rest:
        return None
    return os.path.basename(rest)[:COMM_LEN]


class BoundArg:
    """A fetch argument bound to a session: resolved symbols, the word size, the comm."""

    def __init__(self, arg: FetchArg, session: Session, definition: str, subsystem: str,
                 uprobe_path: str | None = None) -> None:
        self.arg = arg
        self.name = arg.name
        self.type = arg.type
        self._session = session
        arch = session.arch
        self._word = arch.word_size
        self._mask = arch.word_mask
        self._endian = arch.endian
        self._sp = arch.register(arch.sp).name
        self._symbols: dict[int, int] = {}
        self._comm: str | None = None
        self._comm_live = False
        for node in arg.fetch.walk():
            if node.kind == "reg":
                arch.register(node.name)  # checked by the parser; an unknown name raises here too
            elif node.kind == "sym":
                try:
                    base = session.symbols.resolve(node.name)
                except SymbolError as exc:
                    raise TraceDefinitionError("BAD_MEM_ADDR", definition, node.column,
                                               f"unknown symbol {node.name!r}", subsystem) from exc
                self._symbols[node.column] = (base + node.value) & self._mask
            elif node.kind == "comm":
                self._comm = comm_of(session)
                self._comm_live = self._comm is None and session.target.reads_comm()
                if self._comm is None and not self._comm_live:
                    raise TraceDefinitionError(
                        "BAD_VAR", definition, node.column,
                        f"$comm: a {session.spec.partition(':')[0]} target has no task name kpsdk can read "
                        "(elf: and qemu-user: programs have one; a kernel where kpsdk finds current through "
                        "its BTF)", subsystem)
            elif node.kind == "foffs":
                self._symbols[node.column] = _file_offset_address(uprobe_path, node, definition, subsystem)
        #: this argument's value at a hit (None where memory could not be read): the compiled fetch
        self.value: Callable[[HitContext], Value] = compile_arg(self)

    @property
    def session(self) -> Session:
        return self._session

    @property
    def comm(self) -> str | None:
        """``$comm``'s fixed value (a program's name), or None."""
        return self._comm

    @property
    def comm_live(self) -> bool:
        """``$comm`` is read at each hit (a kernel's current)."""
        return self._comm_live

    def symbol_address(self, node: Fetch) -> int:
        """Where a ``@SYM`` or ``@+FOFFS`` node of this argument points, resolved at binding."""
        return self._symbols[node.column]

    # -- evaluation, node by node (the compiled closures' reference) ------------------------------

    def interpret(self, hit: HitContext) -> Value:
        """This argument's value at a hit, walking the fetch tree (None where memory could not be read)."""
        fetch, argtype = self.arg.fetch, self.type
        try:
            if fetch.kind in ("comm", "immstr"):
                if fetch.kind == "comm" and self._comm_live:  # a kernel: current->comm, now
                    info = self._session.target.task_info()
                    return info.comm if info is not None else None
                return self._comm if fetch.kind == "comm" else fetch.text
            if fetch.is_memory:
                addr = self._address(fetch, hit)
                return self._load_typed(addr, argtype)
            raw = self._scalar(fetch, hit)
            if argtype.name == "string":  # \IMM:string: the immediate is an address
                return self._read_string(raw)
            return self._convert(raw, argtype)
        except TargetFault:
            return None

    def _scalar(self, node: Fetch, hit: HitContext) -> int:
        """A value that is not loaded by the final store: registers, stack, args, derefs."""
        kind = node.kind
        regs = hit.regs
        if kind == "reg":
            return int(regs[self._session.arch.register(node.name).name])
        if kind == "stackp":
            return int(regs[self._sp])
        if kind == "stack":
            return self._read_word(int(regs[self._sp]) + self._word * node.index)
        if kind == "retval":
            return int(regs.return_value)
        if kind == "arg":
            if hit.entry_args is None:
                return int(regs.arg(node.index - 1))
            value = hit.entry_args.get(node.index)
            if value is None:
                raise TargetFault(f"$arg{node.index} could not be read at the function's entry")
            return value
        if kind == "imm":
            return node.value
        if kind in ("deref", "mem", "sym", "foffs"):
            return self._read_word(self._address(node, hit))
        raise AssertionError(f"unhandled fetch {kind}")

    def _address(self, node: Fetch, hit: HitContext) -> int:
        """Where a memory fetch loads from."""
        if node.kind == "mem":
            return node.value
        if node.kind in ("sym", "foffs"):
            return self._symbols[node.column]
        assert node.inner is not None
        return (self._scalar(node.inner, hit) + node.value) & self._mask

    def _read_word(self, addr: int) -> int:
        return int.from_bytes(self._session.read_memory(addr, self._word), self._endian)

    def _load_typed(self, addr: int, argtype: ArgType) -> Value:
        session = self._session
        if argtype.is_string and argtype.name != "symstr":
            if argtype.count:  # an array of string pointers
                return [self._string_at(self._read_word(addr + i * self._word)) for i in range(argtype.count)]
            return self._string_at(addr)
        size = argtype.size or self._word
        if argtype.name == "symstr":
            size = self._word
        if argtype.count:
            data = session.read_memory(addr, size * argtype.count)
            return [self._convert(int.from_bytes(data[i * size:(i + 1) * size], self._endian), argtype)
                    for i in range(argtype.count)]
        return self._convert(int.from_bytes(session.read_memory(addr, size), self._endian), argtype)

    def _string_at(self, addr: int) -> str | None:
        try:
            return self._read_string(addr)
        except TargetFault:
            return None

    def _read_string(self, addr: int) -> str:
        """In 64-byte pieces through ``read_memory`` (the generic :meth:`Target.read_cstring`), not
        the target's own faster path: the compiled fetches are checked against this."""
        return Target.read_cstring(self._session.target, addr, MAX_STRING).decode("utf-8", "replace")

    def _convert(self, raw: int, argtype: ArgType) -> Value:
        """The store and modify stages: cut to the type's size, bitfield, sign, symbol."""
        if argtype.name == "symstr":
            return self._symbol(raw & self._mask)
        size = argtype.size or self._word
        bits = 8 * size
        value = raw & ((1 << bits) - 1)
        if argtype.bitfield is not None:
            width, offset = argtype.bitfield
            value = (value >> offset) & ((1 << width) - 1)
        elif argtype.signed and value >> (bits - 1):
            value -= 1 << bits
        if argtype.display == "symbol":
            return self._symbol(value)
        return value

    def _symbol(self, addr: int) -> str:
        """``%pS``: ``sym+0xoff/0xsize``, or the address in hex outside every symbol."""
        return format_symbol(self._session, addr)


def format_symbol(session: Session, addr: int, with_offset: bool = True) -> str:
    """The kernel's ``%pS`` (``sym+0x0/0x14``) or, without the offset, ``%ps`` (``sym``)."""
    arch = session.arch
    plain = addr & ~1 if arch.has_thumb else addr
    found = session.symbols.lookup(plain)
    if found is None:
        return f"{addr:#x}"
    name, off, size = found
    name = shown_name(name)  # one line, whatever the symbol table holds
    return f"{name}+{off:#x}/{size:#x}" if with_offset else name


def _file_offset_address(path: str | None, node: Fetch, definition: str, subsystem: str) -> int:
    """``@+OFFSET`` on a uprobe: the address the file offset is loaded at (ELF program headers)."""
    from kpsdk.binfmt.elfimage import load_elf

    if path is None:
        raise TraceDefinitionError("FILE_ON_KPROBE", definition, node.column, subsystem=subsystem)
    image = load_elf(Path(path))
    for seg in image.segments:
        if seg.offset <= node.value < seg.offset + len(seg.data):
            return seg.vaddr + node.value - seg.offset
    raise TraceDefinitionError("BAD_FILE_OFFS", definition, node.column,
                               f"{node.value:#x} is not in a loaded segment of {path}", subsystem)
