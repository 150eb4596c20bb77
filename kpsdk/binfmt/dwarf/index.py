"""The index of a file's DWARF: its functions, inlined copies and globals by name and address,
built by one scan (:mod:`.scan`) and kept between runs.

The scan of a large debug file takes seconds; its result is a few megabytes of JSON, saved
through an :class:`IndexStore` under the file's build ID (or, without one, the SHA-256 of
its bytes), so the next open of the same file reads it back in a fraction of that.  The store
is given by the caller: this layer cannot know kpsdk's cache directory (the layering keeps
:mod:`kpsdk.cache` above the file readers), so :class:`kpsdk.cache.PrivateStore` is passed in
by whoever opens the file (``DebugInfo.open(path, store=PrivateStore("dwarf"))``), and
:class:`MemoryStore` keeps an index for the life of the process.  What comes back from a store
is checked (the header names the key, the format version and the body's SHA-256) before it is
believed: a truncated or planted file is ignored and the index built again.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterator
from typing import Protocol

from kpsdk.binfmt.dwarf.scan import FunctionRecord, GlobalRecord, ScanResult, UnitRecord
from kpsdk.binfmt.dwarf.sections import Bases

#: bumped whenever the saved form or what the scan records changes
FORMAT_VERSION = 3
_MAGIC = b"kpsdk-dwarf-index"


class IndexStore(Protocol):
    """Where indexes are kept between opens: bytes by key.  ``load`` returns None when it has
    nothing under ``key``; ``save`` may silently do nothing (a cache only saves time)."""

    def load(self, key: str) -> bytes | None: ...

    def save(self, key: str, data: bytes) -> None: ...


class MemoryStore:
    """An :class:`IndexStore` in a dict: indexes live as long as the store."""

    def __init__(self) -> None:
        self.entries: dict[str, bytes] = {}

    def load(self, key: str) -> bytes | None:
        return self.entries.get(key)

    def save(self, key: str, data: bytes) -> None:
        self.entries[key] = data


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


class Index:
    """Functions by name and by address, units by address, globals by name."""

    def __init__(self, result: ScanResult) -> None:
        self.units = result.units
        self.functions = result.functions
        self.globals = result.globals
        for fn in self.functions:
            fn.ranges = _merge(fn.ranges)
        self.unit_by_offset = {u.offset: u for u in self.units}
        self.by_name: dict[str, list[FunctionRecord]] = {}
        for fn in self.functions:
            self.by_name.setdefault(fn.name, []).append(fn)
        self.by_die = {fn.die: fn for fn in self.functions}
        self.globals_by_name: dict[str, list[GlobalRecord]] = {}
        for var in self.globals:
            self.globals_by_name.setdefault(var.name, []).append(var)
        # out-of-line functions by address: (low, high, record), sorted by low
        spans = sorted(((low, high, fn) for fn in self.functions if not fn.inlined for low, high in fn.ranges),
                       key=lambda s: (s[0], -s[1]))
        self._lows = [s[0] for s in spans]
        self._spans = spans
        unit_spans = sorted((low, high, u.offset) for u in self.units for low, high in u.ranges)
        self._unit_lows = [s[0] for s in unit_spans]
        self._unit_spans = unit_spans

    def function_at(self, pc: int) -> FunctionRecord | None:
        """The out-of-line function whose code holds ``pc`` (the innermost of nested ones)."""
        i = bisect.bisect_right(self._lows, pc)
        # spans do not overlap but for nested functions (GNU C): the nearest that holds pc is
        # the innermost, and a few steps back are enough to pass over empty neighbours
        for low, high, fn in reversed(self._spans[max(0, i - 8):i]):
            if low <= pc < high:
                return fn
        return None

    def unit_at(self, pc: int) -> UnitRecord | None:
        """The unit whose ranges hold ``pc``; through its functions where the unit has no ranges."""
        i = bisect.bisect_right(self._unit_lows, pc)
        if i > 0:
            low, high, offset = self._unit_spans[i - 1]
            if low <= pc < high:
                return self.unit_by_offset[offset]
        fn = self.function_at(pc)
        return self.unit_by_offset[fn.unit] if fn is not None else None

    def inlined_in(self, caller_die: int) -> Iterator[FunctionRecord]:
        """The inlined copies inside the out-of-line function ``caller_die``."""
        return (fn for fn in self.functions if fn.inlined and fn.caller == caller_die)

    # -- saving ------------------------------------------------------------------------------------

    def dumps(self) -> bytes:
        units = [[u.offset, u.version, u.address_size, u.offset_size, u.name, u.comp_dir, u.producer, u.language,
                  u.stmt_list, u.base, u.ranges, [u.bases.str_offsets, u.bases.addr, u.bases.rnglists,
                                                  u.bases.loclists]] for u in self.units]
        functions = [[f.name, f.die, f.unit, f.ranges, f.entry, int(f.inlined), f.origin, f.caller, f.decl_file,
                      f.decl_line, f.call_file, f.call_line, int(f.external)] for f in self.functions]
        globals_ = [[g.name, g.die, g.unit, g.address, int(g.external)] for g in self.globals]
        return json.dumps({"units": units, "functions": functions, "globals": globals_},
                          separators=(",", ":")).encode()

    @classmethod
    def loads(cls, body: bytes) -> Index:
        raw = json.loads(body)
        result = ScanResult()
        for (offset, version, asize, osize, name, comp_dir, producer, language, stmt, base, ranges,
             bases) in raw["units"]:
            result.units.append(UnitRecord(offset, version, asize, osize, name, comp_dir, producer, language, stmt,
                                           base, [tuple(r) for r in ranges], Bases(*bases)))
        for (name, die, unit, ranges, entry, inlined, origin, caller, decl_file, decl_line, call_file, call_line,
             external) in raw["functions"]:
            result.functions.append(FunctionRecord(name, die, unit, [tuple(r) for r in ranges], entry, bool(inlined),
                                                   origin, caller, decl_file, decl_line, call_file, call_line,
                                                   bool(external)))
        for name, die, unit, address, external in raw["globals"]:
            result.globals.append(GlobalRecord(name, die, unit, address, bool(external)))
        return cls(result)


def _header(key: str, body: bytes) -> bytes:
    digest = hashlib.sha256(body).hexdigest().encode()
    return b"%s v%d key=%s sha256=%s" % (_MAGIC, FORMAT_VERSION, key.encode(), digest)


def store_key(build_id: str, data: bytes) -> str:
    """The key an index is saved under: the build ID, else the SHA-256 of the file's bytes."""
    return f"{build_id}.index" if build_id else f"sha256-{hashlib.sha256(data).hexdigest()}.index"


def load_index(store: IndexStore, key: str) -> Index | None:
    """The index saved under ``key``, None when absent or not intact."""
    raw = store.load(key)
    if raw is None:
        return None
    head, _, body = raw.partition(b"\n")
    if head != _header(key, body):
        return None
    try:
        return Index.loads(body)
    except (ValueError, TypeError, KeyError):
        return None


def save_index(store: IndexStore, key: str, index: Index) -> None:
    """Save ``index`` under ``key``."""
    body = index.dumps()
    store.save(key, _header(key, body) + b"\n" + body)
