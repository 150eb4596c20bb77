"""A kernel image's version, from its ``linux_banner``: which probe grammar the kernel takes.

``kpsdk trace`` checks a definition the way the target's kernel would
(:mod:`kpsdk.trace.grammar`), and what the kernel accepts changed between releases
(``$argN`` in a return probe: refused by 6.1, taken since 6.9).  The version is read
from the image kpsdk already has (``--kernel``/``--symbols``): ``linux_banner``,
``"Linux version 6.1.0-56-amd64 (debian-kernel@...) ..."``, is plain text in a vmlinux
and in the kernel a vmlinuz unpacks to.  The answer is cached by the image's sha256,
as the kallsyms table and the task layout are, so only the first look unpacks it.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from kpsdk.binfmt.files import read_regular
from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.errors import KpsdkError

#: the banner's start: ``Linux version MAJOR.MINOR`` (then the rest of ``uname -r``) and `` (``
BANNER = re.compile(rb"Linux version (\d{1,3})\.(\d{1,3})[^\s\0]* \(")
CACHE_DIR = "kversion2"  #: 2: answers for self-extracting ELF images are no longer "none"


def banner_version(data: bytes) -> tuple[int, int] | None:
    """``(major, minor)`` of the first kernel banner in ``data``; None when there is none."""
    m = BANNER.search(data)
    return (int(m[1]), int(m[2])) if m else None


def kernel_version(image: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(major, minor)`` of the kernel in ``image`` (vmlinuz, vmlinux); None when the file
    has no banner (a System.map, a kallsyms dump) or cannot be read or unpacked."""
    path = Path(image)
    try:
        data = read_regular(path)[0]
    except OSError:
        return None
    digest = hashlib.sha256(data).hexdigest()
    directory = private_dir(CACHE_DIR)
    cached = read_private(directory, digest, 32) if directory is not None else None
    if cached is not None:
        if cached == b"none":
            return None
        m = re.fullmatch(rb"(\d{1,3})\.(\d{1,3})", cached)
        if m:
            return int(m[1]), int(m[2])
    version = banner_version(data)
    if version is None:  # compressed, or an ELF wrapped around it (MIPS's self-extracting vmlinuz)
        from kpsdk.kernel.kallsyms import unpack_kernel

        try:
            version = banner_version(unpack_kernel(data, path)[0])
        except KpsdkError:
            version = None
    if directory is not None:
        write_private(directory, digest, b"none" if version is None else f"{version[0]}.{version[1]}".encode())
    return version
