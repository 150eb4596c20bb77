"""Guest memory read by kpsdk's TCG plugin at the hit, for handlers and trace definitions.

A plugin hit's handlers run after the hit, while the guest goes on: memory they read
later is not the memory the hit saw.  So the memory is read *at* the hit, by the plugin,
as the probe declared it beforehand with kprobe_events fetch arguments (``+0(%si):string``,
``+8(%sp):u64``, ``+0(+0(%si)):string``, ``@jiffies``, ``$stack2``).  This module turns those
fetch trees into the plugin's reads (:class:`~kpsdk.targets.live.tcg.plugin.MemFetch`: a register,
an absolute address or an earlier read's word, plus an offset; a fixed size or a string up to
its NUL) and serves a handler's reads from what one hit's record holds
(:class:`HitMemory`): the same fetch closures as on gdb's path (:mod:`kpsdk.trace.compile`)
then read the memory as it was at the hit.

A read the probe did not declare is a :class:`~kpsdk.errors.TargetError` (it cannot be
answered); a declared one the plugin could not read is a :class:`~kpsdk.errors.TargetFault`,
which a trace prints as the kernel does (``(fault)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kpsdk.errors import TargetError, TargetFault
from kpsdk.kernel.tasks import MAX_JOINED_READ
from kpsdk.targets.live.tcg.plugin import ABSOLUTE, CHAIN, MAX_MEM, MAX_MEM_SIZE, MemFetch

if TYPE_CHECKING:
    from kpsdk.arch import Abi, Arch
    from kpsdk.fetchargs import BoundFetch, FetchNode, FetchType
    from kpsdk.kernel.tasks import TaskLayout

#: how far a string read goes (the kernel's MAX_STRING_SIZE, the NUL included)
STRING_SIZE = MAX_MEM_SIZE
#: a base: (MemFetch.reg, offset added to it)
Base = tuple[int, int]


class Planner:
    """Fetch trees -> the plugin's reads, shared between the arguments of one probe point
    (the same read is asked for once)."""

    def __init__(self, arch: Arch, abi: Abi, register_index: Callable[[str], int | None]) -> None:
        self.arch = arch
        self.abi = abi
        self._index = register_index
        self.reads: list[MemFetch] = []

    def _read(self, fetch: MemFetch) -> int:
        if self.arch.word_size == 4:  # the plugin wraps base + offset at the guest's word
            fetch = replace(fetch, word32=True)
        if fetch in self.reads:
            return self.reads.index(fetch)
        if len(self.reads) >= MAX_MEM:
            raise TargetError(f"the plugin reads at most {MAX_MEM} memory ranges per probe point at a hit "
                              "(a trace definition with more memory fetches needs mechanism='gdb')")
        self.reads.append(fetch)
        return len(self.reads) - 1

    def _register(self, name: str) -> int:
        index = self._index(self.arch.register(name).gdb)
        if index is None:
            raise TargetError(f"kpsdk's QEMU plugin cannot read register {name}")
        return index

    def _word_at(self, where: Base) -> Base:
        """The word loaded from ``where``: a read whose result later reads are based on."""
        k = self._read(MemFetch(where[0], where[1], self.arch.word_size))
        return CHAIN - k, 0

    def _value(self, node: FetchNode, symbol: Callable[[FetchNode], int]) -> Base:
        """Where a scalar node's value comes from, as a base plus an offset."""
        kind = node.kind
        if kind == "reg":
            return self._register(node.name), 0
        if kind == "stackp":
            return self._register(self.arch.sp), 0
        if kind == "stack":
            return self._word_at((self._register(self.arch.sp), self.arch.word_size * node.index))
        if kind == "arg":
            n, regs = node.index - 1, self.abi.args
            if n < len(regs):
                return self._register(regs[n]), 0
            offset = self.abi.stack_args_offset + self.arch.word_size * (n - len(regs))
            return self._word_at((self._register(self.arch.sp), offset))
        if kind == "imm":
            return ABSOLUTE, node.value
        if node.is_memory:
            return self._word_at(self._address(node, symbol))
        raise TargetError(f"a {kind!r} fetch argument cannot be read by the plugin (not yet: use mechanism='gdb')")

    def _address(self, node: FetchNode, symbol: Callable[[FetchNode], int]) -> Base:
        """Where a memory node loads from."""
        if node.kind == "mem":
            return ABSOLUTE, node.value
        if node.kind in ("sym", "foffs"):
            return ABSOLUTE, symbol(node)
        assert node.inner is not None
        base, offset = self._value(node.inner, symbol)
        return base, (offset + node.value) & self.arch.word_mask

    def add_task(self, layout: TaskLayout, percpu: int) -> int:
        """The reads :meth:`TaskLayout.read <kpsdk.kernel.tasks.TaskLayout.read>` makes for the prefix's
        comm, pid and flags (``percpu``: the per-cpu base register's index), chained from the
        per-cpu ``current`` word; returns the index of that word's read."""
        word = self.arch.word_size
        if layout.preempt_count is not None:
            lo = min(layout.current, layout.preempt_count)
            span = max(layout.current + word, layout.preempt_count + 4) - lo
            self._read(MemFetch(percpu, lo, span))
        current = self._read(MemFetch(percpu, layout.current, word))
        task = CHAIN - current
        lo, hi = min(layout.pid, layout.comm), max(layout.pid + 4, layout.comm + layout.comm_size)
        if hi - lo <= MAX_JOINED_READ:
            self._read(MemFetch(task, lo, hi - lo))
        else:
            self._read(MemFetch(task, layout.pid, 4))
            self._read(MemFetch(task, layout.comm, layout.comm_size))
        if layout.ti_flags is not None:
            self._read(MemFetch(task, layout.ti_flags, word))
        if layout.migration_disabled is not None:
            self._read(MemFetch(task, layout.migration_disabled, layout.migration_disabled_size))
        return current

    def add(self, fetch: FetchNode, argtype: FetchType, symbol: Callable[[FetchNode], int]) -> None:
        """The reads one fetch argument needs (registers alone need none)."""
        if fetch.kind in ("comm", "immstr", "retval"):
            return
        word = self.arch.word_size
        if fetch.is_memory:
            base, offset = self._address(fetch, symbol)
        elif argtype.is_string and argtype.name != "symstr":  # \IMM:string, %reg:string...
            base, offset = self._value(fetch, symbol)
            self._read(MemFetch(base, _signed(offset, word), STRING_SIZE, string=True))
            return
        else:
            self._value(fetch, symbol)
            return
        offset = _signed(offset, word)
        if argtype.is_string and argtype.name != "symstr":
            if argtype.count:
                raise TargetError("arrays of strings cannot be read by the plugin (not yet: use mechanism='gdb')")
            self._read(MemFetch(base, offset, STRING_SIZE, string=True))
            return
        size = word if argtype.name == "symstr" else argtype.size or word
        total = size * max(argtype.count, 1)
        if total > MAX_MEM_SIZE:
            raise TargetError(f"the plugin reads at most {MAX_MEM_SIZE} bytes per fetch, not {total}")
        self._read(MemFetch(base, offset, total))


