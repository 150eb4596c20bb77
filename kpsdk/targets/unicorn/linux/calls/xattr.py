"""Extended attributes, read from the sysroot's files (``ls -l`` asks for ACLs, ``cp -a`` for all).

Only the reading calls: setting one would change the sysroot, which is read-only.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno


class XattrCalls(ProcessCore):
    """``getxattr`` and ``listxattr``, by path (following links or not) and by descriptor."""

    def _xattr_target(self, path_addr: int, follow: bool) -> Path | int:
        path = self.string(path_addr)
        return self.root.resolve(path, self.cwd, follow=follow)

    def _xattr_fd(self, fd: int) -> int:
        f = self.fds.get(self.sint(fd))
        if f.kind != "host":
            raise _GuestErrno(errno.ENODATA)  # kpsdk's pipes and console carry no attributes
        return f.fd

    def _getxattr(self, where: Path | int, name_addr: int, value: int, size: int, follow: bool = True) -> int:
        try:
            data = os.getxattr(where, self.string(name_addr, 256), follow_symlinks=follow)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENODATA) from None
        return self._put_sized(value, size, data)

    def _listxattr(self, where: Path | int, out: int, size: int, follow: bool = True) -> int:
        try:
            data = b"".join(os.fsencode(n) + b"\0" for n in os.listxattr(where, follow_symlinks=follow))
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOTSUP) from None
        return self._put_sized(out, size, data)

    def _put_sized(self, buf: int, size: int, data: bytes) -> int:
        """The xattr calls' contract: size 0 asks only how big ``data`` is; a buffer too small is
        ERANGE; else ``data`` is copied out.  Returns its length."""
        if size:
            if len(data) > size:
                raise _GuestErrno(errno.ERANGE)
            self.write(buf, data)
        return len(data)

    @syscall("getxattr")
    def sys_getxattr(self, path: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_target(path, True), name, value, size)

    @syscall("lgetxattr")
    def sys_lgetxattr(self, path: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_target(path, False), name, value, size, follow=False)

    @syscall("fgetxattr")
    def sys_fgetxattr(self, fd: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_fd(fd), name, value, size)

    @syscall("listxattr")
    def sys_listxattr(self, path: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_target(path, True), out, size)

    @syscall("llistxattr")
    def sys_llistxattr(self, path: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_target(path, False), out, size, follow=False)

    @syscall("flistxattr")
    def sys_flistxattr(self, fd: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_fd(fd), out, size)
