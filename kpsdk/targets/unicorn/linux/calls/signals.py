"""Signals: actions, masks, the alternate stack, sending, waiting for one, returning from a
handler, and the timers that send SIGALRM (alarm, setitimer).

What happens to a signal once sent is :mod:`kpsdk.targets.unicorn.linux.signaling`'s; these
handlers read and write the structures as each arch lays them out: ``struct sigaction``
(the kernel's ``struct sigaction`` for rt_sigaction: handler, flags, restorer where the arch
has SA_RESTORER, mask; riscv has no restorer), ``stack_t`` and the ``sigset_t`` of 64 bits
(``sigsetsize`` 8; MIPS 128).
"""

from __future__ import annotations

import errno
import struct

from kpsdk.targets.unicorn.linux import signaling
from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.sched import NSEC
from kpsdk.targets.unicorn.linux.sigframes import SS_AUTODISARM, SS_DISABLE, SS_ONSTACK
from kpsdk.targets.unicorn.linux.tasks import SigAction
from kpsdk.targets.unicorn.linux.waits import _Block

SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK = 0, 1, 2
ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF = 0, 1, 2
#: the smallest alternate stack Linux takes (MINSIGSTKSZ: 2 KiB; arm64 5 KiB)
MINSIGSTKSZ = 2048


