"""Kernel symbol lists as text: ``System.map`` and ``/proc/kallsyms`` lines, and the
:class:`~kpsdk.binfmt.symbols.SymbolTable` made from any list of entries.

One job: the line format (``ADDR TYPE NAME [MODULE]``) both ways, and which entries name
code or data.  Where the entries come from (a kernel image, a cache file) is elsewhere
(:mod:`kpsdk.kernel.kallsyms`).
"""

from __future__ import annotations

import gc
import re
from array import array
from collections.abc import Iterable
from typing import NamedTuple

from kpsdk.binfmt.symbols import CompactSymbolTable, SymbolTable
from kpsdk.errors import ImageFormatError, SymbolError

__all__ = ["FUNC_TYPES", "NAME_PATTERN", "OBJECT_TYPES", "KallsymsEntry", "load_kallsyms_bytes", "load_kallsyms_text",
           "parse_kallsyms_text", "symbol_table"]

#: ``nm`` type letters taken as code: text (global and local) and defined weak symbols.
FUNC_TYPES = frozenset("TtW")
#: ``nm`` type letters taken as data: data, bss, read-only data, defined weak objects.
OBJECT_TYPES = frozenset("DdBbRrV")
_STUB_TEXT = "The real System.map is in the linux-image-"

class KallsymsEntry(NamedTuple):
    """One line of a symbol list: what ``/proc/kallsyms`` shows (``module`` is ``""`` for vmlinux).

    A named tuple because a kernel has ~100,000 of them and tuples are the cheapest to make.
    """

    address: int
    type: str
    name: str
    module: str = ""




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
            "itself with kpsdk.kernel.kallsyms.load_kallsyms_from_image('vmlinuz-...'), or from a "
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
    distance to the next higher address (0 for the last one); and of aliases (one address,
    several names) ``%pS`` names the first in the table's order, which is the kernel's.  Absolute (``A``), undefined
    (``U``, ``w``) and debugging (``N``) entries are left out: they name no code or data.
    """
    addresses: array[int] = array("Q")
    names: list[str] = []
    funcs = bytearray()
    for e in entries:
        if e.type in FUNC_TYPES or e.type in OBJECT_TYPES:
            addresses.append(e.address)
            names.append(e.name)
            funcs.append(e.type in FUNC_TYPES)
    return _table(addresses, names, funcs)


def _table(addresses: array[int], names: list[str], funcs: bytearray) -> SymbolTable:
    """The symbol table of the kept entries, given as columns (an address array, the names, 1
    for a function): sorted by address (stably, as the list was) unless they already are, sizes
    to the next higher address, kept as columns (:class:`CompactSymbolTable`: a kernel's list can
    hold millions).  The cyclic garbage collector is paused while the columns are made: it
    would walk the millions of names again and again (most of the time a 3M-line System.map
    took before)."""
    count = len(addresses)
    paused = gc.isenabled()
    gc.disable()
    try:
        if any(addresses[i] > addresses[i + 1] for i in range(count - 1)):
            order = sorted(range(count), key=addresses.__getitem__)
            addresses = array("Q", (addresses[i] for i in order))
            names = [names[i] for i in order]
            funcs = bytearray(funcs[i] for i in order)
            del order
        sizes = array("Q", bytes(8 * count))
        next_addr = 0
        for k in range(count - 1, -1, -1):
            address = addresses[k]
            if k == count - 1:
                next_addr = address
            elif addresses[k + 1] > address:
                next_addr = addresses[k + 1]
            sizes[k] = next_addr - address
        return CompactSymbolTable(addresses, sizes, names, funcs, first_alias=True)
    finally:
        if paused:
            gc.enable()


def _columns(text: str | bytes) -> tuple[array[int], list[str], bytearray] | None:
    """The symbol lines of ``text`` (or of its bytes) as :func:`_table`'s columns, read a few
    megabytes at a time with one regular expression per chunk (no list of lines, no object per
    line, no copy of the whole text); None when the text has a line this reading does not take
    (a bad line, a byte that is not ASCII, an unusual blank or line break): then
    :func:`parse_kallsyms_text` reads it line by line, and names the bad line."""
    addresses: array[int] = array("Q")
    names: list[str] = []
    funcs = bytearray()
    kept_types = FUNC_TYPES | OBJECT_TYPES
    nonzero = False
    newline = "\n" if isinstance(text, str) else b"\n"
    pos, end_of_text = 0, len(text)
    while pos < end_of_text:
        cut = text.find(newline, min(pos + _CHUNK, end_of_text))  # type: ignore[arg-type]
        cut = end_of_text if cut < 0 else cut + 1
        raw = text[pos:cut]
        pos = cut
        if isinstance(raw, bytes):
            if not raw.isascii():
                return None
            chunk = raw.decode("ascii")
        else:
            chunk = raw
            if not chunk.isascii():
                return None
        if _UNUSUAL.search(chunk):
            return None
        lines = chunk.count("\n") + (0 if chunk.endswith("\n") else 1)
        skipped = len(_SKIPPED.findall(chunk)) - (1 if chunk.endswith("\n") else 0)
        found = _LINES.findall(chunk)
        if len(found) + skipped != lines:
            return None
        for address_text, kind, name in found:
            if not nonzero and address_text.strip("0"):
                nonzero = True
            if kind in kept_types:
                addresses.append(int(address_text, 16))
                names.append(name)
                funcs.append(kind in FUNC_TYPES)
    if not nonzero:
        return None  # no symbol lines, or every address hidden: the line-by-line reading says which
    return addresses, names, funcs


#: what the chunked reading leaves to the line-by-line one: anything splitlines() breaks a line
#: at or \s takes as a blank besides space, tab and newline
_UNUSUAL = re.compile(r"[\r\x0b\x0c\x1c-\x1f]")
_CHUNK = 4 << 20
#: a symbol line (the module, when there is one, left out: the table keeps plain names)
_LINES = re.compile(r"^[ \t]*([0-9a-fA-F]{1,16})[ \t]+([A-Za-z])[ \t]+([^ \t\n]+)(?:[ \t]+\[[^\[\]\s]+\])?[ \t]*$",
                    re.M)
#: a blank line, a comment, or nm's undefined symbol (no address)
_SKIPPED = re.compile(r"^[ \t]*(?:#[^\n]*|[Uwv][ \t]+[^ \t\n]+[ \t]*)?$", re.M)


def load_kallsyms_text(text: str, source: str = "<text>") -> SymbolTable:
    """A symbol table from ``System.map`` or ``/proc/kallsyms`` text.

    Lines are ``ADDR TYPE NAME [MODULE]``.  Types ``T t W`` become functions and
    ``D d B b R r V`` objects; the rest (``A`` absolute and per-cpu, ``U``/``w``/``v``
    undefined, ``N`` debugging...) are skipped.  Module symbols (``[mod]``) are kept under
    their plain names; when a name is defined twice the lowest address wins, so vmlinux's
    definition shadows a module's (modules load above the kernel), as in the kernel's own
    ``kallsyms_lookup_name``.  GCC clones (``foo.isra.0``, ``foo.constprop.0``) also answer
    to their base name (see :class:`SymbolTable`).  A 3,000,000-line System.map loads in
    seconds (:func:`_columns`, :func:`_table`).
    """
    if _STUB_TEXT not in text:
        columns = _columns(text)
        if columns is not None:
            return _table(*columns)
    return symbol_table(parse_kallsyms_text(text, source))


def load_kallsyms_bytes(data: bytes, source: str = "<text>") -> SymbolTable:
    """:func:`load_kallsyms_text` of a file's bytes, decoded a chunk at a time (a System.map of
    millions of lines is not copied whole into a string); undecodable bytes are U+FFFD."""
    if _STUB_TEXT.encode() not in data:
        columns = _columns(data)
        if columns is not None:
            return _table(*columns)
    return load_kallsyms_text(data.decode(errors="replace"), source)


#: A symbol's type letter followed by its name, printable ASCII without blanks: what the
#: kernel's own names are, and what a System.map line can carry.
NAME_PATTERN = r"[A-Za-z][\x21-\x7e]+"
