"""A return value as ``kpsdk probe`` prints it: signed by its C type, with its errno name.

``--restype`` says the C type (a ``long`` is a word, an ``int`` 32 bits);
``--failed`` keeps the negative values and names them the way the kernel's
code does, its internal errno values included (``ERESTARTSYS``).
"""

from __future__ import annotations

import errno

#: errno values the kernel returns that userspace never sees (include/linux/errno.h)
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
