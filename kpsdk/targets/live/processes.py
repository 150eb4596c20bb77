"""The processes a launcher started for a live target (QEMU): their output, their state, their end.

A :class:`~kpsdk.targets.live.target.GdbTarget` owns them from the moment it is made: what
they print is collected into its ``console`` by a thread per stream (a full pipe would
block QEMU), the run loop asks whether one is stopped by a signal (a frozen QEMU is a
stall, :mod:`kpsdk.targets.live.stalls`), and closing reaps them all, stopped or not.
"""

from __future__ import annotations

import array
import fcntl
import os
import signal
import subprocess
import termios
import threading
import time
from pathlib import Path
from typing import Any


class Processes:
    """The processes of one live target and what they wrote to stdout and stderr."""

    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        #: the same list as the target's ``processes`` (launchers and tests read it there)
        self.procs = procs
        self.output = bytearray()
        self._streams = [stream for proc in procs for stream in (proc.stdout, proc.stderr) if stream is not None]
        self._readers = [threading.Thread(target=self._collect, args=(stream,), daemon=True)
                         for stream in self._streams]
        for reader in self._readers:
            reader.start()

    def _collect(self, stream: Any) -> None:
        """Copy an output stream into :attr:`output` (a thread per stream)."""
        for chunk in iter(lambda: stream.read1(65536), b""):
            self.output += chunk

    def settle(self, limit: float = 0.5) -> None:
        """Wait (at most ``limit`` s) until the reader threads have taken everything QEMU
        wrote into its pipes: a program stopped right after a ``write`` has its output
        in the pipe, not yet in :attr:`output`."""
        deadline = time.monotonic() + limit
        for stream in self._streams:
            try:
                while _pipe_pending(stream.fileno()) and time.monotonic() < deadline:
                    time.sleep(0.001)
            except (OSError, ValueError):
                continue  # the pipe is closed: its reader has finished
        time.sleep(0.002)  # the reader appends what its last read returned

    def drain(self) -> None:
        """After an exit: wait (briefly) until QEMU's last output is in :attr:`output`."""
        for proc in self.procs:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return
        for reader in self._readers:
            reader.join(timeout=2)

    def frozen(self) -> str | None:
        """The first process that is stopped by a signal, as ``name (pid N)``."""
        for proc in self.procs:
            if job_stopped(proc.pid):
                return f"{Path(str(proc.args[0])).name} (pid {proc.pid})"  # type: ignore[index]
        return None

    def reap(self) -> None:
        """Terminate and wait for every process (:func:`reap`)."""
        for proc in self.procs:
            reap(proc)


def _pipe_pending(fd: int) -> int:
    """Bytes waiting in a pipe (``FIONREAD``)."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill, and always wait: no zombie, no orphan.  A stopped
    process is continued, or it would not act on the SIGTERM."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


def job_stopped(pid: int) -> bool:
    """Whether a process is stopped by a signal (``T``) or a tracer (``t``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")
