"""Instruction decoding for probe registration, shared by every target.

K1 demands that a probe address be an instruction boundary, also on CISC.  The
only way to know is to decode from a point known to be a boundary, the start
of the containing function, up to the address.  The bytes come from the
target (live kernels patch their text, so the file would lie).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Protocol

from kpsdk.errors import TargetFault
from kpsdk.insn import Decoded

if TYPE_CHECKING:
    import capstone

    from kpsdk.arch import Arch, InstructionSet
    from kpsdk.symbols import SymbolTable


class CodeView(Protocol):
    """What decoding needs of a target: its arch, its symbols and its memory.  A live
    target is one; so is a file's segments before anything runs it (uprobes)."""

    arch: Arch
    symbols: SymbolTable

    def read_memory(self, addr: int, size: int) -> bytes: ...

#: decode from the function start only when it is this close; further away,
#: from the address itself (huge functions, or no symbol)
MAX_LINEAR = 0x10000


def decode_at(target: CodeView, addr: int, start: int, iset: InstructionSet) -> Decoded | None:
    """The instruction at ``addr``, decoding linearly from ``start``.

    Returns None when ``addr`` falls inside an instruction (EILSEQ).  Where
    decoding stops early (data inside the function), the instruction at
    ``addr`` is decoded on its own.

    Registration was mostly this (issue 19), so the walk from ``start`` is
    made without capstone's details, over 256 bytes of the function at a
    time, and remembered per function (:func:`_walk`, checked against the
    bytes read now: changed code is walked again); only the instruction at
    ``addr`` is decoded in detail, alone.
    """
    arch = target.arch
    iset = iset or arch.isets[0]
    md = arch.disassembler(iset)
    if addr - start > MAX_LINEAR or start > addr:
        start = addr
    want = addr - start + 16
    code = b""
    for size in ((want + _CHUNK - 1) & ~(_CHUNK - 1) if start != addr else want, want,
                 addr - start + iset.min_insn):
        try:
            code = target.read_memory(start, size)
            break
        except TargetFault:
            if size == addr - start + iset.min_insn:
                raise
    at = addr
    if start != addr:
        marks = _walk(target, md, code, start, iset)
        mark = marks.get(addr)
        if mark is None:  # the walk stopped before addr (data in the function): addr on its own
            return decode_at(target, addr, addr, iset)
        if not mark:
            return None
        if iset.thumb_bit:  # an IT block's condition comes from its IT, up to 4 instructions back
            back = 0
            for a in range(addr - 1, max(start, addr - 20) - 1, -1):
                if marks.get(a):
                    at, back = a, back + 1
                    if back == 4:
                        break
    found = None
    # one instruction in detail; up to 5 when looking back from an IT block (capstone decodes them all)
    for insn in md.disasm(code[at - start:addr - start + 16], at, 1 if at == addr else 5):
        if insn.address == addr:
            found = insn
            break
    if found is None:
        return None
    boostable, refused = arch.insn.classify(found)
    cond = arch.conditions.of(found) if arch.conditions is not None else None
    return Decoded(found.address, found.size, found.mnemonic, found.op_str, bytes(found.bytes),
                   boostable, refused, cond)


#: how much of a function one walk reads (rounded up to this): more walks again less often, but
#: every read of probed memory looks up each probed address in it (the K10 overlay)
_CHUNK = 0x100
#: per code view, per (start, instruction set): the bytes walked, and by address whether an
#: instruction starts there (True) or the address is inside one (False)
_WALKS: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], tuple[bytes, dict[int, bool]]]] = \
    weakref.WeakKeyDictionary()


def _walk(target: CodeView, md: capstone.Cs, code: bytes, start: int, iset: InstructionSet) -> dict[int, bool]:
    """The instruction boundaries of ``code`` decoded from ``start``: kept while
    later reads show the same bytes (a walk over a longer read is made again)."""
    try:
        walks = _WALKS.setdefault(target, {})
    except TypeError:  # a code view that cannot be weakly referenced: no cache
        walks = {}
    key = (start, iset.name)
    cached = walks.get(key)
    if cached is not None and len(cached[0]) >= len(code) and cached[0][:len(code)] == code:
        return cached[1]
    marks: dict[int, bool] = {}
    for address, size, _, _ in md.disasm_lite(code, start):
        marks[address] = True
        for inside in range(address + 1, address + size):
            marks[inside] = False
    walks[key] = (bytes(code), marks)
    return marks
