"""An epoll instance: its interest list, its ready list, and what a wait takes off it (fs/eventpoll.c).

An item watches one open file description through one descriptor number (Linux's key is the
pair: a ``dup`` of the same file can be added again).  It hears the file's wait queues the
way Linux's ``ep_poll_callback`` does: a :meth:`WaitQueue.watch
<kpsdk.targets.unicorn.linux.waits.WaitQueue.watch>` callback that puts the item at the tail
of the ready list when the wake concerns an event it asked for.  ``epoll_wait`` then scans
the ready list in order, asks each file what it is ready for now
(:func:`~kpsdk.targets.unicorn.linux.fileobj.readiness`) and reports what was asked:

* level-triggered items go back to the tail of the ready list (reported again while ready);
* edge-triggered ones (EPOLLET) leave it until their file's next wake;
* EPOLLONESHOT items are disarmed until ``EPOLL_CTL_MOD``;
* items left unscanned when ``maxevents`` is reached stay first, as ``ep_done_scan`` keeps them.

So the order of events, and which wakes make an edge, are Linux's.  An item goes when its
file description is released (its last descriptor closed, in every process), not when the
descriptor it was added by is closed while a ``dup`` lives: Linux's well-known rule.  The
instance is itself a file: shared across ``fork`` and ``dup`` as any description, and
pollable (readable while an item is ready), so instances nest (EPOLL_CTL_ADD of one into
another; ``ELOOP`` for a cycle or nesting deeper than Linux's 5).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.targets.unicorn.linux.fileobj import POLLERR, POLLHUP, READABLE, FileObject, pollable, readiness
from kpsdk.targets.unicorn.linux.inodes import _GuestErrno
from kpsdk.targets.unicorn.linux.waits import WaitQueue

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.files import OpenFile

EPOLL_CTL_ADD, EPOLL_CTL_DEL, EPOLL_CTL_MOD = 1, 2, 3
EPOLLEXCLUSIVE, EPOLLWAKEUP, EPOLLONESHOT, EPOLLET = 1 << 28, 1 << 29, 1 << 30, 1 << 31
#: the bits that are not events (an item whose events are only these is disarmed)
EP_PRIVATE_BITS = EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE
#: what EPOLLEXCLUSIVE may be combined with (include/uapi/linux/eventpoll.h's users: EPOLLIN,
#: EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLWAKEUP, EPOLLET)
EPOLLEXCLUSIVE_OK = 0x1 | 0x4 | POLLERR | POLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE
#: how deep instances may nest (EP_MAX_NESTS)
EP_MAX_NESTS = 4


class Item:
    """One file watched through one descriptor: what it asks for (``events``, with the private
    bits), the word it reports (``data``), and whether it is on the ready list."""

    __slots__ = ("ep", "file", "fd", "events", "data", "linked", "queues", "callback")

    def __init__(self, ep: Epoll, file: OpenFile, fd: int, events: int, data: int) -> None:
        self.ep, self.file, self.fd, self.events, self.data = ep, file, fd, events, data
        self.linked = False
        self.queues: tuple[WaitQueue, ...] = ()
        self.callback: Callable[[int], None] = self._woken

    def _woken(self, key: int) -> None:
        """A queue of its file was woken (ep_poll_callback): ready, unless disarmed by
        EPOLLONESHOT or the wake is about events it did not ask for."""
        if not self.events & ~EP_PRIVATE_BITS:
            return
        if key and not key & self.events:
            return
        self.ep.ready(self)

    def poll(self) -> int:
        """What the file is ready for of what the item asks."""
        return readiness(self.file)[0] & self.events

    def subscribe(self) -> None:
        self.queues = readiness(self.file)[1]
        for queue in self.queues:
            queue.watch(self.callback)

    def unsubscribe(self) -> None:
        for queue in self.queues:
            queue.unwatch(self.callback)
        self.queues = ()


class Epoll(FileObject):
    """One epoll instance (see the module docstring)."""

    kind = "epoll"
    link = "anon_inode:[eventpoll]"

    def __init__(self) -> None:
        super().__init__()
        #: by (the description's identity, the descriptor number): Linux's epitem key
        self.items: dict[tuple[int, int], Item] = {}
        self.rdllist: list[Item] = []

    # -- the interest list ------------------------------------------------------------------------

    def ctl(self, op: int, file: OpenFile, fd: int, events: int, data: int) -> None:
        """``epoll_ctl`` once the descriptors are known (the checks before are the caller's,
        in Linux's order: EBADF, EPERM, EINVAL for the epoll fd itself)."""
        if file.obj is self:
            raise _GuestErrno(errno.EINVAL)
        if op in (EPOLL_CTL_ADD, EPOLL_CTL_MOD) and events & EPOLLEXCLUSIVE:
            if op == EPOLL_CTL_MOD or isinstance(file.obj, Epoll) or events & ~EPOLLEXCLUSIVE_OK:
                raise _GuestErrno(errno.EINVAL)
        self.prune()
        key = (id(file), fd)
        item = self.items.get(key)
        if op == EPOLL_CTL_ADD:
            if item is not None:
                raise _GuestErrno(errno.EEXIST)
            if isinstance(file.obj, Epoll) and (file.obj.reaches(self) or file.obj.depth() + 1 > EP_MAX_NESTS):
                raise _GuestErrno(errno.ELOOP)
            item = Item(self, file, fd, events | POLLERR | POLLHUP, data)
            self.items[key] = item
            item.subscribe()
            if item.poll():
                self.ready(item)
        elif op == EPOLL_CTL_DEL:
            if item is None:
                raise _GuestErrno(errno.ENOENT)
            self._remove(item)
        elif op == EPOLL_CTL_MOD:
            if item is None:
                raise _GuestErrno(errno.ENOENT)
            if item.events & EPOLLEXCLUSIVE:
                raise _GuestErrno(errno.EINVAL)
            item.events, item.data = events | POLLERR | POLLHUP, data
            if item.poll():
                self.ready(item)
        else:
            raise _GuestErrno(errno.EINVAL)

    def _remove(self, item: Item) -> None:
        item.unsubscribe()
        self.items.pop((id(item.file), item.fd), None)
        if item.linked:
            self.rdllist.remove(item)
            item.linked = False

    def prune(self) -> None:
        """Drop the items whose description was released (its last descriptor closed):
        Linux removes them at that close (eventpoll_release)."""
        for item in [i for i in self.items.values() if i.file.refs <= 0]:
            self._remove(item)

    def reaches(self, other: Epoll) -> bool:
        """Whether ``other`` is this instance or one it watches, however deep (a cycle to refuse)."""
        if other is self:
            return True
        return any(isinstance(i.file.obj, Epoll) and i.file.obj.reaches(other) for i in self.items.values())

    def depth(self) -> int:
        """How many instances deep the instances it watches go."""
        return max((1 + i.file.obj.depth() for i in self.items.values() if isinstance(i.file.obj, Epoll)),
                   default=0)

    # -- the ready list ---------------------------------------------------------------------------

    def ready(self, item: Item) -> None:
        """``item`` may be ready: at the ready list's tail (once), and every waiter woken."""
        if not item.linked:
            item.linked = True
            self.rdllist.append(item)
        self.wait.wake(key=READABLE)

    def send_events(self, maxevents: int) -> list[tuple[int, int]]:
        """What one ``epoll_wait`` reports, at most ``maxevents`` of (events, data), and the
        ready list as Linux leaves it (ep_send_events, ep_done_scan)."""
        self.prune()
        scanning, self.rdllist = self.rdllist, []
        out: list[tuple[int, int]] = []
        done = 0
        for item in scanning:
            if len(out) >= maxevents:
                break
            done += 1
            item.linked = False
            revents = item.poll()
            if not revents:
                continue
            out.append((revents, item.data))
            if item.events & EPOLLONESHOT:
                item.events &= EP_PRIVATE_BITS
            elif not item.events & EPOLLET:
                item.linked = True
                self.rdllist.append(item)
        self.rdllist = scanning[done:] + self.rdllist
        if self.rdllist:
            self.wait.wake(key=READABLE)  # another waiter may take the rest
        return out

    def has_events(self) -> bool:
        """Whether a scan would report something: ``poll`` of the instance itself
        (ep_eventpoll_poll looks at each ready item, taking off those no longer ready)."""
        self.prune()
        for item in list(self.rdllist):
            if item.poll():
                return True
            self.rdllist.remove(item)  # woken for nothing it asks: off the list (ep_read_events_proc)
            item.linked = False
        return False

    # -- as a file ------------------------------------------------------------------------------

    def poll(self) -> int:
        return READABLE if self.has_events() else 0

    def read(self, proc: ProcessCore, f: OpenFile, count: int) -> bytes:
        raise _GuestErrno(errno.EINVAL)  # an epoll descriptor has no read (anon_inode's: EINVAL)

    def release(self) -> None:
        for item in list(self.items.values()):
            self._remove(item)


def check_target(file: OpenFile) -> None:
    """``EPERM`` for a file Linux cannot poll (a regular file, a directory, /dev/null)."""
    if not pollable(file):
        raise _GuestErrno(errno.EPERM)
