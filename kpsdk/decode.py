"""Instruction decoding for probe registration, shared by every target.

K1 demands that a probe address be an instruction boundary, also on CISC.  The
only way to know is to decode from a point known to be a boundary, the start
of the containing function, up to the address.  The bytes come from the
target (live kernels patch their text, so the file would lie).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kpsdk.errors import TargetFault
from kpsdk.insn import Decoded

if TYPE_CHECKING:
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
    """
    arch = target.arch
    md = arch.disassembler(iset)
    if addr - start > MAX_LINEAR or start > addr:
        start = addr
    try:
        code = target.read_memory(start, addr - start + 16)
    except TargetFault:
        code = target.read_memory(start, addr - start + iset.min_insn)
    found = None
    for insn in md.disasm(code, start):
        if insn.address == addr:
            found = insn
            break
        if insn.address > addr:
            return None
    if found is None:
        if start == addr:
            return None
        return decode_at(target, addr, addr, iset)
    boostable, refused = arch.insn.classify(found)
    cond = arch.conditions.of(found) if arch.conditions is not None else None
    return Decoded(found.address, found.size, found.mnemonic, found.op_str, bytes(found.bytes),
                   boostable, refused, cond)
