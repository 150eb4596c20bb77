"""User and group ids, and the file-creation mask: the host user's own (the program runs as it).
"""

from __future__ import annotations

import os

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall


class IdCalls(ProcessCore):
    """The credential calls a program reads (it can change none)."""

    @syscall("getuid", "")
    @syscall("geteuid", "")
    @syscall("getuid32", "")
    @syscall("geteuid32", "")
    def sys_getuid(self, *_: int) -> int:
        return os.getuid()

    @syscall("getgid", "")
    @syscall("getegid", "")
    @syscall("getgid32", "")
    @syscall("getegid32", "")
    def sys_getgid(self, *_: int) -> int:
        return os.getgid()

    @syscall("umask", "mode")
    def sys_umask(self, mask: int, *_: int) -> int:
        """Set the file-creation mask; the old one (022 at start, as a login shell's)."""
        old, self.umask = self.umask, mask & 0o777
        return old
