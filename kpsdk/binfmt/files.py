"""Reading the files users name: regular files only, never more than a bound.

Every file kpsdk parses (an ELF executable, a kernel image, a System.map) comes from the
user and may be anything.  A plain ``read()`` of a FIFO waits for a writer forever, one of
``/dev/zero`` grows until memory runs out, and a sparse file can claim terabytes.
:func:`read_regular` opens without blocking (a FIFO without a writer does not hang the
open), looks at what it opened (not at the path, which may change in between), refuses
anything but a regular file, and reads at most :data:`MAX_FILE_SIZE` bytes.
"""

from __future__ import annotations

import os
import stat

from kpsdk.errors import ImageFormatError

#: The most kpsdk reads from one file, and the most a kernel payload may unpack to (1 GiB):
#: far above any executable it emulates or kernel image it reads symbols from (a vmlinux with
#: its ``.symtab`` is a few hundred MB), far below what would exhaust a machine's memory.
MAX_FILE_SIZE = 1 << 30

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str | os.PathLike[str], limit: int = MAX_FILE_SIZE,
                 follow_links: bool = True) -> tuple[bytes, os.stat_result]:
    """``(contents, stat)`` of the regular file at ``path``, at most ``limit`` bytes.

    Raises :class:`~kpsdk.errors.ImageFormatError` for anything that is not a regular file
    or is larger than ``limit``, and lets :class:`OSError` (no such file, permission denied,
    a symbolic link when not ``follow_links``) through for the caller to word.  The stat is
    the opened file's (its identity is the one of the bytes returned).
    """
    nofollow = 0 if follow_links else os.O_NOFOLLOW
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageFormatError(path, f"not a regular file ({_kind(st.st_mode)})")
        if st.st_size > limit:
            raise ImageFormatError(path, f"{st.st_size} bytes, more than kpsdk reads from one file ({limit})")
        with open(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew after the fstat
        raise ImageFormatError(path, f"more than kpsdk reads from one file ({limit} bytes)")
    return data, st
