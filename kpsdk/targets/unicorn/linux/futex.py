"""Futexes: the one primitive every thread library and ``pthread_*`` call waits with.

The table maps a futex *key* to its waiters, oldest first.  A key names the memory, not the
address: the host buffer behind the page and the offset in it (:meth:`Space.key_of
<kpsdk.targets.unicorn.space.Space.key_of>`), so the threads of a process
(one address space) and processes sharing a ``MAP_SHARED`` mapping (one buffer, any
address) meet on the same word, as on Linux (``get_futex_key`` in kernel/futex/core.c).

Operations (kernel/futex/syscalls.c, ``do_futex``): WAIT and WAIT_BITSET (a relative timeout
on CLOCK_MONOTONIC for WAIT, an absolute one for WAIT_BITSET, on CLOCK_REALTIME with
FUTEX_CLOCK_REALTIME), WAKE and WAKE_BITSET, REQUEUE and CMP_REQUEUE, WAKE_OP.  The
priority-inheritance operations (LOCK_PI...) are ENOSYS: glibc uses them only for
``PTHREAD_PRIO_INHERIT`` mutexes.  Robust lists (:func:`exit_robust_list`) are walked when a
thread ends, as ``exit_robust_list`` in kernel/futex/core.c does.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.files import _GuestErrno

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.tasks import Task

FUTEX_WAIT, FUTEX_WAKE, FUTEX_FD, FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_WAKE_OP = 0, 1, 2, 3, 4, 5
FUTEX_LOCK_PI, FUTEX_UNLOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET = 6, 7, 8, 9, 10
FUTEX_WAIT_REQUEUE_PI, FUTEX_CMP_REQUEUE_PI, FUTEX_LOCK_PI2 = 11, 12, 13
FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME = 128, 256
FUTEX_CMD_MASK = ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
FUTEX_BITSET_MATCH_ANY = 0xFFFFFFFF
#: the futex word's bits a robust mutex uses (include/uapi/linux/futex.h)
FUTEX_WAITERS, FUTEX_OWNER_DIED, FUTEX_TID_MASK = 0x80000000, 0x40000000, 0x3FFFFFFF
#: entries of a robust list walked at most (ROBUST_LIST_LIMIT)
ROBUST_LIST_LIMIT = 2048


@dataclass(eq=False)
class Waiter:
    task: Task
    key: Hashable
    bitset: int


class FutexTable:
    """The waiters of every futex of a session (all its processes)."""

    def __init__(self, wake: Callable[[Task], None]) -> None:
        self._wake = wake
        self._waiters: dict[Hashable, list[Waiter]] = {}
        self._by_task: dict[Task, Waiter] = {}

    def wait(self, task: Task, key: Hashable, bitset: int = FUTEX_BITSET_MATCH_ANY) -> None:
        """``task`` sleeps on ``key`` (the caller raises Block once this is done)."""
        if not bitset:
            raise _GuestErrno(errno.EINVAL)
        self.cancel(task)
        waiter = Waiter(task, key, bitset)
        self._waiters.setdefault(key, []).append(waiter)
        self._by_task[task] = waiter

    def waiting(self, task: Task) -> bool:
        """Whether ``task`` still sleeps on a futex (not woken by a wake, requeued or not)."""
        return task in self._by_task

    def cancel(self, task: Task) -> None:
        """``task`` stops waiting (a timeout, a signal, its end)."""
        waiter = self._by_task.pop(task, None)
        if waiter is not None:
            queue = self._waiters.get(waiter.key, [])
            if waiter in queue:
                queue.remove(waiter)
            if not queue:
                self._waiters.pop(waiter.key, None)

    def wake(self, key: Hashable, count: int, bitset: int = FUTEX_BITSET_MATCH_ANY) -> int:
        """Wake up to ``count`` waiters of ``key`` whose bitset meets ``bitset``; how many."""
        if not bitset:
            raise _GuestErrno(errno.EINVAL)
        queue = self._waiters.get(key)
        if not queue or count <= 0:
            return 0
        woken = [w for w in queue if w.bitset & bitset][:count]
        for waiter in woken:
            queue.remove(waiter)
            del self._by_task[waiter.task]
            self._wake(waiter.task)
        if not queue:
            del self._waiters[key]
        return len(woken)

    def requeue(self, key: Hashable, wake: int, move: int, other: Hashable) -> int:
        """Wake ``wake`` waiters of ``key`` and move up to ``move`` more to ``other``; how many
        were woken plus moved (CMP_REQUEUE's return value)."""
        woken = self.wake(key, wake)
        queue = self._waiters.get(key, [])
        moved = queue[:max(move, 0)]
        if moved:
            del queue[:len(moved)]
            if not queue:
                self._waiters.pop(key, None)
            target = self._waiters.setdefault(other, [])
            for waiter in moved:
                waiter.key = other
                target.append(waiter)
        return woken + len(moved)


def wake_op(oparg_word: int, old: int) -> tuple[int, bool]:
    """FUTEX_WAKE_OP's encoded operation on the word at the second address: the new value to
    store and whether the comparison with the old value holds (``futex_atomic_op_inuser``)."""
    op = (oparg_word >> 28) & 7
    cmp = (oparg_word >> 24) & 15
    oparg = (oparg_word >> 12) & 0xFFF
    cmparg = oparg_word & 0xFFF
    if oparg & 0x800:
        oparg -= 0x1000  # sign-extended 12 bits
    if cmparg & 0x800:
        cmparg -= 0x1000
    if (oparg_word >> 28) & 8:  # FUTEX_OP_OPARG_SHIFT
        if not 0 <= oparg <= 31:
            raise _GuestErrno(errno.EINVAL)
        oparg = 1 << oparg
    if op == 0:  # SET
        new = oparg
    elif op == 1:  # ADD
        new = old + oparg
    elif op == 2:  # OR
        new = old | oparg
    elif op == 3:  # ANDN
        new = old & ~oparg
    elif op == 4:  # XOR
        new = old ^ oparg
    else:
        raise _GuestErrno(errno.ENOSYS)
    signed_old = old - (1 << 32) if old & 0x80000000 else old
    if cmp == 0:
        holds = signed_old == cmparg
    elif cmp == 1:
        holds = signed_old != cmparg
    elif cmp == 2:
        holds = signed_old < cmparg
    elif cmp == 3:
        holds = signed_old <= cmparg
    elif cmp == 4:
        holds = signed_old > cmparg
    elif cmp == 5:
        holds = signed_old >= cmparg
    else:
        raise _GuestErrno(errno.ENOSYS)
    return new & 0xFFFFFFFF, holds


def exit_robust_list(head: int, tid: int, word_size: int, read_word: Callable[[int], int | None],
                     read_u32: Callable[[int], int | None], write_u32: Callable[[int, int], bool],
                     wake: Callable[[int], None]) -> None:
    """Mark the robust futexes thread ``tid`` still holds as its owner died, and wake one waiter
    of each that has waiters (glibc's robust mutexes then return EOWNERDEAD).

    ``head`` is the ``struct robust_list_head`` the thread registered: ``{next, futex_offset,
    list_op_pending}``; each entry is a ``struct robust_list`` whose futex word sits at the
    entry plus ``futex_offset``.  Unreadable memory ends the walk, as on Linux."""
    if not head:
        return
    first, offset, pending = read_word(head), read_word(head + word_size), read_word(head + 2 * word_size)
    if first is None or offset is None or pending is None:
        return
    if offset >= 1 << (8 * word_size - 1):
        offset -= 1 << (8 * word_size)  # futex_offset is a signed long

    def handle(entry: int) -> None:
        addr = entry + offset
        word = read_u32(addr)
        if word is None or word & FUTEX_TID_MASK != tid:
            return
        write_u32(addr, (word & FUTEX_WAITERS) | FUTEX_OWNER_DIED)
        if word & FUTEX_WAITERS:
            wake(addr)

    # an entry's low bit marks a PI futex (fetch_robust_entry): the entry is the rest
    entry, pending, seen = first & ~1, pending & ~1, 0
    while entry != head and entry and seen < ROBUST_LIST_LIMIT:
        nxt = read_word(entry)
        if entry != pending:
            handle(entry)
        if nxt is None:
            break
        entry, seen = nxt & ~1, seen + 1
    if pending:
        handle(pending)
