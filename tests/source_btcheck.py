"""Run inside gdb (``gdb -batch -x tests/source_btcheck.py``): gdb's backtrace at the first hit of a
breakpoint, each physical frame as (file, link-time address), for tests/test_source_gdb.py.

The spec (JSON, path in ``$KPSDK_GDB_SPEC``): ``program``, ``args``, ``break`` (a function name),
``out``; for a qemu-user target ``remote`` (``host:port``) and ``sysroot``; ``stdin`` a file the
program reads.  Runtime addresses become link-time ones through each file's ``.text``: gdb's
``info files`` gives where it is, the file's section header where it was linked.
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path[:0] = json.loads(os.environ["KPSDK_GDB_SYSPATH"])

import gdb  # noqa: E402  (gdb's own module, importable only inside gdb)

from kpsdk.binfmt.dwarf.debugfile import read_elf  # noqa: E402

SPEC = json.load(open(os.environ["KPSDK_GDB_SPEC"]))


def text_spans() -> list[tuple[int, int, str, int]]:
    """(low, high, file, bias) of each file's .text as loaded now."""
    out = []
    for line in gdb.execute("info files", to_string=True).splitlines():
        m = re.match(r"\s*(0x[0-9a-f]+) - (0x[0-9a-f]+) is \.text(?: in (\S+))?$", line)
        if not m:
            continue
        path = m.group(3) or SPEC["program"]
        try:
            section = read_elf(__import__("pathlib").Path(path)).section(".text")
        except (OSError, ValueError):
            continue
        if section is None:
            continue
        low = int(m.group(1), 16)
        out.append((low, int(m.group(2), 16), path, low - section.header["sh_addr"]))
    return out


def main() -> None:
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    if SPEC.get("sysroot"):
        gdb.execute(f"set sysroot {SPEC['sysroot']}")
    gdb.execute(f"file {SPEC['program']}")
    gdb.execute("set breakpoint pending on")
    if SPEC.get("remote"):
        # the libraries are mapped once main runs: the break on a libc function is set there (a
        # pending one is not resolved through QEMU's stub)
        gdb.execute(f"target remote {SPEC['remote']}")
        gdb.execute(f"tbreak {SPEC.get('first', 'main')}", to_string=True)
        gdb.execute("continue", to_string=True)
        gdb.execute(f"break {SPEC['break']}", to_string=True)
        gdb.execute("continue", to_string=True)
    else:
        gdb.execute(f"break {SPEC['break']}", to_string=True)
        args = " ".join(SPEC.get("args", []))
        stdin = f" < {SPEC['stdin']}" if SPEC.get("stdin") else ""
        gdb.execute(f"run {args}{stdin} > /dev/null", to_string=True)
    mask = (1 << 64) - 1 if gdb.lookup_type("long").sizeof == 8 else (1 << 32) - 1
    spans = text_spans()
    frames = []
    frame = gdb.newest_frame()
    while frame is not None and len(frames) < 64:
        if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            pc = frame.pc() & mask
            where = next(((os.path.basename(p), pc - bias) for low, high, p, bias in spans if low <= pc < high),
                         ("?", pc))
            frames.append([*where, frame.name() or ""])
        frame = frame.older()
    with open(SPEC["out"], "w") as out:
        json.dump({"frames": frames}, out)
    try:
        gdb.execute("kill", to_string=True)
    except gdb.error:
        pass


main()
