"""Unicorn's virtual TLB filled by kpsdk (kpsdk/targets/uctlb.py).

Guest stores to memory that is not executable take Unicorn's fast path; what
must not change is what a program sees: code it rewrites runs rewritten, and a
mapping's permissions still hold after fast-path stores to it.
"""

from __future__ import annotations

import pytest
import unicorn

import kpsdk
from kpsdk.errors import KpsdkError

CODE, PAGE, DATA = 0x100000, 0x200000, 0x300000


def _words(ws: tuple[int, ...], endian: str) -> bytes:
    return b"".join(w.to_bytes(4, endian) for w in ws)  # type: ignore[arg-type]


#: per arch: ``store2(a, b, v)`` storing the byte v at a and then at b; ``one()`` returning 1;
#: the offset in ``one`` of the byte to patch and the value that makes it return 2
PROGRAMS: dict[str, tuple[bytes, bytes, int, int]] = {
    # mov [rdi], dl; mov [rsi], dl; ret || mov eax, 1; ret
    "x86_64": (bytes.fromhex("88178816c3"), bytes.fromhex("b801000000c3"), 1, 2),
    # mov eax, [esp+4]; mov ecx, [esp+8]; mov edx, [esp+12]; mov [eax], dl; mov [ecx], dl; ret
    "i386": (bytes.fromhex("8b4424048b4c24088b54240c88108811c3"), bytes.fromhex("b801000000c3"), 1, 2),
    # strb r2, [r0]; strb r2, [r1]; bx lr || mov r0, #1; bx lr
    "arm": (_words((0xE5C02000, 0xE5C12000, 0xE12FFF1E), "little"), _words((0xE3A00001, 0xE12FFF1E), "little"), 0, 2),
    # sb a2, 0(a0); sb a2, 0(a1); ret || addi a0, zero, 1; ret (the immediate's low bits: byte 2's high nibble)
    "riscv64": (_words((0x00C50023, 0x00C58023, 0x00008067), "little"), _words((0x00100513, 0x00008067), "little"),
                2, 0x20),
    # stb r5, 0(r3); stb r5, 0(r4); blr || li r3, 1; blr
    "ppc64": (_words((0x98A30000, 0x98A40000, 0x4E800020), "big"), _words((0x38600001, 0x4E800020), "big"), 3, 2),
}


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_code_a_program_rewrites_with_its_own_stores_runs_rewritten(arch: str) -> None:
    """The case a fill that made the page data-only would break: ``one``'s code is
    translated, the TLB is emptied (a mapping changed), the program's first store to
    that page lands beside the code and its second rewrites the code.  Unicorn drops
    the stale translation only if that second store takes the slow path, so a page
    of an executable mapping must keep its stores there, also when that mapping was
    made after the fill last read the memory map."""
    store2, one, off, value = PROGRAMS[arch]
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, store2)
    s.call(CODE, DATA, DATA + 1, 7)  # fills before the executable page exists: the map must be re-read
    s.target.map(PAGE, 0x1000, "rwx")  # type: ignore[attr-defined]
    s.write_memory(PAGE, one)
    assert s.call(PAGE) == 1
    s.target.map(DATA + 0x1000, 0x1000, "rw")  # type: ignore[attr-defined]  # a mapping change empties the TLB
    s.call(CODE, PAGE + 0x800, PAGE + off, value)
    assert s.read_memory(PAGE + off, 1) == bytes([value])
    assert s.call(PAGE) == 2
    assert s.target.tlb.fills > 0  # type: ignore[attr-defined]  # the fill is kpsdk's


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_a_mapping_made_read_only_refuses_stores_after_fast_ones(arch: str) -> None:
    """Stores to a data page go the fast way after the first; taking the write
    permission away must still refuse the next store, with a clear error."""
    store2, _, _, _ = PROGRAMS[arch]
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, store2)
    for v in range(1, 4):
        s.call(CODE, DATA + 8, DATA + 16, v)
    assert s.read_memory(DATA + 8, 9) == bytes([3]) + bytes(7) + bytes([3])
    s.target.uc.mem_protect(DATA, 0x1000, unicorn.UC_PROT_READ)  # type: ignore[attr-defined]
    with pytest.raises(KpsdkError) as info:
        s.call(CODE, DATA + 8, DATA + 16, 9)
    assert "write" in str(info.value).lower()
    assert s.read_memory(DATA + 8, 1) == bytes([3])

