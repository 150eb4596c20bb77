"""Trace output formats as plugins declare them: :class:`OutputFormat` and its checks.

A plugin returns output formats from the ``kpsdk_trace_formats`` hook (:mod:`kpsdk.hookspecs`),
and the registry checks what it returned (:func:`check_formats`).  Both are the core, so the
declaration lives here, beside them, and not in the trace package that writes the records
(:mod:`kpsdk.trace.output`, which re-exports these names and makes the writers): the core
imports nothing of the trace package (tests/test_layers.py).  What the core knows of a writer
is :class:`FormatWriter`; the trace package's :class:`kpsdk.trace.output.Writer` is one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Generic, Literal, Protocol, TypeVar

from kpsdk.errors import KpsdkError

#: what a format name may be: it is typed on a command line and shown in help
FORMAT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}\Z")


class FormatWriter(Protocol):
    """What every format's writer does: ``write(record)`` for each
    :class:`~kpsdk.trace.events.TraceRecord`, ``flush()`` when a run ends in an error, ``close()``
    at the end.  Writers subclass :class:`kpsdk.trace.output.Writer`, which says more."""

    def write(self, record: Any) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


#: the writer a format makes (the trace package knows it as its Writer)
W = TypeVar("W", bound=FormatWriter)


@dataclass(frozen=True)
class WriterContext:
    """What a writer may want to know about the run besides its records.

    :param process_name: a name for the traced thing (``kpsdk trace x86_64``),
        e.g. Perfetto's process name.
    :param target: the target spec as given (``qemu-system:x86_64``).
    :param prefix: lines as the kernel's trace file has them (task, CPU, flags, time and
        a header); False (``--no-prefix``): the event bodies only.
    :param notes: where the prefix's columns come from, for a header.
    :param word_size: the target's word (C ``long``) in bytes; ``endian`` its byte order
        (for binary formats that record the target's layout: ``trace-dat``).
    """

    process_name: str = "kpsdk trace"
    target: str = ""
    prefix: bool = True
    notes: tuple[str, ...] = ()
    word_size: int = 8
    endian: Literal["little", "big"] = "little"


@dataclass(frozen=True)
class OutputFormat(Generic[W]):
    """One ``--output`` format, provided by a plugin through ``kpsdk_trace_formats``.

    :param name: what ``--output`` takes (lower case, digits, ``-_.``; at most 32).
    :param open: makes the writer for a text stream (stdout or the ``--out`` file).
    :param help: one line for ``kpsdk trace --help`` and ``kpsdk plugins``.
    :param machine_readable: the records are for programs, so ``kpsdk trace``
        prints its reports (histograms, profile) on stderr instead of stdout
        when the records go to stdout.
    :param binary: ``open`` gets a binary stream (``IO[bytes]``), not a text one;
        ``kpsdk trace`` then wants ``--out FILE`` or a stdout that is not a terminal.
    """

    name: str
    open: Callable[[IO[Any], WriterContext], W]
    help: str = ""
    machine_readable: bool = True
    binary: bool = False


def check_formats(groups: list[list[OutputFormat[Any]]]) -> dict[str, OutputFormat[Any]]:
    """The formats the plugins returned, by name; a bad or repeated name is the plugin's error."""
    out: dict[str, OutputFormat[Any]] = {}
    for group in groups:
        for fmt in group:
            if not isinstance(fmt, OutputFormat):
                raise KpsdkError(f"kpsdk_trace_formats returned {type(fmt).__name__}, not an OutputFormat")
            if not FORMAT_NAME.match(fmt.name):
                raise KpsdkError(f"output format name {fmt.name!r}: want lower case letters, digits, '-', '_' "
                                 "or '.', at most 32")
            if fmt.name in out:
                raise KpsdkError(f"output format {fmt.name!r} provided twice")
            out[fmt.name] = fmt
    return out
