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
engine (:mod:`.engine`).  Without
``malloc_usable_size`` (another libc) the hook is installed as before: correct, slower; where
the search finds no single word (another Unicorn) the signal names the faulting pc instead.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import unicorn

from kpsdk.targets.unicorn import engine
from kpsdk.targets.unicorn.tlb import last_fault_address


def fault_addresses(uc: unicorn.Uc, hook: Callable[..., Any]) -> Callable[[], int | None]:
    """A function giving the address of ``uc``'s last refused access (to call after
    ``emu_start`` returned a ``*_UNMAPPED`` or ``*_PROT`` error), or None where it cannot be
    read.  The field's place is looked for at the first call (a scratch engine: ~30 ms that
    a program that never faults does not pay; :mod:`.engine`).  ``hook``, the
    ``UC_HOOK_MEM_INVALID`` callback that records the address (answering False), is
    installed instead where the field cannot be read at all: no ``malloc_usable_size``."""
    if engine.usable_size() is None:  # the hook names what Unicorn refuses, the fill what it refused
        uc.hook_add(unicorn.UC_HOOK_MEM_INVALID, hook)
        return lambda: last_fault_address(uc)
    owner = uc  # the field lives as long as the engine

    def last() -> int | None:
        where = engine.layout()
        handle = owner._uch.value if owner._uch is not None else None
        if where is None or not handle:
            return None
        return int(ctypes.c_uint64.from_address(handle + where.invalid_addr).value)

    return last
