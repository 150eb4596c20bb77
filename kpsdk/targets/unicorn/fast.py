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
from typing import TYPE_CHECKING, Any

import unicorn
from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib

from kpsdk.arch import Register
from kpsdk.regs import bad_argument_number

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.engine import ExitChecks

HOOK_CODE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
HOOK_INTR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)

# Our own handles on the same library, without ``argtypes``: ctypes then passes
# the handle (a c_void_p), the register id (a C int) and the byref() pointer
# as they are, which is ~3x cheaper per call than the binding's converting
# prototypes (0.41 us against 1.21 us for a read, measured here).
_lib = ctypes.CDLL(uclib._name)
_reg_read = _lib.uc_reg_read
_reg_write = _lib.uc_reg_write
_reg_read_batch = _lib.uc_reg_read_batch
_reg_read.restype = _reg_write.restype = _reg_read_batch.restype = ctypes.c_int
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


#: how many register arguments one ``uc_reg_read_batch`` reads at a hit's first argument
#: read.  Measured here (CPU time, x86_64): one ``uc_reg_read`` 0.43 us, a batch of
#: 1 / 2 / 3 / 6 registers 0.52 / 0.53 / 0.60 / 0.63 us.  Two covers the usual handler
#: (one or two arguments) for ~0.1 us more than a single read where it reads one.
SNAPSHOT = 2