def _signed(value: int, word: int) -> int:
    """An offset as the plugin's signed 64-bit field holds it: sign-extended from the guest's
    word (``-8`` on i386 is -8, not 0xfffffff8; the plugin wraps the sum at the word)."""
    bits = 8 * word
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


#: one declared fetch: its tree, its type, and how its symbols resolve
Declared = tuple["FetchNode", "FetchType", Callable[["FetchNode"], int]]


def bound_fetches(args: Iterable[BoundFetch]) -> list[Declared]:
    """A trace event's bound fetch arguments as declared fetches."""
    return [(bound.arg.fetch, bound.type, bound.symbol_address) for bound in args]


def parse_fetches(arch: Arch, texts: Sequence[str]) -> list[tuple[FetchNode, FetchType]]:
    """Fetch arguments a handler declares (``"+0(%si):string"``), parsed by the trace grammar
    (its errors: :class:`~kpsdk.errors.TraceDefinitionError` with the kernel's error text).
    The one import of the trace package by a target (tests/test_layers.py lists it): the
    arguments are kprobe_events syntax, and the grammar is their only parser."""
    from kpsdk.trace.grammar import parse

    if isinstance(texts, str):
        raise TargetError("memory= takes a list of fetch arguments, not one string")
    if not isinstance(texts, (list, tuple)):
        raise TargetError(f"memory= takes a list of fetch arguments (\"+0(%si):string\"), not {type(texts).__name__}")
    out: list[tuple[FetchNode, FetchType]] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text or any(c.isspace() for c in text):
            raise TargetError(f"memory= wants fetch arguments without spaces (\"+0(%si):string\"), not {text!r}")
        definition = parse(f"p:kpsdk/memory kpsdk_memory a{i}={text}", arch)
        out += [(a.fetch, a.type) for a in definition.args]
    return out


class HitMemory:
    """The memory one plugin record holds: (address, bytes or None) per read, answered as
    ``read_memory`` and ``read_cstring`` answer."""

    def __init__(self) -> None:
        self.reads: tuple[tuple[int, bytes | None], ...] = ()

    def read(self, addr: int, size: int) -> bytes:
        faulted = False
        for start, data in self.reads:
            if data is None:
                faulted |= start == addr
                continue
            if start <= addr and addr + size <= start + len(data):
                return data[addr - start:addr - start + size]
        if faulted:
            raise TargetFault(f"at the hit, the plugin could not read {size} bytes", address=addr)
        raise _undeclared(addr, size)

    def cstring(self, addr: int, limit: int) -> bytes:
        for start, data in self.reads:
            if data is None:
                if start == addr:
                    raise TargetFault("at the hit, the plugin could not read the string", address=addr)
                continue
            if start <= addr < start + len(data):
                text = data[addr - start:]
                end = text.find(b"\0")
                return text[:end if 0 <= end < limit else limit]
        raise _undeclared(addr, 1)


def _undeclared(addr: int, size: int) -> TargetError:
    return TargetError(f"a probe on the plugin mechanism cannot read guest memory it did not declare ({size} bytes "
                       f"at {addr:#x}): the guest has moved on since the hit, and the plugin read only what the probe "
                       "declared (s.target.declare_memory(probe, [FETCHARG...]); or use mechanism='gdb')")
