"""Signals: actions and masks are recorded, never delivered; sending one stops the run.

``rt_sigaction`` keeps what the program installs (and gives it back), ``rt_sigprocmask`` and
``sigaltstack`` answer as for a process with nothing blocked and no alternate stack.  A signal
sent to itself (``kill``, ``tgkill``, ``tkill``, what ``raise`` and ``abort`` do) would need
delivery: a :class:`~kpsdk.errors.NotEmulatedError` naming the signal.
"""

from __future__ import annotations

import errno

from kpsdk.errors import NotEmulatedError
from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno

SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


class SignalCalls(ProcessCore):
    """The calls about signal actions, masks and sending."""

    @syscall("rt_sigaction", "d p p u")
    def sys_rt_sigaction(self, sig: int, act: int, oact: int, *_: int) -> int:
        if not 1 <= sig <= 64 or sig in (9, 19):  # SIGKILL and SIGSTOP cannot be caught
            raise _GuestErrno(errno.EINVAL)
        two = 2 * self.word.size  # the handler and the flags: the first two words on every arch
        old = self.sigactions.get(sig, bytes(two))
        if act:
            self.sigactions[sig] = self.read(act, two)
        if oact:
            self.write(oact, old)
        return 0

    @syscall("rt_sigprocmask", "d p p u")
    def sys_rt_sigprocmask(self, how: int, new: int, old: int, size: int, *_: int) -> int:
        if old:
            self.write(old, bytes(min(size, 128)))
        return 0

    @syscall("sigaltstack", "p p")
    def sys_sigaltstack(self, new: int, old: int, *_: int) -> int:
        if old:
            self.write(old, self.word.pack(0) + self.word.pack(2) + self.word.pack(0))  # SS_DISABLE
        return 0

    def _signal(self, sig: int) -> int:
        if not sig:
            return 0
        name = SIGNALS.get(sig, f"signal {sig}")
        raise NotEmulatedError(f"the program sent itself {name}: signal delivery is not emulated yet on the "
                               "Unicorn target (run it with --target qemu-user)")

    @syscall("kill", "d d")
    def sys_kill(self, pid: int, sig: int, *_: int) -> int:
        return self._signal(sig)

    @syscall("tgkill", "d d d")
    def sys_tgkill(self, tgid: int, tid: int, sig: int, *_: int) -> int:
        return self._signal(sig)

    @syscall("tkill", "d d")
    def sys_tkill(self, tid: int, sig: int, *_: int) -> int:
        return self._signal(sig)
