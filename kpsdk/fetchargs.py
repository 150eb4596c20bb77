"""A trace's fetch arguments as a target is told them: what of them a target may read.

A trace event's fetch arguments (``+0(%si):string``, ``@jiffies:u64``...) are parsed and bound
to a session by the trace package (:mod:`kpsdk.trace.grammar`, :mod:`kpsdk.trace.fetch`), which
hands them to the target before the event's probe registers (:meth:`kpsdk.target.Target.declare_fetches`):
a target whose handlers run after the hit (the QEMU plugin) must read their memory at the hit.
The target interface is the core, and the core imports nothing of the trace package
(tests/test_layers.py), so these protocols say what a target may ask of a bound argument: its
fetch tree, its type, where its symbols point.  The trace package's classes are them.
"""

from __future__ import annotations

from typing import Any, Protocol


class FetchNode(Protocol):
    """One node of a fetch tree (:class:`kpsdk.trace.grammar.Fetch`): ``kind`` is ``reg``
    (``name``), ``stack`` (``index``), ``stackp``, ``retval``, ``comm``, ``arg`` (``index``,
    1-based), ``imm`` (``value``), ``immstr``, ``mem`` (``value``: an address to load from),
    ``sym`` (``name`` + ``value``), ``foffs`` (``value``: a file offset) or ``deref`` (``value``
    added to ``inner``'s value, then loaded)."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> int: ...

    @property
    def index(self) -> int: ...

    @property
    def inner(self) -> FetchNode | None: ...

    @property
    def is_memory(self) -> bool:
        """The value is loaded from memory at an address."""
        ...


class FetchType(Protocol):
    """A fetch argument's type (:class:`kpsdk.trace.grammar.ArgType`): ``name`` as written
    (``u32``, ``string``, ``symstr``), ``size`` in bytes (0 for a string), ``count`` the array
    length or 0."""

    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def count(self) -> int: ...

    @property
    def is_string(self) -> bool: ...


class FetchField(Protocol):
    """``NAME=FETCHARG[:TYPE]`` as parsed (:class:`kpsdk.trace.grammar.FetchArg`): its tree."""

    @property
    def fetch(self) -> FetchNode: ...


class BoundFetch(Protocol):
    """A fetch argument bound to a session (:class:`kpsdk.trace.fetch.BoundArg`): the parsed
    argument, its type, and the address each ``@SYM`` or ``@+FOFFS`` node of its tree points at
    (``symbol_address(node)``, resolved when it was bound; ``node`` one of its own)."""

    @property
    def arg(self) -> FetchField: ...

    @property
    def type(self) -> FetchType: ...

    def symbol_address(self, node: Any, /) -> int: ...
