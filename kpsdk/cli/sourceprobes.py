"""``kpsdk probe --kprobe/--uprobe`` by source: ``'parse_line:12 len buf->size'``, each hit printed
with the variables' values.

A probe option's text is perf probe's definition (``POINT [VAR...]``): POINT a source probe point
(``FUNC:RELLINE``, ``FILE:LINE``, ``FUNC@FILE``, ``FUNC;PATTERN``, or a function: every inlined
copy of it too, as perf probes them) and each VAR a variable path (``len``, ``buf->size``,
``argv[1]``) or ``$vars``/``$params``.  A ``--uprobe`` names its file first (``PATH:POINT``), or
none: the program.  :func:`split_probe` tells such a text from a plain ``SYM+OFF`` (left to the
old path), and :func:`arm` makes one probe per address the point resolves to once the session is
open, whose hits print::

    [3] parse_line+0x36 (0x555555555336) demo.c:75 len=7 buf->size=16 line=0x555555556004 "a b c"

Nothing here reads DWARF before the session: the point is resolved with the session's debug
information (:mod:`kpsdk.debuginfo`, ``--debug-dir``), and a variable that is not in scope or
has no value at a hit is printed as such (``total=<optimized out>``), never an error.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from kpsdk.cli.hitregs import hit_head
from kpsdk.debuginfo import is_source_point
from kpsdk.errors import DebugInfoError, KprobeError, OptimizedOutError, TargetFault

if TYPE_CHECKING:
    from rich.console import Console

    from kpsdk.binfmt.dwarf import Value
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: the most bytes a ``char *`` variable's string shows
STRING_SHOWN = 64


@dataclass
class SourceProbe:
    """One ``--kprobe``/``--uprobe`` text by source: ``letter`` ``k`` or ``u``, the point, the
    uprobe's file (None: the program), the variables to print."""

    letter: str
    text: str
    point: str
    path: str | None = None
    variables: list[str] = field(default_factory=list)
    probes: list[Any] = field(default_factory=list)


def split_probe(text: str, letter: str) -> SourceProbe | None:
    """``text`` as a probe by source, or None when it is a plain location (``SYM``, ``SYM+0x4``,
    ``0xADDR``, ``PATH:SYM``) that the option's old path takes."""
    words = text.split()
    if not words:
        return None
    head, variables = words[0], words[1:]
    if letter == "k":
        if not variables and not is_source_point(head):
            return None
        return SourceProbe("k", text.strip(), head, None, variables)
    path, point = _uprobe_point(head)
    if point is None:
        return None if not variables else SourceProbe("u", text.strip(), head.rpartition(":")[2],
                                                      head.rpartition(":")[0] or None, variables)
    return SourceProbe("u", text.strip(), point, path, variables)


def _uprobe_point(head: str) -> tuple[str | None, str | None]:
    """``(path, point)`` of a uprobe's ``[PATH:]POINT`` with a source point (PATH: what precedes a
    ``:`` when it names a file or holds a ``/``; none: the program's); ``(None, None)`` else."""
    for i in range(len(head) - 1, 0, -1):
        if head[i] == ":" and is_source_point(head[i + 1:]) and ("/" in head[:i] or Path(head[:i]).is_file()):
            return head[:i], head[i + 1:]
    return (None, head) if is_source_point(head) else (None, None)


def arm(session: Session, probe: SourceProbe, con: Console, hit: list[int], stack: bool, fallback: Any) -> list[Any]:
    """The probes of ``probe``, one per address its point resolves to (not registered yet), each
    printing its hits: the variables when some are named (and with ``stack`` the call stack),
    else what ``fallback()`` (the option's usual pre_handler) prints."""
    reg = session.registry
    if probe.letter == "k":
        if probe.variables and (is_source_point(probe.point) or _has_dwarf(session)):
            # variables to read: where perf puts such a probe (past an unoptimized prologue)
            try:
                places = [{"addr": p.address} for p in session.debug.points(probe.point, with_variables=True)]
            except DebugInfoError as e:
                raise KprobeError(errno.ENOENT, f"{probe.point!r}: {e}") from None
        else:
            places = reg.probe_types["kprobe"].expand_location(session, probe.point)  # type: ignore[misc]
        cls = reg.probe_types["kprobe"].probe_class
        probe.probes = [cls(**place, pre_handler=_printer(session, probe, con, hit, stack) if probe.variables
                            else fallback()) for place in places]
        return probe.probes
    from kpsdk.plugins.uprobe_source import source_locations
    from kpsdk.plugins.uprobes import Uprobe

    path = probe.path or str(session.debug.program().path)
    try:
        places = source_locations(path, probe.point, [session], with_variables=bool(probe.variables))
    except KprobeError:
        if probe.variables and not is_source_point(probe.point):  # PATH:SYM VAR...: a symbol's entry
            return [Uprobe.parse(f"{path}:{probe.point}",
                                 pre_handler=_printer(session, probe, con, hit, stack))]
        raise
    probe.probes = [Uprobe(str(p["path"]), int(p["offset"]), pre_handler=_printer(session, probe, con, hit, stack)
                           if probe.variables else fallback()) for p in places]
    return probe.probes


