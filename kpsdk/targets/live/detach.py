"""Leaving a process that kpsdk attached to (``pid:``) running and unmodified.

gdbserver plants real trap instructions in the process's code for software breakpoints.
Closing a ``pid:`` session therefore halts the process if it runs (hits served until it
stops), deletes every breakpoint and watchpoint kpsdk's agent holds, and detaches
(``-target-detach``: gdb and gdbserver take their breakpoints out, and the process goes on
from where it stopped).  Then the code under every address kpsdk ever put a breakpoint at
is read back through ``/proc/PID/mem`` and compared with what it was before: a trap left
behind would kill the process at its next pass, so a difference is an error, never silent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kpsdk.errors import TargetError
from kpsdk.targets.live.limits import HALT_TIMEOUT
from kpsdk.targets.live.mi import GdbError

if TYPE_CHECKING:
    from kpsdk.targets.live.target import GdbTarget


@dataclass
class Detach:
    """A process to leave running when the session closes.

    :param pid: its process id on this machine (where ``/proc/PID/mem`` is read back).
    """

    pid: int
    #: the code at each address kpsdk put a breakpoint at, before it did
    original: dict[int, bytes] = field(default_factory=dict)
    #: what went wrong leaving the process, if anything (close() raises it after cleaning up)
    error: str | None = None
    #: addresses whose code was compared after the detach, and found as they were
    checked: int = 0
    #: leave() was called (once per session, whatever came of it)
    left: bool = False

    def leave(self, target: GdbTarget) -> None:
        """Halt, remove kpsdk's breakpoints, detach, and check the code (see the module)."""
        mi = target.mi
        if mi is None or not mi.alive() or target._exit_status is not None:
            return
        try:
            if target.running_now:
                target.in_hit = False
                target._interrupt()
                if target._await_stop(HALT_TIMEOUT) is None:
                    self.error = f"process {self.pid} did not stop within {HALT_TIMEOUT:g} s to be detached"
                    return
            mi.console_command("python kpsdk_agent.forget()")
            mi.command("-target-detach")
        except KeyboardInterrupt:
            self.error = f"interrupted while detaching from process {self.pid}: it may be left stopped or with traps"
            raise
        except (GdbError, TargetError) as exc:
            self.error = f"detaching from process {self.pid} failed: {exc}"
            return
        self.error = self.compare()

    def compare(self) -> str | None:
        """Read the code back (``/proc/PID/mem``); a description of what differs, or None."""
        try:
            fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
        except OSError as exc:
            return f"cannot read process {self.pid}'s code back to check it: {exc.strerror}"
        changed = []
        try:
            for addr, before in sorted(self.original.items()):
                try:
                    now = os.pread(fd, len(before), addr)
                except OSError:
                    continue  # unmapped since (a library closed): nothing of kpsdk's can be there
                if now != before:
                    changed.append(f"{addr:#x} ({before.hex()} -> {now.hex()})")
                else:
                    self.checked += 1
        finally:
            os.close(fd)
        if changed:
            return f"process {self.pid} was left with changed code at {', '.join(changed)}"
        return None
