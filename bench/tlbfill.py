"""Issue 38's TLB-fill row: what one TLB miss costs with kpsdk's C fill (tlbfill.c) and with the
Python fill it falls back to without gcc, on a loop loading one byte of each of 4,096 pages
(16 MiB) in turn: every load misses Unicorn's 256-entry TLB.  The C fill's growing of the TLB
(its flushes) is turned off here, so both fills answer every miss; the cost per miss is the
run's CPU time over the fills counted, Unicorn's own part of a miss included.

Called from ``bench/run.py``; ``python bench/tlbfill.py`` prints the numbers as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import kpsdk
from kpsdk.targets.unicorn import tlb

CODE, DATA, SPAN = 0x100000, 0x10000000, 0x1000000
# for (n = rdi; n; n--) for (p = DATA; p < DATA + 16 MiB; p += 4 KiB) eax += *p
LOOP = bytes.fromhex("31c048be" + DATA.to_bytes(8, "little").hex() + "48b9" + (DATA + SPAN).to_bytes(8, "little").hex()
                     + "03064881c6001000004839ce72f248ffcf75d9c3")


def _per_miss(native: bool, passes: int, reps: int) -> tuple[float, float, float]:
    saved = tlb._native, tlb._native_tried
    if not native:
        tlb._native, tlb._native_tried = None, True
    try:
        s = kpsdk.open("unicorn:x86_64")
    finally:
        tlb._native, tlb._native_tried = saved
    fill = s.target.tlb  # type: ignore[attr-defined]
    assert fill.native == native
    if fill._state is not None:
        fill._state.grow_at = 0  # every miss answered: no growing of the TLB
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, SPAN, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, LOOP)
    s.call(CODE, 1)
    per = []
    for _ in range(reps):
        before = fill.fills
        t = time.process_time()
        s.call(CODE, passes)
        per.append((time.process_time() - t) / (fill.fills - before) * 1e6)
    s.close()
    return statistics.median(per), min(per), max(per)


def bench_tlbfill(reps: int, log: Callable[[str], None]) -> dict[str, Any]:
    log(f"TLB fill: a miss at each of 4,096 pages, C fill and Python fill, {reps} rounds")
    c = _per_miss(True, 50, reps)
    py = _per_miss(False, 5, reps)
    return {"c_us": c, "python_us": py}


def rows(raw: dict[str, Any], row: Callable[..., Any], us: Callable[[float], str]) -> list[Any]:
    if "c_us" not in raw:
        return [row("T", "TLB miss, C fill vs Python fill", "n/a", "", "", "", raw.get("error", "not run"))]
    c, py = raw["c_us"], raw["python_us"]
    return [row("T", f"TLB miss answered by kpsdk's fill, Unicorn's part included (CPU per miss, median, range "
                f"{us(c[1])}-{us(c[2])}; Python fill {us(py[1])}-{us(py[2])})", us(c[0]),
                f"Python fill {us(py[0])}", f"{py[0] / c[0]:.1f}x cheaper", "info", "info")]


if __name__ == "__main__":
    out = bench_tlbfill(5, lambda m: None)
    out["load"] = os.getloadavg()
    print(json.dumps(out))
