"""The Linux process ABI of an architecture, as data: system calls and what the Linux layer needs.

:class:`Syscalls` is the trap and the call table every Unicorn target uses (``write`` and
``exit`` even without a Linux layer); :class:`LinuxAbi` is what the Unicorn target's Linux
layer (:mod:`kpsdk.targets.unicorn.linux`) must know beyond the numbers: auxv values, the
layout of ``struct stat``, TLS, how errors are returned.  Generic code reads these and
never asks which architecture it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StatLayout:
    """One ``struct stat`` as an architecture's kernel fills it (asm/stat.h), as data.

    :param size: the structure's size in bytes.
    :param fields: ``(name, offset, struct code)`` of each field the Linux layer
        fills (``st_mode``...; ``st_atime_nsec`` and friends included); the rest is 0.
    """

    size: int
    fields: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class LinuxAbi:
    """What the Unicorn target's Linux layer (:mod:`kpsdk.targets.unicorn.linux`) must know of an
    architecture's process ABI beyond the call numbers: data, so generic code never asks
    which architecture it runs.

    :param platform: ``AT_PLATFORM`` (the kernel's ``ELF_PLATFORM``), None where the
        kernel gives none (riscv).
    :param hwcap: ``AT_HWCAP``, the features a program may pick code for (IFUNCs).
    :param hwcap2: ``AT_HWCAP2``.
    :param machine: ``uname -m`` (``struct utsname``'s machine).
    :param sysroot: Debian's cross sysroot (``/usr/TRIPLE``), the default root of a
        program of a foreign architecture; None: none by default.
    :param stat: ``struct stat`` of ``fstat``/``newfstatat``/``stat``.
    :param stat64: ``struct stat64`` of ``fstat64``/``fstatat64`` (32-bit arches).
    :param tls_register: the Unicorn register ``arch_prctl(ARCH_SET_FS)`` or ARM's
        ``set_tls`` writes (x86_64 fs base, ARM TPIDRURO); None where the program
        sets its thread pointer itself (riscv tp, ppc64 r13).
    :param set_thread_area: i386's ``set_thread_area``: ``(uc, gdt, base, limit,
        pages) -> entry``: writes a TLS descriptor into the GDT at ``gdt`` (one
        page the layer maps) and returns its entry number.
    :param pair_aligned: a 64-bit argument starts at an even register (ARM EABI:
        ``pread64(fd, buf, count, pad, lo, hi)``).
    :param error_flag: how a failed call says so: None, a negative result
        (``-errno``); else ``(register, bit)``: the bit is set and the result is
        the positive errno (ppc64's CR0.SO).
    :param big_endian: the byte order of the guest's words.
    :param open_flag_bits: the ``open(2)`` flags whose bits differ from asm-generic's
        (arch/*/include/uapi/asm/fcntl.h: ``O_DIRECTORY``, ``O_NOFOLLOW``, ``O_DIRECT``,
        ``O_LARGEFILE`` on arm and powerpc), by name: what ``--strace`` prints.
    :param syscall_insn_size: bytes of the system-call instruction (``syscall``/``int 0x80``:
        2; ARM's ``svc``: 4, 2 in Thumb state, which the layer asks the CPU): a call restarted
        after a signal handler (``SA_RESTART``) runs it again from there, as Linux does.
    :param tls_gpr: the general register that is the thread pointer where there is no
        ``tls_register`` (riscv ``tp``, ppc64 ``r13``): what ``clone(CLONE_SETTLS)`` sets.
    :param tls_segment: the Unicorn register of the segment that ``set_thread_area``'s entry is
        loaded into (i386's gs): ``clone(CLONE_SETTLS)`` reloads it in the new thread, whose
        cached base is then its own while the descriptor table is shared.
    :param thread_pointer: ``(uc) -> address or None``: the running thread's pointer where it
        is in neither ``tls_register`` nor ``tls_gpr`` (i386: the base of the descriptor gs
        selects); None: read from those.
    :param sigaction: the fields of the kernel's ``struct sigaction`` (rt_sigaction's), in
        order: ``restorer`` only where the arch has SA_RESTORER (not riscv; MIPS puts its 32-bit
        ``flags`` first and has none).
    :param stack_t: the fields of ``stack_t`` in order (MIPS: sp, size, flags).
    :param cpu_exceptions: CPU exceptions Unicorn reports as interrupts that Linux turns into
        signals: ``(interrupt number, signal name, si_code)`` (x86's divide error: SIGFPE,
        FPE_INTDIV; a ``ud2``: SIGILL).
    :param vector_page: a page the kernel maps into every process at a fixed address, and its
        bytes (ARM's kuser helpers at 0xffff0000: ``__kuser_get_tls``, ``__kuser_cmpxchg``...,
        which older armhf C libraries call).
    :param legacy_call: ``(read, pc, thumb) -> number or None``: the number of a system call made
        the arch's old way (ARM's OABI ``swi 0x9000NN``), which the layer refuses by name
        instead of taking it for an EABI call.
    :param clone_backwards: ``clone``'s arguments are ``(flags, stack, parent_tid, tls,
        child_tid)`` (i386, arm, powerpc, mips: the kernel's CONFIG_CLONE_BACKWARDS; riscv64 and
        aarch64 too, as their glibc's clone.S passes them) instead of x86_64's ``(flags, stack,
        parent_tid, child_tid, tls)``.
    :param calls: the calls the layer answers on this arch, by the arch's names for them
        (:mod:`kpsdk.arch_backends.syscall_tables`; each has a handler, found by that name):
        any other number is ``-ENOSYS``, recorded under its name.  ``exit`` and
        ``exit_group`` are not among them: the target runs those itself.
    """

    platform: str | None
    hwcap: int
    hwcap2: int = 0
    machine: str = ""
    sysroot: str | None = None
    stat: StatLayout | None = None
    stat64: StatLayout | None = None
    tls_register: int | None = None
    set_thread_area: Callable[[Any, int, int, int, bool], int] | None = None
    pair_aligned: bool = False
    error_flag: tuple[int, int] | None = None
    open_flag_bits: tuple[tuple[str, int], ...] = ()
    calls: frozenset[str] = frozenset()
    syscall_insn_size: int = 4
    clone_backwards: bool = False
    tls_gpr: str | None = None
    tls_segment: int | None = None
    thread_pointer: Callable[[Any], int | None] | None = None
    sigaction: tuple[str, ...] = ("handler", "flags", "restorer", "mask")
    stack_t: tuple[str, ...] = ("sp", "flags", "size")
    cpu_exceptions: tuple[tuple[int, str, int], ...] = ()
    vector_page: tuple[int, bytes] | None = None
    legacy_call: Callable[[Callable[[int, int], bytes], int, bool], int | None] | None = None


@dataclass(frozen=True)
class Syscalls:
    """The Linux system-call convention and table of an architecture.

    :param number: register holding the call number.
    :param args: argument registers in order.
    :param result: register receiving the result.
    :param intno: Unicorn interrupt number of the trap, or ``None`` when the
        trap is an instruction hook (x86_64 ``syscall``).
    :param calls: every Linux call of the arch, its number by its name, as the kernel's
        tables give them (:mod:`kpsdk.arch_backends.syscall_numbers`): what names a number
        in warnings and ``--strace``; at least ``write``, ``exit`` and ``exit_group`` (the
        calls the target runs without a Linux layer).  What the Linux layer answers is
        :attr:`LinuxAbi.calls`.
    :param unicorn_insn: Unicorn's instruction id to hook (``UC_HOOK_INSN``) where
        the trap is an instruction rather than an interrupt (x86_64's ``syscall``).
    :param linux: the process ABI the Linux layer needs (auxv, TLS, structs);
        None: only the freestanding calls (write, exit) are emulated.
    """

    number: str
    args: tuple[str, ...]
    result: str
    intno: int | None
    calls: dict[str, int]
    unicorn_insn: int | None = None
    linux: LinuxAbi | None = None
