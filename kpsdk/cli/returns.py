"""A return value as ``kpsdk probe`` prints it: signed by its C type, with what its failure means.

``--restype`` says the C type (a ``long`` is a word, an ``int`` 32 bits).
``--failed`` keeps the negative values.  An errno name belongs to the kernel's
convention only, a function of a kernel returning ``-ENOENT`` (-4095..-1, its
internal values included: ``ERESTARTSYS``): :func:`failure_text`.  A user
function's -1 is no errno (``ret=-1 (EPERM)`` read -1 as one); its failure is
told by the C library's ``errno`` after the call, which :class:`ThreadErrno`
reads where the target knows the thread pointer and the library says where
``errno`` is (:mod:`kpsdk.binfmt.tls`: glibc's, on Unicorn).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kpsdk.errors import KpsdkError

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.binfmt.tls import TlsVariable
    from kpsdk.session import Session

#: errno values the kernel returns that userspace never sees (include/linux/errno.h)
#: the most negative return a kernel function's errno convention uses (include/linux/err.h, MAX_ERRNO)
MAX_ERRNO = 4095
KERNEL_ERRNO = {512: "ERESTARTSYS", 513: "ERESTARTNOINTR", 514: "ERESTARTNOHAND", 515: "ENOIOCTLCMD",
                516: "ERESTART_RESTARTBLOCK", 517: "EPROBE_DEFER", 518: "EOPENSTALE", 519: "ENOPARAM",
                521: "EBADHANDLE", 522: "ENOTSYNC", 523: "EBADCOOKIE", 524: "ENOTSUPP", 525: "ETOOSMALL",
                526: "ESERVERFAULT", 527: "EBADTYPE", 528: "EJUKEBOX", 529: "EIOCBQUEUED", 530: "ERECALLCONFLICT"}


def signed_return(raw: int, restype: str, word_bits: int) -> int:
    """A return register's value as the C type ``restype`` (long/ulong: a word; int/uint: 32 bits)."""
    bits = 32 if restype in ("int", "uint") else word_bits
    value = raw & ((1 << bits) - 1)
    if restype in ("long", "int") and value >> (bits - 1):
        value -= 1 << bits
    return value


def errno_name(value: int) -> str:
    """``ENOENT`` for -2 (the kernel's internal ones too: ``ERESTARTSYS``); "" when it is none."""
    if value >= 0:
        return ""
    return errno.errorcode.get(-value) or KERNEL_ERRNO.get(-value, "")


def failure_text(value: int, kernel: bool, thread_errno: int | None) -> str:
    """What ``--failed`` adds after ``ret=VALUE``: on a kernel (``kernel``), the errno name of a
    return in -4095..-1 (`` (ENOENT)``); for a user function, the thread's errno after the call
    when it is known (`` errno=ENOENT``); "" otherwise."""
    if kernel:
        name = errno_name(value) if -MAX_ERRNO <= value < 0 else ""
        return f" ({name})" if name else ""
    if thread_errno is None:
        return ""
    return f" errno={errno.errorcode.get(thread_errno, str(thread_errno))}"


class ThreadErrno:
    """The running thread's ``errno`` as its C library keeps it (glibc: the TLS variable
    ``errno`` of ``libc.so.6``), read at a hit; None where the target does not say its thread
    pointer (live targets) or no mapped object says where ``errno`` is (a static program)."""

    #: the thread-local variable read
    NAME = "errno"

    def __init__(self, session: Session) -> None:
        self.session = session
        #: each mapped object's answer, by identity: where its errno is (None: it has none)
        self._objects: dict[tuple[int, int], TlsVariable | None] = {}

    def read(self) -> int | None:
        """The value now, or None when it cannot be known."""
        target = self.session.target
        pointer = target.thread_pointer()
        if pointer is None:
            return None
        arch = target.arch
        for mf in target.mapped_files():
            found = self._variable(mf.identity, mf.image)
            if found is None:
                continue
            try:
                slot = int.from_bytes(target.read_memory(mf.bias + found.slot, arch.word_size), arch.endian)
                raw = target.read_memory(found.address(pointer, slot), 4)
            except KpsdkError:  # not mapped (yet): the value is not known
                return None
            return int.from_bytes(raw, arch.endian, signed=True)
        return None

    def _variable(self, identity: tuple[int, int], image: ElfImage) -> TlsVariable | None:
        """Where ``image`` keeps the variable, read from its file once per file."""
        if identity not in self._objects:
            from kpsdk.binfmt.tls import tls_variable

            try:
                self._objects[identity] = tls_variable(image, self.session.arch, self.NAME)
            except (KpsdkError, OSError):  # an unreadable or malformed file says nothing
                self._objects[identity] = None
        return self._objects[identity]
