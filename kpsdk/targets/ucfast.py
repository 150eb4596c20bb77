"""Direct ctypes access to libunicorn, for the per-hit hot path.

The official binding's ``reg_read`` costs ~2.7 us here and wraps every hook
callback in two extra Python frames; calling ``uc_reg_read`` and registering
our own ``CFUNCTYPE`` callbacks costs a fraction of that (see
``docs/performance.md``).  Everything not on the hot path uses the binding.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.arch import Register

HOOK_CODE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
HOOK_INTR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)

_reg_read = uclib.uc_reg_read
_reg_write = uclib.uc_reg_write


class FastRegs:
    """Register reads and writes through ``uc_reg_read``/``uc_reg_write``."""

    __slots__ = ("_uch", "_buf", "_ref")

    def __init__(self, uc: unicorn.Uc) -> None:
        self._uch = uc._uch
        self._buf = ctypes.c_uint64()
        self._ref = ctypes.byref(self._buf)

    def read(self, reg: Register) -> int:
        self._buf.value = 0
        _reg_read(self._uch, reg.uc, self._ref)
        return self._buf.value & reg.mask

    def read_id(self, uc_id: int) -> int:
        self._buf.value = 0
        _reg_read(self._uch, uc_id, self._ref)
        return self._buf.value

    def write(self, reg: Register, value: int) -> None:
        self._buf.value = value & reg.mask
        _reg_write(self._uch, reg.uc, self._ref)

    def write_id(self, uc_id: int, value: int) -> None:
        self._buf.value = value
        _reg_write(self._uch, uc_id, self._ref)


class FastHooks:
    """Hooks registered with our own C callbacks (kept alive here)."""

    def __init__(self, uc: unicorn.Uc) -> None:
        self._uch = uc._uch
        self._alive: dict[int, object] = {}

    def code(self, callback: Callable[[int, int, int, int], None], begin: int, end: int) -> int:
        return self._add(unicorn.UC_HOOK_CODE, HOOK_CODE(callback), begin, end)

    def intr(self, callback: Callable[[int, int, int], None]) -> int:
        return self._add(unicorn.UC_HOOK_INTR, HOOK_INTR(callback), 1, 0)

    def _add(self, kind: int, cfunc: Any, begin: int, end: int) -> int:
        handle = uc_hook_h()
        status = uclib.uc_hook_add(
            self._uch, ctypes.byref(handle), kind, ctypes.cast(cfunc, ctypes.c_void_p), None,
            ctypes.c_uint64(begin), ctypes.c_uint64(end),
        )
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)
        self._alive[handle.value] = cfunc
        return int(handle.value)

    def delete(self, handle: int) -> None:
        uclib.uc_hook_del(self._uch, uc_hook_h(handle))
        self._alive.pop(handle, None)
