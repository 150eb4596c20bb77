"""The thread and its thread pointer: TLS set-up, the tid address, robust lists, rseq, futexes,
``sched_yield``.

How each arch sets its thread pointer is :class:`kpsdk.arch.LinuxAbi` data (``tls_register``,
i386's ``set_thread_area``).  Futex waits park the task (:mod:`kpsdk.targets.unicorn.linux.futex`
keeps the waiters, :mod:`kpsdk.targets.unicorn.linux.waits` says how a call waits).
"""

from __future__ import annotations

import errno
import struct

from kpsdk.targets.unicorn.linux import futex as fx
from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.memory import PAGE
from kpsdk.targets.unicorn.linux.waits import _Block

ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS = 0x1001, 0x1002, 0x1003


class ThreadCalls(ProcessCore):
    """The calls about the one thread's own set-up."""

    @syscall("arch_prctl", "archprctl p")
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
        if self.abi.set_thread_area is None and self.abi.tls_register is not None:
            # MIPS: the thread pointer itself, into UserLocal for ``rdhwr $29`` (arch/mips/kernel/syscall.c)
            self.uc.reg_write(self.abi.tls_register, desc)
            return 0
        if self.abi.set_thread_area is None:
            raise _GuestErrno(errno.ENOSYS)
        self.thread_area(desc)
        return 0

    def thread_area(self, desc: int) -> None:
        """Load the ``struct user_desc`` at ``desc`` as i386's set_thread_area does (and tell the
        program the entry when it asked for a free one); clone(CLONE_SETTLS) does it too."""
        setter = self.abi.set_thread_area
        assert setter is not None
        entry, base, limit, flags = struct.unpack(self.order + "iIII", self.read(desc, 16))
        if not self.gdt:
            self.gdt = self.mem.mmap(0, PAGE, 3, 0)
        got = setter(self.uc, self.gdt, base, limit, bool(flags & 0x10))  # bit 4: limit_in_pages
        if entry == -1:
            self.write(desc, struct.pack(self.order + "i", got))

    @syscall("cacheflush", "p p x")
    def sys_cacheflush(self, *_: int) -> int:
        return 0  # ARM's: Unicorn sees written code anyway (kpsdk drops its translations)

    @syscall("set_tid_address", "p")
    def sys_set_tid_address(self, addr: int, *_: int) -> int:
        self.task.clear_child_tid = addr
        return self.task.tid

    @syscall("set_robust_list", "p u")
    def sys_set_robust_list(self, head: int, size: int, *_: int) -> int:
        if size != 3 * self.word.size:
            raise _GuestErrno(errno.EINVAL)
        self.task.robust_list = head
        return 0

    @syscall("get_robust_list", "d p p")
    def sys_get_robust_list(self, tid: int, head: int, size: int, *_: int) -> int:
        task = self.task if not self.sint(tid) else self.kernel.tasks.get(self.sint(tid))
        if task is None:
            raise _GuestErrno(errno.ESRCH)
        self.write(head, self.word.pack(task.robust_list))
        self.write(size, self.word.pack(3 * self.word.size))
        return 0

    @syscall("rseq", "p x x x")
    def sys_rseq(self, *_: int) -> int:
        return -errno.ENOSYS  # glibc runs without restartable sequences (it asks, then does without)

    @syscall("riscv_hwprobe", "p u u p x")
    def sys_riscv_hwprobe(self, *_: int) -> int:
        return -errno.ENOSYS  # a kernel before 6.4's answer: Debian 13's glibc then assumes the base ISA

    @syscall("sched_yield", "")
    def sys_sched_yield(self, *_: int) -> int:
        if self.kernel.sched.queue:
            from kpsdk.targets.unicorn.linux.kernel import YIELD

            self.kernel.stop(YIELD)
        return 0

    # -- futexes ----------------------------------------------------------------------------------

    def _key(self, addr: int) -> tuple[int, int]:
        if addr % 4:
            raise _GuestErrno(errno.EINVAL)
        key = self.mem.table.key_of(addr)
        if key is None:
            raise _GuestErrno(errno.EFAULT)
        return key

    def _u32(self, addr: int) -> int:
        return int(struct.unpack(self.order + "I", self.read(addr, 4))[0])

    def _deadline(self, timeout: int, absolute: bool, realtime: bool) -> int | None:
        """A futex timeout as a deadline on the kernel's clock (None: none)."""
        if not timeout:
            return None
        when = self.timespec_ns(timeout)
        clock = self.kernel.clock
        if absolute:
            return max(when - (clock.now(realtime) - clock.elapsed), clock.elapsed)
        return clock.elapsed + when

    @syscall("futex", "p d d p p d")
    def sys_futex(self, addr: int, op: int, val: int, timeout: int, addr2: int, val3: int, *_: int) -> int:
        task = self.task
        cmd = op & fx.FUTEX_CMD_MASK
        realtime = bool(op & fx.FUTEX_CLOCK_REALTIME)
        futexes = self.kernel.futexes
        if cmd in (fx.FUTEX_WAIT, fx.FUTEX_WAIT_BITSET):
            if task.call is not None:  # run again: woken, timed out, or a spurious wake
                futexes.cancel(task)
                if task.timed_out:
                    return -errno.ETIMEDOUT
                return 0
            bitset = val3 & 0xFFFFFFFF if cmd == fx.FUTEX_WAIT_BITSET else fx.FUTEX_BITSET_MATCH_ANY
            key = self._key(addr)
            if self._u32(addr) != val & 0xFFFFFFFF:
                return -errno.EAGAIN
            deadline = self._deadline(timeout, cmd == fx.FUTEX_WAIT_BITSET, realtime)
            futexes.wait(task, key, bitset)
            raise _Block((), deadline, restart="eintr" if timeout else "restart")
        if cmd in (fx.FUTEX_WAKE, fx.FUTEX_WAKE_BITSET):
            bitset = val3 & 0xFFFFFFFF if cmd == fx.FUTEX_WAKE_BITSET else fx.FUTEX_BITSET_MATCH_ANY
            return futexes.wake(self._key(addr), self.sint(val), bitset)
        if cmd in (fx.FUTEX_REQUEUE, fx.FUTEX_CMP_REQUEUE):
            if cmd == fx.FUTEX_CMP_REQUEUE and self._u32(addr) != val3 & 0xFFFFFFFF:
                return -errno.EAGAIN
            move = self.sint(timeout)  # the count of waiters to move rides in the timeout argument
            if self.sint(val) < 0 or move < 0:
                raise _GuestErrno(errno.EINVAL)
            return futexes.requeue(self._key(addr), self.sint(val), move, self._key(addr2))
        if cmd == fx.FUTEX_WAKE_OP:
            key1, key2 = self._key(addr), self._key(addr2)
            old = self._u32(addr2)
            new, holds = fx.wake_op(val3 & 0xFFFFFFFF, old)
            self.write(addr2, struct.pack(self.order + "I", new))
            woken = futexes.wake(key1, self.sint(val))
            if holds:
                woken += futexes.wake(key2, self.sint(timeout))
            return woken
        return -errno.ENOSYS  # the priority-inheritance operations (see kpsdk.targets.unicorn.linux.futex)
