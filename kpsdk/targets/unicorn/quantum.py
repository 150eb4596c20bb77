"""Counting the blocks a task runs, to end its quantum at a point the program decides.

The Linux layer's scheduler (:mod:`kpsdk.targets.unicorn.linux.sched`) must take the CPU from
a task that runs on without a system call (a spinning thread), and must do it at the same
place in every run.  Host time cannot give that; a count of executed blocks can.  Unicorn's
own instruction count (``emu_start(count=N)``) adds a callback at every instruction and made
a loop 10x slower here; a block hook in C (``quantum.c``, built with gcc at first use by
:func:`kpsdk.nativebuild.build_shared_object`) costs ~1.5x on a three-instruction loop and
less on real code.  Without a compiler the same hook runs in Python (correct, slower).

The counter is installed only when a second task first exists: a single-threaded program
never pays for it.  A block hook fires only in code translated after it was added, so
installing it drops every translation once.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.errors import TargetError, ToolMissingError
from kpsdk.nativebuild import build_shared_object

SOURCE = Path(__file__).with_name("quantum.c")


class _State(ctypes.Structure):
    _fields_ = [("left", ctypes.c_uint64), ("counted", ctypes.c_uint64), ("stop", ctypes.c_void_p),
                ("expired", ctypes.c_uint64)]


_HOOK_BLOCK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
_native: Any = None
_native_tried = False


def _native_hook() -> Any:
    """The C hook's address, or None where it cannot be built (no gcc: the Python hook serves)."""
    global _native, _native_tried
    if not _native_tried:
        _native_tried = True
        try:
            lib = ctypes.CDLL(str(build_shared_object("unicorn-native", SOURCE, "kpsdk's quantum counter")))
        except (ToolMissingError, TargetError, OSError):
            return None
        _native = (lib, ctypes.cast(lib.kpsdk_quantum_block, ctypes.c_void_p))
    return None if _native is None else _native[1]


class QuantumCounter:
    """A block counter on one Unicorn engine: :meth:`arm` a quantum, run, read :attr:`counted`."""

    def __init__(self, uc: unicorn.Uc, prefer_native: bool = True) -> None:
        self.uc = uc
        self.state = _State(0, 0, ctypes.cast(uclib.uc_emu_stop, ctypes.c_void_p).value, 0)
        self._handle = uc_hook_h()
        hook = _native_hook() if prefer_native else None
        #: whether the C hook counts (else a Python callback does: ~1 us a block)
        self.native = hook is not None
        if hook is None:
            state, stop = self.state, uclib.uc_emu_stop

            def count(handle: int, address: int, size: int, user: int) -> None:
                state.counted += 1
                if state.left:
                    state.left -= 1
                    if not state.left:
                        state.expired = 1
                        stop(ctypes.c_void_p(handle))

            self._callback = _HOOK_BLOCK(count)  # kept: Unicorn holds only its address
            hook = ctypes.cast(self._callback, ctypes.c_void_p)
        assert uc._uch is not None
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(self._handle), unicorn.UC_HOOK_BLOCK, hook,
                                   ctypes.byref(self.state), ctypes.c_uint64(1), ctypes.c_uint64(0))
        if status != unicorn.UC_ERR_OK:
            raise TargetError(f"cannot add the scheduler's block counter: {unicorn.UcError(status)}")
        uc.ctl_flush_tb()  # type: ignore[attr-defined]  # code translated before this point would run uncounted

    def arm(self, blocks: int) -> None:
        """Stop the engine after ``blocks`` more blocks (0: never)."""
        self.state.left = blocks
        self.state.expired = 0

    @property
    def expired(self) -> bool:
        return bool(self.state.expired)

    def take(self) -> int:
        """Blocks counted since the last take."""
        n = self.state.counted
        self.state.counted = 0
        return int(n)

    def close(self) -> None:
        if self.uc._uch is not None:
            uclib.uc_hook_del(self.uc._uch, self._handle)
