"""``kpsdk list -V/-L/--vars``: what the DWARF of a program or kernel says, as ``perf probe`` prints it.

``-V POINT`` is ``perf probe -V POINT``'s listing (the variables a probe can read at each place
the point resolves to), ``-L FUNC`` is ``perf probe -L FUNC``'s (the function's source with its
probeable lines numbered from the declaration), both from
:mod:`kpsdk.binfmt.dwarf.probepoints`; ``--vars`` lists the global variables with their C types.
Nothing runs: the file is read, its debug file found as :meth:`kpsdk.binfmt.dwarf.DebugInfo.open`
finds one, and the index is kept in kpsdk's cache.
"""

from __future__ import annotations

import sys
from pathlib import Path


def list_source(path: Path, vars_at: str | None, lines: str | None, globals_: bool, debug_dirs: list[str],
                source_dirs: list[str]) -> None:
    """Print each listing asked for, in the order -V, -L, --vars."""
    from kpsdk.binfmt.dwarf import DebugInfo
    from kpsdk.binfmt.dwarf.probepoints import format_lines, format_variables
    from kpsdk.cache import PrivateStore

    dbg = DebugInfo.open(path, debug_dir=debug_dirs, store=PrivateStore("dwarf"), source_dir=source_dirs)
    # written as they are: perf's listings are tab-separated, which a rich console would expand
    if vars_at is not None:
        sys.stdout.write(format_variables(dbg, vars_at))
    if lines is not None:
        sys.stdout.write(format_lines(dbg, lines))
    if globals_:
        sys.stdout.write(format_globals(dbg))
    sys.stdout.flush()


def format_globals(dbg: object) -> str:
    """The global variables, ``perf probe -V --externs``' way: a tab, the type, a tab, the name."""
    from kpsdk.binfmt.dwarf import DebugInfo

    assert isinstance(dbg, DebugInfo)
    found = sorted({(v.type.perf_name, v.name) for v in dbg.globals()}, key=lambda tv: (tv[1], tv[0]))
    out = [f"Global variables in {dbg.path.name}"]
    out += [f"\t\t{kind}\t{name}" for kind, name in found] or ["\t\t(No global variables)"]
    return "\n".join(out) + "\n"
