"""Instruction decoding for probe registration, shared by every target.

K1 demands that a probe address be an instruction boundary, also on CISC.  The
only way to know is to decode from a point known to be a boundary, the start
of the containing function, up to the address.  The bytes come from the
target (live kernels patch their text, so the file would lie).
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from kpsdk.arch.insn import Decoded
from kpsdk.errors import TargetFault

if TYPE_CHECKING:
    import capstone

    from kpsdk.arch import Arch, InstructionSet


class CodeView(Protocol):
    """What decoding needs of a target: its arch and its memory.  A live target is one;
    so is a file's segments before anything runs it (uprobes).  Where the caller also
    needs the code's symbols: :class:`kpsdk.binfmt.symbols.CodeAndSymbols`."""

    arch: Arch

    def read_memory(self, addr: int, size: int) -> bytes: ...

#: decode from the function start only when it is this close; further away,
#: from the address itself (huge functions, or no symbol)
MAX_LINEAR = 0x10000


def decode_at(target: CodeView, addr: int, start: int, iset: InstructionSet,
              end: int | None = None) -> Decoded | None:
    """The instruction at ``addr`` (:func:`_decode_at`), refused where the arch's kernel
    refuses what comes before it: an instruction in a branch delay slot (MIPS,
    :class:`~kpsdk.arch.DelaySlots`: the instruction before is read from the target, and
    none is there at the start of a mapping, as the kernel's ``copy_from_kernel_nofault``
    finds none), and refused in a function at an odd address, where that is code of an
    instruction set kpsdk does not decode (:attr:`Arch.odd_code <kpsdk.arch.Arch.odd_code>`:
    MIPS16e, microMIPS, whose symbols have the ISA bit); an odd address in a function at an even
    one is inside an instruction (None, EILSEQ)."""
    arch = target.arch
    if addr & 1 and start & 1 and arch.odd_code is not None and not iset.thumb_bit:  # an odd function
        return Decoded(addr, 0, "", "", b"", False, f"{addr:#x}: {arch.odd_code}")
    insn = _decode_at(target, addr, start, iset, end)
    slots = arch.delay_slots
    if insn is None or slots is None or insn.refused is not None:
        return insn
    try:
        before = target.read_memory(addr - slots.size, slots.size) if addr >= slots.size else b""
    except TargetFault:
        return insn
    reason = slots.refuses_after(before)
    return insn if reason is None else insn._replace(boostable=False, refused=reason)


def _decode_at(target: CodeView, addr: int, start: int, iset: InstructionSet,
               end: int | None = None) -> Decoded | None:
    """The instruction at ``addr``, decoding linearly from ``start``.

    Returns None when ``addr`` falls inside an instruction (EILSEQ).  Where
    decoding stops early (data inside the function), the instruction at
    ``addr`` is decoded on its own.  ``end``, where known, is where the
    function ends (its symbol's size): the walk reads no further, instead of a
    whole 256-byte chunk (a 60-byte function was decoded four times over).

    Registration was mostly this (issue 19), so the walk from ``start`` is
    made without capstone's details, over 256 bytes of the function at a
    time, and remembered per function (:func:`_walk`, checked against the
    bytes read now: changed code is walked again); the walk keeps each
    instruction's size, mnemonic and operands.  What the probe manager needs
    beyond them (boostable, refused, condition) depends on the instruction's
    bytes only, so it is decoded in detail once per distinct instruction and
    kept (:func:`_classes`).  An ARM Thumb instruction that may sit in an IT
    block takes its condition from the instructions before it: that one is
    decoded in detail with them, every time.
    """
    arch = target.arch
    iset = iset or arch.isets[0]
    md = arch.disassembler(iset)
    if addr - start > MAX_LINEAR or start > addr:
        start = addr
    want = addr - start + 16
    if start != addr:
        # the function's bytes and 15 more: an instruction that starts inside it is whole in the
        # walk even where the symbol's size cuts it (then its bytes are still inside one: EILSEQ)
        limit = end - start + 15 if end is not None and end > addr else None
        code, marks = _walk(target, md, start, want if limit is None else min(want, limit), iset, limit,
                            addr - start + iset.min_insn)
        mark = marks.get(addr)
        if mark is None:  # the walk stopped before addr (data in the function): addr on its own
            return _decode_at(target, addr, addr, iset)
        if not isinstance(mark, tuple):  # False: inside an instruction
            return None
        if not iset.thumb_bit:
            decoded = _decoded(arch, md, iset, addr, code[addr - start:addr - start + mark[0]], mark)
            rule = arch.insn.in_context
            if rule is not None and decoded is not None and decoded.refused is None:
                why = rule(code[max(0, addr - start - arch.insn.context_bytes):addr - start], addr)
                if why is not None:
                    decoded = decoded._replace(boostable=False, refused=why)
            return decoded
    else:
        primed = _primed(target, addr, iset)
        if primed is not None:
            return primed
        code = _read(target, addr, want, addr + iset.min_insn)
        # a list, not next(): the generator runs to its end and frees capstone's buffer there,
        # instead of being closed by an exception when dropped (~1 us of a ~10 us decode)
        for _, size, mnemonic, op_str in list(md.disasm_lite(code, addr, 1)):
            return _decoded(arch, md, iset, addr, code[:size], (size, mnemonic, op_str))
        return None
    at = addr
    back = 0  # an IT block's condition comes from its IT, up to 4 instructions back
    for a in range(addr - 1, max(start, addr - 20) - 1, -1):
        if marks.get(a):
            at, back = a, back + 1
            if back == 4:
                break
    found = None
    # the instruction in detail, with up to 4 before it (capstone decodes them all)
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


