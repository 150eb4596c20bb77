"""The clocks of a live run's stall checks: how long QEMU has been stopped, how long gdb has been mute.

Checked only between hits (the run loop calls :meth:`StallWatch.check` when no hit
came for ``POLL_SECONDS``), never on a hit's path.  The run loop also weighs what
needs the target itself first: a broken agent conversation, and gdb's word that
it lost step with the stub (:meth:`~kpsdk.targets.live.runloop.RunLoop._check_progress`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kpsdk.errors import TargetStalled
from kpsdk.targets.live.limits import HALT_TIMEOUT, PING_SECONDS

if TYPE_CHECKING:
    from kpsdk.targets.live.mi import MiConnection
    from kpsdk.targets.live.processes import Processes


class StallWatch:
    """Whether a run whose gdb and QEMU live can still go on (a run's clocks, reset at each run)."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.frozen_since: float | None = None  # when the run loop first saw a QEMU stopped

    def reset(self) -> None:
        """A run starts: a QEMU stopped before it is timed from now."""
        self.frozen_since = None

    def check(self, mi: MiConnection, limit: float) -> TargetStalled | None:
        """The stall to end the session with, or None: a QEMU stopped (``SIGSTOP``) for longer
        than ``limit`` s, or gdb not answering a ping for that long (it is waiting for a
        stub that does not reply)."""
        stalled = self._frozen_for(limit)
        if stalled is not None:
            return stalled
        mi.ping(PING_SECONDS)
        if mi.unanswered_for() > limit:
            mi.pump(HALT_TIMEOUT)  # an answer held back by a handler that ran long arrives now
            if mi.unanswered_for() > limit:
                return TargetStalled(f"gdb has not answered for {limit:g} s (stall_limit): "
                                     "it is stuck waiting for the gdbstub")
        return None

    def _frozen_for(self, limit: float) -> TargetStalled | None:
        frozen = self.processes.frozen()
        if frozen is None:
            self.frozen_since = None
            return None
        now = time.monotonic()
        if self.frozen_since is None:
            self.frozen_since = now
        elif now - self.frozen_since > limit:
            return TargetStalled(f"{frozen} has been stopped (SIGSTOP?) for more than {limit:g} s (stall_limit)")
        return None
