"""Instruction analysis shared by the arch backends.

Three questions decide how a probe point can work (Guts section 6.3: "Probing
the Guts of Kprobes", OLS 2006; in the kernel, each architecture's
``arch_prepare_kprobe`` refuses or prepares an instruction, and x86's
``can_boost`` decides boosting):

* is the instruction *boostable*: can a copy of it run out of line, followed
  by a jump back, and behave exactly as in place?  Anything that reads or
  writes the program counter (branches, calls, returns, pc-relative loads) or
  traps cannot;
* what are its *successors*: the addresses execution can reach right after it,
  given the registers at the probe hit.  A post_handler is run there, which is
  how kpsdk "single-steps" without a hardware step;
* is it *refused*: instructions the kernel will not probe either.

The capstone-group based rules are generic; each backend adds its own
program-counter register ids and indirect-branch forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import capstone

ReadReg = Callable[[str], int]
ReadMem = Callable[[int, int], bytes]

#: capstone groups whose members change control flow or trap.
FLOW_GROUPS = frozenset(
    {
        capstone.CS_GRP_JUMP,
        capstone.CS_GRP_CALL,
        capstone.CS_GRP_RET,
        capstone.CS_GRP_INT,
        capstone.CS_GRP_IRET,
        capstone.CS_GRP_BRANCH_RELATIVE,
    }
)


class Decoded(NamedTuple):
    """One decoded instruction with what the probe manager needs to know.

    A named tuple, immutable and compared by value: registering a probe makes one, and a
    frozen dataclass took 2.5 us to build against ~0.4 us (issue 19's registration row)."""

    address: int
    size: int
    mnemonic: str
    op_str: str
    raw: bytes
    boostable: bool
    refused: str | None
    #: an arch-specific condition code when the instruction may not execute
    #: (ARM cc, or a Thumb instruction in an IT block); None: always executes
    condition: int | None = None

    def __str__(self) -> str:
        return f"{self.mnemonic} {self.op_str}".strip()


def changes_flow(insn: capstone.CsInsn, pc_ids: frozenset[int]) -> bool:
    """True if the instruction branches, traps or touches the program counter."""
    if FLOW_GROUPS.intersection(insn.groups):
        return True
    if not pc_ids:  # no architectural pc operand (ppc64): groups and mnemonics decide
        return False
    try:
        read, written = insn.regs_access()
    except capstone.CsError:
        return True  # capstone cannot tell: be safe
    return bool(pc_ids.intersection(read) or pc_ids.intersection(written))


def immediate_targets(insn: capstone.CsInsn, relative: bool) -> set[int]:
    """Branch targets given as immediates (absolute, or relative to the insn)."""
    out: set[int] = set()
    for op in insn.operands:
        if op.type == capstone.CS_OP_IMM:
            out.add(insn.address + op.imm if relative else op.imm)
    return out


def sign_extend(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value
