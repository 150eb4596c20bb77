"""Kernel symbol lists as text: ``System.map`` and ``/proc/kallsyms`` lines, and the
:class:`~kpsdk.binfmt.symbols.SymbolTable` made from any list of entries.

One job: the line format (``ADDR TYPE NAME [MODULE]``) both ways, and which entries name
code or data.  Where the entries come from (a kernel image, a cache file) is elsewhere
(:mod:`kpsdk.kernel.kallsyms`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from kpsdk.binfmt.symbols import Symbol, SymbolTable
from kpsdk.errors import ImageFormatError, SymbolError

__all__ = ["FUNC_TYPES", "NAME_PATTERN", "OBJECT_TYPES", "KallsymsEntry", "load_kallsyms_text",
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
    return SymbolTable(symbols, first_alias=True)


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


#: A symbol's type letter followed by its name, printable ASCII without blanks: what the
#: kernel's own names are, and what a System.map line can carry.
NAME_PATTERN = r"[A-Za-z][\x21-\x7e]+"
