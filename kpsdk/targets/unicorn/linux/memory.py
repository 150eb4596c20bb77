"""A Linux process's address space on Unicorn: ``brk``, ``mmap``, ``munmap``, ``mprotect``, ``mremap``.

The mappings themselves are a :class:`~kpsdk.targets.unicorn.space.Space`'s (host memory
that can leave the engine when another process runs; its table, not ``uc_mem_regions``, says
what is mapped where); this module decides *where*: the heap (``brk``) starts a page above kpsdk's own area (which
sits right after the program, where Linux would start the heap: Linux moves
the heap by a random offset anyway, so programs never count on it), and
``mmap`` picks the lowest free range from :data:`MMAP_BASE` up.  kpsdk's
area and the stack are never the program's to unmap or re-protect (``EINVAL``,
as for an address Linux does not give user space).
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import unicorn

from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.space import ARENA_MAPPING, Space

PAGE = 0x1000
#: where anonymous and file mappings go, lowest first (below the stack on 32-bit arches)
MMAP_BASE = 0x40000000
#: mmap(2) flags (include/uapi/asm-generic/mman-common.h; the same on x86, ARM, riscv, ppc64)
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
MAP_FIXED_NOREPLACE = 0x100000
MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4
#: the heap may not grow beyond this many bytes (RLIMIT_DATA is unlimited by default; this
#: bounds what a runaway program makes kpsdk allocate)
HEAP_LIMIT = 1 << 30


#: the bytes of a file mapped from the overlay: ``(offset, size) -> bytes``
Reader = Callable[[int, int], bytes]


def page_up(x: int) -> int:
    return (x + PAGE - 1) & ~(PAGE - 1)


#: how much a stack grows at a time: a program that descends page by page faults once a chunk
STACK_CHUNK = 0x10000

class AddressSpace:
    """The program's mappings in ``table``, with ``reserved`` ranges it may not touch."""

    def __init__(self, table: Space, limit: int, brk_base: int, reserved: list[tuple[int, int]],
                 on_unmap: Callable[[int, int], None] | None = None) -> None:
        self.table = table
        self.limit = limit  #: one past the highest address (2**32 or a 64-bit arch's user limit)
        #: where a length's page rounding and a range's end wrap: a 64-bit kernel's unsigned long,
        #: which runs 32-bit programs as compat tasks (their lengths do not wrap at 2**32)
        self.wrap = 1 << 64
        self.brk_base = self.brk_end = brk_base
        self.reserved = reserved
        self.on_unmap = on_unmap
        #: what ``/proc/self/maps`` names each file mapping: by range, the file's path and the
        #: offset at the range's start (a range unmapped or mapped over is forgotten)
        self.names: dict[tuple[int, int], tuple[str, int]] = {}
        #: where the bytes of each path a mapping was made of (mmap's) come from: what ``mremap``
        #: reads when it grows such a mapping (a host file, or a reader of an overlay file's bytes)
        self.sources: dict[str, Path | Reader] = {}
        #: the processes using it (a CLONE_VM clone shares it: vfork, posix_spawn); the last
        #: one's end or execve releases it
        self.users = 1
        #: the stack's room ``(floor, top)`` and its lowest mapped address (:meth:`grow_stack`);
        #: None: no stack that grows (a process not started by the loader)
        self.stack: tuple[int, int] | None = None
        self.stack_low = 0

    def fork(self) -> AddressSpace:
        """A copy for a new process (``fork``): private memory copied, shared memory shared."""
        child = AddressSpace(self.table.fork(), self.limit, self.brk_base, list(self.reserved), self.on_unmap)
        child.brk_end = self.brk_end
        child.stack, child.stack_low = self.stack, self.stack_low
        child.names = dict(self.names)
        child.sources = dict(self.sources)
        return child

    def release(self) -> None:
        """One process stops using it; the last one's going frees the memory."""
        self.users -= 1
        if self.users <= 0:
            self.table.release()

    def grow_stack(self, addr: int) -> bool:
        """Map the stack down to ``addr`` (its 64 KiB chunk) when ``addr`` lies in the stack's
        room below what is mapped, as Linux grows a ``VM_GROWSDOWN`` area at a fault or a
        kernel access there (``expand_stack``); True when it grew.  A process starts with
        :data:`STACK_INITIAL <kpsdk.targets.unicorn.layout.STACK_INITIAL>` mapped: a fork copies,
        and a process switch unmaps and maps, only what the program has reached."""
        if self.stack is None or not self.stack[0] <= addr < self.stack_low:
            return False
        low = max(self.stack[0], addr & ~(STACK_CHUNK - 1))
        try:
            self.table.map(low, self.stack_low, unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE)
        except (unicorn.UcError, OSError):
            return False
        self._forget(low, self.stack_low)
        self.stack_low = low
        return True

    def name(self, start: int, end: int, path: str, offset: int, source: Path | Reader | None = None) -> None:
        """``[start, end)`` shows ``path`` from file offset ``offset`` in ``/proc/self/maps``;
        ``source``, the host file it was read from, or ``(offset, size) -> bytes`` for a file
        with no host side (the overlay's)."""
        self._forget(start, end)
        self.names[(start, end)] = (path, offset)
        if source is not None:
            self.sources[path] = source

    def file_at(self, addr: int) -> tuple[str, int] | None:
        """The file and file offset ``addr`` maps (None: anonymous memory): what a probe armed
        there belongs to, in whichever process maps that file."""
        for (lo, hi), (path, offset) in self.names.items():
            if lo <= addr < hi:
                return path, offset + (addr - lo)
        return None

    def _named(self, start: int, end: int) -> list[tuple[tuple[int, int], tuple[str, int]]]:
        """The named parts of ``[start, end)``, cut to it, in address order."""
        out = []
        for (lo, hi), (path, offset) in sorted(self.names.items()):
            if lo < end and start < hi:
                cut = max(lo, start)
                out.append(((cut, min(hi, end)), (path, offset + (cut - lo))))
        return out

    def _forget(self, start: int, end: int) -> None:
        """``[start, end)`` shows no file any more (the parts of a named range outside it keep theirs)."""
        for (lo, hi), (path, offset) in list(self.names.items()):
            if lo < end and start < hi:
                del self.names[(lo, hi)]
                if lo < start:
                    self.names[(lo, start)] = (path, offset)
                if end < hi:
                    self.names[(end, hi)] = (path, offset + (end - lo))

    # -- what is where ------------------------------------------------------------------

    def regions(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """The mapped parts of ``[start, end)``: ``(start, end, perms)``, in order."""
        return self.table.regions(start, end)

    def free(self, start: int, end: int) -> bool:
        return 0 < start < end <= self.limit and self.table.free(start, end)

    def _check_reserved(self, start: int, end: int) -> None:
        if any(lo < end and start < hi for lo, hi in self.reserved):
            raise _GuestErrno(errno.EINVAL)

    def find(self, size: int, hint: int = 0, arena: bool = False) -> int:
        """The lowest free ``size`` bytes from :data:`MMAP_BASE` (``hint`` first, when free);
        outside the arenas unless ``arena`` (a mapping that may live in one)."""
        if hint and not hint % PAGE and self.free(hint, hint + size):
            return hint
        at = self.table.find_free(size, MMAP_BASE, self.limit, avoid_arenas=not arena)
        if at is None:
            raise _GuestErrno(errno.ENOMEM)
        return at

    def room(self, start: int) -> int:
        """Where the free range from ``start`` ends: the next mapping, arena or reserved range."""
        end = self.table.arena_room(start, self.limit)
        return min([end] + [lo for lo, _ in self.reserved if lo >= start])

    # -- the calls ------------------------------------------------------------------------

    def align(self, length: int) -> int:
        """``length`` rounded up to pages in the word (0 where Linux's PAGE_ALIGN wraps)."""
        return page_up(length) % self.wrap

    def brk(self, want: int) -> int:
        """``brk``: the new break, or the old one when it cannot move there (Linux's answer)."""
        if want < self.brk_base or want - self.brk_base > HEAP_LIMIT:
            return self.brk_end
        old, new = page_up(self.brk_end), page_up(want)
        try:
            if new > old:
                if not self.free(old, new):
                    return self.brk_end
                self.table.map(old, new, unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE)
            elif new < old:
                self.unmap(new, old)
        except (unicorn.UcError, OSError, _GuestErrno):  # the engine or the host refused the memory
            return self.brk_end
        self.brk_end = want
        return want

    def mmap(self, addr: int, length: int, prot: int, flags: int, buf: mmap.mmap | None = None) -> int:
        """Map ``length`` bytes (zeroed; the caller copies a file's bytes in), or ``buf`` (the
        bytes a session's processes share, copy-on-protect: :mod:`.images`); the address."""
        if not length:
            raise _GuestErrno(errno.EINVAL)
        size = self.align(length)
        if not size or size > self.limit:  # do_mmap, get_unmapped_area
            raise _GuestErrno(errno.ENOMEM)
        if flags & (MAP_FIXED | MAP_FIXED_NOREPLACE):
            if addr % PAGE:
                raise _GuestErrno(errno.EINVAL)
            if addr + size > self.limit:
                raise _GuestErrno(errno.ENOMEM)
        else:
            addr = page_up(addr)  # only a hint
        # small anonymous private memory may live in an arena (space.py: no engine call)
        arena = buf is None and bool(flags & MAP_ANONYMOUS) and not flags & MAP_SHARED and size <= ARENA_MAPPING
        if flags & MAP_FIXED:
            self._check_reserved(addr, addr + size)
            self.unmap(addr, addr + size)
        elif flags & MAP_FIXED_NOREPLACE:
            if not self.free(addr, addr + size):
                raise _GuestErrno(errno.EEXIST)
        else:
            addr = self.find(size, addr, arena)
        try:  # MAP_SHARED memory stays shared with the children a fork makes
            region = self.table.map(addr, addr + size, prot & 7, buf=buf, shared=bool(flags & MAP_SHARED),
                                    room=self.room(addr) if arena else None)
            region.cow = buf is not None
        except (unicorn.UcError, OSError):  # the engine or the host cannot give that much memory
            raise _GuestErrno(errno.ENOMEM) from None
        self._forget(addr, addr + size)
        return addr

    def check_unmap(self, start: int, end: int) -> None:
        """``EINVAL`` unless ``munmap`` of ``[start, end)`` may go on (unaligned, empty, past
        the user's addresses, kpsdk's own memory)."""
        if start % PAGE or end <= start or end > self.limit:
            raise _GuestErrno(errno.EINVAL)
        self._check_reserved(start, page_up(end))

    def unmap(self, start: int, end: int) -> None:
        """``munmap`` of ``[start, end)``: whatever of it is mapped."""
        self.check_unmap(start, end)
        end = page_up(end)
        if self.on_unmap is not None:
            for lo, hi, _ in self.regions(start, end):
                self.on_unmap(lo, hi)
        self.table.unmap(start, end)
        self._forget(start, end)

    def protect(self, start: int, length: int, prot: int) -> None:
        """``mprotect``: every page of the range must be mapped (else ``ENOMEM``)."""
        if start % PAGE:
            raise _GuestErrno(errno.EINVAL)
        end = start + self.align(length)
        if end <= start or end > self.limit:
            raise _GuestErrno(errno.ENOMEM)
        self._check_reserved(start, end)
        parts = self.regions(start, end)
        if sum(hi - lo for lo, hi, _ in parts) != end - start:
            raise _GuestErrno(errno.ENOMEM)
        self.table.protect(start, end, prot & 7)

    def remap(self, old: int, old_size: int, new_size: int, flags: int, new_addr: int = 0) -> int:
        """``mremap``: shrink in place, grow in place when the pages after are free, else move
        (MREMAP_MAYMOVE) by copying; MREMAP_FIXED moves to ``new_addr`` (what was there is
        unmapped).  A grown file mapping's new pages hold the file's next bytes, as Linux's.
        The checks are mm/mremap.c's, in its order; MREMAP_DONTUNMAP is refused (``EINVAL``,
        as before Linux 5.7: not emulated).  Adjacent mappings with the same permissions
        count as one, as Linux merges them."""
        if flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) or old % PAGE:
            raise _GuestErrno(errno.EINVAL)
        if flags & MREMAP_FIXED and not flags & MREMAP_MAYMOVE:
            raise _GuestErrno(errno.EINVAL)
        old_size, new_size = self.align(old_size), self.align(new_size)
        if not new_size or new_size > self.limit - PAGE or flags & MREMAP_DONTUNMAP:
            raise _GuestErrno(errno.EINVAL)  # check_mremap_params
        fixed = bool(flags & MREMAP_FIXED)
        if fixed and (new_addr % PAGE or new_addr > self.limit - PAGE - new_size
                      or (new_addr < old + old_size and old < new_addr + new_size)):
            raise _GuestErrno(errno.EINVAL)  # unaligned, past the address space, overlapping
        parts = self.regions(old, old + max(old_size, PAGE))
        if not parts or parts[0][0] != old:
            raise _GuestErrno(errno.EFAULT)  # nothing there
        if sum(hi - lo for lo, hi, _ in parts) < old_size or len({prot for _, _, prot in parts}) > 1:
            raise _GuestErrno(errno.EFAULT)  # across mappings
        self._check_reserved(old, old + old_size)
        if not old_size:  # a duplicate: meaningless for private memory (vma_to_resize)
            raise _GuestErrno(errno.EINVAL)  # (of shared memory: not emulated)
        perms = parts[0][2]
        if fixed:
            self._check_reserved(new_addr, new_addr + new_size)
            self.unmap(new_addr, new_addr + new_size)
            if new_size < old_size:
                self.unmap(old + new_size, old + old_size)
                old_size = new_size
            return self._move(old, old_size, new_size, perms, new_addr)
        if new_size <= old_size:
            if new_size < old_size:
                self.unmap(old + new_size, old + old_size)
            return old
        file_after = self._file_after(old + old_size)
        if old + new_size <= self.limit and self.free(old + old_size, old + new_size):
            self._map_more(old + old_size, old + new_size, perms)
            self._forget(old + old_size, old + new_size)
            self._fill_from_file(old + old_size, old + new_size, file_after)
            return old
        if not flags & MREMAP_MAYMOVE:
            raise _GuestErrno(errno.ENOMEM)
        return self._move(old, old_size, new_size, perms, self.find(new_size))

    def _move(self, old: int, old_size: int, new_size: int, perms: int, new: int) -> int:
        """Move ``[old, old + old_size)`` to ``new`` (free), grown to ``new_size``: its bytes
        copied, its names taken along, a file mapping's new pages read from the file."""
        file_after = self._file_after(old + old_size)
        self._map_more(new, new + new_size, perms)
        self._forget(new, new + new_size)
        data = self.table.read(old, old_size)
        assert data is not None  # every page of it is mapped: checked by the caller
        self.table.write(new, data)
        moved = self._named(old, old + old_size)
        self.unmap(old, old + old_size)
        for (lo, hi), (path, offset) in moved:  # its names go with it
            self.name(new + (lo - old), new + (hi - old), path, offset)
        if new_size > old_size:
            self._fill_from_file(new + old_size, new + new_size, file_after)
        return new

    def _map_more(self, start: int, end: int, perms: int) -> None:
        """Zeroed memory for ``mremap`` (``ENOMEM`` where the engine or the host refuses it)."""
        try:
            self.table.map(start, end, perms)
        except (unicorn.UcError, OSError):
            raise _GuestErrno(errno.ENOMEM) from None

    def discard(self, start: int, end: int) -> None:
        """``MADV_DONTNEED`` over ``[start, end)`` (mapped): private anonymous pages read zeros
        again; a file's private pages and shared memory are left as they are (Linux reads a
        file's pages back from the file, which kpsdk does not keep)."""
        for lo, hi, _ in self.regions(start, end):
            region = self.table.region_at(lo)
            if region is None or region.shared or region.cow or self._named(lo, hi):
                continue
            self.table.write(lo, bytes(hi - lo))

    def _file_after(self, end: int) -> tuple[str, int] | None:
        """The file and offset that continue a mapping ending at ``end`` past it: those of
        the named range holding its last page (which may go on past ``end``: a part of a
        mapping remapped), else None (anonymous memory)."""
        for (lo, hi), (path, offset) in self.names.items():
            if lo < end <= hi:
                return path, offset + (end - lo)
        return None

    def _fill_from_file(self, start: int, end: int, file_after: tuple[str, int] | None) -> None:
        """A grown file mapping's new pages ``[start, end)``: the file's next bytes (zeros past
        its end), named in ``/proc/self/maps`` as Linux's one grown mapping is.  Left zero and
        unnamed for anonymous memory, or a file that cannot be read again."""
        if file_after is None:
            return
        path, offset = file_after
        source = self.sources.get(path)
        if source is None:
            return
        if callable(source):
            data = source(offset, end - start)
            if data:
                self.table.write(start, data)
            self.name(start, end, path, offset)
            return
        try:  # not through a link made since: the file the sysroot's walk found then
            fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            data = os.pread(fd, end - start, offset)
        except OSError:
            return
        finally:
            os.close(fd)
        if data:
            self.table.write(start, data)
        self.name(start, end, path, offset)
