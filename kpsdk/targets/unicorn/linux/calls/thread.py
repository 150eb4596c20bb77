"""The thread and its thread pointer: TLS set-up, the tid address, robust lists, rseq, futexes.

There is one thread: a ``futex`` wait that would block can only be woken by another, so it is
a :class:`~kpsdk.errors.NotEmulatedError`.  How each arch sets its thread pointer is
:class:`kpsdk.arch.LinuxAbi` data (``tls_register``, i386's ``set_thread_area``).
"""

from __future__ import annotations

import errno
import struct

from kpsdk.errors import NotEmulatedError
from kpsdk.targets.unicorn.linux.calls.core import PID, ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.memory import PAGE

ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS = 0x1001, 0x1002, 0x1003
FUTEX_WAIT, FUTEX_WAKE = 0, 1


class ThreadCalls(ProcessCore):
    """The calls about the one thread's own set-up."""

    @syscall("arch_prctl", "x p")
    def sys_arch_prctl(self, code: int, addr: int, *_: int) -> int:
        reg = self.abi.tls_register
        if reg is None:
            raise _GuestErrno(errno.EINVAL)
        if code == ARCH_SET_FS:
            self.uc.reg_write(reg, addr)
            return 0
        if code == ARCH_GET_FS:
            self.write(addr, self.word.pack(self.uc.reg_read(reg)))
            return 0
        raise _GuestErrno(errno.EINVAL)

    @syscall("set_tls", "p")
    def sys_set_tls(self, addr: int, *_: int) -> int:
        if self.abi.tls_register is None:
            raise _GuestErrno(errno.ENOSYS)
        self.uc.reg_write(self.abi.tls_register, addr)
        return 0

    @syscall("set_thread_area", "p")
    def sys_set_thread_area(self, desc: int, *_: int) -> int:
        setter = self.abi.set_thread_area
        if setter is None and self.abi.tls_register is not None:
            # MIPS: the thread pointer itself, into UserLocal for ``rdhwr $29`` (arch/mips/kernel/syscall.c)
            self.uc.reg_write(self.abi.tls_register, desc)
            return 0
        if setter is None:
            raise _GuestErrno(errno.ENOSYS)
        entry, base, limit, flags = struct.unpack(self.order + "iIII", self.read(desc, 16))
        if not self.gdt:
            self.gdt = self.mem.mmap(0, PAGE, 3, 0)
        got = setter(self.uc, self.gdt, base, limit, bool(flags & 0x10))  # bit 4: limit_in_pages
        if entry == -1:
            self.write(desc, struct.pack(self.order + "i", got))
        return 0

    @syscall("cacheflush")
    def sys_cacheflush(self, *_: int) -> int:
        return 0  # ARM's: Unicorn sees written code anyway (kpsdk drops its translations)

    @syscall("set_tid_address", "p")
    def sys_set_tid_address(self, *_: int) -> int:
        return PID

    @syscall("set_robust_list", "p u")
    def sys_set_robust_list(self, *_: int) -> int:
        return 0

    @syscall("rseq", "p u x x")
    def sys_rseq(self, *_: int) -> int:
        return -errno.ENOSYS  # glibc runs without restartable sequences (it asks, then does without)

    @syscall("riscv_hwprobe")
    def sys_riscv_hwprobe(self, *_: int) -> int:
        return -errno.ENOSYS  # a kernel before 6.4's answer: Debian 13's glibc then assumes the base ISA

    @syscall("futex", "p d d")
    def sys_futex(self, addr: int, op: int, val: int, *_: int) -> int:
        if op & 0x7F == FUTEX_WAKE:
            return 0
        if op & 0x7F == FUTEX_WAIT and self.read_word(addr) & 0xFFFFFFFF != val & 0xFFFFFFFF:
            return -errno.EAGAIN
        raise NotEmulatedError("the program waits on a futex: only another thread could wake it, and "
                               "threads are not emulated yet on the Unicorn target")
