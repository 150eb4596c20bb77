"""The address space: ``brk``, ``mmap`` and friends.

The ranges themselves (where a mapping goes, what ``mremap`` moves, the names
``/proc/self/maps`` shows) are :class:`~kpsdk.targets.unicorn.linux.memory.AddressSpace`'s;
these calls check the arguments, bring a file's bytes into its mapping and tell the target
when a library's span is mapped or about to go (``on_file_map``, ``on_unmap``).
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Callable

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import MemFile, MemSpecial
from kpsdk.targets.unicorn.linux.memory import MAP_ANONYMOUS, MAP_FIXED, MAP_PRIVATE, MAP_SHARED, PAGE, page_up

#: mmap's sharing type bits (MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE), PROT_WRITE
MAP_TYPE, PROT_WRITE, MAP_SHARED_VALIDATE = 0x0F, 2, 0x03
#: the protection bits mprotect takes (read, write, exec, PROT_SEM), and the two it strips
PROT_VALID, PROT_GROWSDOWN, PROT_GROWSUP = 0xF, 0x01000000, 0x02000000
#: the largest file offset a mapping may reach (MAX_LFS_FILESIZE on 64-bit kernels)
MAX_LFS_FILESIZE = (1 << 63) - 1
#: madvise's advice Linux takes (include/uapi/asm-generic/mman-common.h; MIPS and the others
#: share these numbers), and MADV_DONTNEED
MADV_VALID = frozenset([*range(0, 5), *range(8, 26), 100, 101])
MADV_DONTNEED = 4


class MemoryCalls(ProcessCore):
    """The calls that map, unmap, protect and query the process's memory."""

    @syscall("brk", "p")
    def sys_brk(self, addr: int, *_: int) -> int:
        return self.mem.brk(addr)

    def _mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
        """mmap's checks in Linux's order (``ksys_mmap_pgoff``, ``do_mmap``): the descriptor
        (``EBADF``), the mapping type (``EINVAL``), the file's modes (``EACCES``), a range past
        what a file offset can reach (``EOVERFLOW``); the length and address are the address
        space's to check (:meth:`AddressSpace.mmap`)."""
        flags = self.abi.generic_flags(flags, self.abi.mmap_flags)  # MIPS's MAP_ANONYMOUS...: the generic bits
        f = None if flags & MAP_ANONYMOUS else self.fds.get(self.sint(fd))
        if flags & MAP_TYPE not in (MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE):
            raise _GuestErrno(errno.EINVAL)
        if f is not None and f.kind == "dev" and isinstance(f.node, MemSpecial) and f.node.device == "zero":
            f, flags = None, flags | MAP_ANONYMOUS  # /dev/zero: zeroed memory, as Linux's shmem_zero_setup
        if f is not None and f.kind not in ("host", "mem"):
            raise _GuestErrno(errno.EACCES if f.kind == "path" else errno.ENODEV)
        if offset % PAGE:
            raise _GuestErrno(errno.EINVAL)
        if f is not None:
            if not f.readable:
                raise _GuestErrno(errno.EACCES)
            if flags & MAP_TYPE != MAP_PRIVATE and prot & PROT_WRITE:
                if not f.writable:
                    raise _GuestErrno(errno.EACCES)
                raise _GuestErrno(errno.ENODEV)  # a shared writable mapping would write the file back: not emulated
            if length and offset + page_up(length) > MAX_LFS_FILESIZE:  # file_mmap_ok
                raise _GuestErrno(errno.EOVERFLOW)
        shared = self._shared_pages(f, addr, length, prot, flags, offset)
        at = self.mem.mmap(addr, length, prot, flags, buf=shared)
        if shared is not None and f is not None:
            self.mem.name(at, at + page_up(length), f.path, offset, f.host)
            if self.kernel is not None:
                self.kernel.host.file_mapped(self.mem, at, at + page_up(length))
            if self.on_file_map is not None and f.host is not None:
                self.on_file_map(f.host, at, offset)
            return at
        if f is not None:
            if f.kind == "mem" and isinstance(f.node, MemFile):
                node = f.node
                data = bytes(node.data[offset:offset + page_up(length)])  # a copy: MAP_PRIVATE's
                self.write(at, data)
                self.mem.name(at, at + page_up(length), f.path, offset, _reader(node))
                return at
            try:  # the file's bytes up to the end of the last page, as Linux maps them
                want = page_up(length)
                st = os.fstat(f.fd)
                if stat.S_ISREG(st.st_mode):  # never a buffer larger than what is there
                    want = min(want, max(st.st_size - offset, 0))
                data = os.pread(f.fd, want, offset)
            except OSError as e:
                self.mem.unmap(at, at + length)
                raise _GuestErrno(e.errno or errno.EACCES) from None
            self.write(at, data)
            self._keep_pages(f, at, length, prot, flags, offset)
            self.mem.name(at, at + page_up(length), f.path, offset, f.host)
            if self.kernel is not None:  # the probes of that file there (an exec'd process's libraries)
                self.kernel.host.file_mapped(self.mem, at, at + page_up(length))
            if self.on_file_map is not None and f.host is not None:
                self.on_file_map(f.host, at, offset)
        return at

    def _page_key(self, f: OpenFile | None, addr: int, length: int, prot: int, flags: int,
                  offset: int) -> tuple[tuple[int, int], int, int, int] | None:
        """The page cache's key for a private read-only mapping of a sysroot file at a fixed
        address (ld.so's segments), else None (anything another process could not share)."""
        if f is None or f.kind != "host" or prot & PROT_WRITE or flags & MAP_TYPE != MAP_PRIVATE or \
                not flags & MAP_FIXED or self.kernel is None:
            return None
        try:
            st = os.fstat(f.fd)
        except OSError:
            return None
        return (st.st_dev, st.st_ino), offset, page_up(length), addr

    def _shared_pages(self, f: OpenFile | None, addr: int, length: int, prot: int, flags: int,
                      offset: int) -> mmap.mmap | None:
        key = self._page_key(f, addr, length, prot, flags, offset)
        return None if key is None else self.kernel.pages.get(*key)

    def _keep_pages(self, f: OpenFile, at: int, length: int, prot: int, flags: int, offset: int) -> None:
        """A private read-only mapping just made: its buffer joins the page cache, and the mapping
        becomes copy-on-protect (another process may share it from now on)."""
        key = self._page_key(f, at, length, prot, flags, offset)
        region = self.mem.table.region_at(at)
        if key is not None and region is not None and region.start == at and region.size == key[2]:
            region.cow = True
            self.kernel.pages.put(*key, region.buf)

    @syscall("mmap", "p u prot mflags fd x")
    def sys_mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int, *_: int) -> int:
        if offset % PAGE:  # the arch's sys_mmap checks the byte offset before anything else
            raise _GuestErrno(errno.EINVAL)
        return self._mmap(addr, length, prot, flags, fd, offset)

    @syscall("mmap2", "p u prot mflags fd pgoff")
    def sys_mmap2(self, addr: int, length: int, prot: int, flags: int, fd: int, pgoff: int, *_: int) -> int:
        return self._mmap(addr, length, prot, flags, fd, pgoff * PAGE)  # mmap2's offset is in 4096-byte units

    @syscall("munmap", "p u")
    def sys_munmap(self, addr: int, length: int, *_: int) -> int:
        self.mem.check_unmap(addr, addr + length)  # before the target hears of it
        if self.on_unmap is not None:
            self.on_unmap(addr, addr + length)
        self.mem.unmap(addr, addr + length)
        return 0

    @syscall("mprotect", "p u prot")
    def sys_mprotect(self, addr: int, length: int, prot: int, *_: int) -> int:
        prot &= ~(PROT_GROWSDOWN | PROT_GROWSUP)
        if addr % PAGE:
            raise _GuestErrno(errno.EINVAL)
        if not length:
            return 0
        if addr + self.mem.align(length) >= self.mem.wrap or not self.mem.align(length):  # the end wrapped
            raise _GuestErrno(errno.ENOMEM)
        if prot & ~PROT_VALID:  # arch_validate_prot, after the range's own checks
            raise _GuestErrno(errno.EINVAL)
        self.mem.protect(addr, length, prot)
        return 0

    @syscall("mremap", "p u u x")
    def sys_mremap(self, old: int, old_size: int, new_size: int, flags: int, new_addr: int = 0, *_: int) -> int:
        return self.mem.remap(old, old_size, new_size, flags, new_addr)

    @syscall("madvise", "p u d")
    def sys_madvise(self, addr: int, length: int, advice: int, *_: int) -> int:
        """Advice Linux knows (``EINVAL`` else) on a page-aligned range, ``ENOMEM`` where a part
        of it is not mapped; ``MADV_DONTNEED`` empties private anonymous pages (they read zeros
        next), the only advice whose effect a program can see."""
        if self.sint(advice) not in MADV_VALID or addr % PAGE:
            raise _GuestErrno(errno.EINVAL)
        end = addr + self.mem.align(length)
        if (length and end == addr) or end >= self.mem.wrap:  # PAGE_ALIGN or the end wrapped
            raise _GuestErrno(errno.EINVAL)
        if end == addr:
            return 0
        if end > self.mem.limit or sum(hi - lo for lo, hi, _ in self.mem.regions(addr, end)) != end - addr:
            raise _GuestErrno(errno.ENOMEM)
        if self.sint(advice) == MADV_DONTNEED:
            self.mem.discard(addr, end)
        return 0

    @syscall("mlock", "p u")
    @syscall("munlock", "p u")
    @syscall("mlockall", "mclflags")
    @syscall("munlockall", "")
    def sys_mlock(self, *_: int) -> int:
        """Locking pages in memory: every page of the emulated process is in kpsdk's memory
        already, and none is ever swapped (gpg locks its secrets)."""
        return 0

    @syscall("mincore", "p u p")
    def sys_mincore(self, addr: int, length: int, vec: int, *_: int) -> int:
        """Every page of the range is resident (one byte per page, 1); ``ENOMEM`` where one is
        not mapped, as Linux.  GNU grep's stack-overflow guard asks, walking down its stack."""
        if addr % PAGE:
            raise _GuestErrno(errno.EINVAL)
        end = page_up(addr + length)
        if end > self.mem.limit or sum(hi - lo for lo, hi, _ in self.mem.regions(addr, end)) != end - addr:
            raise _GuestErrno(errno.ENOMEM)
        self.write(vec, b"\1" * ((end - addr) // PAGE))
        return 0


def _reader(node: MemFile) -> Callable[[int, int], bytes]:
    """What ``mremap`` reads when it grows a mapping of an overlay file: its bytes now."""
    def read(offset: int, size: int) -> bytes:
        return bytes(node.data[offset:offset + size])
    return read
