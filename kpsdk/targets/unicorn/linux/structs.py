"""The structures system calls fill, packed in the guest's byte order.

``struct stat`` differs per architecture and comes from its backend as data
(:class:`kpsdk.arch.StatLayout`); ``struct statx`` and ``struct utsname`` are the
same everywhere (include/uapi/linux/stat.h, include/uapi/linux/utsname.h).
"""

from __future__ import annotations

import os
import stat as statmod
import struct
from collections.abc import Callable

from kpsdk.arch import StatLayout

#: STATX_BASIC_STATS: the fields kpsdk fills (include/uapi/linux/stat.h)
STATX_BASIC_STATS = 0x7FF
STATX_SIZE = 256
#: what fstat says of the console, stdin and pipes: a FIFO, never a terminal, so a
#: program buffers its output as it does under qemu-user with a pipe for stdout
FIFO_MODE = statmod.S_IFIFO | 0o600


def stat_values(st: os.stat_result | None) -> dict[str, int]:
    """A host file's ``stat`` as the guest sees it (None: one of kpsdk's pipes)."""
    if st is None:
        return {"st_mode": FIFO_MODE, "st_nlink": 1, "st_uid": os.getuid(), "st_gid": os.getgid(),
                "st_blksize": 4096, "st_dev": 0xC, "st_ino": 1}
    return {
        "st_dev": st.st_dev, "st_ino": st.st_ino, "st_mode": st.st_mode, "st_nlink": st.st_nlink,
        "st_uid": st.st_uid, "st_gid": st.st_gid, "st_rdev": st.st_rdev, "st_size": st.st_size,
        "st_blksize": st.st_blksize, "st_blocks": st.st_blocks,
        "st_atime": int(st.st_atime), "st_atime_nsec": st.st_atime_ns % 10**9,
        "st_mtime": int(st.st_mtime), "st_mtime_nsec": st.st_mtime_ns % 10**9,
        "st_ctime": int(st.st_ctime), "st_ctime_nsec": st.st_ctime_ns % 10**9,
    }


def pack_stat(layout: StatLayout, values: dict[str, int], order: str) -> bytes:
    """``values`` laid out as ``layout`` says, each cut to its field's width."""
    out = bytearray(layout.size)
    for name, offset, code in layout.fields:
        size = struct.calcsize(code)
        value = values.get(name, 0) & ((1 << (8 * size)) - 1)
        struct.pack_into(order + code.upper(), out, offset, value)
    return bytes(out)


def pack_statx(values: dict[str, int], order: str) -> bytes:
    """``struct statx`` (include/uapi/linux/stat.h) with the basic stats."""
    out = bytearray(STATX_SIZE)
    v = values.get
    struct.pack_into(order + "IIQIIIH", out, 0, STATX_BASIC_STATS, v("st_blksize", 0), 0, v("st_nlink", 0),
                     v("st_uid", 0), v("st_gid", 0), v("st_mode", 0) & 0xFFFF)
    struct.pack_into(order + "QQQ", out, 32, v("st_ino", 0), v("st_size", 0) & (2**64 - 1), v("st_blocks", 0))
    for at, key in ((64, "st_atime"), (96, "st_ctime"), (112, "st_mtime")):
        struct.pack_into(order + "qI", out, at, v(key, 0), v(key + "_nsec", 0))
    rdev, dev = v("st_rdev", 0), v("st_dev", 0)
    struct.pack_into(order + "IIII", out, 128, os.major(rdev), os.minor(rdev), os.major(dev), os.minor(dev))
    return bytes(out)


#: d_type of ``struct linux_dirent64`` by file type (include/linux/fs_types.h: S_IFMT >> 12)
DT_UNKNOWN = 0
#: a linux_dirent64's fixed part: d_ino (u64), d_off (s64), d_reclen (u16), d_type (u8)
DIRENT64_HEAD = 19


def pack_dirent64(ino: int, cookie: int, dtype: int, name: bytes, order: str) -> bytes:
    """One ``struct linux_dirent64`` (include/linux/dirent.h): its name NUL-terminated and
    the record padded to 8 bytes, as fs/readdir.c's filldir64 lays it out."""
    reclen = (DIRENT64_HEAD + len(name) + 1 + 7) & ~7
    return struct.pack(order + "QqHB", ino & (2**64 - 1), cookie, reclen, dtype) + name.ljust(
        reclen - DIRENT64_HEAD, b"\0")


#: how a getdents call lays out one record: (inode, cookie, d_type, name, byte order) -> bytes
DirentPacker = Callable[[int, int, int, bytes, str], bytes]