def _has_dwarf(session: Session) -> bool:
    """Whether the session's program (or kernel) has debug information."""
    try:
        return session.debug.has_debug_info(session.debug.program().path)
    except DebugInfoError:
        return False


def show_value(value: Value) -> str:
    """A value as gdb's ``print`` shows it; a ``char *``'s string after its address."""
    text = str(value)
    real = value.type.strip()
    target = real.target.strip() if real.kind == "pointer" and real.target is not None else None
    if target is not None and target.kind == "base" and target.encoding in ("signed_char", "unsigned_char"):
        try:
            raw = value.string(STRING_SHOWN + 1)
        except (TargetFault, LookupError):
            return f"{text} <unreadable>"
        shown = raw[:STRING_SHOWN].decode("utf-8", "backslashreplace").replace('"', '\\"')
        return f'{text} "{shown}"' + ("..." if len(raw) > STRING_SHOWN else "")
    return text


def read_variables(regs: PtRegs, variables: list[str]) -> list[str]:
    """``NAME=VALUE`` of each variable (``$vars``/``$params`` expanded) at the hit; a variable
    without a value here shows why in brackets."""
    out = []
    for name in variables:
        if name in ("$vars", "$params", "$locals"):
            for var, value in regs.vars(name).items():
                out.append(f"{var}={_shown(value)}")
            continue
        try:
            out.append(f"{name}={show_value(regs.var(name))}")
        except OptimizedOutError:
            out.append(f"{name}=<optimized out>")
        except (DebugInfoError, TargetFault) as e:
            out.append(f"{name}=<{e}>")
    return out


def _shown(value: Value | DebugInfoError) -> str:
    if isinstance(value, OptimizedOutError):
        return "<optimized out>"
    if isinstance(value, DebugInfoError):
        return f"<{value}>"
    try:
        return show_value(value)
    except TargetFault as e:
        return f"<{e}>"


def _printer(session: Session, probe: SourceProbe, con: Console, hit: list[int], stack: bool) -> Any:
    """A pre_handler printing the hit's place, source line and variables."""
    lines: dict[int, str] = {}

    def pre(p: Any, regs: PtRegs) -> int:
        hit[0] += 1
        ip = regs.ip
        if ip not in lines:
            lines[ip] = _source_line(session, ip)
        text = hit_head(session, hit[0]).append(f"{session.symbols.format(ip)} ({ip:#x})", style="cyan")
        if lines[ip]:
            text.append(f" {lines[ip]}", style="dim")
        text.append(" " + " ".join(read_variables(regs, probe.variables)))
        con.print(text, soft_wrap=True)
        if stack:
            print_stack(session, con, regs)
        return 0

    return pre


def print_stack(session: Session, con: Console, regs: PtRegs) -> None:
    """The hit's call stack, one ``=> sym+0xoff (ADDRESS)`` line a frame after the first, as
    ftrace's stacktrace lists callers (:meth:`kpsdk.Session.backtrace`: CFI first)."""
    for frame in session.backtrace(regs)[1:]:
        con.print(Text(f"    => {frame.where} ({frame.pc:#x})" + ("  [kretprobe]" if frame.trampoline else ""),
                       style="dim"), soft_wrap=True, highlight=False)


def _source_line(session: Session, pc: int) -> str:
    """``file.c:LINE`` of the code at ``pc`` ("" without debug information)."""
    from kpsdk.binfmt.dwarf import line_at

    where = session.debug.file_at(pc)
    if where is None:
        return ""
    try:
        found = line_at(session.debug.open(where.path), pc - where.bias)
    except DebugInfoError:
        return ""
    return f"{found[0].rsplit('/', 1)[-1]}:{found[1]}" if found else ""
