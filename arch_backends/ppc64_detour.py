"""ppc64 and ppc64le kretprobe detours on Unicorn: the guest code of
:class:`kpsdk.arch.EntryDetour` and :class:`kpsdk.arch.ReturnDetour`
(``kpsdk/targets/unicorn/detour.py`` says what they do), hand-encoded.

kpsdk keeps the detours' data words in the host's byte order (Python reads them as a
native array): little-endian.  The big-endian guest reaches them with the byte-reversing
``ldbrx`` and ``stdbrx`` (Power ISA 2.06), ppc64le with plain ``ldx``/``stdx``, so
nothing is swapped in Python; the code itself is stored in the instruction set's order.
Addresses are built in registers (``lis; ori; sldi; oris; ori``): reading a literal
pc-relative needs ``bcl``, which would clobber lr, the very register the entry must save.

Registers: r11 and r12 (volatile, and free at a call: ELFv1 gives r11 the environment
pointer only to languages that use one, r12 to glink and PLT stubs) and CR0 (volatile)
at the entry; r0, r11, r12, CR0 and CTR at the return, where only r3 (and r4) matter.
"""

from __future__ import annotations

import struct

import capstone

from kpsdk.arch import EntryDetour, InstructionSet, ReturnDetour

_R0, _R1, _R11, _R12 = 0, 1, 11, 12


def _d(opcode: int, rt: int, ra: int, imm: int) -> int:
    """D-form: ``addi``/``addis`` (rt, ra, simm), ``ori``/``oris`` (ra = rs | uimm: the
    caller passes the fields in encoding order)."""
    return opcode << 26 | rt << 21 | ra << 16 | (imm & 0xFFFF)


def _rldicr(ra: int, rs: int, sh: int, me: int) -> int:
    """MD-form ``rldicr``: the 6-bit sh and me fields are stored split (Power ISA 3.0, 3.3.13)."""
    return (30 << 26 | rs << 21 | ra << 16 | (sh & 0x1F) << 11 | ((me & 0x1F) << 1 | me >> 5) << 5 | 1 << 2
            | (sh >> 5) << 1)


def li64(rt: int, value: int) -> list[int]:
    """``lis; ori; sldi 32; oris; ori``: any 64-bit value in ``rt``."""
    hi, lo = value >> 32, value & 0xFFFFFFFF
    return [_d(15, rt, 0, hi >> 16), _d(24, rt, rt, hi & 0xFFFF), _rldicr(rt, rt, 32, 31),
            _d(25, rt, rt, lo >> 16), _d(24, rt, rt, lo & 0xFFFF)]


def _x(rt: int, ra: int, rb: int, xo: int) -> int:
    """X-form (opcode 31): ``ldbrx`` (532), ``stdbrx`` (660), ``add`` (XO 266 << 1 as X)."""
    return 31 << 26 | rt << 21 | ra << 16 | rb << 11 | xo << 1


def _order(iset: InstructionSet) -> str:
    """The struct byte order of the instruction set's code (ppc64 ``>``, ppc64le ``<``)."""
    return ">" if iset.capstone[1] & capstone.CS_MODE_BIG_ENDIAN else "<"


def _ldbrx(rt: int, ra: int, rb: int, order: str = ">") -> int:
    """Load the little-endian data doubleword: ``ldbrx`` on a big-endian CPU, ``ldx`` on ppc64le."""
    return _x(rt, ra, rb, 532 if order == ">" else 21)


def _stdbrx(rs: int, ra: int, rb: int, order: str = ">") -> int:
    """Store it: ``stdbrx`` / ``stdx``."""
    return _x(rs, ra, rb, 660 if order == ">" else 149)


def _add(rt: int, ra: int, rb: int) -> int:
    return _x(rt, ra, rb, 266)


def _cmpdi0(ra: int) -> int:
    """``cmpdi cr0, ra, 0``."""
    return 11 << 26 | 1 << 21 | ra << 16


def _cmpld(ra: int, rb: int) -> int:
    """``cmpld cr0, ra, rb``."""
    return 31 << 26 | 1 << 21 | ra << 16 | rb << 11 | 32 << 1


def _bc(cond: str, at: int, target: int) -> int:
    """``beq``/``bne``/``bge`` on CR0 to ``target`` (within +-32 KiB)."""
    bo, bi = {"eq": (12, 2), "ne": (4, 2), "ge": (4, 0)}[cond]
    off = target - at
    assert -(1 << 15) <= off < (1 << 15) and not off & 3
    return 16 << 26 | bo << 21 | bi << 16 | (off & 0xFFFC)


def _b(at: int, target: int) -> int:
    off = target - at
    assert -(1 << 25) <= off < (1 << 25) and not off & 3, "a detour's branches stay near kpsdk's area"
    return 18 << 26 | (off & 0x03FFFFFC)


def _sldi4(ra: int, rs: int) -> int:
    """``sldi ra, rs, 4``."""
    return _rldicr(ra, rs, 4, 59)


_MFLR_R11 = 0x7D6802A6  # mflr r11
_MTLR_R11 = 0x7D6803A6  # mtlr r11
_MTCTR_R12 = 0x7D8903A6  # mtctr r12
_BCTR = 0x4E800420


