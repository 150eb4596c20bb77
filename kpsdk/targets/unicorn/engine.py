"""Two fields of Unicorn 2.1.4's engine structure that its API does not reach, and why kpsdk
reads or writes them.

``invalid_addr``: the address of the last refused guest access (:mod:`.faults`: a signal's
``si_addr`` without the memory hook that slowed every store).

``no_exit_request``: Unicorn follows every guest load and store, and every code hook, with a
call to ``helper_check_exit_request`` (``check_exit_request`` in its ``tcg-op.c``), so that a
hook that stops the engine or moves the pc stops it right there instead of at the end of
the block.  The call spills the guest registers around each memory access: 13% of xz's
CPU in the profile, and without it (measured, CPU, load 10+) ``sha512sum`` of 10 MB took
0.12 s instead of 0.29 s, ``sort`` of 100,000 lines 0.31 s instead of 0.54 s and
``xz -9`` of 1 MB 1.5 s instead of 2.6 s.  Unicorn skips the call in code translated while
the field is set (its ARM translator sets it inside Thumb IT blocks).  Only a code hook and a
memory hook can stop the engine or move the pc in the middle of a block (the trap of a
system call or a breakpoint ends its block anyway, a block hook runs before the block's own
check, and the TLB fill's rare stop, an exception handed to ``fail``, can wait for the end
of the block), so :class:`ExitChecks` sets the field while the engine has neither, and
clears it while it has one.  Code translated meanwhile keeps what it was translated with;
kpsdk drops the translations where it adds a code hook (a hook fires only in code
translated after it) and all of them when it adds a memory hook, so every block that can
call such a hook is translated with the checks.

Neither field has an API, so their places are found once per process on a scratch engine:
``invalid_addr`` as the one word that held each of two unmapped addresses after a load from
each (the structure's size from ``malloc_usable_size``: nothing past it is read), and
``no_exit_request`` from its place after it in ``uc_priv.h`` (618 bytes on a 64-bit host),
checked by the fields between them that can be predicted (the count of mapped regions, the
page size and mask) and the ones around it (``init_done`` set, itself clear).  Where a check
fails the fields are not used: the hook and the checks stay, correct and slower.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import sys
from collections.abc import Callable
from typing import NamedTuple

import unicorn
from unicorn import x86_const

#: two unmapped addresses the scratch engine loads from (unlikely words in a fresh engine)
_PROBES = (0x7EDC_BA98_7123, 0x5A5A_1234_5678)
_CODE = 0x10000
#: from ``invalid_addr`` on a 64-bit host (uc_priv.h, Unicorn 2.1.4): ``mapped_block_count``,
#: ``target_page_size``, ``target_page_align``, ``no_exit_request`` (``init_done`` next to it)
_BLOCK_COUNT, _PAGE_SIZE, _PAGE_ALIGN, _NO_EXIT = 552, 568, 572, 618


class Layout(NamedTuple):
    invalid_addr: int
    no_exit_request: int | None


_layout: Layout | None = None
_searched = False


def usable_size() -> Callable[[int], int] | None:
    """glibc's ``malloc_usable_size``: how far the engine's structure may be read."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_usable_size
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = [ctypes.c_void_p], ctypes.c_size_t
    return function  # type: ignore[no-any-return]


def _search() -> Layout | None:
    usable = usable_size()
    if usable is None:
        return None
    uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    uc.mem_map(_CODE, 0x1000)
    uc.mem_write(_CODE, bytes.fromhex("488b03"))  # mov rax, [rbx]
    handle = uc._uch.value if uc._uch is not None else None
    if not handle:
        return None
    size = usable(handle)
    found: set[int] | None = None
    for addr in _PROBES:
        uc.reg_write(x86_const.UC_X86_REG_RBX, addr)
        try:
            uc.emu_start(_CODE, _CODE + 3)
        except unicorn.UcError as e:
            if e.errno != unicorn.UC_ERR_READ_UNMAPPED:
                return None
        else:
            return None
        raw = ctypes.string_at(handle, size - size % 8)
        here = {i * 8 for i, (word,) in enumerate(struct.iter_unpack("<Q", raw)) if word == addr}
        found = here if found is None else found & here
    if found is None or len(found) != 1:
        return None
    invalid = found.pop()
    no_exit = invalid + _NO_EXIT
    if sys.maxsize <= 2**32 or no_exit + 2 > size:
        return Layout(invalid, None)
    raw = ctypes.string_at(handle + invalid, _NO_EXIT + 2)
    count, page, align = (int.from_bytes(raw[o:o + 4], sys.byteorder) for o in (_BLOCK_COUNT, _PAGE_SIZE, _PAGE_ALIGN))
    fits = count == len(list(uc.mem_regions())) and page == 0x1000 and align == 0xFFF \
        and raw[_NO_EXIT] == 0 and raw[_NO_EXIT + 1] == 1
    return Layout(invalid, no_exit if fits else None)


def layout() -> Layout | None:
    """Where the two fields are (None: ``invalid_addr`` was not found; ``no_exit_request``
    None: not where it was expected), searched once per process."""
    global _layout, _searched
    if not _searched:
        _searched = True
        _layout = _search()
    return _layout


class ExitChecks:
    """Unicorn's exit checks after loads and stores, off while the engine has no code hook
    and no memory hook (see the module docstring).  ``enabled``: the arch's translator
    leaves the field to kpsdk (not 32-bit ARM's, which sets it at every instruction)."""

    def __init__(self, uc: unicorn.Uc, enabled: bool = True) -> None:
        self._uc = uc
        where = layout() if enabled else None
        self._field: ctypes.c_uint8 | None = None
        if where is not None and where.no_exit_request is not None and uc._uch is not None and uc._uch.value:
            self._field = ctypes.c_uint8.from_address(uc._uch.value + where.no_exit_request)
        #: hooks that may stop the engine or move the pc inside a block (code and memory hooks)
        self.hooks = 0
        self._set()

    @property
    def available(self) -> bool:
        """kpsdk may turn the checks off on this engine (the field was found, the arch leaves
        it alone): the TLB fill must then refuse faulting accesses itself (tlbfill.c)."""
        return self._field is not None

    @property
    def skipped(self) -> bool:
        """Code translated now has no exit checks after its loads and stores."""
        return self._field is not None and bool(self._field.value)

    def added(self) -> None:
        self.hooks += 1
        self._set()

    def deleted(self) -> None:
        self.hooks = max(0, self.hooks - 1)
        self._set()

    def _set(self) -> None:
        if self._field is not None and self._uc._uch is not None:
            self._field.value = 0 if self.hooks else 1
