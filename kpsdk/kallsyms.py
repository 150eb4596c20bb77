"""Kernel symbols without debug packages: System.map text, ``/proc/kallsyms``, and the
kallsyms table inside a kernel image.

A stock distribution kernel ships no usable symbol file: Debian's ``System.map`` is an
83-byte stub pointing at the ``-dbg`` package (858 MB).  But every kernel built with
``CONFIG_KALLSYMS`` carries its own compressed symbol table (the one behind
``/proc/kallsyms``) in ``.rodata``, so the ``vmlinuz`` alone is enough.  This module

- parses ``System.map`` / ``/proc/kallsyms`` lines (:func:`load_kallsyms_text`);
- unpacks a ``vmlinuz`` (bzImage with a gzip, xz, lzma, bzip2, zstd or lz4 payload, or a bare
  compressed stream) to the vmlinux inside (:func:`extract_vmlinux`);
- finds and decodes the kallsyms tables in it (:func:`load_kallsyms_from_image`), or reads
  ``.symtab`` when given an unstripped ``vmlinux``;
- takes any of these files by content (:func:`load_kernel_symbols`).

The decoder follows the format written by the kernel's ``scripts/kallsyms.c`` instead of
trusting fixed offsets, because the layout moved between versions (``kallsyms_seqs_of_names``
appeared in 6.2 and was backported into Debian's 6.1; the offsets table moved behind the token
index in 6.4 or so).  Every table it finds is cross-checked against the others (token index
against token table, markers against the decoded names, sorted addresses, ``_text`` present),
and any mismatch raises :class:`~kpsdk.errors.SymbolError` naming the check: a wrong symbol
table would put probes on the wrong instructions, which is worse than no table.

Addresses are the link-time ones, which are the runtime ones when the kernel boots with
``nokaslr`` (x86_64: ``_text`` at ``0xffffffff81000000``).
"""

from __future__ import annotations

import bz2
import hashlib
import lzma
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from elftools.elf.constants import SH_FLAGS, SHN_INDICES
from elftools.elf.sections import Symbol as ElfSymbol

from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.elfimage import ElfFile
from kpsdk.errors import ImageFormatError, SymbolError
from kpsdk.files import MAX_FILE_SIZE, read_regular
from kpsdk.symbols import Symbol, SymbolTable

__all__ = [
    "FUNC_TYPES",
    "OBJECT_TYPES",
    "KallsymsEntry",
    "compression_of",
    "decode_kallsyms",
    "extract_vmlinux",
    "load_kallsyms_from_image",
    "load_kallsyms_text",
    "kernel_symbols_of",
    "load_kernel_symbols",
    "parse_kallsyms_text",
    "read_image_entries",
    "symbol_table",
    "unpack_kernel",
]

#: ``nm`` type letters taken as code: text (global and local) and defined weak symbols.
FUNC_TYPES = frozenset("TtW")
#: ``nm`` type letters taken as data: data, bss, read-only data, defined weak objects.
OBJECT_TYPES = frozenset("DdBbRrV")

#: Bumped whenever the cache file's content could change for the same image.
_CACHE_VERSION = 2
_CACHE_MAGIC = "# kpsdk kallsyms cache"

_STUB_TEXT = "The real System.map is in the linux-image-"


class KallsymsEntry(NamedTuple):
    """One line of a symbol list: what ``/proc/kallsyms`` shows (``module`` is ``""`` for vmlinux).

    A named tuple because a kernel has ~100,000 of them and tuples are the cheapest to make.
    """

    address: int
    type: str
    name: str
    module: str = ""


# --------------------------------------------------------------------------- text formats