def entry_detour(at: int, iset: InstructionSet, d: EntryDetour) -> tuple[bytes, int]:
    """The return probes' fast entry: three guest stores (the count, the record's two words)."""
    order = _order(iset)
    w: list[int] = []
    w += li64(_R12, d.gate)
    w += [_ldbrx(_R11, 0, _R12, order), _cmpdi0(_R11), 0]  # bne slow (patched below)
    bne_gate = len(w) - 1
    w += li64(_R12, d.avail)
    w += [_ldbrx(_R11, 0, _R12, order), _cmpdi0(_R11), 0]  # beq slow
    beq_empty = len(w) - 1
    w += [_d(14, _R11, _R11, -1), _stdbrx(_R11, 0, _R12, order), _sldi4(_R11, _R11)]  # n -= 1; store; n * 16
    w += li64(_R12, d.records)
    w += [_add(_R12, _R12, _R11), _MFLR_R11, _stdbrx(_R11, 0, _R12, order),  # record.ret = lr
          _d(14, _R12, _R12, 8), _stdbrx(_R1, 0, _R12, order)]  # record.sp = r1
    w += li64(_R11, d.tramp)
    w += [_MTLR_R11]
    w += [_b(at + 4 * len(w), d.resume)]
    slow = 4 * len(w)
    w += [_b(at + slow, d.resume)]  # hooked: Python runs the entry as a hit
    w[bne_gate] = _bc("ne", at + 4 * bne_gate, at + slow)
    w[beq_empty] = _bc("eq", at + 4 * beq_empty, at + slow)
    return struct.pack(f"{order}{len(w)}I", *w), slow


def return_detour(at: int, iset: InstructionSet, r: ReturnDetour) -> tuple[bytes, int, int]:
    """Where a detoured call returns: r12 holds the count's address throughout, so the
    general instruction (``ldbrx r12, r12, r0``: the jump word two after the count) can
    load through it; the short one loads the record's first word."""
    assert r.ret_sp == 0, "lr holds the return address: sp is the entry's again"
    order = _order(iset)
    w: list[int] = []
    w += li64(_R12, r.avail)
    w += [_ldbrx(_R11, 0, _R12, order), _d(14, _R0, 0, 8), _ldbrx(_R0, _R12, _R0, order),  # n, and the free count m
          _cmpld(_R11, _R0), 0]  # bge general
    bge = len(w) - 1
    w += [_sldi4(_R11, _R11)]
    w += li64(_R0, r.records)
    w += [_add(_R11, _R11, _R0), _d(14, _R0, 0, 8), _ldbrx(_R0, _R11, _R0, order),  # record.sp
          _cmpld(_R0, _R1), 0]  # bne general
    bne = len(w) - 1
    short = 4 * len(w)
    w += [_ldbrx(_R12, 0, _R11, order), _MTCTR_R12, _BCTR]  # hooked: through the record's first word
    general = 4 * len(w)
    w += [_d(14, _R0, 0, 16), _ldbrx(_R12, _R12, _R0, order), _MTCTR_R12, _BCTR]  # hooked at the ldbrx
    w[bge] = _bc("ge", at + 4 * bge, at + general)
    w[bne] = _bc("ne", at + 4 * bne, at + general)
    return struct.pack(f"{order}{len(w)}I", *w), short, general + 4


def near_jump(at: int, target: int, iset: InstructionSet) -> bytes | None:
    """``b target`` (one instruction: a detour displaces only the entry's first)."""
    off = target - at
    if not -(1 << 25) <= off < (1 << 25):
        return None
    return struct.pack(f"{_order(iset)}I", 18 << 26 | (off & 0x03FFFFFC))


_UNCONDITIONAL = frozenset({"b", "ba", "bl", "bla", "blr", "blrl", "bctr", "bctrl"})


def regs_access(insn: capstone.CsInsn) -> tuple[set[str], set[str]]:
    """The registers ``insn`` reads and writes, from its operands (capstone 5 has no
    ``regs_access`` for PowerPC): the first register operand is written and the rest
    read, except for stores, compares and branches, which read theirs; CR0 is read by a
    conditional branch or ``isel`` naming no CR field and by ``mfcr``, and written by a
    compare naming none and by record forms (``add.``); lr and ctr by their moves."""
    regs = [insn.reg_name(op.reg) for op in insn.operands if op.type == capstone.CS_OP_REG]
    regs += [insn.reg_name(op.mem.base) for op in insn.operands if op.type == capstone.CS_OP_MEM]
    m = insn.mnemonic.rstrip("+-")
    reads: set[str] = set()
    writes: set[str] = set()
    names_cr = any(r.startswith("cr") for r in regs)
    if m.startswith("st"):
        reads |= set(regs)
        if "u" in m[2:]:  # stdu, stwu...: the base register is updated
            writes |= set(regs[1:])
    elif m.startswith(("cmp", "tw", "td")):
        reads |= {r for r in regs if not r.startswith("cr")}
        writes |= {r for r in regs if r.startswith("cr")} or ({"cr0"} if m.startswith("cmp") else set())
    elif m.startswith("b"):
        reads |= set(regs)
        if m.startswith("bd"):  # bdnz...: counts ctr down
            reads.add("ctr")
            writes.add("ctr")
        elif m not in _UNCONDITIONAL and not names_cr:
            reads.add("cr0")
        if "lr" in m:
            reads.add("lr")
        if "ctr" in m:
            reads.add("ctr")
        if m.endswith("l") or m.endswith("la"):
            writes.add("lr")
    elif m in ("mtlr", "mtctr"):
        writes.add(m[2:])
        reads |= set(regs)
    elif m in ("mflr", "mfctr"):
        reads.add(m[2:])
        writes |= set(regs)
    elif m == "mfcr" or m.startswith("mfocrf"):
        reads.add("cr0")
        writes |= set(regs)
    elif regs:
        writes.add(regs[0])
        reads |= set(regs[1:])
        if m.startswith("isel") and not names_cr:
            reads.add("cr0")
    if m.endswith(".") or m.startswith(("mtcr", "mtocrf")):
        writes.add("cr0")
    return reads, writes
