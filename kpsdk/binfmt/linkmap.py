"""The dynamic loader's list of loaded objects, read from any target's memory.

A dynamically linked Linux program tells debuggers what it has loaded through the
System V ABI's ``r_debug`` protocol (glibc's ``elf/link.h``, the gABI's "Dynamic
Section": ``DT_DEBUG``): the loader stores the address of its ``struct r_debug`` in
the program's ``DT_DEBUG`` entry; ``r_debug.r_map`` heads a doubly linked list of
``struct link_map`` (load bias, path, dynamic section of each object), and the loader
calls the function at ``r_debug.r_brk`` before and after every change (``dlopen``,
``dlclose``) with ``r_state`` saying which (``RT_ADD``, ``RT_DELETE``) and
``RT_CONSISTENT`` once the list is whole again.  The way there starts from the
auxiliary vector the kernel gave the program (``AT_PHDR``/``AT_PHNUM``: its program
headers in memory, hence ``PT_DYNAMIC``; ``AT_BASE``: the loader's bias; ``AT_ENTRY``).

Nothing here knows how memory is read: a target passes a ``read(addr, size) -> bytes``
(gdb/MI for qemu-user, Unicorn's memory for its Linux layer), its word size and byte
order.  Every read is bounded and every list walk is cut off, so a corrupt or hostile
program cannot make kpsdk loop or read without end; what cannot be read raises the
reader's own error (:class:`~kpsdk.errors.TargetFault` for kpsdk's targets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, cast

from kpsdk.errors import TargetError

#: auxiliary vector entry types (include/uapi/linux/auxvec.h)
AT_NULL, AT_PHDR, AT_PHENT, AT_PHNUM, AT_PAGESZ, AT_BASE, AT_ENTRY = 0, 3, 4, 5, 6, 7, 9
#: program header types and the dynamic tags used (the gABI)
PT_DYNAMIC, PT_INTERP, PT_PHDR = 2, 3, 6
DT_NULL, DT_DEBUG = 0, 21
#: ``r_debug.r_state`` (glibc elf/link.h)
RT_CONSISTENT, RT_ADD, RT_DELETE = 0, 1, 2

#: walks stop here: more objects than any program loads, more dynamic entries than any file has
MAX_OBJECTS = 4096
MAX_DYNAMIC = 4096
MAX_AUXV = 512
#: a loaded object's path is read up to this many bytes (PATH_MAX)
MAX_NAME = 4096

Reader = Callable[[int, int], bytes]


def parse_auxv(raw: bytes, word_size: int, endian: Literal["little", "big"]) -> dict[int, int]:
    """``{type: value}`` from the raw auxiliary vector (pairs of words up to ``AT_NULL``),
    as ``/proc/PID/auxv`` or the gdb remote protocol's ``qXfer:auxv:read`` give it.

    A repeated type keeps its first value (the kernel writes each once).
    """
    out: dict[int, int] = {}
    pair = 2 * word_size
    for i in range(0, min(len(raw) - len(raw) % pair, MAX_AUXV * pair), pair):
        kind = int.from_bytes(raw[i : i + word_size], endian)
        if kind == AT_NULL:
            break
        out.setdefault(kind, int.from_bytes(raw[i + word_size : i + pair], endian))
    return out


@dataclass(frozen=True)
class LoadedObject:
    """One ``struct link_map`` entry: an object the loader mapped.

    :param name: ``l_name``, the path the loader opened ("" for the program itself;
        the loader's own is its ``PT_INTERP`` path).
    :param bias: ``l_addr``, what was added to the object's link-time addresses.
    :param dynamic: ``l_ld``, the address of its dynamic section.
    :param address: where the entry itself is (the loader's handle for it).
    :param name_at: ``l_name``, where the name is.
    """

    name: str
    bias: int
    dynamic: int
    address: int
    name_at: int = 0

    @property
    def key(self) -> tuple[int, int, int, int]:
        """What tells this entry from any other the loader makes later: the entry's, its
        name's and its dynamic section's addresses and its bias (a reused entry address
        alone could be another object's)."""
        return (self.address, self.bias, self.name_at, self.dynamic)


@dataclass(frozen=True)
class RDebug:
    """``struct r_debug`` as the loader last wrote it."""

    version: int
    map: int
    brk: int
    state: int
    ldbase: int


class LinkMap:
    """The loader's bookkeeping in one program's memory.

    :param read: ``read(addr, size) -> bytes`` of target memory.
    :param word_size: 4 or 8 (the ELF class of the program).
    :param endian: ``"little"`` or ``"big"``.
    """

    def __init__(self, read: Reader, word_size: int, endian: str) -> None:
        if word_size not in (4, 8) or endian not in ("little", "big"):
            raise TargetError(f"no link map for {word_size}-byte {endian}-endian words")
        self.read, self.word = read, word_size
        self.endian = cast(Literal["little", "big"], endian)

    def _int(self, addr: int, size: int) -> int:
        return int.from_bytes(self.read(addr, size), self.endian)

    def word_at(self, addr: int) -> int:
        return self._int(addr, self.word)

    # -- from the auxiliary vector to r_debug ----------------------------------------------------

    def program_headers(self, auxv: dict[int, int]) -> list[tuple[int, int]]:
        """``(p_type, p_vaddr)`` of each of the program's headers, read where ``AT_PHDR`` says."""
        phdr, count = auxv.get(AT_PHDR), auxv.get(AT_PHNUM, 0)
        size = auxv.get(AT_PHENT, 56 if self.word == 8 else 32)
        if not phdr or not 0 < count <= 0xFFFF or size < (24 if self.word == 8 else 12) or size > 256:
            return []
        table = self.read(phdr, count * size)
        vaddr_at = 16 if self.word == 8 else 8  # Elf64_Phdr: type, flags, offset, vaddr; Elf32: type, offset, vaddr
        return [(int.from_bytes(table[i * size : i * size + 4], self.endian),
                 int.from_bytes(table[i * size + vaddr_at : i * size + vaddr_at + self.word], self.endian))
                for i in range(count)]

    def program_bias(self, auxv: dict[int, int], entry: int | None = None) -> int:
        """The program's load bias: ``AT_PHDR`` minus ``PT_PHDR``'s address, else ``AT_ENTRY``
        minus the file's ``entry`` (0 when neither can say: an ``ET_EXEC`` file)."""
        for kind, vaddr in self.program_headers(auxv):
            if kind == PT_PHDR:
                return (auxv[AT_PHDR] - vaddr) % (1 << (8 * self.word))
        if entry is not None and AT_ENTRY in auxv:
            return (auxv[AT_ENTRY] - entry) % (1 << (8 * self.word))
        return 0

    def dynamic_address(self, auxv: dict[int, int], entry: int | None = None) -> int | None:
        """Where the program's ``PT_DYNAMIC`` is in memory; None for a static program."""
        for kind, vaddr in self.program_headers(auxv):
            if kind == PT_DYNAMIC:
                return (vaddr + self.program_bias(auxv, entry)) % (1 << (8 * self.word))
        return None

    def r_debug_address(self, dynamic: int) -> int:
        """``DT_DEBUG``'s value in the dynamic section at ``dynamic``: 0 until the loader has
        filled it in (before it ran, or for a program without the entry)."""
        pair = 2 * self.word
        for i in range(MAX_DYNAMIC):
            raw = self.read(dynamic + i * pair, pair)
            tag = int.from_bytes(raw[: self.word], self.endian)
            if tag == DT_NULL:
                return 0
            if tag == DT_DEBUG:
                return int.from_bytes(raw[self.word :], self.endian)
        return 0

    def r_state_address(self, addr: int) -> int:
        """Where the ``int r_state`` of the ``struct r_debug`` at ``addr`` is (after the
        ``int`` version, padded to a word, and two pointers), as :meth:`r_debug` reads it."""
        return addr + 3 * self.word

    def r_debug(self, addr: int) -> RDebug:
        """``struct r_debug`` at ``addr``: an ``int`` version, then word-aligned pointers, the
        ``int`` state, the loader's base."""
        w = self.word
        raw = self.read(addr, 5 * w)
        def word(i: int) -> int:
            return int.from_bytes(raw[i * w : (i + 1) * w], self.endian)

        return RDebug(version=int.from_bytes(raw[:4], self.endian), map=word(1), brk=word(2),
                      state=int.from_bytes(raw[3 * w : 3 * w + 4], self.endian), ldbase=word(4))

    # -- the list ---------------------------------------------------------------------------------

    def objects(self, head: int, names: Mapping[tuple[int, int, int, int], str] | None = None) -> list[LoadedObject]:
        """The ``link_map`` list from ``head`` (``r_debug.r_map``), in load order.

        ``struct link_map`` starts ``l_addr, l_name, l_ld, l_next, l_prev``, one word
        each.  The walk stops at a null ``l_next``, at an entry seen before (a loop) and
        after :data:`MAX_OBJECTS`.  ``names``: the names of entries read before, by
        :attr:`LoadedObject.key`: the loader never renames an entry, so they are not
        read again (a walk after each ``dlopen`` then reads one word group per entry).
        """
        out: list[LoadedObject] = []
        seen: set[int] = set()
        node = head
        while node and node not in seen and len(out) < MAX_OBJECTS:
            seen.add(node)
            entry, node = self.entry(node, names)
            out.append(entry)
        return out

    def entry(self, node: int, names: Mapping[tuple[int, int, int, int], str] | None = None,
              name: str | None = None) -> tuple[LoadedObject, int]:
        """The ``link_map`` entry at ``node`` and its ``l_next``.  Its name is ``name`` when the
        caller has it (a stub's ``qXfer:libraries-svr4`` list), else taken from ``names`` or read."""
        w = self.word
        raw = self.read(node, 4 * w)
        l_addr, l_name, l_ld, l_next = (int.from_bytes(raw[i * w : (i + 1) * w], self.endian) for i in range(4))
        if name is None:
            name = (names or {}).get((node, l_addr, l_name, l_ld))
        if name is None:
            name = self.string(l_name) if l_name else ""
        return LoadedObject(name, l_addr, l_ld, node, l_name), l_next

    def string(self, addr: int, limit: int = MAX_NAME) -> str:
        """The NUL-terminated string at ``addr``, read in small pieces (a name near the end of a
        mapping must not need the bytes after it), at most ``limit`` bytes."""
        out = bytearray()
        chunk = 64 - addr % 64  # never cross a 64-byte boundary, so never a page one
        while len(out) < limit:
            piece = self.read(addr + len(out), chunk)
            end = piece.find(b"\0")
            if end >= 0:
                out += piece[:end]
                break
            out += piece
            chunk = 64
        return bytes(out[:limit]).decode("utf-8", "surrogateescape")

    def loaded(self, auxv: dict[int, int], entry: int | None = None) -> tuple[RDebug | None, list[LoadedObject]]:
        """``r_debug`` and its list for the program whose auxiliary vector is ``auxv``
        (``entry``: the file's ``e_entry``, for a program without ``PT_PHDR``).  ``(None, [])``
        for a static program, or before the loader has set ``DT_DEBUG``."""
        dynamic = self.dynamic_address(auxv, entry)
        if dynamic is None:
            return None, []
        where = self.r_debug_address(dynamic)
        if not where:
            return None, []
        debug = self.r_debug(where)
        return debug, self.objects(debug.map)