def parse_kallsyms_text(text: str, source: str = "<text>") -> list[KallsymsEntry]:
    """Every ``ADDR TYPE NAME [MODULE]`` line, in file order.

    Kept separate from :func:`load_kallsyms_text` so tests and tools can see the types that
    the symbol table leaves out.  A line is exactly what the kernel writes: 1 to 16 hex digits
    (no ``0x``, sign or ``_``), one type letter, a name, optionally ``[module]``; blank lines,
    ``#`` comments and ``nm``'s address-less undefined symbols are skipped.  Raises
    :class:`~kpsdk.errors.ImageFormatError` for any other line (with its number) and for
    text with no symbol line at all, and :class:`SymbolError` for Debian's stub System.map
    and for a list whose addresses are all hidden (``kptr_restrict``).
    """
    if _STUB_TEXT in text:
        raise SymbolError(
            f"{source} is Debian's stub System.map, not a symbol list (the real one is in the "
            "linux-image-<version>-dbg package, ~850 MB): load the symbols from the kernel image "
            "itself with kpsdk.kallsyms.load_kallsyms_from_image('vmlinuz-...'), or from a "
            "/proc/kallsyms dump of the running kernel"
        )
    entries: list[KallsymsEntry] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        m = _LINE.fullmatch(raw)
        if m is not None:  # the common case, in one match
            entries.append(KallsymsEntry(int(m[1], 16), m[2], m[3], m[4] or ""))
            continue
        parts = raw.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):  # nm's undefined symbols have no address
            continue
        entries.append(_parse_line(parts, raw, source, lineno))
    if not entries:
        raise ImageFormatError(source, "no symbol lines")
    if all(e.address == 0 for e in entries):
        raise SymbolError(
            f"{source}: every address is 0, so the kernel hid them (kptr_restrict): read /proc/kallsyms "
            "as root after `echo 0 > /proc/sys/kernel/kptr_restrict`"
        )
    return entries


_HEX_ADDRESS = re.compile(r"[0-9a-fA-F]{1,16}")
_MODULE = re.compile(r"\[[^\[\]]+\]")
#: A whole well-formed line: the same rules as _parse_line's, in one match.
_LINE = re.compile(r"\s*([0-9a-fA-F]{1,16})\s+([A-Za-z])\s+(\S+)(?:\s+\[([^\[\]\s]+)\])?\s*")


def _parse_line(parts: list[str], raw: str, source: str, lineno: int) -> KallsymsEntry:
    """One ``ADDR TYPE NAME [MODULE]`` line, split on whitespace; every field checked, so that
    a line :data:`_LINE` refused gets an error saying which field is wrong."""
    if not 3 <= len(parts) <= 4:
        raise ImageFormatError(source, f"not a System.map/kallsyms line (want ADDR TYPE NAME [MODULE]): {raw!r}",
                               lineno)
    address, kind, name = parts[:3]
    if not _HEX_ADDRESS.fullmatch(address):
        raise ImageFormatError(source, f"bad address {address!r} (want 1 to 16 hex digits) in {raw!r}", lineno)
    if not (len(kind) == 1 and kind.isascii() and kind.isalpha()):
        raise ImageFormatError(source, f"bad type {kind!r} (want one letter) in {raw!r}", lineno)
    module = ""
    if len(parts) == 4:
        if not _MODULE.fullmatch(parts[3]):
            raise ImageFormatError(source, f"bad module {parts[3]!r} (want [NAME]) in {raw!r}", lineno)
        module = parts[3][1:-1]
    return KallsymsEntry(int(address, 16), kind, name, module)


def symbol_table(entries: Iterable[KallsymsEntry]) -> SymbolTable:
    """A :class:`SymbolTable` of the function and data symbols among ``entries``.

    kallsyms has no sizes, so, as the kernel itself does for ``%pS``, a symbol's size is the
    distance to the next higher address (0 for the last one).  Absolute (``A``), undefined
    (``U``, ``w``) and debugging (``N``) entries are left out: they name no code or data.
    """
    kept = sorted(
        (e for e in entries if e.type in FUNC_TYPES or e.type in OBJECT_TYPES),
        key=lambda e: e.address,
    )
    symbols: list[Symbol] = []
    next_addr = 0
    for i in range(len(kept) - 1, -1, -1):
        e = kept[i]
        if i == len(kept) - 1 or kept[i + 1].address > e.address:
            next_addr = kept[i + 1].address if i + 1 < len(kept) else e.address
        size = next_addr - e.address
        kind = "func" if e.type in FUNC_TYPES else "object"
        symbols.append(Symbol(e.name, e.address, size, kind))
    symbols.reverse()
    return SymbolTable(symbols)


