"""The encodings DWARF's sections are made of: LEB128 numbers, fixed-size integers, strings.

Kept apart because the hot loops of the DIE scanner (:mod:`kpsdk.binfmt.dwarf.scan`) and of
the line-program decoder (:mod:`kpsdk.binfmt.dwarf.linetable`) read a few million of them
in a large file: each reader is a plain function over ``bytes`` and a position, returning
the value and the next position, with the one-byte case first (most LEB128 numbers are).
A read past the end of the section is an :class:`IndexError` or :class:`struct.error`,
which the callers turn into a :class:`~kpsdk.errors.DwarfFormatError` naming the offset.
"""

from __future__ import annotations

import struct


def uleb(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 number at ``pos``: (value, position after it)."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7


def sleb(data: bytes, pos: int) -> tuple[int, int]:
    """A signed LEB128 number at ``pos``: (value, position after it)."""
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if byte & 0x40:
                value -= 1 << shift
            return value, pos


def cstring(data: bytes, pos: int) -> tuple[bytes, int]:
    """A NUL-terminated string at ``pos``: (its bytes, position after the NUL)."""
    end = data.index(b"\0", pos)
    return data[pos:end], end + 1


class Numbers:
    """Fixed-size unsigned integers of one byte order, by size (1, 2, 3, 4, 8)."""

    def __init__(self, little_endian: bool) -> None:
        order = "<" if little_endian else ">"
        self.little = little_endian
        self._formats = {size: struct.Struct(order + code) for size, code in ((1, "B"), (2, "H"), (4, "I"), (8, "Q"))}
        self.u16 = self._formats[2].unpack_from
        self.u32 = self._formats[4].unpack_from
        self.u64 = self._formats[8].unpack_from

    def read(self, data: bytes, pos: int, size: int) -> int:
        """The ``size``-byte unsigned integer at ``pos``."""
        fmt = self._formats.get(size)
        if fmt is not None:
            return int(fmt.unpack_from(data, pos)[0])
        if pos + size > len(data):
            raise IndexError(f"{size}-byte number at {pos:#x} runs past the end ({len(data)} bytes)")
        return int.from_bytes(data[pos:pos + size], "little" if self.little else "big")
