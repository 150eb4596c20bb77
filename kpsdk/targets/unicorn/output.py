"""Where a Unicorn program's standard output and error go: streamed as written, a tail kept.

A ``write`` to descriptor 1 or 2 (the bare layer's, or the Linux layer's console description)
is handed at once to the session's destination for that stream (``stdout=``/``stderr=`` of
``kpsdk.open``: a host file descriptor, or a binary file object), and its last
``console_limit`` bytes (both streams, in the order written) are what ``s.console`` shows.
Nothing else is held: a program writing a gigabyte costs the host the limit, not the gigabyte.
"""

from __future__ import annotations

import io
import os
from typing import Any, Protocol

from kpsdk.errors import ArgumentError

#: the default ``console_limit``: the tail of the program's output ``s.console`` keeps (1 MiB)
CONSOLE_LIMIT = 1 << 20


class BinaryWriter(Protocol):
    def write(self, data: bytes, /) -> Any: ...


#: a stream's destination: a host file descriptor or a binary file object (None: none)
Destination = int | BinaryWriter | None


def check_destination(value: object, option: str) -> Destination:
    """``stdout=``/``stderr=`` checked: None, a host descriptor (an int >= 0, left open), or a file
    object with ``write`` taking bytes (a text file's ``.buffer``, its text flushed first)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ArgumentError(f"elf: {option} must be a file descriptor or a binary file object, not a bool")
    if isinstance(value, int):
        if value < 0:
            raise ArgumentError(f"elf: {option}={value} is not a file descriptor")
        return value
    if isinstance(value, io.TextIOBase):
        buffer = getattr(value, "buffer", None)
        if buffer is None or not callable(getattr(buffer, "write", None)):
            raise ArgumentError(f"elf: {option} is a text file without a binary buffer; give a binary file")
        value.flush()
        return buffer  # type: ignore[no-any-return]
    if not callable(getattr(value, "write", None)):
        raise ArgumentError(f"elf: {option} must be a file descriptor or a binary file object "
                            f"(with write), not {type(value).__name__}")
    return value  # type: ignore[return-value]


def check_limit(value: object) -> int:
    """``console_limit=`` checked: a number of bytes, >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgumentError(f"elf: console_limit must be a number of bytes (an int >= 0), not {value!r}")
    return value


class GuestOutput:
    """A program's descriptors 1 and 2: each write streamed to its destination, the last
    ``limit`` bytes kept in ``tail`` (the target's ``_console``, which ``s.console`` reads)."""

    def __init__(self, tail: bytearray, limit: int = CONSOLE_LIMIT) -> None:
        self.tail = tail
        self.limit = limit
        self.out: Destination = None
        self.err: Destination = None

    def configure(self, limit: int, stdout: Destination, stderr: Destination) -> None:
        self.limit, self.out, self.err = limit, stdout, stderr

    @property
    def split(self) -> bool:
        """Whether standard output and error go to different places (two open descriptions)."""
        return self.out is not self.err and not (isinstance(self.out, int) and self.out == self.err)

    def write(self, data: bytes, stream: int) -> None:
        """``data`` written to ``stream`` (1 or 2): sent on, then kept in the tail.  A host
        error of the destination (``EPIPE``: the reader went away) raises its OSError, which
        the caller answers the program with."""
        where = self.err if stream == 2 else self.out
        if where is not None and data:
            if isinstance(where, int):
                view = memoryview(data)
                while view:
                    view = view[os.write(where, view):]
            else:
                where.write(data)
                flush = getattr(where, "flush", None)
                if flush is not None:
                    flush()
        limit, tail = self.limit, self.tail
        if len(data) >= limit:
            tail[:] = data[len(data) - limit:]
            return
        tail += data
        extra = len(tail) - limit
        if extra > 0:
            del tail[:extra]
