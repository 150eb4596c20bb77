"""The Qiling half of bench/linuxprogs.py, run in Qiling's own venv (``bench/.qiling-venv``).

Prints one JSON object.  ``sort LINES_FILE``: Debian's busybox ``sort`` on that input,
from a rootfs holding a copy of busybox (Qiling resolves the program inside its
rootfs); ``{"seconds", "output_sha256"}`` or ``{"error"}``.  ``hot PROG N REPS``: the
static hotlibc program, unhooked and with ``ql.hook_address`` on ``atoi`` reading its
argument; ``{"plain_s", "hooked_s", "hits"}`` (best of REPS each).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def qiling(argv: list[str], rootfs: str, stdin: bytes) -> tuple[object, object]:
    from qiling import Qiling
    from qiling.const import QL_VERBOSE
    from qiling.extensions import pipe

    ql = Qiling(argv, rootfs, verbose=QL_VERBOSE.DISABLED)
    ql.os.stdin = pipe.SimpleInStream(sys.stdin.fileno())
    ql.os.stdin.write(stdin)
    out = pipe.SimpleOutStream(sys.stdout.fileno())
    ql.os.stdout = out
    return ql, out


def sort(lines_file: str) -> dict[str, object]:
    data = Path(lines_file).read_bytes()
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "bin").mkdir()
        shutil.copy("/bin/busybox", Path(root) / "bin" / "busybox")
        start = time.perf_counter()
        try:
            ql, out = qiling([f"{root}/bin/busybox", "sort"], root, data)
            ql.run()  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - reported as this row's result, not hidden
            return {"error": f"{type(e).__name__}: {e}"}
        seconds = time.perf_counter() - start
        got = out.read()  # type: ignore[attr-defined]
    return {"seconds": seconds, "output_sha256": hashlib.sha256(got).hexdigest(), "bytes": len(got)}


def hot(prog: str, n: int, reps: int) -> dict[str, object]:
    from elftools.elf.elffile import ELFFile

    with open(prog, "rb") as f:
        atoi = next(s["st_value"] for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                    if s.name == "atoi")
    with tempfile.TemporaryDirectory() as root:
        shutil.copy(prog, Path(root) / "hot")
        hits = [0]

        def on_atoi(ql: object) -> None:
            hits[0] += 1
            if ql.arch.regs.rdi == 0:  # type: ignore[attr-defined]  # keep the read
                print("null")

        def once(hooked: bool) -> float:
            ql, _ = qiling([f"{root}/hot", str(n)], root, b"")
            if hooked:
                ql.hook_address(on_atoi, atoi)  # type: ignore[attr-defined]
            start = time.perf_counter()
            ql.run()  # type: ignore[attr-defined]
            return time.perf_counter() - start

        plain = min(once(False) for _ in range(reps))
        hooked = []
        for _ in range(reps):
            hits[0] = 0
            hooked.append(once(True))
    return {"plain_s": plain, "hooked_s": min(hooked), "hits": hits[0]}


def main() -> None:
    if sys.argv[1] == "sort":
        result = sort(sys.argv[2])
    else:
        result = hot(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    sys.stdout.flush()
    print("\n" + json.dumps(result))


if __name__ == "__main__":
    main()
