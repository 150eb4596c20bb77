"""The kallsyms table inside a decompressed kernel, decoded to the entries
``/proc/kallsyms`` shows.

The decoder follows the format written by the kernel's ``scripts/kallsyms.c`` instead of
trusting fixed offsets, because the layout moved between versions (``kallsyms_seqs_of_names``
appeared in 6.2 and was backported into Debian's 6.1; the offsets table moved behind the token
index in 6.4 or so).  Every table it finds is cross-checked against the others (token index
against token table, markers against the decoded names, sorted addresses, the start of the
kernel's text present), and any mismatch raises :class:`~kpsdk.errors.ImageFormatError`
naming the check: a wrong symbol table would put probes on the wrong instructions, which is
worse than no table.
"""

from __future__ import annotations

import bisect
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from kpsdk.errors import ImageFormatError
from kpsdk.kernel.kallsyms_text import NAME_PATTERN, KallsymsEntry
from kpsdk.kernel.unpack import is_elf

__all__ = ["decode_kallsyms", "find_token_tables"]


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


def find_token_tables(data: bytes, endian: str = "<") -> list[_Layout]:
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
    if is_elf(data) and len(data) > 5 and data[4] in (1, 2) and data[5] in (1, 2):  # else (arm64 Image) try all
        endian = "<" if data[5] == 1 else ">"
        sizes = [8] if data[4] == 2 else [4]
    layouts = [
        _Layout(lay.token_table, lay.token_index, lay.tokens, lay.endian, size)
        for lay in find_token_tables(data, endian)
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


#: A decoded name: the type letter, then the name.
_DECODED_NAME = re.compile(NAME_PATTERN.encode())


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
            "kallsyms_relative_base or kallsyms_addresses) that is sorted and places _text or _stext"
        )
    entries = [KallsymsEntry(addr, chr(name[0]), name[1:].decode("ascii"))
               for name, addr in zip(expanded, addresses, strict=True)]
    names = {en.name for en in entries}
    for required in ("_stext", "_etext"):  # every arch has these; _text is not on ARM
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
    # where the kernel's text starts: _text (x86, riscv), else _stext (ARM has no _text)
    text_idx = [i for i, n in enumerate(names) if n[1:] == b"_text"]
    if not text_idx:
        text_idx = [i for i, n in enumerate(names) if n[1:] == b"_stext"]
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
        bases = [base] if base or ps != 8 or e != "<" else _self_relocated(data, base_pos)
        negative = sum(1 for o in offsets if o < 0)
        for base in bases:
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


#: ``r_info`` of an ``R_AARCH64_RELATIVE`` relocation (symbol 0, type 1027), little-endian
_AARCH64_RELATIVE = struct.pack("<Q", 1027)


def _self_relocated(data: bytes, pos: int) -> list[int]:
    """What the pointer at file offset ``pos`` of an arm64 ``Image`` may hold once the kernel
    has relocated itself: candidates, the likeliest first (the caller checks each).

    An arm64 kernel is linked as a PIE with ``--no-apply-dynamic-relocs`` (arch/arm64/Makefile):
    every pointer in the file is 0, and its value is the addend of the ``R_AARCH64_RELATIVE``
    relocation the kernel applies to itself at boot (``__relocate_kernel``, head.S, from its
    own ``.rela.dyn``, which the Image keeps; entries of 24 bytes, 8-aligned: ``r_offset,
    r_info, r_addend``).  The Image's first byte is ``_text``, at a link address aligned to
    2 MiB (KIMAGE_VADDR), so the word's relocation has ``r_offset == _text + pos``; of the
    ``_text`` that makes so, the true one is the one whose image holds the most of the
    relocations' targets (every one of them: they are the kernel's own words).
    """
    entries: list[tuple[int, int]] = []
    at = data.find(_AARCH64_RELATIVE)
    while at >= 8:
        if at % 8 == 0 and at + 16 <= len(data):
            offset, _, addend = struct.unpack_from("<QQQ", data, at - 8)
            entries.append((offset, addend))
        at = data.find(_AARCH64_RELATIVE, at + 1)
    targets = sorted(offset for offset, _ in entries)
    scored: list[tuple[int, int]] = []
    for offset, addend in entries:
        text = offset - pos
        if text % 0x200000 == 0 and 0 <= addend - text < len(data):
            inside = bisect.bisect_left(targets, text + len(data)) - bisect.bisect_left(targets, text)
            scored.append((inside, addend))
    return [addend for _, addend in sorted(scored, reverse=True)]


def _plausible(addrs: list[int], text_idx: list[int], ptr_size: int) -> bool:
    """Sorted, inside the address space (a base near 0 or the top must not wrap), _text placed."""
    if any(b < a for a, b in zip(addrs, addrs[1:], strict=False)):
        return False
    if addrs and not (addrs[0] >= 0 and addrs[-1] < 1 << (8 * ptr_size)):
        return False
    return bool(text_idx) and all(addrs[i] != 0 for i in text_idx)
