"""``current`` and ``task_struct``'s pid and comm from a kernel's own code, where it has no BTF.

Debian builds its i386, armhf and ppc64el kernels without ``CONFIG_DEBUG_INFO_BTF`` and
without ``CONFIG_KALLSYMS_ALL``: no type information, and no data symbols (no
``current_task``).  The kernel's code still says all the trace prefix needs:
``dump_stack_print_info`` (lib/dump_stack.c) prints ``CPU: %d PID: %d Comm: %.20s`` of
``current``, so its code loads ``current`` the arch's way (i386: ``mov R, %fs:current_task``;
arm: ``mrc p15, 0, R, c13, c0, 3``, TPIDRURO; ppc64: ``ld R, PACACURRENT(r13)``), reads one
32-bit field from it (``pid``) and takes the address of one (``comm``).  The arch backend
(:class:`~kpsdk.arch.TaskCode`) recognises its own instructions; this module follows the
register holding current through the function and insists on exactly one of each, so a
kernel whose code does not read that way gets ``<...>-0``, never a wrong field.

The function's code is read from the guest at the first hit (the kernel is running then:
an arm ``zImage`` does not say at which address its raw image starts, the running kernel does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpsdk.errors import TargetError

if TYPE_CHECKING:
    import capstone

    from kpsdk.arch import Arch, TaskCode

#: TASK_COMM_LEN (include/linux/sched.h)
COMM_SIZE = 16


@dataclass(frozen=True)
class CodeLayout:
    """What one function's code shows: where current is read from (the per-cpu or PACA
    offset; 0 where a register holds it), and ``task_struct.pid`` / ``.comm``'s offsets."""

    current: int
    pid: int
    comm: int


def current_fields(code: bytes, addr: int, arch: Arch, facts: TaskCode) -> CodeLayout:
    """The :class:`CodeLayout` the function at ``addr`` (its bytes ``code``) shows.

    Raises :class:`~kpsdk.errors.TargetError` saying what the code lacks: no load of
    current, or not exactly one 32-bit load (the pid) and one address (comm) from it.
    """
    md = arch.disassembler()
    written_by = _writes_of(arch)
    holding: dict[str, int] = {}  # register (capstone's name) -> where the per-cpu word it holds was read
    loads: dict[int, set[int]] = {}  # per place read: the offsets of 32-bit fields read through it
    addresses: dict[int, set[int]] = {}  # and the offsets of the fields whose address is taken
    for insn in md.disasm(code, addr):
        for reg, source in holding.items():
            use = facts.field(insn, reg)
            if use is None:
                continue
            kind, offset, size = use
            if kind == "address":
                addresses.setdefault(source, set()).add(offset)
            elif size == 4 and offset not in facts.not_pid:
                loads.setdefault(source, set()).add(offset)
        for reg in written_by(insn):
            holding.pop(reg, None)
        loaded = facts.loads_current(insn)
        if loaded is not None:
            holding[loaded[0]] = loaded[1]
    name = facts.function
    # current is the word whose fields the function reads (i386 reads cpu_number the same way,
    # and only prints it)
    sources = set(loads) | set(addresses)
    if len(sources) != 1:
        raise TargetError(f"{name}: kpsdk finds {len(sources)} candidates for current in its code for "
                          f"{arch.name}, not one")
    (where,) = sources
    pids, comms = loads.get(where, set()), addresses.get(where, set())
    if len(pids) != 1 or len(comms) != 1:
        raise TargetError(f"{name} reads {len(pids)} 32-bit fields of current and takes the address of "
                          f"{len(comms)} (kpsdk wants one of each: pid and comm)")
    (pid,), (comm,) = pids, comms
    return CodeLayout(where, pid, comm)


def _writes_of(arch: Arch) -> Callable[[capstone.CsInsn], set[str]]:
    """``insn -> the registers it writes``, by name: the arch's own account where capstone
    has none (ppc64: :attr:`DetourCode.regs_access <kpsdk.arch.DetourCode.regs_access>`)."""
    own = arch.detours.regs_access if arch.detours is not None else None
    if own is not None:
        return lambda insn: own(insn)[1]

    def capstones(insn: capstone.CsInsn) -> set[str]:
        return {insn.reg_name(r) for r in insn.regs_access()[1]}

    return capstones


def code_layout(read: Callable[[int, int], bytes], function: tuple[int, int], arch: Arch) -> CodeLayout:
    """The layout from the function ``(address, size)`` read from the guest through ``read``."""
    tasks = arch.kernel_tasks
    if tasks is None or tasks.code is None:
        raise TargetError(f"{arch.name}: kpsdk does not know how its kernel's code reads current")
    addr, size = function
    return current_fields(read(addr, size), addr, arch, tasks.code)