class SignalCalls(ProcessCore):
    """The calls about signal actions, masks, sending and waiting."""

    # -- what a struct looks like here --------------------------------------------------------

    @property
    def _sigset_size(self) -> int:
        return signaling.numbers(self.kernel).nsig // 8

    def _read_set(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, self._sigset_size), self.arch.endian)

    def _write_set(self, addr: int, mask: int) -> None:
        self.write(addr, mask.to_bytes(self._sigset_size, self.arch.endian))

    # -- actions ------------------------------------------------------------------------------

    @syscall("rt_sigaction", "signo sigaction osigaction u")
    def sys_rt_sigaction(self, sig: int, act: int, oact: int, size: int, *_: int) -> int:
        nums = signaling.numbers(self.kernel)
        sig = self.sint(sig)
        if not 1 <= sig <= nums.nsig or size != self._sigset_size:
            raise _GuestErrno(errno.EINVAL)
        if act and sig in (nums.SIGKILL, nums.SIGSTOP):
            raise _GuestErrno(errno.EINVAL)
        old = self.sighand.get(sig)
        new = self._read_action(act) if act else None
        if oact:
            self._write_action(oact, old)
        if new is not None:
            new.mask &= ~signaling.unblockable(self.kernel)
            self.sighand.actions[sig] = new
            if signaling._ignored(self, None, sig, nums):  # a pending signal now ignored goes
                self.shared_pending.pop(sig, None)
                for task in self.threads:
                    task.pending.pop(sig, None)
        return 0

    def _read_action(self, addr: int) -> SigAction:
        """The arch's ``struct sigaction`` (:attr:`kpsdk.arch.LinuxAbi.sigaction`: a word per
        field, the mask last; a flags field first is MIPS's 32-bit int, padded to a word)."""
        action = SigAction()
        at = addr
        for name in self.abi.sigaction:
            if name == "mask":
                action.mask = self._read_set(at)
            else:
                setattr(action, name, self.read_word(at) & (0xFFFFFFFF if name == "flags" else self.arch.word_mask))
            at += self.word.size
        return action

    def _write_action(self, addr: int, action: SigAction) -> None:
        out = b""
        for name in self.abi.sigaction:
            if name == "mask":
                out += action.mask.to_bytes(self._sigset_size, self.arch.endian)
            else:
                out += self.word.pack(getattr(action, name) & self.arch.word_mask)
        self.write(addr, out)

    # -- masks --------------------------------------------------------------------------------

    @syscall("rt_sigprocmask", "sighow sigset osigset u")
    def sys_rt_sigprocmask(self, how: int, new: int, old: int, size: int, *_: int) -> int:
        if size != self._sigset_size:
            raise _GuestErrno(errno.EINVAL)
        task = self.task
        value = self._read_set(new) if new else None
        if old:
            self._write_set(old, task.sigmask)
        if value is not None:
            if how == SIG_BLOCK:
                task.sigmask |= value
            elif how == SIG_UNBLOCK:
                task.sigmask &= ~value
            elif how == SIG_SETMASK:
                task.sigmask = value
            else:
                raise _GuestErrno(errno.EINVAL)
            task.sigmask &= ~signaling.unblockable(self.kernel)
        return 0

    @syscall("rt_sigpending", "osigset u")
    def sys_rt_sigpending(self, out: int, size: int, *_: int) -> int:
        if size > self._sigset_size:
            raise _GuestErrno(errno.EINVAL)
        task = self.task
        self._write_set(out, (task.pending_mask() | self.shared_pending_mask()) & task.sigmask)
        return 0

    @syscall("sigaltstack", "p p")
    def sys_sigaltstack(self, new: int, old: int, *_: int) -> int:
        task = self.task
        sp, size, flags = task.altstack
        regs_sp = self.kernel.host.fast.read(self.arch.register(self.arch.sp))
        on = bool(sp <= regs_sp < sp + size) and not flags & SS_DISABLE
        if new:
            new_sp, new_flags, new_size = self._read_stack_t(new)
            if on:
                raise _GuestErrno(errno.EPERM)
            mode = new_flags & ~SS_AUTODISARM
            if mode not in (0, SS_DISABLE, SS_ONSTACK):
                raise _GuestErrno(errno.EINVAL)
            if mode == SS_DISABLE:
                new_sp = new_size = 0
            elif new_size < MINSIGSTKSZ:
                raise _GuestErrno(errno.ENOMEM)
        if old:
            self._write_stack_t(old, sp, (SS_ONSTACK if on else flags & (SS_DISABLE | SS_AUTODISARM)), size)
        if new:
            task.altstack = (new_sp, new_size, new_flags & ~SS_ONSTACK)
        return 0

    def _read_stack_t(self, addr: int) -> tuple[int, int, int]:
        """``stack_t`` in the arch's order (:attr:`kpsdk.arch.LinuxAbi.stack_t`): (sp, flags, size);
        ``ss_flags`` is an int in a word's slot."""
        w = self.word.size
        data = self.read(addr, 3 * w)
        fields = {}
        for i, name in enumerate(self.abi.stack_t):
            chunk = data[i * w:(i + 1) * w]
            # ss_flags is an int at the start of its word's slot (padding after it), either byte order
            if name == "flags":
                fields[name] = struct.unpack(self.order + "i", chunk[:4])[0]
            else:
                fields[name] = self.word.unpack(chunk)[0]
        return fields["sp"], fields["flags"], fields["size"]

    def _write_stack_t(self, addr: int, sp: int, flags: int, size: int) -> None:
        w = self.word.size
        values = {"sp": self.word.pack(sp), "size": self.word.pack(size),
                  "flags": struct.pack(self.order + "i", flags).ljust(w, b"\0")}
        self.write(addr, b"".join(values[name] for name in self.abi.stack_t))

    # -- sending ------------------------------------------------------------------------------

    def _check_sig(self, sig: int) -> int:
        sig = self.sint(sig)
        if not 0 <= sig <= signaling.numbers(self.kernel).nsig:
            raise _GuestErrno(errno.EINVAL)
        return sig

    @syscall("kill", "d signo")
    def sys_kill(self, pid: int, sig: int, *_: int) -> int:
        sig = self._check_sig(sig)
        pid = self.sint(pid)
        kernel = self.kernel
        if pid > 0:
            targets = [p for p in kernel.processes.values() if p.pid == pid and p.exit_status is None]
        elif pid == 0:
            targets = [p for p in kernel.processes.values() if p.pgid == self.pgid and p.exit_status is None]
        elif pid == -1:
            targets = [p for p in kernel.processes.values() if p.exit_status is None and p.pid != self.pid]
        else:
            targets = [p for p in kernel.processes.values() if p.pgid == -pid and p.exit_status is None]
        if not targets:
            raise _GuestErrno(errno.ESRCH)
        if sig:
            info = signaling.kill_info(kernel, sig, False)
            for process in targets:
                signaling.send_to_process(kernel, process, sig, info)
        return 0

    @syscall("tgkill", "d d signo")
    def sys_tgkill(self, tgid: int, tid: int, sig: int, *_: int) -> int:
        return self._tkill(self.sint(tid), sig, self.sint(tgid))

    @syscall("tkill", "d signo")
    def sys_tkill(self, tid: int, sig: int, *_: int) -> int:
        return self._tkill(self.sint(tid), sig, None)

    def _tkill(self, tid: int, sig: int, tgid: int | None) -> int:
        sig = self._check_sig(sig)
        if tid <= 0 or tgid is not None and tgid <= 0:
            raise _GuestErrno(errno.EINVAL)
        task = self.kernel.tasks.get(tid)
        if task is None or tgid is not None and task.pid != tgid:
            raise _GuestErrno(errno.ESRCH)
        if sig:
            signaling.send_to_task(self.kernel, task, sig, signaling.kill_info(self.kernel, sig, True))
        return 0

    def _queued_info(self, uinfo: int, sig: int, pid: int) -> bytes:
        """The siginfo ``rt_sigqueueinfo`` passes, its signal number set to ``sig``: EPERM for
        a kernel's code (>= 0) or a tkill's sent to another process (do_rt_sigqueueinfo)."""
        from kpsdk.targets.unicorn.linux.sigframes.siginfo import SI_TKILL, layout

        info = bytearray(self.read(uinfo, 128))
        lay = layout(self.arch.name)
        second, third = struct.unpack_from(lay.order + "ii", info, 4)
        code = second if lay.swapped else third
        if (code >= 0 or code == SI_TKILL) and pid != self.pid:
            raise _GuestErrno(errno.EPERM)
        struct.pack_into(lay.order + "i", info, 0, sig)
        return bytes(info)

    @syscall("rt_sigqueueinfo", "d d p")
    def sys_rt_sigqueueinfo(self, pid: int, sig: int, uinfo: int, *_: int) -> int:
        """``sigqueue``: a signal with the caller's siginfo (its value), to a process."""
        pid = self.sint(pid)
        sig = self._check_sig(sig)
        info = self._queued_info(uinfo, sig, pid)
        target = self.kernel.processes.get(pid)
        if target is None or target.exit_status is not None:
            raise _GuestErrno(errno.ESRCH)
        if sig:
            signaling.send_to_process(self.kernel, target, sig, info)
        return 0

    @syscall("rt_tgsigqueueinfo", "d d d p")
    def sys_rt_tgsigqueueinfo(self, tgid: int, tid: int, sig: int, uinfo: int, *_: int) -> int:
        """``pthread_sigqueue``: as rt_sigqueueinfo, to one thread of a process."""
        tgid, tid = self.sint(tgid), self.sint(tid)
        sig = self._check_sig(sig)
        if tgid <= 0 or tid <= 0:
            raise _GuestErrno(errno.EINVAL)
        info = self._queued_info(uinfo, sig, tgid)
        task = self.kernel.tasks.get(tid)
        if task is None or task.pid != tgid:
            raise _GuestErrno(errno.ESRCH)
        if sig:
            signaling.send_to_task(self.kernel, task, sig, info)
        return 0

    # -- waiting for a signal ------------------------------------------------------------------

    @syscall("pause", "")
    def sys_pause(self, *_: int) -> int:
        raise _Block((), restart="eintr")  # only a signal ends it: its handler runs, then EINTR

    @syscall("rt_sigsuspend", "sigset u")
    def sys_rt_sigsuspend(self, mask: int, size: int, *_: int) -> int:
        task = self.task
        if task.call is None:
            if size != self._sigset_size:
                raise _GuestErrno(errno.EINVAL)
            task.saved_mask = task.sigmask
            task.sigmask = self._read_set(mask) & ~signaling.unblockable(self.kernel)
        if task.deliverable():  # the new mask lets a pending signal in: its handler runs now, then EINTR
            return -errno.EINTR
        raise _Block((), restart="eintr")

    # -- returning from a handler ----------------------------------------------------------------

    @syscall("rt_sigreturn", "")
    def sys_rt_sigreturn(self, *_: int) -> int | None:
        from kpsdk.targets.unicorn.linux.kernel import SIGRETURN

        self.task.sigreturn = True
        self.kernel.stop(SIGRETURN)
        return None

    @syscall("sigreturn", "")
    def sys_sigreturn(self, *_: int) -> int | None:
        from kpsdk.targets.unicorn.linux.kernel import SIGRETURN

        self.task.sigreturn = False
        self.kernel.stop(SIGRETURN)
        return None

    # -- timers that send SIGALRM -------------------------------------------------------------------

    @syscall("alarm", "u")
    def sys_alarm(self, seconds: int, *_: int) -> int:
        left = self._arm_itimer(seconds * NSEC, 0)
        return (left[0] + NSEC - 1) // NSEC if left[0] else 0

    @syscall("setitimer", "d p p")
    def sys_setitimer(self, which: int, new: int, old: int, *_: int) -> int:
        if which != ITIMER_REAL:
            raise _GuestErrno(errno.EINVAL if which not in (ITIMER_VIRTUAL, ITIMER_PROF) else errno.ENOSYS)
        value, interval = (0, 0)
        if new:
            w = self.word.size
            words = [self.word.unpack(self.read(new + i * w, w))[0] for i in range(4)]
            interval = words[0] * NSEC + words[1] * 1000
            value = words[2] * NSEC + words[3] * 1000
            if words[1] >= 1_000_000 or words[3] >= 1_000_000:
                raise _GuestErrno(errno.EINVAL)
        left = self._arm_itimer(value, interval) if new else self._itimer_left()
        if old:
            self._write_itimerval(old, *left)
        return 0

    @syscall("getitimer", "d p")
    def sys_getitimer(self, which: int, out: int, *_: int) -> int:
        if which != ITIMER_REAL:
            raise _GuestErrno(errno.EINVAL if which not in (ITIMER_VIRTUAL, ITIMER_PROF) else errno.ENOSYS)
        self._write_itimerval(out, *self._itimer_left())
        return 0

    def _write_itimerval(self, addr: int, value: int, interval: int) -> None:
        words = (interval // NSEC, interval % NSEC // 1000, value // NSEC, value % NSEC // 1000)
        self.write(addr, b"".join(self.word.pack(w) for w in words))

    def _itimer_left(self) -> tuple[int, int]:
        timer = self.itimer
        if timer is None:
            return 0, 0
        return max(timer[0] - self.kernel.clock.elapsed, 1), timer[1]

    def _arm_itimer(self, value: int, interval: int) -> tuple[int, int]:
        """Set ITIMER_REAL to fire in ``value`` ns (0: off), then every ``interval`` ns; what was left."""
        left = self._itimer_left()
        kernel = self.kernel
        if not value:
            self.itimer = None
            return left
        deadline = kernel.clock.elapsed + value
        self.itimer = (deadline, interval)
        process = self
        armed = self.itimer

        def fire() -> None:
            if process.itimer is not armed or process.exit_status is not None:
                return  # disarmed, changed or the process ended since
            signaling.alarm(kernel, process)  # type: ignore[arg-type]
            if interval:
                process._rearm_itimer(armed[0] + interval, interval)
            else:
                process.itimer = None

        kernel.at(deadline, fire)
        return left

    def _rearm_itimer(self, deadline: int, interval: int) -> None:
        self.itimer = None
        self._arm_itimer(max(deadline - self.kernel.clock.elapsed, 1), interval)
