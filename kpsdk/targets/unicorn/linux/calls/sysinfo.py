"""The machine as the process sees it: ``uname``, ``sysinfo``, resource limits, randomness, CPUs.

The host's figures where a program sizes itself by them (memory, loads, uptime), the arch's
``uname -m``, one CPU (the one Unicorn emulates), and the limits a fresh Linux process has
(an 8 MiB stack, the descriptor table's size).
"""

from __future__ import annotations

import errno
import os
import struct

from kpsdk.targets.unicorn.linux import structs
from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import FdTable, _GuestErrno

RLIMIT_STACK, RLIMIT_NOFILE = 3, 7


class SysinfoCalls(ProcessCore):
    """The calls that describe the machine and the process's limits."""

    @syscall("sysinfo", "p")
    def sys_sysinfo(self, buf: int, *_: int) -> int:
        """The machine's uptime, loads and memory (the host's: the program runs on it), one
        process (this one), no swap.  sort sizes its buffers from it; Python and bash ask too."""
        page = os.sysconf("SC_PAGE_SIZE")
        uptime = self.kernel.clock.now(False) // 1_000_000_000  # CLOCK_BOOTTIME, as the program reads it
        self.write(buf, structs.pack_sysinfo(self.arch.word_size, self.order, uptime, os.getloadavg(),
                                             os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page,
                                             1))
        return 0

    @syscall("uname", "p")
    def sys_uname(self, buf: int, *_: int) -> int:
        self.write(buf, structs.pack_utsname(self.abi.machine, self.order))
        return 0

    def _limit(self, resource: int) -> tuple[int, int]:
        inf = (1 << 64) - 1
        return {RLIMIT_STACK: (8 << 20, inf), RLIMIT_NOFILE: (FdTable.LIMIT, FdTable.LIMIT)}.get(resource, (inf, inf))

    @syscall("prlimit64", "d rlimit p p")
    def sys_prlimit64(self, pid: int, resource: int, new: int, old: int, *_: int) -> int:
        if old:
            self.write(old, struct.pack(self.order + "QQ", *self._limit(resource)))
        return 0

    @syscall("getrlimit", "rlimit p")
    @syscall("ugetrlimit", "rlimit p")
    def sys_getrlimit(self, resource: int, buf: int, *_: int) -> int:
        mask = (1 << self.bits) - 1
        cur, top = self._limit(resource)
        self.write(buf, self.word.pack(min(cur, mask)) + self.word.pack(min(top, mask)))
        return 0

    @syscall("getrandom", "p u grndflags")
    def sys_getrandom(self, buf: int, size: int, *_: int) -> int:
        size = min(size, 1 << 20)
        self.write(buf, os.urandom(size))
        return size

    @syscall("sched_getaffinity", "d u p")
    def sys_sched_getaffinity(self, pid: int, size: int, mask: int, *_: int) -> int:
        if size < self.word.size:
            raise _GuestErrno(errno.EINVAL)
        self.write(mask, self.word.pack(1))  # one CPU: the one Unicorn emulates
        return self.word.size
