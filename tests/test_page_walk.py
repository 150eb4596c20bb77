"""ARM's short-descriptor page walk (the reads a live kernel's software PAN refuses), on
translation tables built here by the ARM ARM's rules: each descriptor kind, both TTBRs, and
the addresses that are not mapped, which must stay faults."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

import kpsdk

L1 = 0x4000_0000  # TTBR0's table (16 KB aligned)
L1_HIGH = 0x4100_0000  # TTBR1's
L2 = 0x4200_0400  # a second-level table (1 KB aligned)


def _walk(tables: dict[int, int], regs: dict[str, int], va: int) -> int | None:
    walk = kpsdk.get_registry().arch("arm").page_walk
    assert walk is not None

    def read_phys(pa: int, n: int) -> bytes:
        assert n == 4 and pa % 4 == 0
        return struct.pack("<I", tables.get(pa, 0))

    return walk(lambda name: regs[name], read_phys, va)


REGS = {"TTBCR": 0, "TTBR0": L1 | 0x6A, "TTBR1": 0}


def test_each_descriptor_kind() -> None:
    tables = {
        L1 + (0xBE8 << 2): L2 | 1,  # 0xbe8xxxxx: a page table
        L2 + (0x8D << 2): 0x4567_8000 | 2,  # 0xbe88dxxx: a small page
        L2 + (0x90 << 2): 0x5555_0000 | 1,  # 0xbe890xxx: within a 64 KB large page
        L1 + (0xC00 << 2): 0x6000_0000 | 2,  # 0xc00xxxxx: a 1 MB section
        L1 + (0xD00 << 2): 0x7700_0000 | 2 | (1 << 18),  # 0xd0xxxxxx: a 16 MB supersection
    }
    assert _walk(tables, REGS, 0xBE88DFD6) == 0x45678FD6
    assert _walk(tables, REGS, 0xBE890BCD) == 0x55550BCD
    assert _walk(tables, REGS, 0xC0012345) == 0x60012345
    assert _walk(tables, REGS, 0xD00BCDEF) == 0x770BCDEF
    # unmapped: no first-level entry, and a page table without the page
    assert _walk(tables, REGS, 0x1000) is None
    assert _walk(tables, REGS, 0xBE800000) is None


def test_ttbr1_and_long_descriptors() -> None:
    regs = {"TTBCR": 2, "TTBR0": L1, "TTBR1": L1_HIGH}  # N=2: TTBR1 above 1 GB
    tables = {L1_HIGH + (0xC00 << 2): 0x6000_0000 | 2, L1 + (0x001 << 2): 0x3000_0000 | 2}
    assert _walk(tables, regs, 0xC0000010) == 0x60000010
    assert _walk(tables, regs, 0x00100010) == 0x30000010
    # LPAE (TTBCR.EAE) is not walked: no TTBR is read, nothing is mapped
    assert _walk({L1 + (0x001 << 2): 0x3000_0000 | 2}, {"TTBCR": 1 << 31}, 0x00100010) is None


@given(st.integers(0, 0xFFFF_FFFF))
def test_unmapped_tables_never_map(va: int) -> None:
    assert _walk({}, REGS, va) is None

