"""The address a refused guest access went to, without a memory hook that slows every store.

A Linux program's segmentation fault carries the address it touched (``si_addr``).  Unicorn
2.1.4 names it only to a ``UC_HOOK_MEM_INVALID`` hook, and the mere existence of such a hook
(``uc_mem_hook_installed`` in its ``cputlb.c``, which counts the ``*_UNMAPPED`` and ``*_PROT``
kinds) stops ``notdirty_write`` from ever marking a page dirty: every store of the program
then takes the slow store path (a helper call, a lookup of the mapping, ~50 ns), and the
virtual TLB's fast stores (:mod:`.tlb`) are lost.  Measured on x86_64 programs with the hook
and without (CPU, load 10+): busybox ``sort`` of 10,000 lines 0.52 s and 0.19 s, coreutils
``sort`` of 100,000 lines 2.1 s and 0.78 s, ``sha512sum`` of 10 MB 0.84 s and 0.51 s.

Unicorn keeps the address all the same, in its engine's ``invalid_addr`` field, set on every
refused access just before ``uc_emu_start`` returns the error.  The field has no API, so its
place in the engine structure is found once per process, at its first fault, on a scratch
engine: two loads from
two unmapped addresses, and the one word of the structure that held each address in turn
(the structure's size from ``malloc_usable_size``, so nothing past it is read).  Without
``malloc_usable_size`` (another libc) the hook is installed as before: correct, slower; where
the search finds no single word (another Unicorn) the signal names the faulting pc instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from collections.abc import Callable
from typing import Any

import unicorn
from unicorn import x86_const

#: two unmapped addresses the scratch engine loads from (unlikely words in a fresh engine)
_PROBES = (0x7EDC_BA98_7123, 0x5A5A_1234_5678)
_CODE = 0x10000
_offset: int | None = None
_searched = False


def _usable_size() -> Callable[[int], int] | None:
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


def _find_offset() -> int | None:
    """Where ``invalid_addr`` lies in Unicorn's engine structure, or None (see the docstring)."""
    usable = _usable_size()
    if usable is None:
        return None
    uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    uc.mem_map(_CODE, 0x1000)
    uc.mem_write(_CODE, bytes.fromhex("488b03"))  # mov rax, [rbx]
    handle = uc._uch.value if uc._uch is not None else None
    if not handle:
        return None
    size = usable(handle)
    if size < 8:
        return None
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
    return found.pop() if found is not None and len(found) == 1 else None


def fault_addresses(uc: unicorn.Uc, hook: Callable[..., Any]) -> Callable[[], int | None]:
    """A function giving the address of ``uc``'s last refused access (to call after
    ``emu_start`` returned a ``*_UNMAPPED`` or ``*_PROT`` error), or None where it cannot be
    read.  The field's place is looked for at the first call (a scratch engine: ~30 ms that
    a program that never faults does not pay).  ``hook``, the ``UC_HOOK_MEM_INVALID``
    callback that records the address (answering False), is installed instead where the
    field cannot be read at all: no ``malloc_usable_size``."""
    if _usable_size() is None:
        uc.hook_add(unicorn.UC_HOOK_MEM_INVALID, hook)
        return lambda: None
    engine = uc  # the field lives as long as the engine

    def last() -> int | None:
        global _offset, _searched
        if not _searched:
            _searched = True
            _offset = _find_offset()
        handle = engine._uch.value if engine._uch is not None else None
        if _offset is None or not handle:
            return None
        return int(ctypes.c_uint64.from_address(handle + _offset).value)

    return last
