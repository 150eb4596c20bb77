"""Extended attributes (``ls -l`` asks for ACLs, ``cp -a`` copies them all).

A sysroot or bind file's are the host's, read there.  The overlay keeps its own files'
attributes in memory (``setxattr`` on a sysroot file copies it up first, as Linux's
overlayfs does), in the namespaces a program may set as its user (``user.``; ``trusted.`` and
``security.`` as root); a bind's files take none from the guest (``EOPNOTSUPP``: the host
keeps what it has).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from kpsdk.targets.unicorn.linux.calls.core import AT_FDCWD
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.calls.paths import PathCalls
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import HostNode, MemNode, Node
from kpsdk.targets.unicorn.linux.tree import Ref

#: setxattr's flags
XATTR_CREATE, XATTR_REPLACE = 1, 2
#: the largest value and name list Linux takes (XATTR_SIZE_MAX, XATTR_LIST_MAX)
XATTR_SIZE_MAX = 65536


class XattrCalls(PathCalls):
    """``getxattr``, ``listxattr``, ``setxattr``, ``removexattr``: by path (following links or
    not) and by descriptor."""

    def _xattr_ref(self, path_addr: int, follow: bool) -> Ref:
        return self.existing(AT_FDCWD, path_addr, follow)

    def _xattr_fd(self, fd: int) -> Ref:
        f = self.fds.get(self.sint(fd))
        if f.kind == "path":
            raise _GuestErrno(errno.EBADF)
        if f.node is None and f.kind != "host":
            raise _GuestErrno(errno.ENODATA)  # kpsdk's pipes and console carry no attributes
        return self.fd_ref(self.sint(fd))

    @staticmethod
    def _host_of(node: Node | None) -> Path | None:
        return node.path if isinstance(node, HostNode) else None

    def _getxattr(self, ref: Ref, name_addr: int, value: int, size: int, follow: bool = True) -> int:
        name = self.string(name_addr, 256)
        node = ref.node
        host = self._host_of(node)
        if host is not None:
            try:
                data = os.getxattr(host, name, follow_symlinks=False)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.ENODATA) from None
        elif isinstance(node, MemNode):
            found = (node.xattrs or {}).get(name)
            if found is None:
                raise _GuestErrno(errno.ENODATA)
            data = found
        else:
            raise _GuestErrno(errno.ENODATA)
        return self._put_sized(value, size, data)

    def _listxattr(self, ref: Ref, out: int, size: int, follow: bool = True) -> int:
        node = ref.node
        host = self._host_of(node)
        if host is not None:
            try:
                names = os.listxattr(host, follow_symlinks=False)
            except OSError as e:
                raise _GuestErrno(e.errno or errno.ENOTSUP) from None
        elif isinstance(node, MemNode):
            names = sorted(node.xattrs or {})
        else:
            names = []
        return self._put_sized(out, size, b"".join(os.fsencode(n) + b"\0" for n in names))

    def _put_sized(self, buf: int, size: int, data: bytes) -> int:
        """The xattr calls' contract: size 0 asks only how big ``data`` is; a buffer too small is
        ERANGE; else ``data`` is copied out.  Returns its length."""
        if size:
            if len(data) > size:
                raise _GuestErrno(errno.ERANGE)
            self.write(buf, data)
        return len(data)

    def _setxattr(self, ref: Ref, name_addr: int, value: int, size: int, flags: int,
                  remove: bool = False) -> int:
        name = self.string(name_addr, 256)
        if flags & ~(XATTR_CREATE | XATTR_REPLACE) or not name or len(name) > 255:
            raise _GuestErrno(errno.EINVAL if not name or flags & ~3 else errno.ERANGE)
        if size > XATTR_SIZE_MAX:
            raise _GuestErrno(errno.E2BIG)
        cred = self.root.cred
        space = name.split(".", 1)[0]
        if space not in ("user", "trusted", "security") or space != "user" and cred.uid != 0:
            raise _GuestErrno(errno.EOPNOTSUPP if space not in ("trusted", "security") else errno.EPERM)
        data = self.read(value, size) if size else b""
        node = ref.node
        if ref.own is not None or node is None:
            raise _GuestErrno(errno.EPERM)
        if isinstance(node, HostNode) and node.bind is not None:
            raise _GuestErrno(errno.EROFS if not node.bind.writable else errno.EOPNOTSUPP)
        if not cred.owns(node):
            raise _GuestErrno(errno.EPERM)
        mem = self.root.copy_up(ref.parent, ref.name, node)
        assert isinstance(mem, MemNode)
        if mem.xattrs is None:
            mem.xattrs = {}
        table = mem.xattrs
        if remove:
            if name not in table:
                raise _GuestErrno(errno.ENODATA)
            del table[name]
        else:
            if flags & XATTR_CREATE and name in table:
                raise _GuestErrno(errno.EEXIST)
            if flags & XATTR_REPLACE and name not in table:
                raise _GuestErrno(errno.ENODATA)
            table[name] = data
        self.root.touch(mem, data=False)
        return 0

    @syscall("getxattr", "path path p u")
    def sys_getxattr(self, path: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_ref(path, True), name, value, size)

    @syscall("lgetxattr", "path path p u")
    def sys_lgetxattr(self, path: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_ref(path, False), name, value, size, follow=False)

    @syscall("fgetxattr", "fd path p u")
    def sys_fgetxattr(self, fd: int, name: int, value: int, size: int, *_: int) -> int:
        return self._getxattr(self._xattr_fd(fd), name, value, size)

    @syscall("listxattr", "path p u")
    def sys_listxattr(self, path: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_ref(path, True), out, size)

    @syscall("llistxattr", "path p u")
    def sys_llistxattr(self, path: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_ref(path, False), out, size, follow=False)

    @syscall("flistxattr", "fd p u")
    def sys_flistxattr(self, fd: int, out: int, size: int, *_: int) -> int:
        return self._listxattr(self._xattr_fd(fd), out, size)

    @syscall("setxattr", "path path wbuf u x")
    def sys_setxattr(self, path: int, name: int, value: int, size: int, flags: int, *_: int) -> int:
        return self._setxattr(self._xattr_ref(path, True), name, value, size, flags)

    @syscall("lsetxattr", "path path wbuf u x")
    def sys_lsetxattr(self, path: int, name: int, value: int, size: int, flags: int, *_: int) -> int:
        return self._setxattr(self._xattr_ref(path, False), name, value, size, flags)

    @syscall("fsetxattr", "fd path wbuf u x")
    def sys_fsetxattr(self, fd: int, name: int, value: int, size: int, flags: int, *_: int) -> int:
        return self._setxattr(self._xattr_fd(fd), name, value, size, flags)

    @syscall("removexattr", "path path")
    def sys_removexattr(self, path: int, name: int, *_: int) -> int:
        return self._setxattr(self._xattr_ref(path, True), name, 0, 0, 0, remove=True)

    @syscall("lremovexattr", "path path")
    def sys_lremovexattr(self, path: int, name: int, *_: int) -> int:
        return self._setxattr(self._xattr_ref(path, False), name, 0, 0, 0, remove=True)

    @syscall("fremovexattr", "fd path")
    def sys_fremovexattr(self, fd: int, name: int, *_: int) -> int:
        return self._setxattr(self._xattr_fd(fd), name, 0, 0, 0, remove=True)
