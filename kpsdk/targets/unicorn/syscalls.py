"""The Unicorn target's system calls: the boundary between the CPU and the Linux layer.

A system call the program makes (the arch's trap interrupt, or x86_64's ``syscall``
instruction) is decoded here by the arch's table (number, name, arguments), announced to
plugins (``kpsdk_syscall_entry``, then ``kpsdk_syscall_exit`` with the result), handed to the
Linux process (:mod:`kpsdk.targets.unicorn.linux`) and its result written back as the ABI
returns it.  Without a Linux process (a ``unicorn:`` CPU) a minimal layer answers: ``write``
to stdout and stderr goes to the console, ``exit`` and ``exit_group`` end the program, any
other call gets ``-ENOSYS``.

Its own module because it is the one place where the target meets the Linux layer: the
mechanisms (:mod:`.target`) know nothing of system calls, and the Linux layer nothing of
Unicorn's hooks.  An object the target owns, typed against :class:`SyscallHost`; what a call
reads on its way is this object's own attributes, as it was the target's (the hook is this
object's bound method, the target's interrupt hook calls :meth:`SyscallGlue.syscall` through
an attribute of its own), so no lookup or call is added per system call.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import unicorn

from kpsdk.events import SyscallEvent
from kpsdk.targets.unicorn.layout import PAGE

if TYPE_CHECKING:
    from kpsdk.arch import Arch, Syscalls
    from kpsdk.targets.unicorn.fast import FastRegs
    from kpsdk.targets.unicorn.libraries import Libraries
    from kpsdk.targets.unicorn.linux import LinuxProcess
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.output import GuestOutput

#: the system calls ld.so maps one library's segments with: a library is complete at the first other call
MAPPING_CALLS = frozenset({"mmap", "mmap2", "mprotect", "munmap"})
#: the most one read or write moves (Linux's MAX_RW_COUNT: INT_MAX rounded down to a page)
MAX_RW_COUNT = 0x7FFFF000


class SyscallHost(Protocol):
    """What the system-call glue uses of the Unicorn target."""

    uc: unicorn.Uc
    arch: Arch
    fast: FastRegs

    def emit(self, event: str, **kwargs: Any) -> None:
        """Fire ``kpsdk_<event>`` for the target's session (:meth:`kpsdk.target.Target.emit`)."""

    def fail(self, exc: BaseException) -> None:
        """Store ``exc`` for ``run()``/``call()`` and stop the emulation (from a hook)."""

    def program_exited(self, status: int) -> None:
        """The program called ``exit``/``exit_group``: record ``status`` and stop the run."""


