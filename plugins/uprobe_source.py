"""Uprobes by source: ``PATH:POINT`` with a perf probe point (``prog:parse_line:12``,
``prog:demo.c:40``, ``libfoo.so:parse``), resolved through the file's debug information into
the file offsets a :class:`~kpsdk.plugins.uprobes.Uprobe` takes, one per place the point is
(every inlined copy of a function, as perf probes them).

The uprobes plugin (:mod:`kpsdk.plugins.uprobes`) asks here, giving the sessions a bare library
name is looked up in and whose ``debug_dir`` is searched.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kpsdk.binfmt.filelocation import find_file
from kpsdk.debuginfo import file_points, is_source_point
from kpsdk.errors import DebugInfoError, KprobeError, LocationError

if TYPE_CHECKING:
    from kpsdk.session import Session


def split_source(spec: str, sessions: Sequence[Session]) -> tuple[str, str] | None:
    """``PATH:POINT`` with a source probe point: ``(the file's path, the point)``; None for other
    text.  The path is the longest prefix before a ``:`` that names a file (paths may hold ``:``)."""
    for i in range(len(spec) - 1, 0, -1):
        if spec[i] != ":" or not is_source_point(spec[i + 1:]):
            continue
        path = find_file(spec[:i], sessions)
        if os.path.isfile(path):
            return path, spec[i + 1:]
    return None


def source_locations(path: str, point: str, sessions: Sequence[Session] = (),
                     with_variables: bool = False) -> list[dict[str, Any]]:
    """``{"path", "offset", "where"}`` of each place the source probe point ``point`` resolves to
    in the file at ``path`` (its debug information found as the ``sessions`` find theirs, their
    ``debug_dir`` first; ``with_variables``: past an unoptimized function's prologue, as perf puts
    a probe that reads variables); ``ENOENT`` (a :class:`KprobeError`) naming why when it cannot be."""
    dirs = [d for s in sessions for d in s.debug_dirs]
    try:
        found = file_points(path, point, dirs, with_variables)
    except DebugInfoError as e:
        raise KprobeError(errno.ENOENT, f"{path}:{point}: {e}") from None
    except OSError as e:  # the file itself (or its debug file) cannot be read
        raise KprobeError(e.errno or errno.ENOENT, f"{path}:{point}: {e.strerror or e}") from None
    return [{"path": path, "offset": offset, "where": p.where} for offset, p in found]


def one_location(path: str, point: str, sessions: Sequence[Session] = ()) -> dict[str, Any]:
    """The ``{"path", "offset"}`` of a ``Uprobe`` on ``PATH:POINT``: one place, or ``EINVAL``
    (a :class:`~kpsdk.errors.LocationError`) naming the places, where the decorator puts one
    probe on each."""
    places = source_locations(path, point, sessions)
    if len(places) != 1:
        where = ", ".join(f"{p['where']} (offset {p['offset']:#x})" for p in places)
        raise LocationError(errno.EINVAL, f"{path}:{point} is at {len(places)} places ({where}): one Uprobe goes "
                                          f"on one; @s.uprobe('{path}:{point}') puts one on each")
    return {"path": places[0]["path"], "offset": places[0]["offset"]}
