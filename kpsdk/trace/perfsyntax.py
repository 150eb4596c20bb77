"""perf probe's syntax in ``kpsdk trace``: definitions such as ``'parse_line:12 len buf->size:u32'``
turned into the ``uprobe_events``/``kprobe_events`` lines they mean, before anything runs.

A definition whose first word is not ``p``, ``r``, ``rN`` or ``-`` (with an optional
``:[GRP/]EVENT``) is perf probe's ``[[GROUP:]EVENT=]POINT [ARG...]``
(:func:`kpsdk.binfmt.dwarf.perfdefs.is_perf_definition`).  It is translated with the DWARF of
the program it probes (``-x PROG``; by default the program TARGET runs: uprobe lines on it) or
of the kernel (``--symbols vmlinux``: kprobe lines, ``SYM+OFF``), one line per address, named as
perf names them (group ``probe_PROG`` or ``probe``, event ``FUNC``, ``FUNC_LN``,
``FUNC__return``; several places of one point get perf's ``_1``, ``_2`` suffixes), so the trace
prints ftrace's format with perf's names.  ``kpsdk trace --definition`` prints the lines as
``perf probe -D`` does instead of running them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.errors import DebugInfoError, PerfSyntaxError

if TYPE_CHECKING:  # the DWARF reader (pyelftools) is imported when a definition needs it, not for --help
    from kpsdk.binfmt.dwarf.perfdefs import TraceLine


def has_perf_syntax(definitions: Sequence[str]) -> bool:
    """Whether any of ``definitions`` is written in perf probe's syntax."""
    from kpsdk.binfmt.dwarf.perfdefs import is_perf_definition

    return any(is_perf_definition(d) for d in definitions)


def translate_all(definitions: Sequence[str], program: str | os.PathLike[str] | None,
                  kernel: str | os.PathLike[str] | None, debug_dirs: Sequence[str] = (), *,
                  runnable: bool = True) -> list[TraceLine | str]:
    """Each definition in perf's syntax as its lines (a uprobe on ``program``, else a kprobe on
    ``kernel``'s symbols), the others as they are.

    :param runnable: the lines as they run (perf's ``_N`` suffixes on repeated names, a uprobe's
        global as ``@+FILEOFFSET``); False: exactly as ``perf probe -D`` prints them.
    :raises PerfSyntaxError: neither file given, or the DWARF cannot resolve a point or a
        variable (the reader's error says what there is instead).
    """
    from kpsdk.binfmt.dwarf import DebugInfo
    from kpsdk.binfmt.dwarf.perfdefs import is_perf_definition, translate, with_suffixes
    from kpsdk.cache import PrivateStore

    out: list[TraceLine | str] = []
    opened: DebugInfo | None = None
    for text in definitions:
        if not is_perf_definition(text):
            out.append(text)
            continue
        file = program if program is not None else kernel
        if file is None:
            raise PerfSyntaxError(text, "give the program it probes (-x PROG, or TARGET a program) or the kernel's "
                                        "vmlinux with its DWARF (--symbols)")
        try:
            if opened is None:
                opened = DebugInfo.open(file, debug_dir=list(debug_dirs), store=PrivateStore("dwarf"))
            lines = translate(opened, text, os.path.abspath(program) if program is not None else None,
                              runnable=runnable)
        except PerfSyntaxError:
            raise
        except DebugInfoError as e:
            raise PerfSyntaxError(text, str(e)) from e
        out += with_suffixes(lines) if runnable else lines
    return out


def runnable_lines(definitions: Sequence[str], program: str | os.PathLike[str] | None,
                   kernel: str | os.PathLike[str] | None, debug_dirs: Sequence[str] = ()) -> list[str]:
    """The definitions as kprobe_events/uprobe_events lines kpsdk runs (see :func:`translate_all`)."""
    if not has_perf_syntax(definitions):
        return list(definitions)
    return [str(line) for line in translate_all(definitions, program, kernel, debug_dirs)]


def program_of(exec_: str | None, target_arg: str | None, target: str | None) -> str | None:
    """The program perf-syntax definitions probe: ``-x PROG``, else the program TARGET (or a
    ``qemu-user:``/``native:``/``elf:`` spec) runs, when it is a file."""
    if exec_ is not None:
        return exec_
    for spec in (target, target_arg):
        if spec is None:
            continue
        scheme, sep, rest = spec.partition(":")
        candidate = rest if sep and scheme in ("elf", "qemu-user", "native") else spec
        if Path(candidate).is_file():
            return candidate
    return None
