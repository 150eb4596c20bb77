"""Every bound a live target waits within, in one place (design: every wait is bounded).

Read by the parts of :class:`~kpsdk.targets.live.target.GdbTarget` that wait: attaching
(:mod:`.connect`), the run loop (:mod:`.runloop`) and its stall checks (:mod:`.stalls`).
"""

from __future__ import annotations

from kpsdk.options import STALL_LIMIT as _STALL_LIMIT

#: how long stop()/timeouts wait for the target to report that it stopped: a
#: healthy one does in milliseconds, so a timeout is kept to within a second or two
HALT_TIMEOUT = 1.5
#: a gdbstub that does not complete the handshake within this is not one
ATTACH_TIMEOUT = 8.0
#: the run loop wakes at least this often to notice a dead or stalled target
POLL_SECONDS = 0.5
#: how long the run loop spins for the next hit before blocking: not at all, since gdb and
#: QEMU need the CPU to produce it (kpsdk.targets.live.agentlink, docs/performance.md)
NEXT_HIT_SPIN = 0.0
#: default ``stall_limit`` (kpsdk.options): the same bound as one MI command's
STALL_LIMIT = _STALL_LIMIT
#: gdb waits this much longer for a stub's reply than kpsdk waits for gdb
STALL_MARGIN = 5.0
#: while no hit comes, the run loop asks gdb a harmless question at most this often
PING_SECONDS = 1.0