def _read(target: CodeView, addr: int, size: int, least: int) -> bytes:
    """``size`` bytes at ``addr``, or fewer up to ``least`` where memory ends first."""
    try:
        return target.read_memory(addr, size)
    except TargetFault:
        return target.read_memory(addr, least - addr)


def _decoded(arch: Arch, md: capstone.Cs, iset: InstructionSet, addr: int, raw: bytes,
             lite: tuple[int, str, str]) -> Decoded | None:
    """A :class:`Decoded` from a lite decode (size, mnemonic, operands) and the kept
    classification of ``raw`` (decoded in detail the first time those bytes are seen)."""
    classes = _classes(arch)
    key = (iset.name, iset.capstone, raw)
    known = classes.get(key)
    if known is None:
        found = next(md.disasm(raw, addr, 1), None)
        if found is None or found.size != len(raw):
            return None
        boostable, refused = arch.insn.classify(found)
        known = (boostable, refused, arch.conditions.of(found) if arch.conditions is not None else None)
        if len(classes) >= _CLASSES_MAX:
            classes.clear()
        classes[key] = known
    # the texts interned: a probe keeps its Decoded, and a million probes on a few kinds of
    # instruction kept a million copies of the same few strings (80 bytes a probe)
    return Decoded(addr, lite[0], sys.intern(lite[1]), sys.intern(lite[2]), raw, *known)


#: per arch name: by (instruction set, its capstone mode, bytes) what classifying an instruction gave (boostable,
#: refused, condition); bounded (cleared when full)
_Classes = dict[tuple[str, tuple[int, int], bytes], tuple[bool, str | None, int | None]]
_CLASSES: dict[str, _Classes] = {}
_CLASSES_MAX = 1 << 16


def _classes(arch: Arch) -> _Classes:
    return _CLASSES.setdefault(arch.name, {})


#: how much of a function one walk reads (rounded up to this): more walks again less often, but
#: every read of probed memory looks up each probed address in it (the K10 overlay)
_CHUNK = 0x100
#: per code view, per (start, instruction set): the bytes walked, by address what starts there
#: (size, mnemonic, operands) or False inside an instruction, and the view's ``code_generation``
_Walk = tuple[bytes, dict[int, "tuple[int, str, str] | bool"], "int | None"]
_WALKS: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], _Walk]] = weakref.WeakKeyDictionary()


#: the code view whose walks :func:`_walks_of` gave last (weakly), and those walks
_LAST_WALKS: list[Any] = [None, None]


def _walks_of(target: CodeView) -> dict[tuple[int, str], _Walk]:
    """``target``'s kept walks: the last view's without a lookup (a batch asks for the same
    one thousands of times; ``WeakKeyDictionary.setdefault`` made a weak reference each
    time, ~1 us of a registration).  A view that cannot be weakly referenced keeps none."""
    ref, walks = _LAST_WALKS
    if ref is not None and ref() is target:
        return walks  # type: ignore[no-any-return]
    try:
        walks = _WALKS.setdefault(target, {})
    except TypeError:
        return {}
    _LAST_WALKS[:] = [weakref.ref(target), walks]
    return walks  # type: ignore[no-any-return]


def _walk(target: CodeView, md: capstone.Cs, start: int, want: int, iset: InstructionSet,
          limit: int | None, least: int) -> tuple[bytes, dict[int, tuple[int, str, str] | bool]]:
    """The code from ``start`` (at least ``want`` bytes where readable, ``least`` where not;
    at most ``limit`` when given: the function's size and an instruction's worth more) and
    its instructions decoded from ``start``.
    A walk is kept per function; it is used without reading the
    code again while the view's ``code_generation`` (an int that every change to the
    code made through kpsdk, and every run, moves on; None where it cannot tell: live
    targets, or a handler running) has not moved, else while the bytes read now agree
    (a walk over a longer read is made again)."""
    walks = _walks_of(target)
    key = (start, iset.name)
    cached = walks.get(key)
    generation = getattr(target, "code_generation", None)
    if cached is not None and generation is not None and cached[2] == generation and len(cached[0]) >= want:
        return cached[0], cached[1]
    code = b""
    chunk = (want + _CHUNK - 1) & ~(_CHUNK - 1)
    for size in (chunk if limit is None else min(chunk, limit), want, least):
        try:
            code = target.read_memory(start, size)
            break
        except TargetFault:
            if size == least:
                raise
    if cached is not None and len(cached[0]) >= len(code) and cached[0][:len(code)] == code:
        walks[key] = (cached[0], cached[1], generation)
        return cached[0], cached[1]
    marks: dict[int, tuple[int, str, str] | bool] = {}
    for address, size, mnemonic, op_str in md.disasm_lite(code, start):
        marks[address] = (size, mnemonic, op_str)
        for inside in range(address + 1, address + size):
            marks[inside] = False
    walks[key] = (bytes(code), marks, generation)
    return code, marks


