"""Making, removing and renaming names: ``mkdir``, ``rmdir``, ``unlink``, ``rename``, ``link``,
``symlink``, ``mknod`` and their ``*at`` forms.

Each walks its paths (the last name not followed, as Linux's calls that make or remove a name
do) and hands the result to the file system (:class:`~kpsdk.targets.unicorn.linux.overlay.Sysroot`),
which changes the overlay or a ``"rw"`` bind's host directory.
"""

from __future__ import annotations

import errno

from kpsdk.targets.unicorn.linux.calls.core import AT_EMPTY_PATH, AT_FDCWD
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.paths import PathCalls
from kpsdk.targets.unicorn.linux.files import _GuestErrno

AT_REMOVEDIR, AT_SYMLINK_FOLLOW = 0x200, 0x400


class NameCalls(PathCalls):
    """The calls that change which names a directory holds."""

    def _mkdir(self, dirfd: int, path_addr: int, mode: int) -> int:
        self.root.mkdir(self.lookup(dirfd, self.string(path_addr), follow=False), mode & ~self.umask & 0o7777)
        return 0

    @syscall("mkdir", "path mode")
    def sys_mkdir(self, path: int, mode: int, *_: int) -> int:
        return self._mkdir(AT_FDCWD, path, mode)

    @syscall("mkdirat", "dirfd path mode")
    def sys_mkdirat(self, dirfd: int, path: int, mode: int, *_: int) -> int:
        return self._mkdir(dirfd, path, mode)

    @syscall("rmdir", "path")
    def sys_rmdir(self, path: int, *_: int) -> int:
        self.root.rmdir(self.lookup(AT_FDCWD, self.string(path), follow=False))
        return 0

    @syscall("unlink", "path")
    def sys_unlink(self, path: int, *_: int) -> int:
        self.root.unlink(self.lookup(AT_FDCWD, self.string(path), follow=False))
        return 0

    @syscall("unlinkat", "dirfd path atflags")
    def sys_unlinkat(self, dirfd: int, path: int, flags: int, *_: int) -> int:
        if flags & ~AT_REMOVEDIR:
            raise _GuestErrno(errno.EINVAL)
        ref = self.lookup(dirfd, self.string(path), follow=False)
        if flags & AT_REMOVEDIR:
            self.root.rmdir(ref)
        else:
            self.root.unlink(ref)
        return 0

    def _rename(self, olddir: int, old: int, newdir: int, new: int, flags: int = 0) -> int:
        old_path, new_path = self.string(old), self.string(new)
        a = self.lookup(olddir, old_path, follow=False)
        b = self.lookup(newdir, new_path, follow=False)
        self.root.rename(a, b, flags)
        return 0

    @syscall("rename", "path path")
    def sys_rename(self, old: int, new: int, *_: int) -> int:
        return self._rename(AT_FDCWD, old, AT_FDCWD, new)

    @syscall("renameat", "dirfd path dirfd path")
    def sys_renameat(self, olddir: int, old: int, newdir: int, new: int, *_: int) -> int:
        return self._rename(olddir, old, newdir, new)

    @syscall("renameat2", "dirfd path dirfd path x")
    def sys_renameat2(self, olddir: int, old: int, newdir: int, new: int, flags: int, *_: int) -> int:
        return self._rename(olddir, old, newdir, new, flags)

    def _link(self, olddir: int, old: int, newdir: int, new: int, flags: int) -> int:
        if flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH):
            raise _GuestErrno(errno.EINVAL)
        old_path = self.string(old) if old or not flags & AT_EMPTY_PATH else ""
        if not old_path and flags & AT_EMPTY_PATH:
            if self.root.cred.uid != 0:
                raise _GuestErrno(errno.ENOENT)  # CAP_DAC_READ_SEARCH, as Linux 6.1
            a = self.fd_ref(self.sint(olddir))
        else:
            a = self.lookup(olddir, old_path, follow=bool(flags & AT_SYMLINK_FOLLOW))
        if a.own is not None:
            raise _GuestErrno(errno.EXDEV)
        b = self.lookup(newdir, self.string(new), follow=False)
        self.root.link(a, b, old_parent_known=a.parent is not None)
        return 0

    @syscall("link", "path path")
    def sys_link(self, old: int, new: int, *_: int) -> int:
        return self._link(AT_FDCWD, old, AT_FDCWD, new, 0)

    @syscall("linkat", "dirfd path dirfd path x")
    def sys_linkat(self, olddir: int, old: int, newdir: int, new: int, flags: int, *_: int) -> int:
        return self._link(olddir, old, newdir, new, flags)

    def _symlink(self, target_addr: int, dirfd: int, path_addr: int) -> int:
        target = self.string(target_addr)
        self.root.symlink(self.lookup(dirfd, self.string(path_addr), follow=False), target)
        return 0

    @syscall("symlink", "path path")
    def sys_symlink(self, target: int, path: int, *_: int) -> int:
        return self._symlink(target, AT_FDCWD, path)

    @syscall("symlinkat", "path dirfd path")
    def sys_symlinkat(self, target: int, dirfd: int, path: int, *_: int) -> int:
        return self._symlink(target, dirfd, path)

    def _mknod(self, dirfd: int, path_addr: int, mode: int, dev: int) -> int:
        kind = mode & 0o170000
        self.root.mknod(self.lookup(dirfd, self.string(path_addr), follow=False),
                        kind | (mode & ~self.umask & 0o7777), dev)
        return 0

    @syscall("mknod", "path mode x")
    def sys_mknod(self, path: int, mode: int, dev: int, *_: int) -> int:
        return self._mknod(AT_FDCWD, path, mode, dev)

    @syscall("mknodat", "dirfd path mode x")
    def sys_mknodat(self, dirfd: int, path: int, mode: int, dev: int, *_: int) -> int:
        return self._mknod(dirfd, path, mode, dev)