def load_kallsyms_text(text: str, source: str = "<text>") -> SymbolTable:
    """A symbol table from ``System.map`` or ``/proc/kallsyms`` text.

    Lines are ``ADDR TYPE NAME [MODULE]``.  Types ``T t W`` become functions and
    ``D d B b R r V`` objects; the rest (``A`` absolute and per-cpu, ``U``/``w``/``v``
    undefined, ``N`` debugging...) are skipped.  Module symbols (``[mod]``) are kept under
    their plain names; when a name is defined twice the lowest address wins, so vmlinux's
    definition shadows a module's (modules load above the kernel), as in the kernel's own
    ``kallsyms_lookup_name``.  GCC clones (``foo.isra.0``, ``foo.constprop.0``) also answer
    to their base name (see :class:`SymbolTable`).
    """
    return symbol_table(parse_kallsyms_text(text, source))


# --------------------------------------------------------------------------- decompression


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


def _is_elf(data: bytes) -> bool:
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


def compression_of(data: bytes) -> str | None:
    """The compression name (``"xz"``, ``"gzip"``...) of a stream by its magic bytes."""
    for name, magic, _ in _COMPRESSORS:
        if data.startswith(magic):
            return name
    return None


def extract_vmlinux(path: str | os.PathLike[str]) -> tuple[bytes, str]:
    """``(vmlinux bytes, compression)`` of a kernel image; ``"none"`` for an uncompressed one.

    A bzImage is read through its setup header (``payload_offset``/``payload_length``).  Any
    other file is searched for compressed streams the way the kernel's ``extract-vmlinux``
    does, keeping the first that unpacks to an ELF file.
    """
    p = Path(path)
    return unpack_kernel(_read_kernel_file(p), p)


def _read_kernel_file(path: Path) -> bytes:
    """A kernel image's or symbol file's bytes: a regular file, at most MAX_FILE_SIZE."""
    try:
        return read_regular(path)[0]
    except FileNotFoundError:
        raise SymbolError(f"kernel image {path} does not exist") from None
    except OSError as e:
        raise SymbolError(f"cannot read kernel image {path}: {e.strerror}") from e


def unpack_kernel(data: bytes, source: str | os.PathLike[str] = "<image>") -> tuple[bytes, str]:
    """:func:`extract_vmlinux` of a kernel image already in memory (``source`` names it in errors)."""
    if _is_elf(data):
        return data, "none"
    payload = _bzimage_payload(data)
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
            if _is_elf(out) or (out and _find_token_tables(out)):
                return out, kind
            tried.append(f"{kind}@{start:#x}")
            start = data.find(magic, start + 1)
            if len(tried) > 64:
                break
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


# --------------------------------------------------------------------------- kallsyms decoding

#: More symbols than any kernel has (a distribution kernel has 90,000-170,000): bounds searches.
_MAX_SYMS = 1 << 21

# Every character used in a symbol name stays a one-character token at its own code
# (scripts/kallsyms.c only reuses codes no symbol contains), and every kernel has digits in
# its symbol names, so "0\0" ... "9\0" lies inside the token table at codes 0x30..0x39.
_DIGITS_SIGNATURE = b"".join(bytes([c]) + b"\0" for c in b"0123456789")
_ZERO_RUN = re.compile(b"\0{4,}")


@dataclass
class _Layout:
    """Where the tables are (byte offsets in the vmlinux) and how to read them."""

    token_table: int
    token_index: int
    tokens: list[bytes]
    endian: str  # "<" or ">"
    ptr_size: int


