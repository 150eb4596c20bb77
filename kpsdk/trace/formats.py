"""kpsdk's own ``kpsdk trace --output`` formats, provided as a plugin like any other.

``text``, ``jsonl``, ``perfetto`` and ``trace-dat`` reach :func:`kpsdk.trace.output.make_writer`
through the ``kpsdk_trace_formats`` hook, exactly as a third-party package's
formats do (``examples/kpsdk-csvtrace``); ``-p no:trace-formats`` removes them.
"""

from __future__ import annotations

from typing import IO

from kpsdk import hookimpl
from kpsdk.trace.output import (
    JsonlWriter,
    OutputFormat,
    PerfettoWriter,
    TextWriter,
    WriterContext,
)
from kpsdk.trace.tracedat import TraceDatWriter


def _text(stream: IO[str], context: WriterContext) -> TextWriter:
    return TextWriter(stream, prefix=context.prefix, notes=context.notes)


def _jsonl(stream: IO[str], context: WriterContext) -> JsonlWriter:
    return JsonlWriter(stream, context)


def _trace_dat(stream: IO[bytes], context: WriterContext) -> TraceDatWriter:
    return TraceDatWriter(stream, context.word_size, context.endian)


def _perfetto(stream: IO[str], context: WriterContext) -> PerfettoWriter:
    return PerfettoWriter(stream, context.process_name)


@hookimpl
def kpsdk_trace_formats() -> list[OutputFormat]:
    return [
        OutputFormat("text", _text, "ftrace lines, as /sys/kernel/tracing/trace prints them",
                     machine_readable=False),
        OutputFormat("jsonl", _jsonl, "one JSON object a line"),
        OutputFormat("perfetto", _perfetto, "Trace Event Format JSON for ui.perfetto.dev"),
        OutputFormat("trace-dat", _trace_dat, "trace-cmd's trace.dat (version 6): trace-cmd report, KernelShark",
                     binary=True),
    ]
