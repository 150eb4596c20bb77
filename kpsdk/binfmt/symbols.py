"""Symbol tables: ``sym+0xoff`` in, addresses out, and back.

Targets fill a :class:`SymbolTable` from whatever they have (an ELF's
``.symtab``, later System.map or kallsyms); everything that accepts an address
also accepts ``sym``, ``sym+0x10`` or ``0x401000``.
"""

from __future__ import annotations

import bisect
import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kpsdk.argcheck import is_int, parse_number, want_int, want_str
from kpsdk.errors import ArgumentError, SymbolError, shown

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.running import LoadedObject

#: ``SYM``, ``SYM+OFF``, ``SYM-OFF``, or a number alone (``0x401000``, ``-4``); numbers as a probe's
#: location reads them (:func:`kpsdk.argcheck.parse_number`: ``0x`` hex or decimal; ``010`` is refused as
#: ambiguous), ASCII digits only
_NUM = r"0[xX][0-9a-fA-F]+|[0-9]+"
_EXPR = re.compile(rf"^\s*(?:(?P<sym>[A-Za-z_.$][\w.$@]*)\s*(?:(?P<sign>[+-])\s*(?P<off>{_NUM}))?"
                   rf"|(?P<numsign>[+-])?\s*(?P<num>{_NUM}))\s*$")
