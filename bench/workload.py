"""The hand-written x86_64 loop every comparison runs, and the timing helpers.

Pure Python with no kpsdk import: ``qiling_half.py`` imports it from the
separate Qiling venv, so kpsdk, plain Unicorn and Qiling run the same bytes.

Layout (position independent; ``n`` is an immediate so no register set-up is
needed on any side)::

    0x00  b9 nn nn nn nn   mov  ecx, n
    0x05  31 c0            xor  eax, eax
    0x07  eb 04            jmp  0x0d
    0x09  8d 47 01         inc: lea eax, [rdi+1]      <- the probed instruction
    0x0c  c3                    ret
    0x0d  89 cf            L:   mov edi, ecx
    0x0f  89 c6                 mov esi, eax
    0x11  e8 f3 ff ff ff        call inc
    0x16  ff c9                 dec ecx
    0x18  75 f3                 jnz L
    0x1a  c3               ret  (kpsdk's ``call()`` returns here; Unicorn and
                                 Qiling stop at 0x1a before it)

The probed ``lea`` is boostable (no pc use), so every kpsdk mechanism applies.
"""

from __future__ import annotations

import gc
import struct
import time
from collections.abc import Callable

#: offset of ``inc`` (the probed instruction)
INC_OFF = 0x09
#: offset where the loop is done (Unicorn's ``until``; Qiling's end of code)
END_OFF = 0x1A
#: where kpsdk and plain Unicorn map the loop
CODE = 0x400000
#: a region of nops nothing ever executes, for probes "elsewhere"
NOPS = 0x10000000


def loop_code(n: int, with_ret: bool = True) -> bytes:
    """The loop calling ``inc`` ``n`` times (``n`` >= 1)."""
    if not 1 <= n < 2**31:
        raise ValueError("n must be in 1 .. 2**31-1")
    code = (
        b"\xb9" + struct.pack("<I", n) + b"\x31\xc0" + b"\xeb\x04"
        + b"\x8d\x47\x01\xc3"
        + b"\x89\xcf\x89\xc6" + b"\xe8" + struct.pack("<i", INC_OFF - 0x16) + b"\xff\xc9\x75\xf3"
    )
    assert len(code) == END_OFF
    return code + (b"\xc3" if with_ret else b"")


def best_time(fn: Callable[[], object], reps: int) -> float:
    """Best wall time of ``reps`` calls of ``fn`` (after one warm-up call), GC off."""
    fn()
    enabled = gc.isenabled()
    gc.disable()
    try:
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        if enabled:
            gc.enable()


def race(configs: dict[str, tuple[Callable[[], object], Callable[[], object] | None, Callable[[], object] | None]],
         reps: int, clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Best time of each ``run`` over ``reps`` rounds, the configurations interleaved.

    ``clock``: wall time by default; ``time.process_time`` on a machine loaded by
    other processes (the CPU this process spent, descheduled time left out).

    ``configs`` maps a name to ``(run, on, off)``: ``on()`` before the timed
    run sets the configuration up (registers a probe...), ``off()`` after it
    undoes it.  Interleaving makes slow phases of a noisy machine hit every
    configuration alike; the minimum keeps the undisturbed runs.
    """
    best = dict.fromkeys(configs, float("inf"))
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            for name, (run, on, off) in configs.items():
                if on is not None:
                    on()
                t0 = clock()
                run()
                t = clock() - t0
                if off is not None:
                    off()
                best[name] = min(best[name], t)
    finally:
        if enabled:
            gc.enable()
    return best


def per_hit_us(probed: float, base: float, hits: int) -> float:
    """Per-hit cost in microseconds: probed time minus the unprobed baseline."""
    return (probed - base) / hits * 1e6
