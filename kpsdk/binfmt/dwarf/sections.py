"""The DWARF sections of one file as bytes, and the per-unit lookups every reader shares.

pyelftools reads the sections (decompressing ``SHF_COMPRESSED`` and ``.zdebug_*`` ones and
relocating those of a relocatable object) into streams; this module keeps their bytes for
kpsdk's own decoders (the index's DIE scanner, the line programs, range and location lists)
and answers the indirections of DWARF 5: ``DW_FORM_strx`` through ``.debug_str_offsets``,
``DW_FORM_addrx`` through ``.debug_addr``, ``DW_FORM_rnglistx``/``loclistx`` through the
offset tables of ``.debug_rnglists``/``.debug_loclists`` (section 7.29).
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.dwarfinfo import DWARFInfo

from kpsdk.binfmt.dwarf.primitives import Numbers, cstring


@dataclass(frozen=True)
class Bases:
    """A unit's bases into the indexed sections (DWARF 5 ``DW_AT_*_base``; 0 where absent)."""

    str_offsets: int = 0
    addr: int = 0
    rnglists: int = 0
    loclists: int = 0


def _bytes(section: object) -> bytes:
    if section is None:
        return b""
    stream = section.stream  # type: ignore[attr-defined]
    getvalue = getattr(stream, "getvalue", None)
    if getvalue is not None:
        return bytes(getvalue())
    stream.seek(0)
    return bytes(stream.read())


class Sections:
    """The DWARF sections of a file, as bytes, with its byte order and address size."""

    def __init__(self, dwarf: DWARFInfo) -> None:
        self.info = _bytes(dwarf.debug_info_sec)
        self.abbrev = _bytes(dwarf.debug_abbrev_sec)
        self.str = _bytes(dwarf.debug_str_sec)
        self.line_str = _bytes(dwarf.debug_line_str_sec)
        self.str_offsets = _bytes(dwarf.debug_str_offsets_sec)
        self.addr = _bytes(dwarf.debug_addr_sec)
        self.line = _bytes(dwarf.debug_line_sec)
        self.ranges = _bytes(dwarf.debug_ranges_sec)
        self.rnglists = _bytes(dwarf.debug_rnglists_sec)
        self.loc = _bytes(dwarf.debug_loc_sec)
        self.loclists = _bytes(dwarf.debug_loclists_sec)
        self.num = Numbers(dwarf.config.little_endian)
        self.default_address_size = dwarf.config.default_address_size

    # -- DWARF 5 indirections -------------------------------------------------------------------

    def string(self, offset: int) -> str:
        """The string at ``offset`` of ``.debug_str``."""
        return cstring(self.str, offset)[0].decode("utf-8", "replace")

    def line_string(self, offset: int) -> str:
        """The string at ``offset`` of ``.debug_line_str``."""
        return cstring(self.line_str, offset)[0].decode("utf-8", "replace")

    def string_index(self, index: int, bases: Bases, offset_size: int) -> str:
        """``DW_FORM_strx``: entry ``index`` of the unit's ``.debug_str_offsets`` table."""
        return self.string(self.num.read(self.str_offsets, bases.str_offsets + index * offset_size, offset_size))

    def address_index(self, index: int, bases: Bases, address_size: int) -> int:
        """``DW_FORM_addrx``: entry ``index`` of the unit's ``.debug_addr`` table."""
        return self.num.read(self.addr, bases.addr + index * address_size, address_size)

    def list_index(self, section: bytes, base: int, index: int, offset_size: int) -> int:
        """``DW_FORM_rnglistx``/``loclistx``: the offset of list ``index`` in ``section``,
        relative to ``base`` (the unit's ``DW_AT_rnglists_base``/``loclists_base``)."""
        return base + self.num.read(section, base + index * offset_size, offset_size)
