"""Direct ctypes access to libunicorn, for the per-hit hot path.

The official binding's ``reg_read`` costs ~2.7 us here and wraps every hook
callback in two extra Python frames; calling ``uc_reg_read`` and registering
our own ``CFUNCTYPE`` callbacks costs a fraction of that (see
``docs/performance.md``).  Everything not on the hot path uses the binding.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.arch import Register

HOOK_CODE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
HOOK_INTR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)

# Our own handles on the same library, without ``argtypes``: ctypes then passes
# the handle (a c_void_p), the register id (a C int) and the byref() pointer
# as they are, which is ~3x cheaper per call than the binding's converting
# prototypes (0.41 us against 1.21 us for a read, measured here).
_lib = ctypes.CDLL(uclib._name)
_reg_read = _lib.uc_reg_read
_reg_write = _lib.uc_reg_write
_reg_read.restype = _reg_write.restype = ctypes.c_int
_mem_read = _lib.uc_mem_read
_mem_write = _lib.uc_mem_write
_mem_read.restype = _mem_write.restype = ctypes.c_int
_ctl = _lib.uc_ctl
_ctl.restype = ctypes.c_int
#: ``uc_ctl``'s control word for UC_CTL_TB_REMOVE_CACHE with two arguments, written
#: (``UC_CTL_WRITE`` in unicorn.h: ``type | nargs << 26 | UC_CTL_IO_WRITE << 30``)
_REMOVE_CACHE = unicorn.UC_CTL_TB_REMOVE_CACHE | 2 << 26 | unicorn.UC_CTL_IO_WRITE << 30


def memory_writer(uc: unicorn.Uc) -> Callable[[int, bytes], None]:
    """``uc.mem_write(addr, data)`` through ``uc_mem_write`` without the binding's
    argument conversions: registration writes a trap per breakpoint-path probe."""
    assert uc._uch is not None, "the Unicorn engine is closed"
    uch = ctypes.c_void_p(uc._uch.value)
    c_u64, c_size = ctypes.c_uint64, ctypes.c_size_t

    def write(addr: int, data: bytes) -> None:
        status = _mem_write(uch, c_u64(addr), data, c_size(len(data)))
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)

    return write


def memory_reader(uc: unicorn.Uc) -> Callable[[int, int], bytes]:
    """``uc.mem_read(addr, size)`` through ``uc_mem_read`` into a buffer kept for small
    reads: the binding's conversions and fresh buffer were most of the cost of
    decoding an instruction at registration (~8 us of it).  Raises ``UcError``."""
    assert uc._uch is not None, "the Unicorn engine is closed"
    uch = ctypes.c_void_p(uc._uch.value)
    c_u64, c_size = ctypes.c_uint64, ctypes.c_size_t
    small = ctypes.create_string_buffer(64)

    def read(addr: int, size: int) -> bytes:
        buf = small if size <= 64 else ctypes.create_string_buffer(size)
        status = _mem_read(uch, c_u64(addr), buf, c_size(size))
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)
        return buf.raw[:size]

    return read


#: the first piece of a string read (most are short); later pieces run to the page's end
CSTRING_FIRST = 256
PAGE = 0x1000


def cstring_reader(uc: unicorn.Uc) -> Callable[[int, int], bytes | None]:
    """``read(addr, max)``: a NUL-terminated string's bytes through ``uc_mem_read`` into one
    kept buffer, its end found by C (``c_char`` array ``.value``), where the chunked
    reads through the binding cost ~10 us per string.  A piece never crosses a page
    boundary (the next page may be unmapped); None where a page cannot be read."""
    assert uc._uch is not None, "the Unicorn engine is closed"
    uch = ctypes.c_void_p(uc._uch.value)
    c_u64, c_size = ctypes.c_uint64, ctypes.c_size_t
    buf = ctypes.create_string_buffer(PAGE + 1)  # + a NUL after the longest piece

    def read(addr: int, max: int) -> bytes | None:  # noqa: A002 - as Session.read_string
        out = b""
        size = CSTRING_FIRST
        while len(out) < max:
            at = addr + len(out)
            n = min(size, max - len(out), PAGE - at % PAGE)
            if _mem_read(uch, c_u64(at), buf, c_size(n)):
                return None
            buf[n] = b"\0"
            piece = buf.value
            out += piece
            if len(piece) < n:
                break
            size = PAGE
        return out

    return read


def cache_remover(uc: unicorn.Uc) -> Callable[[int, int], None]:
    """``uc.ctl_remove_cache(begin, end)`` without the binding's generic ``ctl`` path
    (~10 us there, a few hundred ns here): registration drops translations once or
    twice per probe."""
    assert uc._uch is not None, "the Unicorn engine is closed"
    uch = ctypes.c_void_p(uc._uch.value)
    c_u64 = ctypes.c_uint64

    def remove_cache(begin: int, end: int) -> None:
        status = _ctl(uch, _REMOVE_CACHE, c_u64(begin), c_u64(end))
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)

    return remove_cache


class FastRegs:
    """Register reads and writes through ``uc_reg_read``/``uc_reg_write``.

    ``read`` and ``write`` are closures over the engine handle and one 8-byte
    buffer: measured here, a closure call costs ~0.6 us against ~0.95 us for
    the same body as a method reading its state from slots.  The buffer is not
    cleared before a read: a narrower register leaves stale high bytes, which
    the register's mask removes.
    """

    __slots__ = ("read", "write", "args_reader", "_uch", "_keep")

    def __init__(self, uc: unicorn.Uc) -> None:
        assert uc._uch is not None, "the Unicorn engine is closed"
        uch = ctypes.c_void_p(uc._uch.value)
        buf = ctypes.c_uint64()
        ref = ctypes.byref(buf)
        reg_read, reg_write = _reg_read, _reg_write

        def args_reader(regs: tuple[Register, ...], stack: Callable[[int], int]) -> Callable[[int], int]:
            """``PtRegs.arg``: argument ``n`` read in one frame, its register's id and mask
            looked up in tuples; past the register arguments, ``stack(n)``."""
            ids, masks, count = tuple(r.uc for r in regs), tuple(r.mask for r in regs), len(regs)

            def arg(n: int) -> int:
                if n < count:
                    reg_read(uch, ids[n], ref)
                    return buf.value & masks[n]
                return stack(n)

            return arg

        def read(reg: Register) -> int:
            reg_read(uch, reg.uc, ref)
            return buf.value & reg.mask

        def write(reg: Register, value: int) -> None:
            buf.value = value & reg.mask
            reg_write(uch, reg.uc, ref)

        self.read: Callable[[Register], int] = read
        self.write: Callable[[Register, int], None] = write
        self.args_reader: Callable[[tuple[Register, ...], Callable[[int], int]], Callable[[int], int]] = args_reader
        self._uch = uch
        self._keep = (uch, buf, ref)

    def fetcher(self, reg: Register) -> tuple[Callable[[], object], ctypes.c_uint64]:
        """``(fetch, buf)``: after ``fetch()``, ``buf.value`` is ``reg``'s value.  ``fetch`` is
        ``uc_reg_read`` with its arguments bound by ``functools.partial``, so a hook that
        reads one register calls into C with no Python frame between (``read`` is one:
        ~0.1 us of a ~0.5 us hit).  The buffer is this reader's alone and starts zeroed,
        so a register narrower than 8 bytes needs no mask."""
        buf = ctypes.c_uint64()
        return functools.partial(_reg_read, self._uch, reg.uc, ctypes.byref(buf)), buf


class FastWords:
    """One machine word of memory read or written through ``uc_mem_read``/``uc_mem_write``.

    For the return probes' hot path (the return address at [sp] on x86): the
    binding's ``mem_read`` makes a string buffer and a bytearray per call,
    about four times the cost of this.  ``read`` returns None where the
    memory is not mapped.
    """

    __slots__ = ("read", "write", "_keep")

    def __init__(self, uc: unicorn.Uc, size: int, byteorder: str) -> None:
        assert uc._uch is not None, "the Unicorn engine is closed"
        uch = ctypes.c_void_p(uc._uch.value)
        buf = ctypes.c_uint64() if size == 8 else ctypes.c_uint32()
        ref = ctypes.byref(buf)
        n = ctypes.c_size_t(size)
        mem_read, mem_write = _mem_read, _mem_write
        swap = byteorder != sys.byteorder  # a big-endian target on a little-endian host
        mask = (1 << (8 * size)) - 1

        def flip(value: int) -> int:
            return int.from_bytes(value.to_bytes(size, "little"), "big")

        def read(addr: int) -> int | None:
            if mem_read(uch, ctypes.c_uint64(addr), ref, n):
                return None
            return flip(buf.value) if swap else buf.value

        def write(addr: int, value: int) -> bool:
            buf.value = flip(value & mask) if swap else value & mask
            return not mem_write(uch, ctypes.c_uint64(addr), ref, n)

        self.read: Callable[[int], int | None] = read
        self.write: Callable[[int, int], bool] = write
        self._keep = (uch, buf, ref, n)


class FastHooks:
    """Hooks registered with our own C callbacks (kept alive here)."""

    def __init__(self, uc: unicorn.Uc) -> None:
        self._uch = uc._uch
        self._alive: dict[int, object] = {}

    def code(self, callback: Callable[[int, int, int, int], None], begin: int, end: int) -> int:
        return self._add(unicorn.UC_HOOK_CODE, HOOK_CODE(callback), begin, end)

    def code_shared(self, cfunc: Any, begin: int, end: int) -> int:
        """A code hook calling ``cfunc``, a ``HOOK_CODE`` the caller made once and keeps alive:
        for hooks deleted from inside their own callback (ctypes does not hold the callback
        object while it runs, so :meth:`code`'s, freed by :meth:`delete`, could go under it)."""
        return self._add(unicorn.UC_HOOK_CODE, cfunc, begin, end)

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