class FastRegs:
    """Register reads and writes through ``uc_reg_read``/``uc_reg_write``.

    ``read`` and ``write`` are closures over the engine handle and one 8-byte
    buffer: measured here, a closure call costs ~0.6 us against ~0.95 us for
    the same body as a method reading its state from slots.  The buffer is not
    cleared before a read: a narrower register leaves stale high bytes, which
    the register's mask removes.

    ``hit`` is the per-hit state :class:`~kpsdk.regs.PtRegs` shares with the
    hook paths: ``[new ip, probed address, argument snapshot or None]``.  The
    snapshot is what makes ``regs.arg(0)`` and ``regs.arg(1)`` cheap: the ctypes
    call itself is most of a register read (~0.4 us here), so the first of them
    read in a hit fetches both in one ``uc_reg_read_batch`` and the other is an
    index (:data:`SNAPSHOT`).  Every per-hit reset clears it, and so does every
    write here (a handler writing ``rdi`` then reading ``arg(0)`` sees its write).
    """

    __slots__ = ("read", "write", "args_reader", "getter", "hit", "_uch", "_keep")

    def __init__(self, uc: unicorn.Uc) -> None:
        assert uc._uch is not None, "the Unicorn engine is closed"
        uch = ctypes.c_void_p(uc._uch.value)
        buf = ctypes.c_uint64()
        ref = ctypes.byref(buf)
        reg_read, reg_write, read_batch = _reg_read, _reg_write, _reg_read_batch
        hit: list[Any] = [None, None, None]
        keep: list[object] = [uch, buf, ref]

        snap: dict[int, int] = {}  # register id -> its index in the argument snapshot
        batch: list[Any] = []  # (ids, vals, ptrs, count) once args_reader made them

        def args_reader(regs: tuple[Register, ...], stack: Callable[[int], int]) -> Callable[[int], int]:
            """``PtRegs.arg``: the first :data:`SNAPSHOT` arguments from the hit's snapshot
            (taken by the first of them read in the hit, one C call for both), the other
            register arguments read at once, and past those ``stack(n)``."""
            count = len(regs)
            masks = tuple(r.mask for r in regs)
            uc_ids = [r.uc for r in regs if r.uc is not None]
            assert len(uc_ids) == count, "an argument register Unicorn does not have"
            snapped = min(count, SNAPSHOT)
            ids = (ctypes.c_int * max(snapped, 1))(*uc_ids[:snapped])
            vals = (ctypes.c_uint64 * max(snapped, 1))()  # zeroed: a 4-byte register leaves 0s above it
            base = ctypes.addressof(vals)
            ptrs = (ctypes.c_void_p * max(snapped, 1))(*(base + 8 * i for i in range(snapped)))
            keep.append((ids, vals, ptrs))
            batch[:] = [ids, vals, ptrs, snapped]
            snap.clear()
            snap.update((rid, i) for i, rid in enumerate(uc_ids[:snapped]))
            ids_all = tuple(uc_ids)

            def arg(n: int) -> int:
                try:
                    if 0 <= n < snapped:
                        if hit[2] is None:
                            read_batch(uch, ids, ptrs, snapped)
                            hit[2] = vals
                        return vals[n] & masks[n]
                    if 0 <= n < count:
                        reg_read(uch, ids_all[n], ref)
                        return buf.value & masks[n]
                except TypeError:
                    raise bad_argument_number(n) from None
                return stack(n)  # refuses a negative n

            return arg

        def getter(reg: Register) -> Callable[[object], int]:
            """The ``fget`` of ``PtRegs``'s property for ``reg``, one Python frame: an
            argument register through the hit's snapshot, any other one read at once."""
            rid, mask = reg.uc, reg.mask
            index = snap.get(rid) if rid is not None else None
            if index is not None:
                ids, vals, ptrs, count = batch

                def get_arg(_regs: object) -> int:
                    if hit[2] is None:
                        read_batch(uch, ids, ptrs, count)
                        hit[2] = vals
                    return vals[index] & mask

                return get_arg

            def get(_regs: object) -> int:
                reg_read(uch, rid, ref)
                return buf.value & mask

            return get

        def read(reg: Register) -> int:
            reg_read(uch, reg.uc, ref)
            return buf.value & reg.mask

        def write(reg: Register, value: int) -> None:
            hit[2] = None
            buf.value = value & reg.mask
            reg_write(uch, reg.uc, ref)

        self.read: Callable[[Register], int] = read
        self.write: Callable[[Register, int], None] = write
        self.args_reader: Callable[[tuple[Register, ...], Callable[[int], int]], Callable[[int], int]] = args_reader
        self.getter: Callable[[Register], Callable[[object], int]] = getter
        self.hit = hit
        self._uch = uch
        self._keep = keep

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
    """Hooks registered with our own C callbacks (kept alive here).

    ``checks``: told of every hook that may stop the engine or move the pc inside a block
    (code hooks here, memory hooks through :meth:`mid_block_added`), so that Unicorn's exit
    checks after loads and stores are made only while one exists (:mod:`.engine`)."""

    def __init__(self, uc: unicorn.Uc, checks: ExitChecks | None = None) -> None:
        self._uch = uc._uch
        self._alive: dict[int, object] = {}
        self._checks = checks
        self._mid_block: set[int] = set()  # the code hooks among _alive

    def code(self, callback: Callable[[int, int, int, int], None], begin: int, end: int) -> int:
        return self._add(unicorn.UC_HOOK_CODE, HOOK_CODE(callback), begin, end)

    def code_shared(self, cfunc: Any, begin: int, end: int, mid_block: bool = True) -> int:
        """A code hook calling ``cfunc``, a ``HOOK_CODE`` the caller made once and keeps alive:
        for hooks deleted from inside their own callback (ctypes does not hold the callback
        object while it runs, so :meth:`code`'s, freed by :meth:`delete`, could go under it).
        ``mid_block=False``: the hook never stops the engine nor moves the pc (Unicorn's exit
        checks can stay off for it: :mod:`.engine`)."""
        return self._add(unicorn.UC_HOOK_CODE, cfunc, begin, end, mid_block)

    def intr(self, callback: Callable[[int, int, int], None]) -> int:
        return self._add(unicorn.UC_HOOK_INTR, HOOK_INTR(callback), 1, 0)

    def _add(self, kind: int, cfunc: Any, begin: int, end: int, mid_block: bool = True) -> int:
        handle = uc_hook_h()
        status = uclib.uc_hook_add(
            self._uch, ctypes.byref(handle), kind, ctypes.cast(cfunc, ctypes.c_void_p), None,
            ctypes.c_uint64(begin), ctypes.c_uint64(end),
        )
        if status != unicorn.UC_ERR_OK:
            raise unicorn.UcError(status)
        self._alive[handle.value] = cfunc
        if kind == unicorn.UC_HOOK_CODE and mid_block:
            self._mid_block.add(int(handle.value))
            self.mid_block_added()
        return int(handle.value)

    def delete(self, handle: int) -> None:
        uclib.uc_hook_del(self._uch, uc_hook_h(handle))
        self._alive.pop(handle, None)
        if handle in self._mid_block:
            self._mid_block.discard(handle)
            self.mid_block_deleted()

    def mid_block_added(self) -> None:
        """A hook that may stop the engine inside a block exists (a memory hook added elsewhere)."""
        if self._checks is not None:
            self._checks.added()

    def mid_block_deleted(self) -> None:
        if self._checks is not None:
            self._checks.deleted()