def dirent_packer(word_size: int) -> DirentPacker:
    """The older ``struct linux_dirent`` of ``getdents`` (fs/readdir.c's filldir): the inode
    and offset are words, the name follows, and d_type is the record's last byte.  An inode
    number a 32-bit word cannot hold is EOVERFLOW there (raised by the caller's check)."""
    word = "Q" if word_size == 8 else "I"
    head = 2 * word_size + 2

    def pack(ino: int, cookie: int, dtype: int, name: bytes, order: str) -> bytes:
        if ino >> (8 * word_size):
            raise OverflowError(ino)
        reclen = (head + len(name) + 2 + word_size - 1) & ~(word_size - 1)
        body = struct.pack(order + word + word + "H", ino, cookie, reclen) + name + b"\0"
        return body.ljust(reclen - 1, b"\0") + bytes([dtype])

    return pack


def dirent_type(mode: int) -> int:
    """The d_type of a file of ``mode`` (``S_IFMT >> 12`` is the DT_ value on Linux)."""
    return statmod.S_IFMT(mode) >> 12


#: the fields of ``struct statfs`` in order (include/uapi/asm-generic/statfs.h; f_fsid is two ints)
STATFS_FIELDS = ("f_type", "f_bsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_fsid0",
                 "f_fsid1", "f_namelen", "f_frsize", "f_flags")
#: the host's ``struct statfs`` (a 64-bit Linux: every word a long, f_fsid two ints, four spare longs)
_HOST_STATFS = struct.Struct("=qqqqqqqiiqqq32x")
#: what statfs says of kpsdk's pipes and console, and of the process's own /proc (linux/magic.h)
PIPEFS_MAGIC, PROC_SUPER_MAGIC, TMPFS_MAGIC = 0x50495045, 0x9FA0, 0x01021994


def host_statfs(where: str | int) -> dict[str, int]:
    """``statfs(2)`` (a path) or ``fstatfs(2)`` (a host descriptor) of the host, through libc:
    Python's ``os.statvfs`` leaves out ``f_type``, which programs test (``stat -f``, ``df -T``)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(_HOST_STATFS.size)
    if ctypes.sizeof(ctypes.c_long) != 8:  # a 32-bit host's struct differs: statvfs's fields, no type
        st = os.statvfs(where)
        return {"f_bsize": st.f_bsize, "f_blocks": st.f_blocks, "f_bfree": st.f_bfree, "f_bavail": st.f_bavail,
                "f_files": st.f_files, "f_ffree": st.f_ffree, "f_namelen": st.f_namemax, "f_frsize": st.f_frsize}
    done = libc.fstatfs(where, buf) if isinstance(where, int) else libc.statfs(os.fsencode(where), buf)
    if done != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return dict(zip(STATFS_FIELDS, _HOST_STATFS.unpack(buf.raw), strict=True))


def pack_statfs(values: dict[str, int], word_size: int, order: str) -> bytes:
    """``struct statfs`` of a 64-bit arch (also ppc64's ``statfs64``: 120 bytes), or the packed
    ``struct statfs64`` of a 32-bit one (84 bytes: i386's and ARM's ``ARCH_PACK_STATFS64``)."""
    v = [values.get(name, 0) for name in STATFS_FIELDS]
    if word_size == 8:
        return struct.pack(f"{order}7q2i3q32x", *v)
    return struct.pack(f"{order}2I5Q2i3I16x", *(x & 0xFFFFFFFF if i < 2 or i > 8 else x for i, x in enumerate(v)))


def pack_sysinfo(word_size: int, order: str, uptime: int, loads: tuple[float, float, float], total: int,
                 free: int, procs: int) -> bytes:
    """``struct sysinfo`` (include/uapi/linux/sysinfo.h) with no swap, no shared or buffer memory
    and no high memory: the sizes in bytes (``mem_unit`` 1) where they fit a word, else in
    pages (``mem_unit`` 4096), as Linux's ``do_sysinfo`` decides for a 32-bit caller; the
    loads in 1/65536ths (SI_LOAD_SHIFT)."""
    unit = 1 if total < 1 << (8 * word_size) else 4096
    w = "Q" if word_size == 8 else "I"
    head = struct.pack(f"{order}{w}{w}{w}{w}{w}{w}{w}{w}{w}{w}HH", uptime, *(int(x * 65536) for x in loads),
                       total // unit, free // unit, 0, 0, 0, 0, procs, 0)
    tail = struct.pack(f"{order}{w}{w}I", 0, 0, unit)
    pad = (-len(head)) % word_size  # totalhigh is word-aligned after procs and pad
    body = head + bytes(pad) + tail
    size = 112 if word_size == 8 else 64  # _f[20 - 2 * sizeof(long) - 4] and the struct's alignment
    return body + bytes(size - len(body))


def pack_utsname(machine: str, order: str) -> bytes:
    """``struct new_utsname``: six 65-byte strings."""
    fields = ("Linux", "kpsdk", "6.1.0-kpsdk", "#1 SMP kpsdk Unicorn", machine, "(none)")
    return b"".join(f.encode()[:64].ljust(65, b"\0") for f in fields)
