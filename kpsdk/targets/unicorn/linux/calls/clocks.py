"""Clocks and sleeping: the host's clocks, moved on by what the program "slept".

A sleep waits for nothing: it adds its time to :attr:`clock_skew`, which every clock the
process reads (and ``sysinfo``'s uptime) includes, so a program sees the time pass as it
asked while the run does not wait.
"""

from __future__ import annotations

import struct
import time

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall


class ClockCalls(ProcessCore):
    """The calls that read the clocks or sleep."""

    def _now(self, clock: int) -> float:
        now = time.monotonic() if clock in (1, 4, 7) else time.time()  # MONOTONIC, MONOTONIC_RAW, BOOTTIME
        return now + self.clock_skew

    @syscall("clock_gettime", "d p")
    def sys_clock_gettime(self, clock: int, ts: int, *_: int) -> int:
        now = self._now(clock)
        self.write(ts, self.word.pack(int(now)) + self.word.pack(int(now % 1 * 1e9)))
        return 0

    @syscall("clock_gettime64", "d p")
    def sys_clock_gettime64(self, clock: int, ts: int, *_: int) -> int:
        now = self._now(clock)
        self.write(ts, struct.pack(self.order + "qq", int(now), int(now % 1 * 1e9)))
        return 0

    @syscall("gettimeofday", "p p")
    def sys_gettimeofday(self, tv: int, tz: int, *_: int) -> int:
        now = self._now(0)
        if tv:
            self.write(tv, self.word.pack(int(now)) + self.word.pack(int(now % 1 * 1e6)))
        return 0

    @syscall("time", "p")
    def sys_time(self, out: int, *_: int) -> int:
        now = int(self._now(0))
        if out:
            self.write(out, self.word.pack(now))
        return now

    def _sleep(self, req: int, wide: bool) -> int:
        sec, nsec = struct.unpack(self.order + "qq", self.read(req, 16)) if wide else \
            (self.read_word(req), self.read_word(req + self.word.size))
        self.clock_skew += sec + nsec / 1e9  # the clocks move on; nothing waits
        return 0

    @syscall("nanosleep", "p p")
    def sys_nanosleep(self, req: int, *_: int) -> int:
        return self._sleep(req, self.bits == 64)

    @syscall("clock_nanosleep")
    def sys_clock_nanosleep(self, clock: int, flags: int, req: int, *_: int) -> int:
        return self._sleep(req, self.bits == 64)

    @syscall("clock_nanosleep_time64")
    def sys_clock_nanosleep_time64(self, clock: int, flags: int, req: int, *_: int) -> int:
        return self._sleep(req, True)
