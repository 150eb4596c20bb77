"""Where the Unicorn target puts its own things in the emulated address space.

Its own module because several parts place things by these numbers and none of them owns
the others: the mechanisms (:mod:`.target`: booster slots), guest memory (:mod:`.memory`:
kpsdk's area, the stack), the loader (:mod:`.loader`: the program below the area, the Linux
process's reserved ranges) and the runner (:mod:`.running`: call frames under the stack).
"""

from __future__ import annotations

PAGE = 0x1000
#: kpsdk's own area: sentinel + out-of-line slots and code, then DATA_SIZE the guest writes.
#: 128 MiB: room for ~4.2 million 32-byte booster slots (a million kprobes in one session,
#: issue 38).  It costs nothing until used: every mapping is anonymous host memory
#: (:mod:`.space`), which the host commits page by page as slots are written, and Unicorn's
#: own bookkeeping of a mapping does not grow with its size (an open measured the same with
#: 2 MiB and 64 MiB).  Slots past an arch's near-jump reach from the probed code (riscv64's
#: jal: 1 MiB; ARM's b: 32 MiB) cannot jump back, and their points take the hook path.
AREA_SIZE = 0x8000000
SLOT_SIZE = 32
SLOT_BASE = 0x100  # offset of the first slot in kpsdk's area (the sentinel is at 0)
STACK_TOP = 0x7FFF0000
#: the stack's room: a Linux program's grows down into it on demand, up to Linux's default
#: RLIMIT_STACK (8 MiB); a blank CPU or a bare ELF gets BARE_STACK of it mapped at once
STACK_SIZE = 0x800000
BARE_STACK = 0x100000
#: a Linux program's stack as it starts (Linux's ``stack_expand`` in setup_arg_pages), below what
#: its arguments take; the rest of STACK_SIZE is mapped as the program reaches it
STACK_INITIAL = 0x20000


def align_up(x: int, a: int = PAGE) -> int:
    """``x`` rounded up to a multiple of ``a`` (a power of two)."""
    return (x + a - 1) & ~(a - 1)
