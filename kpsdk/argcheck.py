"""The arguments of kpsdk's memory and symbol calls, checked where the user hands them over.

A value of the wrong kind (``s.read_memory("add", 4)``, ``s.symbols.lookup("add")``) is an
:class:`~kpsdk.errors.ArgumentError` naming the call, the argument and what it wants,
rather than a ``TypeError`` about ``'<'`` from deep inside a bisect or a ctypes call.
Calls made at every hit (a handler's ``s.read_memory``, a trace's symbol lookups) test
the usual case inline (``type(addr) is int`` and a range) and come here only for the rest.

The numbers users write (a probe's ``0x401000``, a symbol's ``+0x10``) are read here too
(:func:`parse_number`), so that every layer reads them alike: this module imports nothing of
kpsdk but its errors, and the ELF and symbol readers below the core use it.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from kpsdk.errors import ArgumentError, shown


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool: ``addr=True`` is a mistake, not address 1."""
    return isinstance(value, int) and not isinstance(value, bool)


#: what ``int(text, 0)`` takes, spelled in ASCII digits, without ``_`` separators or blanks
_NUMBER = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0+|[1-9][0-9]*)\Z")


def parse_number(text: str) -> int | None:
    """``int(text, 0)`` (decimal, ``0x``, ``0o``, ``0b``, a sign), or None when it is not one;
    a decimal too long for Python to convert (over 4300 digits) is None too.  ASCII digits
    only: ``int()`` also takes other scripts' digits (``int("٣") == 3``), ``_`` separators and
    blanks around the number, which no number a user writes for kpsdk holds."""
    if not _NUMBER.match(text):
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def want_int(call: str, name: str, value: object, least: int | None = 0, most: int | None = None) -> int:
    """``value`` if it is an int (not a bool) from ``least`` to ``most`` (None: no bound),
    else an ArgumentError."""
    if not is_int(value) or (least is not None and value < least) or (most is not None and value > most):
        span = "" if least is None else f" from {least}" if most is None else f" from {least} to {most:#x}"
        raise ArgumentError(f"{call}: {name}={shown(value)}; want an int{span}")
    return value


def want_address(call: str, value: object, word_mask: int | None = None, name: str = "addr") -> int:
    """An address: an int from 0 to the arch's word (``word_mask``; unbounded when None)."""
    return want_int(call, name, value, 0, word_mask)


def want_str(call: str, name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"{call}: {name}={shown(value)}; want a str")
    return value


def want_bytes(call: str, name: str, value: object) -> bytes:
    """Bytes from a bytes-like object (bytes, bytearray, memoryview); a str is refused: its
    encoding is the caller's choice."""
    if isinstance(value, str) or not isinstance(value, bytes | bytearray | memoryview):
        raise ArgumentError(f"{call}: {name}={shown(value)}; want bytes (or a bytearray or memoryview)")
    return bytes(value)
