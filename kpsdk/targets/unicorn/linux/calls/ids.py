"""User and group ids, and the file-creation mask: the host user's own (the program runs as it).

The process has the host user's ids, real, effective and saved alike, and cannot take others:
a ``set*id`` call that asks for its own ids (what ``posix_spawn``'s POSIX_SPAWN_RESETIDS and
many programs' privilege drops do) succeeds, any other is EPERM, as for an unprivileged user
(root's requests too: the emulated process is never privileged).  ``umask`` is the process's
own (inherited across fork, kept across exec).
"""

from __future__ import annotations

import errno
import os
import struct

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno

#: "leave it as it is" in set*id's arguments ((uid_t) -1, 32 bits; 16 bits for the old calls)
_KEEP = (0xFFFFFFFF, 0xFFFF)


class IdCalls(ProcessCore):
    """The credential calls: the ids read, and changed only to themselves."""

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

    def _same(self, own: int, *asked: int) -> int:
        for value in asked:
            if value & 0xFFFFFFFF not in (*_KEEP, own):
                raise _GuestErrno(errno.EPERM)
        return 0

    @syscall("setuid", "d")
    @syscall("setuid32", "d")
    @syscall("setfsuid", "d")
    @syscall("setfsuid32", "d")
    def sys_setuid(self, uid: int, *_: int) -> int:
        return self._same(os.getuid(), uid)

    @syscall("setgid", "d")
    @syscall("setgid32", "d")
    @syscall("setfsgid", "d")
    @syscall("setfsgid32", "d")
    def sys_setgid(self, gid: int, *_: int) -> int:
        return self._same(os.getgid(), gid)

    @syscall("setreuid", "d d")
    @syscall("setreuid32", "d d")
    def sys_setreuid(self, ruid: int, euid: int, *_: int) -> int:
        return self._same(os.getuid(), ruid, euid)

    @syscall("setregid", "d d")
    @syscall("setregid32", "d d")
    def sys_setregid(self, rgid: int, egid: int, *_: int) -> int:
        return self._same(os.getgid(), rgid, egid)

    @syscall("setresuid", "d d d")
    @syscall("setresuid32", "d d d")
    def sys_setresuid(self, ruid: int, euid: int, suid: int, *_: int) -> int:
        return self._same(os.getuid(), ruid, euid, suid)

    @syscall("setresgid", "d d d")
    @syscall("setresgid32", "d d d")
    def sys_setresgid(self, rgid: int, egid: int, sgid: int, *_: int) -> int:
        return self._same(os.getgid(), rgid, egid, sgid)

    def _put_ids(self, value: int, *addrs: int) -> int:
        for addr in addrs:
            self.write(addr, struct.pack(self.order + "I", value))
        return 0

    @syscall("getresuid", "p p p")
    @syscall("getresuid32", "p p p")
    def sys_getresuid(self, r: int, e: int, s: int, *_: int) -> int:
        return self._put_ids(os.getuid(), r, e, s)

    @syscall("getresgid", "p p p")
    @syscall("getresgid32", "p p p")
    def sys_getresgid(self, r: int, e: int, s: int, *_: int) -> int:
        return self._put_ids(os.getgid(), r, e, s)

    @syscall("getgroups", "d p")
    @syscall("getgroups32", "d p")
    def sys_getgroups(self, size: int, out: int, *_: int) -> int:
        groups = os.getgroups()
        size = self.sint(size)
        if size == 0:
            return len(groups)
        if size < len(groups):
            raise _GuestErrno(errno.EINVAL)
        self.write(out, b"".join(struct.pack(self.order + "I", g) for g in groups))
        return len(groups)

    @syscall("setgroups", "d p")
    @syscall("setgroups32", "d p")
    def sys_setgroups(self, size: int, groups: int, *_: int) -> int:
        wanted = [struct.unpack(self.order + "I", self.read(groups + 4 * i, 4))[0] for i in range(self.sint(size))]
        if sorted(wanted) != sorted(os.getgroups()):
            raise _GuestErrno(errno.EPERM)
        return 0

    @syscall("umask", "mode")
    def sys_umask(self, mask: int, *_: int) -> int:
        """Set the file-creation mask; the old one (022 at start, as a login shell's)."""
        old, self.umask = self.umask, mask & 0o777
        return old