def _find_token_tables(data: bytes, endian: str = "<") -> list[_Layout]:
    """Every ``kallsyms_token_table`` followed by the ``kallsyms_token_index`` that matches it.

    The index (256 u16 offsets of the tokens) is computed from the candidate table and must
    be found right after it: a check that random data does not pass.  ``endian`` ``"?"``
    tries both byte orders.
    """
    found: list[_Layout] = []
    for m in re.finditer(re.escape(_DIGITS_SIGNATURE), data):
        # Walk back over the 0x30 tokens before "0": each is non-empty and NUL-terminated.
        start = m.start()
        ok = True
        for _ in range(0x30):
            if start < 2 or data[start - 1] != 0:
                ok = False
                break
            prev = data.rfind(b"\0", 0, start - 1)
            if prev == start - 2:  # an empty token: not a token table
                ok = False
                break
            start = prev + 1
        if not ok:
            continue
        tokens: list[bytes] = []
        pos = start
        for _ in range(256):
            end = data.find(b"\0", pos, pos + 256)
            if end <= pos:
                ok = False
                break
            tokens.append(data[pos:end])
            pos = end + 1
        if not ok:
            continue
        offsets, o = [], 0
        for t in tokens:
            offsets.append(o)
            o += len(t) + 1
        if o > 0xFFFF:
            continue
        for end_char in ("<", ">") if endian == "?" else (endian,):
            want = struct.pack(f"{end_char}256H", *offsets)
            idx = data.find(want, pos, pos + 16 + len(want))
            if idx >= 0:
                found.append(_Layout(start, idx, tokens, end_char, 8))
    return found


def _u32(data: bytes, pos: int, e: str) -> int:
    return int(struct.unpack_from(f"{e}I", data, pos)[0])


def _align(x: int, a: int) -> int:
    return (x + a - 1) & ~(a - 1)


def _marker_run(data: bytes, pos: int, stop: int, e: str) -> int:
    """How many u32 words from ``pos`` (which holds 0) increase like kallsyms_markers."""
    count, prev = 1, 0
    q = pos + 4
    while q + 4 <= stop:
        v = _u32(data, q, e)
        # 256 names take at least 256 * 2 bytes (length + one token), at most 256 * 514.
        if not prev + 512 <= v <= prev + 256 * 514:
            break
        prev, count, q = v, count + 1, q + 4
    return count


