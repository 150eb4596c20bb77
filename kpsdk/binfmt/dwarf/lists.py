"""Range lists and location lists, DWARF 2 to 5.

A function's code, an inlined copy's, a lexical block's are address ranges (``DW_AT_ranges``);
a variable of optimized code has a location per range of pcs (``DW_AT_location`` as a
list).  DWARF 4 keeps them in ``.debug_ranges``/``.debug_loc`` as address pairs relative to
the unit's base address, with a base-address selection entry (a first address of all ones);
DWARF 5 in ``.debug_rnglists``/``.debug_loclists`` as typed entries (``DW_RLE_*``,
``DW_LLE_*``: section 7.25 and 7.7.3), some through ``.debug_addr`` indexes.  Both are decoded
here into plain ``(low, high)`` and ``(low, high, expression)`` tuples: pyelftools decodes
them too, but through its construct structures at tens of microseconds an entry, and an index
of a large program reads tens of thousands of lists.
"""

from __future__ import annotations

from kpsdk.binfmt.dwarf.primitives import uleb
from kpsdk.binfmt.dwarf.sections import Bases, Sections

Range = tuple[int, int]
#: (low, high, DWARF expression); ``DW_LLE_default_location`` is (0, 2**64, expression)
LocEntry = tuple[int, int, bytes]

_ALL = 1 << 64


def ranges_v4(sec: Sections, offset: int, base: int, address_size: int) -> list[Range]:
    """The ``.debug_ranges`` list at ``offset`` (DWARF 2-4), ``base`` the unit's base address,
    in the order listed, empty ranges included (the first range's start is where ``perf``
    puts an inlined copy that has no ``DW_AT_entry_pc``)."""
    data, read = sec.ranges, sec.num.read
    ones = (1 << (8 * address_size)) - 1
    out: list[Range] = []
    pos = offset
    while True:
        low, high = read(data, pos, address_size), read(data, pos + address_size, address_size)
        pos += 2 * address_size
        if low == 0 and high == 0:
            return out
        if low == ones:
            base = high
        elif low != high:
            out.append((base + low, base + high))


def ranges_v5(sec: Sections, offset: int, base: int, bases: Bases, address_size: int) -> list[Range]:
    """The ``.debug_rnglists`` list at ``offset`` (DWARF 5), ``base`` the unit's base address,
    in order, empty ranges included (as :func:`ranges_v4`)."""
    data, read = sec.rnglists, sec.num.read
    out: list[Range] = []
    pos = offset
    while True:
        kind = data[pos]
        pos += 1
        if kind == 0:                   # DW_RLE_end_of_list
            return out
        if kind == 1:                   # base_addressx
            index, pos = uleb(data, pos)
            base = sec.address_index(index, bases, address_size)
            continue
        if kind == 5:                   # base_address
            base = read(data, pos, address_size)
            pos += address_size
            continue
        if kind == 2:                   # startx_endx
            a, pos = uleb(data, pos)
            b, pos = uleb(data, pos)
            low, high = sec.address_index(a, bases, address_size), sec.address_index(b, bases, address_size)
        elif kind == 3:                 # startx_length
            a, pos = uleb(data, pos)
            length, pos = uleb(data, pos)
            low = sec.address_index(a, bases, address_size)
            high = low + length
        elif kind == 4:                 # offset_pair
            a, pos = uleb(data, pos)
            b, pos = uleb(data, pos)
            low, high = base + a, base + b
        elif kind == 6:                 # start_end
            low, high = read(data, pos, address_size), read(data, pos + address_size, address_size)
            pos += 2 * address_size
        elif kind == 7:                 # start_length
            low = read(data, pos, address_size)
            length, pos = uleb(data, pos + address_size)
            high = low + length
        else:
            raise ValueError(f"unknown range list entry kind {kind} at .debug_rnglists+{pos - 1:#x}")
        out.append((low, high))


def locations_v4(sec: Sections, offset: int, base: int, address_size: int) -> list[LocEntry]:
    """The ``.debug_loc`` list at ``offset`` (DWARF 2-4)."""
    data, read = sec.loc, sec.num.read
    ones = (1 << (8 * address_size)) - 1
    out: list[LocEntry] = []
    pos = offset
    while True:
        low, high = read(data, pos, address_size), read(data, pos + address_size, address_size)
        pos += 2 * address_size
        if low == 0 and high == 0:
            return out
        if low == ones:
            base = high
            continue
        length = sec.num.u16(data, pos)[0]
        expr = data[pos + 2:pos + 2 + length]
        pos += 2 + length
        if low != high:
            out.append((base + low, base + high, expr))


def locations_v5(sec: Sections, offset: int, base: int, bases: Bases, address_size: int) -> list[LocEntry]:
    """The ``.debug_loclists`` list at ``offset`` (DWARF 5, with GNU's view pairs skipped)."""
    data, read = sec.loclists, sec.num.read
    out: list[LocEntry] = []
    pos = offset
    while True:
        kind = data[pos]
        pos += 1
        if kind == 0:                   # DW_LLE_end_of_list
            return out
        if kind == 1:                   # base_addressx
            index, pos = uleb(data, pos)
            base = sec.address_index(index, bases, address_size)
            continue
        if kind == 6:                   # base_address
            base = read(data, pos, address_size)
            pos += address_size
            continue
        if kind == 9:                   # DW_LLE_GNU_view_pair: views, not addresses
            _, pos = uleb(data, pos)
            _, pos = uleb(data, pos)
            continue
        if kind == 2:                   # startx_endx
            a, pos = uleb(data, pos)
            b, pos = uleb(data, pos)
            low, high = sec.address_index(a, bases, address_size), sec.address_index(b, bases, address_size)
        elif kind == 3:                 # startx_length
            a, pos = uleb(data, pos)
            length, pos = uleb(data, pos)
            low = sec.address_index(a, bases, address_size)
            high = low + length
        elif kind == 4:                 # offset_pair
            a, pos = uleb(data, pos)
            b, pos = uleb(data, pos)
            low, high = base + a, base + b
        elif kind == 5:                 # default_location
            low, high = 0, _ALL
        elif kind == 7:                 # start_end
            low, high = read(data, pos, address_size), read(data, pos + address_size, address_size)
            pos += 2 * address_size
        elif kind == 8:                 # start_length
            low = read(data, pos, address_size)
            length, pos = uleb(data, pos + address_size)
            high = low + length
        else:
            raise ValueError(f"unknown location list entry kind {kind} at .debug_loclists+{pos - 1:#x}")
        length, pos = uleb(data, pos)
        expr = data[pos:pos + length]
        pos += length
        if low != high:
            out.append((low, high, expr))
