"""The initial stack Linux builds for a new process: argc, argv, envp, the auxiliary vector.

From the stack pointer up (fs/binfmt_elf.c ``create_elf_tables``; each psABI's
"Process Initialization": x86-64 3.4.1, i386 2.3.2 ... all the same shape)::

    argc | argv[0..argc-1] | NULL | envp[...] | NULL | auxv (type, value)... | AT_NULL
    ... padding | 16 random bytes (AT_RANDOM) | platform string | argument and
    environment strings | the file name (AT_EXECFN) | top

The stack pointer is aligned to 16 bytes at ``argc``: every psABI kpsdk runs
asks for at most that.  No ``AT_SYSINFO_EHDR``: there is no vDSO, so libc
makes real system calls for the time.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

# auxiliary vector entry types (include/uapi/linux/auxvec.h)
AT_NULL, AT_PHDR, AT_PHENT, AT_PHNUM, AT_PAGESZ, AT_BASE, AT_FLAGS, AT_ENTRY = 0, 3, 4, 5, 6, 7, 8, 9
AT_UID, AT_EUID, AT_GID, AT_EGID, AT_PLATFORM, AT_HWCAP, AT_CLKTCK = 11, 12, 13, 14, 15, 16, 17
AT_SECURE, AT_RANDOM, AT_HWCAP2, AT_EXECFN = 23, 25, 26, 31
#: the most bytes of argument and environment strings: Linux allows a quarter of the stack
#: limit, and kpsdk's stack room is Linux's default 8 MiB
ARG_MAX = 2 * 1024 * 1024
#: sysconf(_SC_CLK_TCK) as every Linux architecture reports it (USER_HZ)
CLK_TCK = 100
PAGE = 0x1000


def stack_bytes(argv: list[bytes], envp: list[bytes], execfn: bytes, word_size: int) -> int:
    """At most how many bytes :func:`build_stack` writes for these strings (the stack must be
    mapped that far before it runs): the strings, the pointers, the auxiliary vector, the
    random bytes and platform string, and alignment."""
    strings = sum(len(s) + 1 for s in (*argv, *envp)) + len(execfn) + 1 + 16 + 64
    words = len(argv) + len(envp) + 3 + 2 * 32  # argc, the two NULLs, auxv pairs (fewer than 32)
    return strings + words * word_size + 64


@dataclass(frozen=True)
class ProcessImage:
    """What the auxiliary vector tells the program about itself and its interpreter."""

    phdr: int
    phent: int
    phnum: int
    entry: int
    base: int  #: the interpreter's load address (0: none)
    uid: int
    gid: int
    platform: str | None
    hwcap: int
    hwcap2: int


def build_stack(write: Callable[[int, bytes], None], top: int, word: struct.Struct, argv: list[bytes],
                envp: list[bytes], execfn: bytes, image: ProcessImage, random: bytes) -> tuple[int, list[int]]:
    """Write the initial stack below ``top``; return the stack pointer (at argc) and the
    auxv as written (type, value, ...).  ``word`` packs one word in the guest's order."""
    strings = bytearray()
    at = top

    def put(data: bytes) -> int:
        nonlocal at
        at -= len(data)
        strings[:0] = data
        return at

    exec_at = put(execfn + b"\0")
    env_at = [put(s + b"\0") for s in reversed(envp)][::-1]
    arg_at = [put(s + b"\0") for s in reversed(argv)][::-1]
    platform_at = put(image.platform.encode() + b"\0") if image.platform else 0
    random_at = (at & ~15) - 16
    auxv = [AT_PHDR, image.phdr, AT_PHENT, image.phent, AT_PHNUM, image.phnum, AT_PAGESZ, PAGE,
            AT_BASE, image.base, AT_FLAGS, 0, AT_ENTRY, image.entry, AT_UID, image.uid, AT_EUID, image.uid,
            AT_GID, image.gid, AT_EGID, image.gid, AT_HWCAP, image.hwcap, AT_HWCAP2, image.hwcap2,
            AT_CLKTCK, CLK_TCK, AT_SECURE, 0, AT_RANDOM, random_at, AT_EXECFN, exec_at]
    if platform_at:
        auxv += [AT_PLATFORM, platform_at]
    auxv += [AT_NULL, 0]
    words = [len(argv), *arg_at, 0, *env_at, 0, *auxv]
    sp = (random_at - len(words) * word.size) & ~15
    write(sp, b"".join(word.pack(w) for w in words))
    write(random_at, random)
    write(top - len(strings), bytes(strings))
    return sp, auxv