def _find_markers(data: bytes, lay: _Layout) -> Iterator[tuple[int, int]]:
    """Candidate ``(markers offset, number of markers)`` before the token table, nearest first.

    ``kallsyms_markers`` (u32, one per 256 symbols, the first 0, then increasing) sits right
    before the token table, or before the ``kallsyms_seqs_of_names`` array (3 bytes a symbol)
    that 6.2+ (and Debian's 6.1) put in between.  Both shapes are offered; the caller checks
    each against the names.
    """
    e, table = lay.endian, lay.token_table
    # Directly before the table (after up to one padding word): read back down to the 0.
    for last in (table - 4, table - 8):
        if last < 0:
            continue
        pos = last
        while pos >= 4 and _u32(data, pos, e) != 0 and _u32(data, pos - 4, e) < _u32(data, pos, e):
            pos -= 4
        if pos >= 0 and _u32(data, pos, e) == 0 and _marker_run(data, pos, table, e) == (last - pos) // 4 + 1:
            yield pos, (last - pos) // 4 + 1
    # Before a seqs_of_names array: the array's length (3 per symbol) must match the count.
    # markers[0] is the last aligned zero word of a run of zeros (markers[1] is not 0).
    lowest = max(0, table - 3 * _MAX_SYMS - 4 * (_MAX_SYMS // 256) - 64)
    runs = [(m.start(), m.end()) for m in _ZERO_RUN.finditer(data, lowest, table)]
    for start, end in reversed(runs):
        pos = (end - 4) & ~3
        if pos < start:
            continue
        count = _marker_run(data, pos, table, e)
        if count < 2:
            continue
        seq_bytes = table - _align(pos + 4 * count, lay.ptr_size)
        if (count - 1) * 256 * 3 < seq_bytes <= count * 256 * 3 + 8:
            yield pos, count


def _decode_names(
    data: bytes, names: int, num: int, markers: list[int], limit: int
) -> tuple[list[bytes], int] | None:
    """The ``num`` compressed names at ``names``, or ``None`` if they disagree with the markers.

    Each entry is a length (one byte; two when the first has bit 7 set, Linux >= 6.1's "big
    symbols" encoding) followed by that many token codes.
    """
    out: list[bytes] = []
    pos = names
    for i in range(num):
        if i % 256 == 0 and markers[i // 256] != pos - names:
            return None
        if pos >= limit:
            return None
        ln = data[pos]
        pos += 1
        if ln & 0x80:
            ln = (ln & 0x7F) | (data[pos] << 7)
            pos += 1
        if ln == 0 or pos + ln > limit:
            return None
        out.append(data[pos : pos + ln])
        pos += ln
    return out, pos


def decode_kallsyms(data: bytes, source: str = "<image>") -> list[KallsymsEntry]:
    """The kallsyms table of a decompressed kernel, as ``/proc/kallsyms`` would list it (nokaslr).

    Raises :class:`~kpsdk.errors.ImageFormatError` (a :class:`SymbolError`) saying which
    table could not be found or failed its check.
    """
    endian, sizes = "?", [8, 4]
    if _is_elf(data) and len(data) > 5 and data[4] in (1, 2) and data[5] in (1, 2):  # else (arm64 Image) try all
        endian = "<" if data[5] == 1 else ">"
        sizes = [8] if data[4] == 2 else [4]
    layouts = [
        _Layout(lay.token_table, lay.token_index, lay.tokens, lay.endian, size)
        for lay in _find_token_tables(data, endian)
        for size in sizes
    ]
    if not layouts:
        raise ImageFormatError(
            source, "no kallsyms token table found (kernel built without CONFIG_KALLSYMS, or not a kernel image)"
        )
    problems: list[str] = []
    for lay in layouts:
        try:
            return _decode_with(data, lay, source)
        except ImageFormatError as e:
            problems.append(e.problem)
    raise ImageFormatError(source, "; ".join(dict.fromkeys(problems)))


def _decode_with(data: bytes, lay: _Layout, source: str) -> list[KallsymsEntry]:
    e = lay.endian
    where = f"kallsyms token table at file offset {lay.token_table:#x}"
    tried: list[int] = []
    for markers_pos, nmarkers in _find_markers(data, lay):
        if markers_pos in tried:
            continue
        tried.append(markers_pos)
        markers = [_u32(data, markers_pos + 4 * i, e) for i in range(nmarkers)]
        lo, hi = (nmarkers - 1) * 256 + 1, nmarkers * 256
        # kallsyms_num_syms (u32, aligned) precedes kallsyms_names, which ends at the markers.
        # The names are at least markers[-1] + 2 bytes a name of the last block long, and at
        # most 514 bytes a name longer than that: scan that window for a count in range whose
        # names decode exactly up to the markers.
        shortest = markers[-1] + 2 * (lo - (nmarkers - 1) * 256)
        p = (markers_pos - shortest - 4) & ~3
        stop = max(0, markers_pos - markers[-1] - 256 * 514 - 16)
        while p >= stop:
            v = _u32(data, p, e)
            if lo <= v <= hi:
                for names in dict.fromkeys((p + 4, _align(p + 4, lay.ptr_size))):
                    got = _decode_names(data, names, v, markers, markers_pos)
                    if got is not None and markers_pos - got[1] < lay.ptr_size:
                        return _finish(data, lay, p, v, got[0], source, where)
            p -= 4
    if not tried:
        raise ImageFormatError(source, f"{where}: no kallsyms_markers array before it")
    raise ImageFormatError(
        source, f"{where}: kallsyms_markers candidates at {', '.join(f'{m:#x}' for m in tried[:6])} but no "
        "kallsyms_num_syms/kallsyms_names pair before them that decodes to those markers"
    )


#: A decoded name: the type letter, then the name, printable ASCII without blanks (what the
#: kernel's own names are, and what a System.map line can carry).
_NAME_PATTERN = r"[A-Za-z][\x21-\x7e]+"
_DECODED_NAME = re.compile(_NAME_PATTERN.encode())


def _finish(
    data: bytes, lay: _Layout, num_pos: int, num: int, compressed: list[bytes], source: str, where: str
) -> list[KallsymsEntry]:
    """Expand the names, find the addresses, check the result (``where``: which table, for errors)."""
    tokens = lay.tokens
    expanded = [b"".join([tokens[c] for c in name]) for name in compressed]
    for i, name in enumerate(expanded):
        if not _DECODED_NAME.fullmatch(name):
            raise ImageFormatError(source, f"{where}: symbol {i} decodes to {name[:40]!r}, not a type letter "
                                           "followed by a name")
    addresses = _find_addresses(data, lay, num_pos, num, expanded)
    if addresses is None:
        raise ImageFormatError(
            source, f"{where}: decoded {num} names but found no address table (kallsyms_offsets + "
            "kallsyms_relative_base or kallsyms_addresses) that is sorted and places _text"
        )
    entries = [KallsymsEntry(addr, chr(name[0]), name[1:].decode("ascii"))
               for name, addr in zip(expanded, addresses, strict=True)]
    names = {en.name for en in entries}
    for required in ("_text", "_stext", "_etext"):
        if required not in names:
            raise ImageFormatError(source, f"{where}: decoded {num} symbols but {required} is not among them")
    return entries


def _find_addresses(data: bytes, lay: _Layout, num_pos: int, num: int, names: list[bytes]) -> list[int] | None:
    """The address of every symbol, trying each place and form the kernel has used.

    ``kallsyms_offsets`` (s32) + ``kallsyms_relative_base`` (pointer) sit either just before
    ``kallsyms_num_syms`` (<= 6.3) or just after ``kallsyms_token_index`` (newer); very old or
    non-relative kernels have ``kallsyms_addresses`` (pointers) before ``kallsyms_num_syms``.
    """
    e, ps = lay.endian, lay.ptr_size
    ptr = "Q" if ps == 8 else "I"
    text_idx = [i for i, n in enumerate(names) if n[1:] == b"_text"]
    candidates: list[tuple[int, int]] = []  # (offsets position, relative_base position)
    # Old layout: offsets, ALGN, relative_base, ALGN, num_syms.
    base_pos = num_pos - ps
    off_pos = base_pos - _align(4 * num, ps)
    candidates.append((off_pos, base_pos))
    # Newer layout: token_index, ALGN, offsets, ALGN, relative_base.
    off_pos = _align(lay.token_index + 512, ps)
    candidates.append((off_pos, _align(off_pos + 4 * num, ps)))
    for off_pos, base_pos in candidates:
        if off_pos < 0 or base_pos + ps > len(data):
            continue
        offsets = struct.unpack_from(f"{e}{num}i", data, off_pos)
        (base,) = struct.unpack_from(f"{e}{ptr}", data, base_pos)
        negative = sum(1 for o in offsets if o < 0)
        if negative > num // 2:
            # CONFIG_KALLSYMS_ABSOLUTE_PERCPU: >= 0 absolute (per-cpu), < 0 relative to base - 1.
            addrs = [o if o >= 0 else base - 1 - o for o in offsets]
        else:
            addrs = [base + (o & 0xFFFFFFFF) for o in offsets]
        if _plausible(addrs, text_idx, ps):
            return addrs
    # Absolute addresses: kallsyms_addresses, ALGN, num_syms.
    addr_pos = num_pos - ps * num
    if addr_pos >= 0:
        addrs = list(struct.unpack_from(f"{e}{num}{ptr}", data, addr_pos))
        if _plausible(addrs, text_idx, ps):
            return addrs
    return None


def _plausible(addrs: list[int], text_idx: list[int], ptr_size: int) -> bool:
    """Sorted, inside the address space (a base near 0 or the top must not wrap), _text placed."""
    if any(b < a for a, b in zip(addrs, addrs[1:], strict=False)):
        return False
    if addrs and not (addrs[0] >= 0 and addrs[-1] < 1 << (8 * ptr_size)):
        return False
    return bool(text_idx) and all(addrs[i] != 0 for i in text_idx)


# --------------------------------------------------------------------------- images and caching

#: The kallsyms cache's directory under kpsdk's cache (:func:`kpsdk.cache.cache_root`).
CACHE_DIR = "kallsyms"
#: What a cached entry must look like to come back unchanged from its System.map line.
_CACHEABLE = re.compile(_NAME_PATTERN)


def _cache_name(digest: str) -> str:
    return f"{digest}.kallsyms"


def _cache_header(digest: str, body: bytes) -> bytes:
    """The first line: the image the entries come from, and a hash that shows they arrived whole."""
    body_digest = hashlib.sha256(body).hexdigest()
    return f"{_CACHE_MAGIC} v{_CACHE_VERSION} image-sha256={digest} body-sha256={body_digest}".encode()


def _read_cache(digest: str) -> list[KallsymsEntry] | None:
    """The cached entries of the image whose sha256 is ``digest``; None when absent, unsafe or damaged."""
    directory = private_dir(CACHE_DIR)
    raw = read_private(directory, _cache_name(digest), MAX_FILE_SIZE) if directory is not None else None
    if raw is None or directory is None:
        return None
    head, _, body = raw.partition(b"\n")
    if head != _cache_header(digest, body):
        return None
    try:
        return parse_kallsyms_text(body.decode("ascii"), str(directory / _cache_name(digest)))
    except (UnicodeDecodeError, SymbolError):
        return None


def _write_cache(digest: str, entries: list[KallsymsEntry]) -> None:
    """Cache ``entries`` if each survives the round trip through a System.map line (an ELF
    ``.symtab`` can hold names no such line can carry; those images are not cached)."""
    if not all(_CACHEABLE.fullmatch(en.type + en.name) and not en.module for en in entries):
        return
    directory = private_dir(CACHE_DIR)
    if directory is None:
        return
    body = "".join(f"{en.address:016x} {en.type} {en.name}\n" for en in entries).encode("ascii")
    write_private(directory, _cache_name(digest), _cache_header(digest, body) + b"\n" + body)


def _elf_symtab(data: bytes, source: str | os.PathLike[str]) -> list[KallsymsEntry] | None:
    """Entries from an unstripped vmlinux's ``.symtab``; ``None`` when it has none.

    A file whose ELF structure is broken also gives ``None``: the kallsyms search that
    follows does not need the ELF structure, and reports its own errors.
    """
    entries: list[KallsymsEntry] = []
    count = 0
    try:
        elf = ElfFile(data, source)
        symtab = elf.section(".symtab")
        if symtab is None or symtab.header["sh_type"] != "SHT_SYMTAB":
            return None
        code_sections = {sec.number for sec in elf.sections if sec.header["sh_flags"] & SH_FLAGS.SHF_EXECINSTR}
        percpu = {sec.number for sec in elf.sections if sec.name == ".data..percpu"}
        for sym in elf.symbols(symtab):
            count += 1
            entry = _symtab_entry(sym, code_sections, percpu)
            if entry is not None:
                entries.append(entry)
    except ImageFormatError:
        return None
    return entries if count >= 2 else None


def _symtab_entry(sym: ElfSymbol, code_sections: set[int], percpu: set[int]) -> KallsymsEntry | None:
    """The kallsyms entry of one ``.symtab`` symbol: defined functions, objects and untyped
    symbols in a section, lettered as kallsyms letters them; None for the others."""
    kind, shndx = sym["st_info"]["type"], sym["st_shndx"]
    if (not sym.name or not isinstance(shndx, int) or not 0 < shndx < SHN_INDICES.SHN_LORESERVE
            or kind not in ("STT_FUNC", "STT_OBJECT", "STT_NOTYPE")):
        return None
    code = kind == "STT_FUNC" or (kind == "STT_NOTYPE" and shndx in code_sections)
    local = sym["st_info"]["bind"] == "STB_LOCAL"
    letter = ("t" if local else "T") if code else ("d" if local else "D")
    if shndx in percpu:  # offsets into each CPU's area, not addresses: kallsyms says "A"
        letter = "A"
    return KallsymsEntry(sym["st_value"], letter, sym.name)


def load_kallsyms_from_image(path: str | os.PathLike[str], *, cache: bool = True) -> SymbolTable:
    """The symbol table of a kernel image: a ``vmlinuz`` (bzImage or compressed stream) or a vmlinux ELF.

    An unstripped vmlinux is read through its ``.symtab``; anything else through the
    kallsyms table embedded in the kernel, which is what a stock distribution kernel offers.
    Addresses are the ones the kernel runs at with ``nokaslr``.  Unpacking and decoding take
    a few seconds (xz), so the result is cached as System.map-style text under kpsdk's cache
    directory (``$KPSDK_CACHE``, ``$XDG_CACHE_HOME/kpsdk`` or ``~/.cache/kpsdk``, in
    ``kallsyms/``), keyed by the sha256 of the image's contents; ``cache=False`` skips it.
    Nothing is written beside the image.
    """
    image = Path(path)
    return symbol_table(_image_entries(_read_kernel_file(image), image, cache))


def _image_entries(data: bytes, source: str | os.PathLike[str], cache: bool) -> list[KallsymsEntry]:
    """The entries of a kernel image's bytes, through the cache when ``cache``."""
    if not cache:
        return _entries_of(data, source)
    digest = hashlib.sha256(data).hexdigest()
    entries = _read_cache(digest)
    if entries is None:
        entries = _entries_of(data, source)
        _write_cache(digest, entries)
    return entries


def image_entries(data: bytes, source: str | os.PathLike[str]) -> list[KallsymsEntry]:
    """Every entry of a kernel image's bytes (per-cpu and absolute ones too), through the cache."""
    return _image_entries(data, source, cache=True)


def load_kernel_symbols(path: str | os.PathLike[str]) -> SymbolTable:
    """Symbols from whatever kernel file the user has: System.map or a kallsyms dump (text),
    a ``vmlinux`` or a ``vmlinuz``.

    One entry point for options like ``symbols=...`` that take any of them: text is told from
    an image by its first line (``ADDR TYPE NAME``).
    """
    p = Path(path)
    try:
        data = read_regular(p)[0]
    except OSError as e:
        raise SymbolError(f"cannot read kernel symbols from {p}: {e.strerror}") from e
    return kernel_symbols_of(data, p)


def kernel_symbols_of(data: bytes, source: str | os.PathLike[str]) -> SymbolTable:
    """:func:`load_kernel_symbols` of a file already read (``source`` names it in errors)."""
    if _is_text_symbols(data[:4096]):
        return load_kallsyms_text(data.decode(errors="replace"), str(source))
    return symbol_table(_image_entries(data, source, cache=True))


def _is_text_symbols(head: bytes) -> bool:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return False
    first = next((line for line in text.splitlines() if line.strip() and not line.startswith("#")), "")
    return re.match(r"\s*[0-9a-fA-F]+\s+\S\s+\S", first) is not None


def read_image_entries(path: str | os.PathLike[str]) -> list[KallsymsEntry]:
    """The raw entries (every type, per-cpu and absolute ones included) of a kernel image, uncached."""
    image = Path(path)
    return _entries_of(_read_kernel_file(image), image)


def _entries_of(data: bytes, source: str | os.PathLike[str]) -> list[KallsymsEntry]:
    vmlinux, _kind = unpack_kernel(data, source)
    if _is_elf(vmlinux):
        entries = _elf_symtab(vmlinux, source)
        if entries:
            return entries
    return decode_kallsyms(vmlinux, str(source))
