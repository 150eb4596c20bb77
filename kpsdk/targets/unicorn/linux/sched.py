"""Which emulated task runs next, and what time it is: both deterministic.

Every task of a session (each thread of each process) runs on the one Unicorn engine, one at
a time.  The scheduler switches only at points the program itself decides: a call that
blocks, ``sched_yield``, an exit, or the end of a *quantum* of translated blocks counted
by a hook in native code (:mod:`kpsdk.targets.unicorn.quantum`), never at a moment the host
chooses.  The run queue is first in, first out.  So the same program with the same inputs
interleaves its threads the same way, prints the same output and hits the same probes in
the same order, run after run: a recording, which no native run gives.  ``schedule_seed=N``
changes the order and the quanta, reproducibly, to shake out races a native run hides.

Time is part of that: the program's clocks (:class:`Clock`) start at the host's clocks when
the session starts and then move only with the program, by the blocks its tasks run (when
more than one task is runnable and blocks are counted), by each system call, and by waits:
when every task is blocked and one waits with a deadline, the clock jumps to that deadline
(a ``sleep 1`` takes no host second).  A program therefore reads consistent, repeatable
times, whatever the host's load.
"""

from __future__ import annotations

import random
import time
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.tasks import Task

NSEC = 1_000_000_000
#: the latest time a Linux clock reaches (ktime_t's KTIME_MAX, ns: some 292 years); a timer set
#: at or past it never fires, and a time the program passes is capped there (timespec64_to_ktime)
KTIME_MAX = (1 << 63) - 1
#: the clock moves on this much at each system call (a call is never free on Linux either)
SYSCALL_NS = 1000
#: and this much per translated block a task runs while blocks are counted
BLOCK_NS = 10
#: blocks a task runs before another runnable task gets the CPU (deterministic default)
QUANTUM_BLOCKS = 20_000


class Clock:
    """The clocks the program reads: CLOCK_REALTIME and CLOCK_MONOTONIC (and their variants),
    both ``start + elapsed`` where ``elapsed`` (ns) is kpsdk's, moved as the module says."""

    def __init__(self, realtime_ns: int | None = None, monotonic_ns: int | None = None) -> None:
        self.realtime_start = time.time_ns() if realtime_ns is None else realtime_ns
        self.monotonic_start = time.monotonic_ns() if monotonic_ns is None else monotonic_ns
        #: ns since the session started, as the program sees it
        self.elapsed = 0
        #: the most ``elapsed`` becomes: past it a clock would pass KTIME_MAX, which Linux's never do
        self.limit = KTIME_MAX - max(self.realtime_start, self.monotonic_start, 0)

    def now(self, realtime: bool) -> int:
        """ns on CLOCK_REALTIME (``realtime``) or CLOCK_MONOTONIC."""
        return (self.realtime_start if realtime else self.monotonic_start) + self.elapsed

    def advance(self, ns: int) -> None:
        if ns > 0:
            self.elapsed = min(self.elapsed + ns, self.limit)

    def advance_to(self, elapsed: int) -> None:
        """Move on to ``elapsed`` ns since the start (never back, never past :attr:`limit`)."""
        if elapsed > self.elapsed:
            self.elapsed = min(elapsed, self.limit)


class Scheduler:
    """The run queue: tasks ready to run, in the order they became ready."""

    def __init__(self, seed: int | None = None, quantum: int = QUANTUM_BLOCKS) -> None:
        self.queue: deque[Task] = deque()
        self.seed = seed
        self._random = random.Random(seed) if seed is not None else None
        self._quantum = quantum

    def reseed(self, seed: int | None) -> None:
        """Run the tasks in the order ``seed`` picks (None: first in, first out)."""
        self.seed = seed
        self._random = random.Random(seed) if seed is not None else None

    def add(self, task: Task) -> None:
        """``task`` is ready: it runs after every task already waiting."""
        if task not in self.queue:
            self.queue.append(task)

    def remove(self, task: Task) -> None:
        if task in self.queue:
            self.queue.remove(task)

    def pick(self) -> Task | None:
        """The next task to run (taken off the queue), or None when none is ready.  With a seed,
        one of the ready tasks chosen by the seeded generator; else the oldest."""
        if not self.queue:
            return None
        if self._random is not None and len(self.queue) > 1:
            i = self._random.randrange(len(self.queue))
            task = self.queue[i]
            del self.queue[i]
            return task
        return self.queue.popleft()

    def quantum(self) -> int:
        """Blocks the next task may run before the others get a turn (varied under a seed)."""
        if self._random is not None:
            return self._random.randint(self._quantum // 20 or 1, self._quantum * 2)
        return self._quantum

    def __len__(self) -> int:
        return len(self.queue)
