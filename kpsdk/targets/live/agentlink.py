"""kpsdk's end of the socket pair to the agent inside gdb (:mod:`kpsdk.targets.live.gdb_agent`).

A socket pair, not a TCP port: nothing listens, nothing can connect from
outside, and gdb inherits its end through ``pass_fds``.

Two kinds of wait.  An answer inside a hit (a register or memory request)
comes back in tens of microseconds, so :meth:`AgentLink.request` spins for a
short while before blocking: waking a blocked process costs ~0.3 ms on this
class of machine.  The next hit is another matter: gdb and QEMU need the CPU
to produce it (~1 ms), and on a machine with other busy processes a host
spinning for it took that CPU from them (0.18-0.27x gdb's own loop with one
competing process on 2 cores, docs/performance.md); the run loop therefore
blocks for the next hit (``spin=0``).  A spin also yields the CPU
(``sched_yield``) at each turn, which costs nothing when nobody else wants it,
and happens only while a CPU is free (:func:`cpu_to_spare`, the rule the
agent follows too): with more runnable tasks than CPUs a spinning gdb cost
2-4x in hits per second (docs/performance.md).
"""

from __future__ import annotations

import os
import select
import socket
import time

from kpsdk.errors import TargetError, TargetExited, TargetFault, TargetStalled

#: how long a wait spins before it blocks in select()
SPIN_SECONDS = 0.002
#: the agent answers a request within this or gdb is considered stuck
REQUEST_TIMEOUT = 20.0
#: how often :func:`cpu_to_spare` looks again at how many tasks are runnable
LOAD_CHECK_SECONDS = 0.1
#: where Linux says how many tasks are runnable now (the fourth field: running/total)
LOADAVG = "/proc/loadavg"

_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_spare = {"ok": True, "checked": -LOAD_CHECK_SECONDS}


def cpu_to_spare() -> bool:
    """Whether a CPU is free now: fewer runnable tasks than CPUs, this process not counted
    (``/proc/loadavg``'s running count), looked at every LOAD_CHECK_SECONDS at most; True
    where that file cannot be read (spinning as before)."""
    now = time.monotonic()
    if now - _spare["checked"] >= LOAD_CHECK_SECONDS:
        _spare["checked"] = now
        try:
            with open(LOADAVG, "rb") as f:
                running = int(f.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            running = 1
        _spare["ok"] = running - 1 < _CPUS
    return bool(_spare["ok"])


class AgentLink:
    """Line-oriented messages to and from the agent.

    A request the agent does not answer within ``request_timeout`` leaves the
    conversation out of step (a late answer would be taken for the next
    one's): the link is then ``broken`` for good, and its owner ends the
    session.
    """

    def __init__(self, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)
        self._buf = b""
        self.request_timeout = request_timeout
        self.broken: TargetStalled | None = None

    @property
    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()
        self.peer.close()

    def send(self, text: str) -> None:
        try:
            self.sock.sendall(text.encode() + b"\n")
        except OSError as exc:
            raise TargetError(f"the gdb agent went away: {exc}") from exc

    def has_line(self) -> bool:
        return b"\n" in self._buf

    def fill(self) -> bool:
        """Read what is there without waiting; False when the agent closed its end."""
        try:
            chunk = self.sock.recv(1 << 16)
        except BlockingIOError:
            return True
        except ConnectionError:
            return False
        if not chunk:
            return False
        self._buf += chunk
        return True

    def take_line(self) -> str | None:
        """A complete line, if one was read."""
        if b"\n" not in self._buf:
            return None
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def wait_line(self, timeout: float, spin: float = SPIN_SECONDS, also: int | None = None) -> str | None:
        """The next line, spinning ``spin`` seconds then blocking up to ``timeout``.

        With ``also`` (another fd, gdb's MI stream), returns None as soon as
        that fd has something to read, so one wait serves both sources.
        """
        deadline = time.monotonic() + timeout
        spin_end = time.perf_counter() + (spin if spin and cpu_to_spare() else 0.0)
        while b"\n" not in self._buf:
            if not self.fill():
                raise TargetExited("gdb exited: its agent's connection closed")
            if b"\n" in self._buf:
                break
            if time.perf_counter() < spin_end:
                os.sched_yield()  # let gdb (or whoever else) run: a spin on a busy machine must not starve it
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            mine = self.sock.fileno()
            ready, _, _ = select.select([mine] if also is None else [mine, also], [], [], remaining)
            if also is not None and also in ready and mine not in ready:
                return None
        return self.take_line()

    def request(self, text: str) -> str:
        """Send a request during a hit and return the answer's value part.

        An ``e MESSAGE`` answer raises :class:`TargetFault` (a memory or
        register access gdb refused).
        """
        if self.broken is not None:
            raise self.broken
        self.send(text)
        line = self.wait_line(self.request_timeout)
        if line is None:
            self.broken = TargetStalled(f"gdb did not answer the request {text.split()[0]!r} within "
                                        f"{self.request_timeout:g} s: it is stuck talking to the gdbstub")
            raise self.broken
        if line.startswith("e "):
            raise TargetFault(f"gdb: {line[2:]} (request {text[:40]!r})")
        return line[2:]
