"""DWARF's register numbers, as an architecture's data.

DWARF never names a register: a location expression says ``DW_OP_reg5``, a call frame
instruction ``DW_CFA_offset r16``, and each psABI says which register a number is.  The
DWARF reader (:mod:`kpsdk.binfmt.dwarf`) turns those numbers into the names kpsdk reads
registers by (``regs["rdi"]``, a gdb stop's registers), so the table lives with the rest
of an architecture's data, in its backend (``Arch.dwarf``), and this module declares its shape.

One table is not always enough: GCC numbers PowerPC's special registers one way in
``.eh_frame`` (its internal numbers of GCC 7: LR 65, CTR 66) and another in ``.debug_info``
and ``.debug_frame`` (the 64-bit ELF ABI's: LR 108, CTR 109), so :class:`DwarfRegisters`
keeps the exceptions of ``.eh_frame`` apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DwarfRegisters:
    """DWARF register numbers of one architecture, mapped to kpsdk's register names.

    :param names: number -> register name, as ``.debug_info`` (``DW_OP_reg*``,
        ``DW_OP_breg*``, ``DW_OP_regx``) and ``.debug_frame`` number them.  The names are
        kpsdk's, and gdb's for the floating-point and vector registers kpsdk's register table
        lacks (``xmm0``, ``d8``, ``fa0``): a CPU view that can read those (a gdb stop) gives a
        variable kept there, one that cannot says it is not available.  A number not here
        is reported as a register kpsdk does not read, never guessed.
    :param eh_frame: the numbers ``.eh_frame`` uses differently (PowerPC's LR and CTR);
        the rest of ``.eh_frame`` follows ``names``.
    :param return_address: the name the return-address column of the call frame
        information maps to when it is no register kpsdk has (x86's column 16 or 8, the
        caller's instruction pointer): the pc.  The unwinder takes the caller's pc from
        that column whatever it is called.
    """

    names: Mapping[int, str]
    eh_frame: Mapping[int, str] = field(default_factory=dict)
    return_address: str = "pc"

    def name(self, number: int, eh_frame: bool = False) -> str | None:
        """The kpsdk name of DWARF register ``number`` (in ``.eh_frame``'s numbering when
        ``eh_frame``), or None for a register kpsdk does not read."""
        if eh_frame and number in self.eh_frame:
            return self.eh_frame[number]
        return self.names.get(number)

    def number(self, name: str, eh_frame: bool = False) -> int | None:
        """The DWARF number of the kpsdk register ``name``, or None."""
        if eh_frame:
            for n, reg in self.eh_frame.items():
                if reg == name:
                    return n
        for n, reg in self.names.items():
            if reg == name:
                return n
        return None
