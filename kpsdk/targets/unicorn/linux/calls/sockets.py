"""Sockets: the layer makes none, and answers the questions asked of descriptors that are not.

``socket()`` is not emulated (-ENOSYS, recorded); ``getsockname``, ``getpeername`` and
``getsockopt`` of any descriptor are ``ENOTSOCK``, as Linux answers for a file or a pipe.
"""

from __future__ import annotations

import errno

from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
from kpsdk.targets.unicorn.linux.calls.declare import syscall
from kpsdk.targets.unicorn.linux.files import _GuestErrno

#: socketcall(2)'s call numbers (include/uapi/linux/net.h)
SOCKETCALLS = {1: "socket", 2: "bind", 3: "connect", 4: "listen", 5: "accept", 6: "getsockname",
               7: "getpeername", 8: "socketpair", 9: "send", 10: "recv", 11: "sendto", 12: "recvfrom",
               13: "shutdown", 14: "setsockopt", 15: "getsockopt", 16: "sendmsg", 17: "recvmsg", 18: "accept4",
               19: "recvmmsg", 20: "sendmmsg"}


class SocketCalls(ProcessCore):
    """The socket calls asked of descriptors that are not sockets."""

    @syscall("getsockname", "fd p inoutint")
    @syscall("getpeername", "fd p inoutint")
    @syscall("getsockopt", "fd socklevel sockopt p inoutint")
    def sys_not_a_socket(self, fd: int, *_: int) -> int:
        """``getsockname``, ``getpeername``, ``getsockopt`` of a descriptor: ``ENOTSOCK`` (``EBADF``
        when it is not open), as Linux answers for a file or a pipe.  Bash asks
        ``getpeername(0)`` at start-up: on any other answer it takes its input for a network
        connection and reads ``~/.bashrc``, whose commands start processes."""
        self.fds.get(self.sint(fd))
        raise _GuestErrno(errno.ENOTSOCK)

    @syscall("socketcall", "d p")
    def sys_socketcall(self, call: int, args: int, *_: int) -> int:
        """i386's and ppc64's one entry for the socket calls (glibc built for kernels before 4.3
        uses it): ``call`` is the call's number (include/uapi/linux/net.h), ``args`` its arguments."""
        name = SOCKETCALLS.get(call)
        if name is None:
            raise _GuestErrno(errno.EINVAL)  # no such call, as Linux
        if name in ("getsockname", "getpeername", "getsockopt"):
            return self.sys_not_a_socket(self.read_word(args))
        self.unimplemented[name] += 1
        return -errno.ENOSYS