_CLONE_SUFFIX = re.compile(r"\.(isra|constprop|part|cold|lto_priv|llvm)\.\d+$")
#: what :func:`shown_name` writes as ``\xNN``/``\uNNNN``/``\UNNNNNNNN``: a backslash (so that the
#: escapes can be told from a name's own text), and every character Python does not call
#: printable: controls (newline, tab, ESC), C1 controls, line and paragraph separators,
#: format characters (bidirectional overrides), surrogates, unassigned code points and every
#: blank but the ASCII space
_UNSHOWN = re.compile(r"[^\x21-\x5b\x5d-\x7e ]")
_ESCAPE = re.compile(r"\\(?:\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    if char.isprintable() and char != " ":
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown_name(name: str, blanks: bool = False) -> str:
    """A symbol's name as kpsdk shows it, on one line whatever the file holds.

    An ELF's ``.strtab`` (or a kallsyms table, a System.map) may name a symbol with any bytes:
    a newline splits a trace line in two, ESC sequences reach the terminal.  Every character
    that is not printable, and the backslash, is written as a Python-style escape (``\\x0a``,
    ``\\x1b``, ``\\u202e``, ``\\\\``); printable text, Unicode letters included, is kept.
    ``blanks``: the space too (``\\x20``), for formats whose fields are separated by blanks
    (``trace.dat``'s kallsyms lines).  Names that need nothing (all real ones) are returned as
    they are, at the cost of one regular expression search.  :meth:`SymbolTable.get` takes the
    escaped form back.
    """
    if _UNSHOWN.search(name) is None and not (blanks and " " in name):
        return name
    shown = _UNSHOWN.sub(_escape, name)
    return shown.replace(" ", "\\x20") if blanks else shown


def unescaped_name(text: str) -> str:
    """The name :func:`shown_name` showed as ``text`` (text without escapes is itself)."""
    def one(match: re.Match[str]) -> str:
        escape = match.group()
        return "\\" if escape == "\\\\" else chr(int(escape[2:], 16))

    return _ESCAPE.sub(one, text)


@dataclass(frozen=True, slots=True)
class Symbol:
    """A named address range.

    ``iset`` names the instruction set the code runs in when it is not the
    architecture's first (ARM's ``"thumb"``: an ELF symbol value with bit 0 set,
    see :attr:`kpsdk.arch.InstructionSet.thumb_bit`); "" for the default.

    ``kind`` is ``"func"``, ``"object"``, ``"ifunc"`` (``STT_GNU_IFUNC``: the address
    of a resolver, which the dynamic loader calls to pick the implementation that
    calls will reach) or ``"plt"`` (a PLT stub, ``malloc@plt``); ``source`` is the table it came from (``".symtab"``,
    ``".dynsym"``; empty for other sources).

    ``descriptor`` is where the function's descriptor is (ppc64 ELFv1: the symbol's
    value in ``.opd``, ``{code, TOC, environment}``), 0 when it has none; ``address``
    is always the code's.  A call needs the descriptor's TOC in r2.
    """

    name: str
    address: int
    size: int
    kind: str  # "func", "object", "ifunc" (an STT_GNU_IFUNC: the address is its resolver's) or "plt"
    iset: str = ""
    source: str = ""
    descriptor: int = 0

    @property
    def thumb(self) -> bool:
        """Kept for code written before :attr:`iset`: the symbol's instruction set is ARM's Thumb."""
        return self.iset == "thumb"


def _number(text: str, sign: str | None) -> int:
    """``text`` (matched by ``_NUM``) read as a probe's location reads it; ValueError for ``010``."""
    value = parse_number(text)
    if value is None:
        raise ValueError(text)
    return -value if sign == "-" else value


def decode_span(sym: Symbol | None, addr: int) -> tuple[int, int | None]:
    """Where decoding toward ``addr`` starts (K1: a known instruction boundary) and where it
    may stop: the function's start and end when ``sym``, the symbol holding ``addr``, is a
    function (no end when its size is unknown), else ``addr`` itself and no end."""
    if sym is not None and sym.kind == "func":
        return sym.address, (sym.address + sym.size if sym.size else None)
    return addr, None


def _glob(pattern: object, kind: object) -> re.Pattern[str]:
    """:meth:`SymbolTable.matching`'s arguments checked, and its pattern compiled."""
    if kind is not None and not isinstance(kind, str):
        raise ArgumentError(f"symbols.matching: kind={shown(kind)}; want a str (func, object, ifunc, plt) or None")
    return re.compile(fnmatch.translate(want_str("symbols.matching", "pattern", pattern)))


def is_glob(text: str) -> bool:
    """Whether a symbol spec is a shell glob (``*``, ``?``, ``[``): symbol names never hold these."""
    return any(c in text for c in "*?[")


def did_you_mean(names: list[str]) -> str:
    """``" (did you mean 'fact'?)"``, or "" when there is nothing close."""
    if not names:
        return ""
    return " (did you mean " + " or ".join(repr(n) for n in names) + "?)"


class SymbolTable:
    """Sorted symbols with O(log n) address lookup and exact-name resolution."""

    def __init__(self, symbols: Iterable[Symbol] = (), first_alias: bool = False) -> None:
        """A table of ``symbols``, as if each were :meth:`add`-ed in turn, in O(n log n).

        One sort, not an insertion per symbol: adding a file's symbols one by one costs
        O(n) each when they are not in address order (80 s for 300,000 in falling order).
        The sort is stable, so symbols at one address keep their order, as with :meth:`add`.

        ``first_alias``: an address several symbols share is named by the first of them in
        the table's order, as the kernel's ``%pS`` names it (``get_symbol_pos`` in
        kernel/kallsyms.c: ``sys_openat``, not ``__se_sys_openat``); a kernel's kallsyms
        table is in the kernel's own order.  Otherwise by the last.
        """
        self.first_alias = first_alias
        given = list(symbols)
        self._by_name: dict[str, Symbol] = {}
        for sym in given:
            self._name(sym)
        self._sorted: list[Symbol] = sorted(given, key=lambda sym: sym.address)
        self._starts: list[int] = [sym.address for sym in self._sorted]

    @classmethod
    def from_sorted(cls, symbols: list[Symbol], first_alias: bool = False) -> SymbolTable:
        """A table of ``symbols`` already in address order (a kernel's millions: no sort, no copy,
        the names added in one loop); the same table as ``SymbolTable(symbols, first_alias)``."""
        table = cls.__new__(cls)
        table.first_alias = first_alias
        by_name: dict[str, Symbol] = {}
        table._by_name = by_name
        setdefault, clone = by_name.setdefault, _CLONE_SUFFIX.sub
        for sym in symbols:
            name = sym.name
            setdefault(name, sym)
            if "." in name:
                base = clone("", name)
                if base != name:
                    setdefault(base, sym)
        table._sorted = symbols
        table._starts = [sym.address for sym in symbols]
        return table

    def copy(self) -> SymbolTable:
        """The same symbols in a table that changes apart from this one (lists copied, no sort)."""
        table = SymbolTable.__new__(SymbolTable)
        table.first_alias = self.first_alias
        table._by_name = dict(self._by_name)
        table._sorted = list(self._sorted)
        table._starts = list(self._starts)
        return table

    def _name(self, sym: Symbol) -> None:
        """Answer to the symbol's name and its GCC clone's base name; the first definition wins."""
        self._by_name.setdefault(sym.name, sym)
        if "." in sym.name:  # a clone's suffix starts with one
            base = _CLONE_SUFFIX.sub("", sym.name)
            if base != sym.name:
                self._by_name.setdefault(base, sym)

    def add(self, sym: Symbol) -> None:
        """Add a symbol; the first definition of a name wins (like the linker's)."""
        self._name(sym)
        i = bisect.bisect_right(self._starts, sym.address)
        self._starts.insert(i, sym.address)
        self._sorted.insert(i, sym)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._sorted)

    def __len__(self) -> int:
        return len(self._sorted)

    def get(self, name: str) -> Symbol:
        """The symbol called ``name``; a versioned name (``malloc@@GLIBC_2.2.5``,
        ``malloc@GLIBC_2.2.5``, as ``readelf`` and ``nm -D`` print them) is its plain one;
        ``malloc@plt`` is only ever the PLT stub (:mod:`kpsdk.binfmt.pltstubs`), never ``malloc``."""
        found = self._find(want_str("symbols.get", "name", name))
        if found is None:
            raise SymbolError(f"unknown symbol {name!r}{did_you_mean(self.suggest(name))}")
        return found

    def _named(self, name: str) -> Symbol | None:
        """The first symbol called ``name`` or whose GCC clone's base name it is."""
        return self._by_name.get(name)

    def _names(self) -> Iterable[str]:
        """Every name :meth:`_named` answers to."""
        return self._by_name

    def _find(self, name: str) -> Symbol | None:
        found = self._named(name)
        if found is None and "@" in name and not name.endswith("@plt"):
            found = self._named(name.partition("@")[0])
        if found is None and "\\" in name:  # a name as kpsdk shows it (shown_name), copied from its output
            found = self._named(unescaped_name(name))
        return found

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Names close to ``name`` (a typo: ``fcat`` -> ``fact``), best first.

        difflib's ratio over every name costs about a second for a kernel's 100k; a typo
        rarely changes both ends of a name and keeps its length within a few
        characters, so only names sharing the first or the last character, of a
        length within ``max(2, len // 5)``, are compared (milliseconds).
        """
        if not want_str("symbols.suggest", "name", name) or not len(self):
            return []
        slack = max(2, len(name) // 5)
        first, last = name[0], name[-1]
        candidates = [k for k in self._names()
                      if abs(len(k) - len(name)) <= slack and (k[0] == first or k[-1] == last)]
        # one swapped pair costs a short name more of its ratio ("sbu"/"sub": 0.67)
        return difflib.get_close_matches(name, candidates, n=n, cutoff=0.6 if len(name) <= 5 else 0.75)

    def matching(self, pattern: str, kind: str | None = "func") -> list[Symbol]:
        """The symbols whose name matches the shell glob ``pattern`` (``vfs_*``, ``do_sys_open*``;
        case-sensitive, as symbol names are), of ``kind`` (None: any), by address."""
        rx = _glob(pattern, kind)
        return [sym for sym in self._sorted if (kind is None or sym.kind == kind) and rx.match(sym.name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(name) is not None

    def resolve(self, expr: str | int) -> int:
        """``"add"``, ``"add+0x4"``, ``"0x401000"`` or an int -> address."""
        if is_int(expr):
            return expr
        if not isinstance(expr, str):
            raise ArgumentError(f"symbols.resolve: expr={shown(expr)}; want a str (SYM, SYM+0xOFF, 0xADDR) or an int")
        m = _EXPR.match(expr)
        try:
            if m is None:
                raise ValueError(expr)
            sym = m.group("sym")
            if sym is None:
                return _number(m.group("num"), m.group("numsign"))
            return self.get(sym).address + (_number(m.group("off"), m.group("sign")) if m.group("off") else 0)
        except ValueError:  # no match, or a number with a leading 0
            raise SymbolError(f"cannot parse address expression {shown(expr)} (want SYM, SYM+0xOFF or 0xADDR)") \
                from None

    def lookup(self, addr: int) -> tuple[str, int, int] | None:
        """``(name, offset, size)`` of the symbol containing ``addr``, else ``None``.

        Zero-sized symbols match only their own address.
        """
        sym = self._at(addr if type(addr) is int else want_int("symbols.lookup", "addr", addr, None))
        return None if sym is None else (sym.name, addr - sym.address, sym.size)

    def _at(self, addr: int) -> Symbol | None:
        """The symbol holding ``addr`` (the one at that address, not the first of its name:
        two static functions may share a name)."""
        i = bisect.bisect_right(self._starts, addr) - 1
        while i >= 0:
            sym = self._sorted[i]
            if sym.address <= addr < sym.address + max(sym.size, 1):
                if self.first_alias:
                    first = bisect.bisect_left(self._starts, sym.address)
                    sym = next(s for s in self._sorted[first:i + 1] if addr < s.address + max(s.size, 1))
                return sym
            if sym.address < addr and sym.size:
                return None
            i -= 1
        return None

    def containing(self, addr: int) -> Symbol | None:
        return self._at(addr if type(addr) is int else want_int("symbols.containing", "addr", addr, None))

    def format(self, addr: int) -> str:
        """``sym+0xoff`` for an address, or its hex value outside any symbol."""
        return self.symbolic(addr if type(addr) is int else want_int("symbols.format", "addr", addr, None)) \
            or f"{addr:#x}"

    def symbolic(self, addr: int) -> str | None:
        """``sym+0xoff`` for an address inside a symbol, else None (an int is the caller's to check);
        the name as :func:`shown_name` shows it: this is text for people and logs."""
        sym = self._at(addr)
        return None if sym is None else f"{shown_name(sym.name)}+{addr - sym.address:#x}"

    def functions(self) -> list[Symbol]:
        return [s for s in self._sorted if s.kind == "func"]


class CompactSymbolTable(SymbolTable):
    """A :class:`SymbolTable` of many symbols in address order, kept as columns: the addresses and
    sizes in arrays, the names in one string, a :class:`Symbol` made only when one is asked for.

    A kernel's symbol list (System.map, kallsyms) has from 100,000 to millions of entries; a
    :class:`Symbol` object, its name, its address as an int object and a dict entry per name
    cost ~400 bytes each (1.2 GB for 3 million).  Here an entry costs its name's characters and
    ~30 bytes.  Names are found by binary search in a name-sorted index (the first definition
    in address order wins, a GCC clone answering to its base name too, as in the dict of
    :class:`SymbolTable`); addresses by binary search in the address array.  It answers every
    question a :class:`SymbolTable` does with the same values; symbols :meth:`add`-ed later go
    to a small table of their own, consulted too.
    """

    def __init__(self, addresses: Sequence[int], sizes: Sequence[int], names: list[str], funcs: bytes | bytearray,
                 first_alias: bool = False) -> None:
        """Columns in address order: each symbol's address, size, name, and 1 for a function."""
        import array

        count = len(names)
        self.first_alias = first_alias
        self._count = count
        self._addr = array.array("Q", addresses)
        self._size = array.array("Q", sizes)
        self._func = bytes(funcs)
        self._text = "\0".join(names)  # names hold no NUL (a symbol table's strings end at one)
        offsets, at = array.array("Q", bytes(8 * (count + 1))), 0
        for i, name in enumerate(names):
            offsets[i] = at
            at += len(name) + 1
        offsets[count] = at
        self._off = offsets
        # the names sorted (stably: the first definition first), and the clones' base names
        self._order = array.array("Q", sorted(range(count), key=names.__getitem__))
        clones = sorted((_CLONE_SUFFIX.sub("", name), i) for i, name in enumerate(names) if "." in name)
        clones = [(base, i) for base, i in clones if base != names[i]]
        self._clone_text = "\0".join(base for base, _ in clones)
        clone_off, at = array.array("Q", bytes(8 * (len(clones) + 1))), 0
        for k, (base, _) in enumerate(clones):
            clone_off[k] = at
            at += len(base) + 1
        clone_off[len(clones)] = at
        self._clone_off = clone_off
        self._clone_index = array.array("Q", (i for _, i in clones))
        self._extra = SymbolTable(first_alias=first_alias)

    # -- columns to symbols

    def _name_of(self, i: int) -> str:
        return self._text[self._off[i]:self._off[i + 1] - 1]

    def _clone_of(self, k: int) -> str:
        return self._clone_text[self._clone_off[k]:self._clone_off[k + 1] - 1]

    def _symbol(self, i: int) -> Symbol:
        return Symbol(self._name_of(i), self._addr[i], self._size[i], "func" if self._func[i] else "object")

    def _first(self, name: str, count: int, key: Callable[[int], str]) -> int | None:
        """The first position of ``name`` among ``count`` sorted names (``key(k)``: the k-th), or None."""
        k = bisect.bisect_left(range(count), name, key=key)
        return k if k < count and key(k) == name else None

    def _named(self, name: str) -> Symbol | None:
        k = self._first(name, self._count, lambda k: self._name_of(self._order[k]))
        exact = self._order[k] if k is not None else None
        c = self._first(name, len(self._clone_index), self._clone_of)
        clone = self._clone_index[c] if c is not None else None
        found = [i for i in (exact, clone) if i is not None]
        if found:
            return self._symbol(min(found))
        return self._extra._named(name)

    def _names(self) -> Iterable[str]:
        yield from (self._name_of(i) for i in range(self._count))
        yield from (self._clone_of(k) for k in range(len(self._clone_index)))
        yield from self._extra._names()

    # -- the SymbolTable questions

    def add(self, sym: Symbol) -> None:
        self._extra.add(sym)

    def __iter__(self):  # type: ignore[no-untyped-def]
        if not len(self._extra):
            return (self._symbol(i) for i in range(self._count))
        return iter(sorted([*(self._symbol(i) for i in range(self._count)), *self._extra],
                           key=lambda sym: sym.address))

    def __len__(self) -> int:
        return self._count + len(self._extra)

    def matching(self, pattern: str, kind: str | None = "func") -> list[Symbol]:
        rx = _glob(pattern, kind)
        found = [self._symbol(i) for i in range(self._count)
                 if (kind is None or (kind == "func") == bool(self._func[i])) and kind in (None, "func", "object")
                 and rx.match(self._name_of(i))]
        found += self._extra.matching(pattern, kind)
        return sorted(found, key=lambda sym: sym.address) if len(self._extra) else found

    def _at(self, addr: int) -> Symbol | None:
        addrs, sizes = self._addr, self._size
        i = bisect.bisect_right(addrs, addr) - 1 if 0 <= addr < 1 << 64 else -1
        while i >= 0:
            start, size = addrs[i], sizes[i]
            if start <= addr < start + max(size, 1):
                if self.first_alias:
                    first = bisect.bisect_left(addrs, start)
                    i = next(j for j in range(first, i + 1) if addr < addrs[j] + max(sizes[j], 1))
                return self._symbol(i)
            if start < addr and size:
                break
            i -= 1
        return self._extra._at(addr) if len(self._extra) else None

    def functions(self) -> list[Symbol]:
        return [*(self._symbol(i) for i in range(self._count) if self._func[i]), *self._extra.functions()]


class SymbolTables(SymbolTable):
    """Several tables answering as one, without copying them: a program's and each of its
    libraries' (each already at its run-time addresses).  A name resolves in the first
    table that has it (the program's first, as the dynamic loader looks names up); an
    address in the table whose symbol holds it.  A table changes by being replaced
    (a library loaded or unloaded), which costs nothing per symbol."""

    def __init__(self, tables: Iterable[SymbolTable]) -> None:
        self.tables = list(tables) or [SymbolTable()]

    def add(self, sym: Symbol) -> None:
        self.tables[0].add(sym)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (sym for table in self.tables for sym in table)

    def __len__(self) -> int:
        return sum(len(table) for table in self.tables)

    def get(self, name: str) -> Symbol:
        want_str("symbols.get", "name", name)
        for table in self.tables:
            if name in table:
                return table.get(name)
        raise SymbolError(f"unknown symbol {name!r}{did_you_mean(self.suggest(name))}")

    def __contains__(self, name: object) -> bool:
        return any(name in table for table in self.tables)

    def suggest(self, name: str, n: int = 3) -> list[str]:
        return [found for table in self.tables for found in table.suggest(name, n)][:n]

    def matching(self, pattern: str, kind: str | None = "func") -> list[Symbol]:
        found = [sym for table in self.tables for sym in table.matching(pattern, kind)]
        return sorted(found, key=lambda sym: sym.address)

    def _at(self, addr: int) -> Symbol | None:
        for table in self.tables:
            found = table._at(addr)
            if found is not None:
                return found
        return None

    def functions(self) -> list[Symbol]:
        return [sym for table in self.tables for sym in table.functions()]


class CodeAndSymbols(Protocol):
    """Code with the symbols that name it: what finding a function's entry needs (kretprobes,
    uprobes).  A target is one; so is a file's segments before anything runs it.  Decoding alone
    needs less (:class:`kpsdk.arch.decode.CodeView`)."""

    arch: Arch
    symbols: SymbolTable

    def read_memory(self, addr: int, size: int) -> bytes: ...


#: each object's symbols at a load bias, made once: a library dlopen'ed again at the same
#: address (the usual case) costs nothing, and libc is relocated once per session's bias
_relocated: dict[tuple[tuple[int, int], int], SymbolTable] = {}
MAX_RELOCATED = 256


def loaded_symbols(files: Sequence[LoadedObject]) -> SymbolTable:
    """Every object's symbols at their run-time addresses (the program's first: a name
    defined in several objects resolves as the program's, as the loader's lookup would)."""
    tables = []
    for mf in files:
        key = (mf.identity, mf.bias)
        table = _relocated.get(key)
        if table is None:
            if len(_relocated) >= MAX_RELOCATED:
                _relocated.clear()
            table = _relocated[key] = mf.image.relocated(mf.bias).symbols
        tables.append(table)
    return SymbolTables(tables)
