"""The Qiling half of comparison 3, run in its own venv (``bench/.qiling-venv``).

Qiling may pin another Unicorn than kpsdk's, so it never shares a process with
kpsdk: ``run.py`` starts this script with the Qiling venv's python and reads
one JSON object from its stdout.  Qiling runs the same bytes as kpsdk
(``workload.loop_code``) in shellcode mode (no rootfs needed), with
``ql.hook_address`` on ``inc``.

Usage: ``python qiling_half.py N REPS``
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import END_OFF, INC_OFF, loop_code, per_hit_us, race  # noqa: E402


def main() -> None:
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    import unicorn
    from qiling import Qiling
    from qiling import __version__ as qiling_version
    from qiling.const import QL_ARCH, QL_OS, QL_VERBOSE

    code = loop_code(n, with_ret=False)  # Qiling's shellcode run ends at the end of the code
    assert len(code) == END_OFF
    ql = Qiling(code=code, archtype=QL_ARCH.X8664, ostype=QL_OS.LINUX, verbose=QL_VERBOSE.DISABLED)
    base_addr = ql.loader.load_address
    inc = base_addr + INC_OFF

    def run() -> None:
        ql.run()

    def flush() -> None:  # a hook added after translation fires only once the TB cache is cleared
        ql.uc.ctl_remove_cache(base_addr, base_addr + len(code))

    run()
    if ql.arch.regs.rax != 2:
        raise SystemExit(f"unexpected loop result {ql.arch.regs.rax}")

    calls = [0]

    def empty(ql: Qiling) -> None:
        calls[0] += 1

    def two_regs(ql: Qiling) -> None:
        calls[0] += 1
        a = ql.arch.regs.rdi
        b = ql.arch.regs.rsi
        if a == -1:  # keep the reads
            print(b)

    handles: list[object] = []

    def hooked(cb: object) -> tuple[object, object, object]:
        def on() -> None:
            handles.append(ql.hook_address(cb, inc))
            flush()

        def off() -> None:
            ql.hook_del(handles.pop())
            flush()

        return run, on, off

    run()  # warm
    best = race({"base": (run, None, None), "empty": hooked(empty), "two_regs": hooked(two_regs)}, reps)
    if calls[0] != 2 * reps * n:
        raise SystemExit(f"the Qiling hooks ran {calls[0]} times, expected {2 * reps * n}")
    out = {"qiling": qiling_version, "unicorn": unicorn.__version__, "hits": n, "reps": reps,
           "base_s": best["base"]}
    for name in ("empty", "two_regs"):
        out[f"{name}_s"] = best[name]
        out[f"{name}_us"] = per_hit_us(best[name], best["base"], n)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
