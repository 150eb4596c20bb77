"""Kernel images unpacked to the vmlinux inside: an x86 bzImage's payload, or the first
compressed stream (gzip, xz, lzma, bzip2, zstd, lz4, lzo) in any other image (ARM's
zImage, a bare stream), the way the kernel's ``scripts/extract-vmlinux`` searches.

One job: bytes in, the uncompressed kernel out, bounded (a hostile payload cannot unpack
into all of memory: every decompressor stops one byte past ``MAX_FILE_SIZE``).  Whether
the result is a kernel is the caller's question (:func:`unpack_kernel`'s ``is_kernel``).
"""

from __future__ import annotations

import bz2
import lzma
import os
import shutil
import struct
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

from kpsdk.binfmt.files import MAX_FILE_SIZE, read_regular
from kpsdk.errors import ImageFormatError, SymbolError

__all__ = ["compression_of", "is_elf", "raw_image", "read_kernel_file", "unpack_kernel"]



def _run_tool(tool: str, args: list[str], data: bytes, package: str) -> bytes:
    path = shutil.which(tool)
    if path is None:
        raise SymbolError(f"no decompressor for this kernel: install the Python package or Debian package {package}")
    try:
        proc = subprocess.run([path, *args], input=data, capture_output=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        raise SymbolError(f"{tool} did not unpack the kernel payload within 300 s") from None
    if proc.returncode != 0:
        raise SymbolError(f"{tool} failed on the kernel payload: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


# The in-process decompressors stop one byte past MAX_FILE_SIZE (_decompress refuses that):
# a small hostile payload cannot unpack into all of memory.


def _gunzip(data: bytes) -> bytes:
    return zlib.decompressobj(wbits=31).decompress(data, MAX_FILE_SIZE + 1)


def _unxz(data: bytes) -> bytes:
    return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data, MAX_FILE_SIZE + 1)


def _unlzma(data: bytes) -> bytes:
    return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(data, MAX_FILE_SIZE + 1)


def _bunzip2(data: bytes) -> bytes:
    return bz2.BZ2Decompressor().decompress(data, MAX_FILE_SIZE + 1)


def _unzstd(data: bytes) -> bytes:
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        return _run_tool("zstd", ["-dcq"], _strip_size_trailer(data), "zstandard (pip) or zstd (apt)")
    out: bytes = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return out


def _unlz4(data: bytes) -> bytes:
    """The kernel's lz4 is the *legacy* frame: magic, then blocks of (u32 size, lz4 block)."""
    try:
        import lz4.block  # type: ignore[import-not-found]
    except ImportError:
        block: Callable[[bytes], bytes] = _lz4_block_py
    else:
        block = lambda b: lz4.block.decompress(b, uncompressed_size=8 << 20)  # noqa: E731
    out = bytearray()
    pos = 4
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, pos)
        if size == 0x184C2102:  # a second legacy frame (concatenated)
            pos += 4
            continue
        if pos + 4 + size > len(data):
            break  # the kernel's 4-byte size trailer
        out += block(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
        if len(out) > MAX_FILE_SIZE:
            break
    return bytes(out)


def _lz4_length(src: bytes, i: int, length: int) -> tuple[int, int]:
    """An LZ4 length: a 4-bit field of 15 continues in bytes until one is not 255."""
    if length == 15:
        while True:
            b = src[i]
            i += 1
            length += b
            if b != 255:
                break
    return length, i


def _lz4_block_py(src: bytes) -> bytes:
    """A plain LZ4 block decoder, for when the ``lz4`` package is not installed (slow but exact)."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit, i = _lz4_length(src, i, token >> 4)
        out += src[i : i + lit]
        i += lit
        if i >= n:
            break
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        mlen, i = _lz4_length(src, i, token & 15)
        mlen += 4
        start = len(out) - offset
        if offset <= 0 or start < 0:
            raise ValueError("corrupt lz4 block (a match before the start of the output)")
        while mlen > 0:
            chunk = out[start : start + min(mlen, offset)]
            out += chunk
            mlen -= len(chunk)
            start += len(chunk)
    return bytes(out)


def _unlzo(data: bytes) -> bytes:
    return _run_tool("lzop", ["-dc"], data, "lzop")


def _strip_size_trailer(data: bytes) -> bytes:
    # The kernel appends the decompressed size (u32 LE) after every compressed stream; command
    # line decompressors take it for a corrupt second frame.
    return data[:-4] if len(data) > 4 else data


#: (name, magic, decompressor), in the order the magic bytes are tried.
_COMPRESSORS: tuple[tuple[str, bytes, Callable[[bytes], bytes]], ...] = (
    ("gzip", b"\x1f\x8b\x08", _gunzip),
    ("xz", b"\xfd7zXZ\x00", _unxz),
    ("zstd", b"\x28\xb5\x2f\xfd", _unzstd),
    ("lzma", b"\x5d\x00\x00", _unlzma),
    ("bzip2", b"BZh", _bunzip2),
    ("lz4", b"\x02\x21\x4c\x18", _unlz4),
    ("lzo", b"\x89LZO", _unlzo),
)


def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def _bzimage_payload(data: bytes) -> bytes | None:
    """The compressed vmlinux of an x86 bzImage (boot protocol >= 2.08), else ``None``."""
    if len(data) < 0x250 or data[0x202:0x206] != b"HdrS":
        return None
    (version,) = struct.unpack_from("<H", data, 0x206)
    if version < 0x208:
        return None
    setup_sects = data[0x1F1] or 4
    payload_offset, payload_length = struct.unpack_from("<II", data, 0x248)
    start = (setup_sects + 1) * 512 + payload_offset
    if start + payload_length > len(data) or payload_length == 0:
        return None
    return data[start : start + payload_length]


def raw_image(data: bytes) -> bool:
    """An uncompressed RISC-V or arm64 ``Image``: the boot header's magic at 0x30 or 0x38.

    Debian ships riscv64 kernels this way (``/boot/vmlinux-*``, not an ELF file); see the
    kernel's Documentation/arch/riscv/boot-image-header.rst and arm64/booting.rst.
    """
    return len(data) >= 0x40 and (data[0x30:0x38] == b"RISCV\0\0\0" or data[0x38:0x3C] in (b"RSC\x05", b"ARM\x64"))


def compression_of(data: bytes) -> str | None:
    """The compression name (``"xz"``, ``"gzip"``...) of a stream by its magic bytes."""
    for name, magic, _ in _COMPRESSORS:
        if data.startswith(magic):
            return name
    return None


def read_kernel_file(path: Path) -> bytes:
    """A kernel image's or symbol file's bytes: a regular file, at most MAX_FILE_SIZE."""
    try:
        return read_regular(path)[0]
    except FileNotFoundError:
        raise SymbolError(f"kernel image {path} does not exist") from None
    except OSError as e:
        raise SymbolError(f"cannot read kernel image {path}: {e.strerror}") from e


def unpack_kernel(data: bytes, source: str | os.PathLike[str] = "<image>",
                  is_kernel: Callable[[bytes], bool] = is_elf) -> tuple[bytes, str]:
    """``(vmlinux bytes, compression)`` of a kernel image already in memory (``source`` names
    it in errors); ``"none"`` for an uncompressed one (an ELF vmlinux, or a raw ``Image``).

    A bzImage is read through its setup header (``payload_offset``/``payload_length``).  Any
    other file is searched for compressed streams, keeping the first that unpacks to an ELF
    file or to what ``is_kernel`` accepts; so is an ELF file ``is_kernel`` refuses, which may be
    a decompressor around the kernel (MIPS's ``vmlinuz``: a self-extracting ELF whose payload is
    the raw kernel), and is the kernel itself when none is found in it.
    """
    elf = is_elf(data)
    if (elf and is_kernel(data)) or raw_image(data):
        return data, "none"
    payload = None if elf else _bzimage_payload(data)
    if payload is not None:
        kind = compression_of(payload)
        if kind is None:
            raise ImageFormatError(source, f"bzImage payload has an unknown compression (starts {payload[:6].hex()})")
        out = _decompress(source, kind, payload)
        if len(payload) >= 4:
            (expect,) = struct.unpack("<I", payload[-4:])
            if expect != len(out) & 0xFFFFFFFF:
                raise ImageFormatError(source, f"{kind} payload unpacked to {len(out)} bytes, the image says "
                                               f"{expect}: truncated or corrupt")
        return out, kind
    tried: list[str] = []
    for kind, magic, _ in _COMPRESSORS:
        start = data.find(magic)
        while start >= 0:
            try:
                out = _decompress(source, kind, data[start:])
            except SymbolError:
                out = b""
            if is_elf(out) or (out and is_kernel(out)):
                return out, kind
            tried.append(f"{kind}@{start:#x}")
            start = data.find(magic, start + 1)
            if len(tried) > 64:
                break
    if elf:  # an ELF file that holds no compressed kernel is the kernel (one without kallsyms)
        return data, "none"
    raise ImageFormatError(
        source, "neither an ELF vmlinux nor a bzImage, and no compressed kernel was found in it"
        + (f" (tried {', '.join(tried[:8])})" if tried else "")
    )


def _decompress(source: str | os.PathLike[str], kind: str, payload: bytes) -> bytes:
    func = next(f for n, _, f in _COMPRESSORS if n == kind)
    try:
        out = func(payload)
    except SymbolError:
        raise
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error, IndexError) as e:
        raise ImageFormatError(source, f"cannot unpack the {kind} kernel payload: {e}") from e
    if len(out) > MAX_FILE_SIZE:
        raise ImageFormatError(source, f"the {kind} kernel payload unpacks to more than {MAX_FILE_SIZE} bytes")
    return out
