"""Kernel symbols without debug packages: System.map text, ``/proc/kallsyms``, and the
kallsyms table inside a kernel image.

A stock distribution kernel ships no usable symbol file: Debian's ``System.map`` is an
83-byte stub pointing at the ``-dbg`` package (858 MB).  But every kernel built with
``CONFIG_KALLSYMS`` carries its own compressed symbol table (the one behind
``/proc/kallsyms``) in ``.rodata``, so the ``vmlinuz`` alone is enough.  This module is the
entry point that takes any of these files; each job is its own module:

- :mod:`kpsdk.kernel.kallsyms_text`: ``System.map`` / ``/proc/kallsyms`` lines, and the symbol
  table made from entries (:func:`load_kallsyms_text`);
- :mod:`kpsdk.kernel.unpack`: a ``vmlinuz`` (bzImage, zImage, bare compressed stream, raw
  ``Image``) unpacked to the kernel inside (:func:`extract_vmlinux`);
- :mod:`kpsdk.kernel.kallsyms_table`: the kallsyms tables found and decoded in it
  (:func:`decode_kallsyms`);
- :mod:`kpsdk.kernel.kallsyms_cache`: the decoded entries cached by the image's hash;
- here: an unstripped vmlinux's ``.symtab``, and :func:`load_kallsyms_from_image` /
  :func:`load_kernel_symbols`, which put them together.

Addresses are the link-time ones, which are the runtime ones when the kernel boots with
``nokaslr`` (x86_64: ``_text`` at ``0xffffffff81000000``).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from elftools.elf.constants import SH_FLAGS, SHN_INDICES
from elftools.elf.sections import Symbol as ElfSymbol

from kpsdk.binfmt.elfimage import ElfFile
from kpsdk.binfmt.files import read_regular
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import ImageFormatError, SymbolError
from kpsdk.kernel import unpack as kernel_unpack
from kpsdk.kernel.kallsyms_cache import CACHE_DIR, read_cache, write_cache
from kpsdk.kernel.kallsyms_table import decode_kallsyms, find_token_tables
from kpsdk.kernel.kallsyms_text import (
    FUNC_TYPES,
    OBJECT_TYPES,
    KallsymsEntry,
    load_kallsyms_bytes,
    load_kallsyms_text,
    parse_kallsyms_text,
    symbol_table,
)
from kpsdk.kernel.unpack import compression_of, is_elf, read_kernel_file

__all__ = [
    "CACHE_DIR",
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


def _has_kallsyms(data: bytes) -> bool:
    return bool(find_token_tables(data))


def unpack_kernel(data: bytes, source: str | os.PathLike[str] = "<image>") -> tuple[bytes, str]:
    """:func:`extract_vmlinux` of a kernel image already in memory (``source`` names it in errors):
    a compressed stream counts as the kernel when it unpacks to an ELF file or holds a kallsyms table."""
    return kernel_unpack.unpack_kernel(data, source, _has_kallsyms)


def extract_vmlinux(path: str | os.PathLike[str]) -> tuple[bytes, str]:
    """``(vmlinux bytes, compression)`` of a kernel image; ``"none"`` for an uncompressed one.

    A bzImage is read through its setup header (``payload_offset``/``payload_length``).  Any
    other file is searched for compressed streams the way the kernel's ``extract-vmlinux``
    does, keeping the first that unpacks to an ELF file or a kallsyms table.
    """
    p = Path(path)
    return unpack_kernel(read_kernel_file(p), p)


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
    return symbol_table(_image_entries(read_kernel_file(image), image, cache))


def _image_entries(data: bytes, source: str | os.PathLike[str], cache: bool) -> list[KallsymsEntry]:
    """The entries of a kernel image's bytes, through the cache when ``cache``."""
    if not cache:
        return _entries_of(data, source)
    digest = hashlib.sha256(data).hexdigest()
    entries = read_cache(digest)
    if entries is None:
        entries = _entries_of(data, source)
        write_cache(digest, entries)
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
        return load_kallsyms_bytes(data, str(source))
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
    return _entries_of(read_kernel_file(image), image)


def _entries_of(data: bytes, source: str | os.PathLike[str]) -> list[KallsymsEntry]:
    vmlinux, _kind = unpack_kernel(data, source)
    if is_elf(vmlinux):
        entries = _elf_symtab(vmlinux, source)
        if entries:
            return entries
    return decode_kallsyms(vmlinux, str(source), data if vmlinux is not data else b"")