#: the code view :func:`prime` last primed (weakly), its ``code_generation`` then, and by
#: (address, instruction set name) the instructions it decoded for a batch's lone decodes.
#: One view at a time: a batch primes, then its checks take them.
_PRIMED: list[Any] = [None, None, {}]
#: addresses at most this far apart share a read and a pass of the decoder (an instruction's
#: longest, x86's 15 bytes, and one more)
_NEAR = 16
#: the longest read one pass makes
_PASS_MAX = 0x10000


def prime(target: CodeView, wanted: list[tuple[int, InstructionSet]]) -> None:
    """Decode, in as few passes as possible, the instructions a batch of registrations
    will decode each on its own (addresses outside any function: :func:`decode_at` from
    the address itself), for the next :func:`decode_at` of each.

    One capstone call per instruction cost ~7.5 us of fixed overhead on x86_64 against
    ~1.3 us per instruction in a call over many (issue 19: a batch of 10,000 kprobes on
    nops spent 40% of its time decoding).  An instruction decoded where a pass over
    neighbouring code reached its address is the same as one decoded on its own, given
    the same bytes: the decoders of x86, ARM (A32), ppc64 and RISC-V keep no state from
    one instruction to the next.  Thumb's does (the instructions after an ``IT`` take its
    condition in their mnemonics), so Thumb code is left to decode on its own, as is
    every address no pass reached on a boundary, and every run of code that cannot be
    read whole.  Only a target that says when its code changed (``code_generation``)
    is primed; the primed instructions serve while it has not moved, each once."""
    generation = getattr(target, "code_generation", None)
    if generation is None:
        return
    try:
        ref = weakref.ref(target)
    except TypeError:  # a code view that cannot be weakly referenced: nothing kept
        return
    found: dict[tuple[int, str], Decoded] = {}
    _PRIMED[:] = [ref, generation, found]
    by_iset: dict[str, tuple[InstructionSet, list[int]]] = {}
    for addr, iset in wanted:
        if not iset.thumb_bit:
            by_iset.setdefault(iset.name, (iset, []))[1].append(addr)
    arch = target.arch
    for iset, addrs in by_iset.values():
        md = arch.disassembler(iset)
        addrs.sort()
        first = 0
        for i in range(1, len(addrs) + 1):
            if i == len(addrs) or addrs[i] - addrs[i - 1] > _NEAR or addrs[i] - addrs[first] > _PASS_MAX:
                _prime_run(target, md, iset, addrs[first:i], found)
                first = i


def _prime_run(target: CodeView, md: capstone.Cs, iset: InstructionSet, addrs: list[int],
               found: dict[tuple[int, str], Decoded]) -> None:
    """One read and one decoder pass from ``addrs[0]`` to past ``addrs[-1]``: each of ``addrs``
    the pass reaches on a boundary goes into ``found``."""
    begin = addrs[0]
    try:
        code = target.read_memory(begin, addrs[-1] - begin + _NEAR)
    except TargetFault:
        return  # memory ends inside the run: each decodes on its own (and reads what it can)
    want = set(addrs)
    arch = target.arch
    for address, size, mnemonic, op_str in md.disasm_lite(code, begin):
        if address in want:
            insn = _decoded(arch, md, iset, address, code[address - begin:address - begin + size],
                            (size, mnemonic, op_str))
            if insn is not None:
                found[(address, iset.name)] = insn
        if address >= addrs[-1]:
            break


def forget_primed() -> None:
    """Drop what :func:`prime` decoded: a batch's own, so that nothing it did not take serves
    a later registration (code written into the engine behind kpsdk's back, which does not
    move ``code_generation``, is then read afresh)."""
    _PRIMED[:] = [None, None, {}]


def _primed(target: CodeView, addr: int, iset: InstructionSet) -> Decoded | None:
    """The instruction :func:`prime` decoded at ``addr`` (taken: each serves once), if
    ``target`` is the view primed and its code has not changed since."""
    ref, generation, found = _PRIMED
    if not found or ref() is not target:
        return None
    if generation != getattr(target, "code_generation", None):
        found.clear()
        return None
    return found.pop((addr, iset.name), None)  # type: ignore[no-any-return]
