"""What a live kernel of an architecture keeps where, as data: the running task, user access.

A live kernel's trace prefix (``comm-pid``, flags) reads ``current`` where :class:`KernelTasks`
says the architecture keeps it, or finds it in code (:class:`TaskCode`) on a kernel built
without BTF; a page walk (:data:`PageWalk`) or an access gate (:class:`AccessGate`) lets
kpsdk read user memory the CPU's access control refuses a debugger in kernel mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import capstone

    from kpsdk.arch.insn import ReadMem, ReadReg

#: ``page_walk(read_reg, read_phys, va) -> physical address, or None where va is not mapped``
PageWalk = Callable[["ReadReg", "ReadMem", int], "int | None"]


@dataclass(frozen=True)
class AccessGate:
    """A register by which a kernel forbids itself (and so the debugger) user memory
    outside its user-access windows; kpsdk opens it for one read during a hit and puts
    the guest's value back before anything runs (the guest never sees the change).

    :param register: gdb's name of the register (ppc64's ``amr``: KUAP on radix MMUs,
        where QEMU's debug translation applies the Authority Mask to kernel accesses of
        non-privileged pages exactly as the CPU does).
    :param open_value: the value that allows every access the page tables allow.
    :param source: where the rule comes from.
    """

    register: str
    open_value: int
    source: str


#: what :attr:`TaskCode.field` says of one instruction using current: ``("load", offset, size)``
#: (a field read from ``current + offset``) or ``("address", offset, 0)`` (``&current->field``)
FieldUse = tuple[Literal["load", "address"], int, int]


@dataclass(frozen=True)
class TaskCode:
    """How a kernel built without BTF shows where ``current`` is and where ``task_struct``
    keeps ``pid`` and ``comm``: in the code of a function that prints them
    (:mod:`kpsdk.kernel.taskcode`).  ``dump_stack_print_info`` (lib/dump_stack.c) prints
    ``current->pid`` (a 32-bit load from current) and ``current->comm`` (the only field
    whose address it takes), on every kernel since 2.6 and on every arch.

    :param function: the kernel function read.
    :param loads_current: ``insn -> (register, where)`` when the instruction puts ``current``
        in a register: ``where`` is the per-cpu (or PACA) offset it is read from, or 0 where
        :attr:`KernelTasks.current_register` holds current itself.
    :param field: ``(insn, register) -> FieldUse | None``: what the instruction does with
        ``current`` held in ``register`` (capstone's name of it).
    :param not_pid: 32-bit fields of current the function also reads that are not the pid
        (arm: ``thread_info.cpu``, raw_smp_processor_id's source there).
    """

    function: str
    loads_current: Callable[[capstone.CsInsn], tuple[str, int] | None]
    field: Callable[[capstone.CsInsn, str], FieldUse | None]
    not_pid: tuple[int, ...] = ()


@dataclass(frozen=True)
class KernelTasks:
    """Where a kernel on this arch keeps the running task (``current``): the trace line's
    ``comm-pid`` prefix on a live kernel.

    :param percpu_register: gdb's name of the register that holds this CPU's per-cpu
        offset while the kernel runs (x86_64: ``gs_base``, which the kernel's ``swapgs``
        loads on entry); "" where ``current_register`` holds the task itself.
    :param current: the per-cpu variable holding the task pointer, in the order kernels
        have spelled it (``SYM``, or ``SYM.member`` read through the kernel's BTF): the
        first the kernel's symbols have is used.
    :param flags_register: the register whose bits say whether interrupts are off ("": no
        register says it, as on ppc64, whose kernel masks interrupts in software: the
        irqs-off flag then prints as ``.``).
    :param irqs_disabled: from that register's value: the ``d`` of the prefix's flags.
    :param preempt_count: the per-cpu preempt count, spelled as ``current`` (empty: the
        prefix's need-resched, irq and preempt-depth flags print as ``.``).
    :param need_resched_bit: TIF_NEED_RESCHED, the bit of ``task_struct.thread_info.flags``.
    :param preempt_need_resched_inverted: the bit of the per-cpu preempt count that is
        *clear* when a preemption is needed (x86's folded PREEMPT_NEED_RESCHED), or 0.
    :param current_register: gdb's name of a register that holds ``current`` itself while
        the kernel runs (riscv: ``tp``); then ``percpu_register`` and ``current`` are not used.
    :param code: where a kernel without BTF (Debian's i386, armhf, ppc64el) shows current
        and task_struct's pid and comm in its code; None: BTF only.
    """

    percpu_register: str
    current: tuple[str, ...]
    flags_register: str
    irqs_disabled: Callable[[int], bool]
    preempt_count: tuple[str, ...] = ()
    need_resched_bit: int | None = None
    preempt_need_resched_inverted: int = 0
    current_register: str | None = None
    code: TaskCode | None = None