class SyscallGlue:
    """The system calls of one Unicorn target (see the module's docstring)."""

    def __init__(self, host: SyscallHost, table: Syscalls, output: GuestOutput, libraries: Libraries) -> None:
        """``table``: the arch's; ``output``: the target's, where ``write`` to 1 and 2 goes
        (the Linux layer gets the same one); ``libraries``: announced at the first call
        that does not map one."""
        self.uc, self.arch, self.fast = host.uc, host.arch, host.fast
        self._sys = table
        self._syscall_names = {nr: name for name, nr in table.calls.items()}
        linux = table.linux
        #: the arch's errno numbers by the generic ones (MIPS), and its error register (MIPS's a3)
        self._errnos = dict(linux.errnos) if linux is not None else {}
        self._error_register = linux.error_register if linux is not None else None
        self._sp = host.arch.register(host.arch.sp)
        #: the call's number and argument registers, looked up once (each call reads them all)
        self._number_reg = host.arch.register(table.number)
        self._arg_regs = tuple(host.arch.register(r) for r in table.args)
        self._pc = host.arch.register(host.arch.pc)
        self._output = output
        self._pending_libraries = libraries.pending  # the same list: never rebound
        self._announce_libraries = libraries.announce
        self._emit: Callable[..., None] = host.emit
        self._fail = host.fail
        self._exited = host.program_exited
        #: the Linux process (elf: targets): every call but exit goes to it; None: write and exit only
        self.linux: LinuxProcess | None = None
        #: the Linux layer's kernel (elf: targets): it runs every call for the current task
        self.kernel: LinuxKernel | None = None
        if table.unicorn_insn is not None:  # x86_64's syscall instruction
            self.uc.hook_add(  # type: ignore[call-arg]  # mypy sees the py2 binding's signature
                unicorn.UC_HOOK_INSN, self.on_syscall_insn, aux1=table.unicorn_insn
            )

    def on_syscall_insn(self, uc: unicorn.Uc, user: Any) -> None:
        """The hook of a system-call instruction (x86_64's ``syscall``)."""
        try:
            self.syscall()
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self._fail(exc)

    def syscall(self) -> None:
        """The system call the CPU is making now: announced, served, answered."""
        sys = self._sys
        read = self.fast.read
        nr = read(self._number_reg)
        calls = sys.calls
        args = tuple([read(r) for r in self._arg_regs])
        if sys.stack_args:  # o32's 5th to 8th arguments, from the caller's stack
            args += self._stack_args(sys.stack_args, sys.stack_args_offset)
        call = SyscallEvent(nr, self._syscall_names.get(nr, f"syscall_{nr}"), args, self.fast.read(self._pc))
        if self._pending_libraries and call.name not in MAPPING_CALLS:
            self._announce_libraries()
        self._emit("syscall_entry", call=call)
        kernel = self.kernel
        if kernel is not None:  # a Linux program: its kernel runs the call for the current task
            answer = kernel.syscall(nr, call)
            if answer is not None:
                self.complete(call, answer)
                kernel.after_syscall()
            return
        result: int | None
        if self.linux is not None and nr not in (calls["exit"], calls["exit_group"]):
            result = self.linux.syscall(nr, call.args)
            if result is None:
                return
        elif nr == calls["write"]:
            fd, buf, count = call.args[:3]
            if fd not in (1, 2):
                result = -errno.EBADF  # nothing else is open
            else:
                data = self._user_bytes(buf, min(count, MAX_RW_COUNT))
                try:
                    self._output.write(data, fd)
                    result = len(data) if data or not count else -errno.EFAULT
                except OSError as e:  # the destination's own error (EPIPE: its reader is gone)
                    result = -(e.errno or errno.EIO)
        elif nr in (calls["exit"], calls["exit_group"]):
            status = call.args[0] & 0xFF
            self._exited(status)
            self._emit("program_exit", status=status)
            return
        else:
            result = -errno.ENOSYS
        self.complete(call, result)

    def complete(self, call: SyscallEvent, result: int) -> None:
        """The call returns ``result`` to the program (the CPU's registers are the caller's):
        written as the ABI returns it, and plugins hear ``kpsdk_syscall_exit``."""
        self._set_result(result)
        call.result = result
        self._emit("syscall_exit", call=call)

    def _stack_args(self, count: int, offset: int) -> tuple[int, ...]:
        """``count`` words from the user stack at sp + ``offset``, as the kernel copies them
        (0 where they are not mapped: the calls that take fewer never read them)."""
        word = self.arch.word_size
        try:
            raw = bytes(self.uc.mem_read(self.fast.read(self._sp) + offset, count * word))
        except unicorn.UcError:
            return (0,) * count
        return tuple(int.from_bytes(raw[i:i + word], self.arch.endian) for i in range(0, len(raw), word))

    def _set_result(self, result: int) -> None:
        """Return ``result`` to the program: in the result register, or as a positive errno
        with the arch's error flag set (ppc64's CR0.SO) or its error register 1 (MIPS's a3, 0
        after a success) where the ABI says so; an errno in the arch's own numbering (MIPS)."""
        sys = self._sys
        failed = -4096 < result < 0
        if failed and self._errnos:
            result = -self._errnos.get(-result, -result)
        if self._error_register is not None:
            self.uc.reg_write(self._error_register, 1 if failed else 0)
            result = -result if failed else result
        flag = sys.linux.error_flag if sys.linux is not None else None
        if flag is not None:
            reg, bit = flag
            value = self.uc.reg_read(reg)
            self.uc.reg_write(reg, (value | bit) if failed else (value & ~bit))
            result = -result if failed else result
        self.fast.write(self.arch.register(sys.result), result & self.arch.word_mask)

    def _user_bytes(self, addr: int, count: int) -> bytes:
        """Up to ``count`` bytes the program passed a system call, as Linux copies them:
        page by page, stopping at the first page that is not mapped (a short
        write; none at all is ``-EFAULT``).  Never more than is mapped, so a
        huge count allocates nothing."""
        out = bytearray()
        while len(out) < count:
            at = addr + len(out)
            chunk = min(count - len(out), PAGE - at % PAGE)
            try:
                out += self.uc.mem_read(at, chunk)
            except unicorn.UcError:
                break
        return bytes(out)
